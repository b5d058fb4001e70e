// The launch API without <<<>>>: cudaLaunchKernel with an argument array, the C++
// cudaLaunchKernel template, cudaLaunchKernelExC with a cudaLaunchConfig_t (no attributes,
// then a priority attribute), the variadic cudaLaunchKernelEx template, dynamic shared
// memory and streams given through each.
#include <vector>

#include "compat.h"

__global__ void axpb(int* out, int n, int a, long long b) {
  extern __shared__ int s[];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i;
  __syncthreads();
  if (i < n) out[i] = a * s[threadIdx.x] + static_cast<int>(b);
}

int verify(const char* how, const int* d, int n, int a, int b) {
  std::vector<int> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += h[i] != a * i + b;
  std::printf("%-28s mismatches %d\n", how, bad);
  EXPECT(bad == 0, "%s", how);
  return bad;
}

int main() {
  const int n = 100000, block = 128, grid = (n + block - 1) / block;
  const size_t smem = block * sizeof(int);
  int* d;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  int nn = n, a = 3;
  long long b = 7;
  void* args[] = {&d, &nn, &a, &b};
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(axpb), dim3(grid), dim3(block), args, smem, s));
  CHECK(cudaStreamSynchronize(s));
  verify("cudaLaunchKernel (C)", d, n, 3, 7);

  a = -2;
  b = 1LL << 33 | 5;  // truncated to 5 in the kernel
  CHECK(cudaLaunchKernel(axpb, dim3(grid), dim3(block), args, smem, nullptr));
  verify("cudaLaunchKernel (template)", d, n, -2, 5);

  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  a = 11;
  b = -3;
  CHECK(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(axpb), args));
  CHECK(cudaStreamSynchronize(s));
  verify("cudaLaunchKernelExC", d, n, 11, -3);

  int lo = 0, hi = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributePriority;
  attr[0].val.priority = hi;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  a = 5;
  b = 0;
  CHECK(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(axpb), args));
  CHECK(cudaStreamSynchronize(s));
  verify("cudaLaunchKernelExC priority", d, n, 5, 0);

  cfg.numAttrs = 0;
  cfg.attrs = nullptr;
  CHECK(cudaLaunchKernelEx(&cfg, axpb, d, n, 4, 9LL));
  CHECK(cudaStreamSynchronize(s));
  verify("cudaLaunchKernelEx (variadic)", d, n, 4, 9);

  // 2D and 3D grids through the array form.
  cfg.gridDim = dim3(grid / 4 + 1, 2, 2);
  cfg.blockDim = dim3(block);
  cfg.stream = nullptr;
  CHECK(cudaLaunchKernelEx(&cfg, axpb, d, n, 1, 0LL));  // blockIdx.x only: covers the first quarter
  verify("cudaLaunchKernelEx 3D grid", d, grid / 4 * block, 1, 0);
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  return finish();
}
