// Launch errors as real codes check them (`kernel<<<...>>>(); cudaGetLastError()`): too many
// threads per block, a zero or oversized grid, too much dynamic shared memory; the error is
// reported by cudaPeekAtLastError and cudaGetLastError, is not sticky, and the device keeps
// working. The names are printed so native and funnel runs must agree on them.
#include "compat.h"

__global__ void k(int* d) { d[blockIdx.x * blockDim.x + threadIdx.x] = 1; }

void expect_error(const char* what) {
  const cudaError_t peek = cudaPeekAtLastError();
  const cudaError_t got = cudaGetLastError();
  const cudaError_t after = cudaGetLastError();
  std::printf("%-30s %s, then %s\n", what, cudaGetErrorName(got), cudaGetErrorName(after));
  EXPECT(got != cudaSuccess && peek == got && after == cudaSuccess, "%s", what);
}

int main() {
  int* d;
  CHECK(cudaMalloc(&d, 1 << 20));
  k<<<1, 2048>>>(d);
  expect_error("2048 threads per block:");
  k<<<0, 32>>>(d);
  expect_error("empty grid:");
  k<<<dim3(1, 70000), 32>>>(d);
  expect_error("grid.y 70000:");
  k<<<1, dim3(1, 1, 128)>>>(d);
  expect_error("block.z 128:");
  k<<<1, 32, 200 * 1024>>>(d);  // above the 48 KB default without the attribute
  expect_error("200 KB dynamic smem:");
  void* args[] = {&d};
  const cudaError_t direct = cudaLaunchKernel(reinterpret_cast<const void*>(k), dim3(1), dim3(4096), args, 0, nullptr);
  std::printf("cudaLaunchKernel 4096 threads: returns %s, then %s\n", cudaGetErrorName(direct),
              cudaGetErrorName(cudaGetLastError()));
  EXPECT(direct != cudaSuccess, "direct launch error");
  // Still usable.
  CHECK(cudaMemset(d, 0, 1 << 20));
  k<<<256, 1024>>>(d);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  int h[4];
  CHECK(cudaMemcpy(h, d + 256 * 1024 - 4, sizeof h, cudaMemcpyDeviceToHost));
  std::printf("valid launch afterwards: %d %d %d %d\n", h[0], h[1], h[2], h[3]);
  EXPECT(h[0] == 1 && h[3] == 1, "valid launch");
  CHECK(cudaFree(d));
  return finish();
}
