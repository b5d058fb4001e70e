// Occupancy and function attributes: cudaFuncGetAttributes fields of kernels with known
// resource use, cudaOccupancyMaxActiveBlocksPerMultiprocessor(+WithFlags),
// cudaOccupancyMaxPotentialBlockSize(+VariableSMem), cudaOccupancyAvailableDynamicSMemPerBlock,
// cudaFuncSetCacheConfig, cudaFuncSetAttribute, and a launch with the suggested configuration.
#include "compat.h"

__global__ void light(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}

__global__ void __launch_bounds__(256) bounded(float* x) {
  __shared__ float s[2048];  // 8 KB static
  s[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  x[threadIdx.x] = s[255 - threadIdx.x];
}

__global__ void heavy(const double* x, double* out, int n) {
  extern __shared__ double dyn[];
  double a[24];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  for (int k = 0; k < 24; ++k) a[k] = x[(i + k) % n];
  for (int r = 0; r < 8; ++r)
    for (int k = 0; k < 24; ++k) a[k] = a[k] * 0.5 + a[(k + r) % 24] * 0.25 + 1.0;
  double s = 0;
  for (int k = 0; k < 24; ++k) s += a[k];
  dyn[threadIdx.x] = s;
  __syncthreads();
  if (i < n) out[i] = dyn[blockDim.x - 1 - threadIdx.x];
}

// Dynamic shared memory as a function of the block size (called from a __host__ __device__
// template in cuda_runtime.h, hence not a lambda).
struct SmemPerBlock {
  __host__ __device__ size_t operator()(int block) const { return static_cast<size_t>(block) * 8; }
};

void attrs(const char* name, const void* f) {
  cudaFuncAttributes a{};
  CHECK(cudaFuncGetAttributes(&a, f));
  std::printf("%-8s regs %d static smem %zu const %zu local %zu maxThreads %d ptx %d binary %d maxDynSmem %d\n", name,
              a.numRegs, a.sharedSizeBytes, a.constSizeBytes, a.localSizeBytes, a.maxThreadsPerBlock, a.ptxVersion,
              a.binaryVersion, a.maxDynamicSharedSizeBytes);
  EXPECT(a.numRegs > 0 && a.maxThreadsPerBlock > 0 && a.binaryVersion == 90, "%s attributes", name);
  int blocks = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 128, 0));
  int blocks2 = 0;
  CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks2, f, 128, 0, cudaOccupancyDisableCachingOverride));
  std::printf("%-8s blocks/SM at 128 threads: %d (with flags %d)\n", name, blocks, blocks2);
  EXPECT(blocks > 0 && blocks * 128 <= 2048 && blocks2 == blocks, "%s occupancy", name);
}

int main() {
  attrs("light", reinterpret_cast<const void*>(light));
  attrs("bounded", reinterpret_cast<const void*>(bounded));
  attrs("heavy", reinterpret_cast<const void*>(heavy));
  cudaFuncAttributes b{};
  CHECK(cudaFuncGetAttributes(&b, bounded));
  EXPECT(b.sharedSizeBytes == 8192 && b.maxThreadsPerBlock <= 256, "bounded attributes");

  int min_grid = 0, block = 0;
  CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, light, 0, 0));
  std::printf("light: suggested block %d, min grid %d\n", block, min_grid);
  EXPECT(block > 0 && block <= 1024 && block % 32 == 0 && min_grid > 0, "potential block size");
  int mg2 = 0, b2 = 0;
  CHECK(cudaOccupancyMaxPotentialBlockSizeVariableSMem(&mg2, &b2, heavy, SmemPerBlock{}, 0));
  std::printf("heavy: suggested block %d, min grid %d\n", b2, mg2);
  EXPECT(b2 > 0 && mg2 > 0, "variable smem");
  size_t avail = 0;
  CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&avail, heavy, 2, 256));
  std::printf("heavy: dynamic smem available with 2 blocks of 256 > 48 KB: %s\n", avail > 48 * 1024 ? "yes" : "no");

  CHECK(cudaFuncSetCacheConfig(light, cudaFuncCachePreferL1));
  CHECK(cudaFuncSetAttribute(heavy, cudaFuncAttributePreferredSharedMemoryCarveout, 50));
  CHECK(cudaFuncSetAttribute(heavy, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
  cudaFuncAttributes h{};
  CHECK(cudaFuncGetAttributes(&h, heavy));
  std::printf("heavy after set: maxDynSmem %d carveout %d\n", h.maxDynamicSharedSizeBytes, h.preferredShmemCarveout);
  EXPECT(h.maxDynamicSharedSizeBytes == 64 * 1024, "set attribute");

  // Launch with the suggestion and check the result.
  const int n = 1 << 20;
  float* d;
  CHECK(cudaMalloc(&d, n * sizeof(float)));
  CHECK(cudaMemset(d, 0, n * sizeof(float)));
  light<<<(n + block - 1) / block, block>>>(d, n);
  double* dd;
  CHECK(cudaMalloc(&dd, 2 * 4096 * sizeof(double)));
  CHECK(cudaMemset(dd, 0, 2 * 4096 * sizeof(double)));
  heavy<<<4096 / b2, b2, b2 * sizeof(double)>>>(dd, dd + 4096, 4096);
  CHECK(cudaGetLastError());
  double first = -1;
  CHECK(cudaMemcpy(&first, dd + 4096, sizeof first, cudaMemcpyDeviceToHost));
  std::printf("heavy result[0] %.1f\n", first);
  CHECK(cudaFree(d));
  CHECK(cudaFree(dd));
  return finish();
}
