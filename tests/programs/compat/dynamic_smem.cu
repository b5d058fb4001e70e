// Dynamic shared memory: extern __shared__ with the size given at launch, above the 48 KB
// default after cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize), two
// extern arrays of different types carved from one buffer, and the attribute read back.
#include <vector>

#include "compat.h"

// Reverses each block's chunk through shared memory (every element crosses threads).
__global__ void reverse_chunks(const int* in, int* out, int chunk) {
  extern __shared__ int s[];
  const int* src = in + static_cast<size_t>(blockIdx.x) * chunk;
  for (int i = threadIdx.x; i < chunk; i += blockDim.x) s[i] = src[i];
  __syncthreads();
  int* dst = out + static_cast<size_t>(blockIdx.x) * chunk;
  for (int i = threadIdx.x; i < chunk; i += blockDim.x) dst[i] = s[chunk - 1 - i];
}

// A double array followed by a char array in the same dynamic buffer.
__global__ void mixed(double* out, int nd, int nc) {
  extern __shared__ double buf[];
  char* c = reinterpret_cast<char*>(buf + nd);
  for (int i = threadIdx.x; i < nd; i += blockDim.x) buf[i] = i * 0.5;
  for (int i = threadIdx.x; i < nc; i += blockDim.x) c[i] = static_cast<char>(i % 100);
  __syncthreads();
  double acc = 0;
  for (int i = threadIdx.x; i < nd; i += blockDim.x) acc += buf[nd - 1 - i] + c[i % nc];
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

int main() {
  int optin = 0;
  CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  std::printf("opt-in shared memory >= 200 KB: %s\n", optin >= 200 * 1024 ? "yes" : "no");
  const int blocks = 64;
  for (int bytes : {1024, 48 * 1024, 100 * 1024, 200 * 1024}) {
    const int chunk = bytes / 4;
    if (bytes > 48 * 1024)
      CHECK(cudaFuncSetAttribute(reverse_chunks, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    std::vector<int> h(static_cast<size_t>(blocks) * chunk), r(h.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<int>(hash32(static_cast<uint32_t>(i)));
    int *din, *dout;
    CHECK(cudaMalloc(&din, h.size() * 4));
    CHECK(cudaMalloc(&dout, h.size() * 4));
    CHECK(cudaMemcpy(din, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    reverse_chunks<<<blocks, 512, bytes>>>(din, dout, chunk);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(r.data(), dout, h.size() * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int b = 0; b < blocks; ++b)
      for (int i = 0; i < chunk; ++i) bad += r[b * chunk + i] != h[b * chunk + chunk - 1 - i];
    std::printf("reverse %6d bytes: mismatches %d\n", bytes, bad);
    EXPECT(bad == 0, "reverse %d", bytes);
    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
  }
  cudaFuncAttributes fa{};
  CHECK(cudaFuncGetAttributes(&fa, reverse_chunks));
  std::printf("maxDynamicSharedSizeBytes %d\n", fa.maxDynamicSharedSizeBytes);
  EXPECT(fa.maxDynamicSharedSizeBytes == 200 * 1024, "attribute read back");

  const int nd = 8000, nc = 30000;  // 94 KB
  const size_t bytes = nd * sizeof(double) + nc;
  CHECK(cudaFuncSetAttribute(mixed, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  double* d;
  CHECK(cudaMalloc(&d, 4 * 256 * sizeof(double)));
  mixed<<<4, 256, bytes>>>(d, nd, nc);
  CHECK(cudaGetLastError());
  std::vector<double> h(4 * 256);
  CHECK(cudaMemcpy(h.data(), d, h.size() * sizeof(double), cudaMemcpyDeviceToHost));
  double total = 0, want = 0;
  for (double v : h) total += v;
  for (int i = 0; i < nd; ++i) want += (nd - 1 - i) * 0.5 + (i % nc) % 100;
  std::printf("mixed %zu bytes: total %.1f (cpu %.1f per block x4)\n", bytes, total, want);
  EXPECT(total == 4 * want, "mixed");
  CHECK(cudaFree(d));
  return finish();
}
