// Function attributes, occupancy and launch errors: what CUDA checks before a launch and
// what its cudaFunc*/cudaOccupancy* calls answer.
#include "check.h"

__global__ void scale(float* p, float f, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= f;
}
__global__ void with_shared(float* p) {
  extern __shared__ float buf[];
  buf[threadIdx.x] = p[threadIdx.x];
  __syncthreads();
  p[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}

int main() {
  cudaFuncAttributes a;
  CHECK(cudaFuncGetAttributes(&a, scale));
  std::printf("attributes: maxThreadsPerBlock %s, numRegs %s, binaryVersion %s\n",
              a.maxThreadsPerBlock > 0 && a.maxThreadsPerBlock <= 1024 ? "ok" : "IMPLAUSIBLE",
              a.numRegs >= 0 && a.numRegs <= 255 ? "ok" : "IMPLAUSIBLE", a.binaryVersion >= 0 ? "ok" : "IMPLAUSIBLE");
  CHECK(cudaFuncSetAttribute(with_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
  CHECK(cudaFuncSetAttribute(with_shared, cudaFuncAttributePreferredSharedMemoryCarveout, 50));
  CHECK(cudaFuncSetCacheConfig(scale, cudaFuncCachePreferL1));
  const char* name = nullptr;
  CHECK(cudaFuncGetName(&name, scale));
  std::printf("name: %s\n", name);
  size_t off = 0, size = 0;
  CHECK(cudaFuncGetParamInfo(reinterpret_cast<const void*>(scale), 2, &off, &size));
  std::printf("param 2: offset %zu size %zu\n", off, size);

  int blocks = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, scale, 128, 0));
  std::printf("occupancy: %s\n", blocks > 0 ? "ok" : "IMPLAUSIBLE");
  int min_grid = 0, block = 0;
  CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, scale, 0, 0));
  std::printf("potential block size: %s\n", block > 0 && block <= 1024 && min_grid > 0 ? "ok" : "IMPLAUSIBLE");

  size_t avail = 0;
  CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&avail, with_shared, 2, 128));
  std::printf("available dynamic shared memory: %s\n", avail > 0 && avail <= 256 * 1024 ? "ok" : "IMPLAUSIBLE");
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = 2, cluster[0].val.clusterDim.y = 1, cluster[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(16);
  cfg.blockDim = dim3(128);
  cfg.attrs = cluster;
  cfg.numAttrs = 1;
  int clusters = 0;
  CHECK(cudaOccupancyMaxActiveClusters(&clusters, reinterpret_cast<const void*>(scale), &cfg));
  std::printf("active clusters: %s\n", clusters > 0 ? "ok" : "IMPLAUSIBLE");
  // A launch that allows programmatic dependent launch (JAX's): it may start before the kernel
  // before it ends, or in stream order (funnel's way).
  {
    float* p = nullptr;
    CHECK(cudaMalloc(&p, 256 * sizeof(float)));
    cudaLaunchAttribute pdl[1];
    pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t pc = {};
    pc.gridDim = dim3(2);
    pc.blockDim = dim3(128);
    pc.attrs = pdl;
    pc.numAttrs = 1;
    std::printf("programmatic stream serialization: %s\n", cudaGetErrorName(cudaLaunchKernelEx(&pc, scale, p, 2.0f, 256)));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(p));
  }

  // Launch errors CUDA reports at the launch.
  float* d = nullptr;
  CHECK(cudaMalloc(&d, 256 * sizeof(float)));
  scale<<<0, 32>>>(d, 2.0f, 256);
  std::printf("zero grid: %s\n", cudaGetErrorName(cudaGetLastError()));
  scale<<<1, 0>>>(d, 2.0f, 256);
  std::printf("zero block: %s\n", cudaGetErrorName(cudaGetLastError()));
  scale<<<1, 4096>>>(d, 2.0f, 256);
  std::printf("block too large: %s\n", cudaGetErrorName(cudaGetLastError()));
  std::printf("null args: %s\n",
              cudaGetErrorName(cudaLaunchKernel(reinterpret_cast<const void*>(scale), 1, 1, nullptr, 0, nullptr)));
  cudaGetLastError();
  int not_a_kernel = 0;
  std::printf("unknown function: %s\n",
              cudaGetErrorName(cudaLaunchKernel(&not_a_kernel, 1, 1, nullptr, 0, nullptr)));
  std::printf("unknown function attributes: %s\n", cudaGetErrorName(cudaFuncGetAttributes(&a, &not_a_kernel)));
  std::printf("bad attribute value: %s\n",
              cudaGetErrorName(cudaFuncSetAttribute(scale, cudaFuncAttributePreferredSharedMemoryCarveout, 101)));
  cudaGetLastError();
  // A good launch still works after those, with dynamic shared memory.
  with_shared<<<1, 64, 64 * sizeof(float)>>>(d);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(d));
  std::printf("done\n");
  return 0;
}
