// __device__ globals: kernels update them, the host reads them with cudaMemcpyFromSymbol,
// writes them with cudaMemcpyToSymbol, gets their address (cudaGetSymbolAddress) to use
// them with cudaMemset/cudaMemcpy and as kernel arguments, and their size (cudaGetSymbolSize).
#include "compat.h"

__device__ int counter;
__device__ unsigned long long bins[32];
__device__ double matrix[64][64];
__device__ int initialised = 1234;  // initialised in the image

__global__ void count(int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    atomicAdd(&counter, 1);
    atomicAdd(&bins[i % 32], static_cast<unsigned long long>(i));
  }
}

__global__ void transpose_in_place() {
  const int r = blockIdx.x, c = threadIdx.x;
  if (r < c) {
    const double t = matrix[r][c];
    matrix[r][c] = matrix[c][r];
    matrix[c][r] = t;
  }
}

__global__ void add_via_pointer(int* p, int v) { *p += v; }

int main() {
  int v = -1;
  CHECK(cudaMemcpyFromSymbol(&v, initialised, sizeof v));
  std::printf("initialised value: %d\n", v);
  EXPECT(v == 1234, "static initialiser");

  const int zero = 0;
  CHECK(cudaMemcpyToSymbol(counter, &zero, sizeof zero));
  void* pb = nullptr;
  CHECK(cudaGetSymbolAddress(&pb, bins));
  CHECK(cudaMemset(pb, 0, 32 * sizeof(unsigned long long)));
  size_t sz = 0;
  CHECK(cudaGetSymbolSize(&sz, bins));
  std::printf("sizeof bins %zu, matrix ", sz);
  CHECK(cudaGetSymbolSize(&sz, matrix));
  std::printf("%zu\n", sz);
  const int n = 100000;
  count<<<(n + 255) / 256, 256>>>(n);
  count<<<(n + 255) / 256, 256>>>(n);
  int c = 0;
  unsigned long long b[32];
  CHECK(cudaMemcpyFromSymbol(&c, counter, sizeof c));
  CHECK(cudaMemcpy(b, pb, sizeof b, cudaMemcpyDeviceToHost));
  unsigned long long want[32] = {};
  for (int i = 0; i < n; ++i) want[i % 32] += 2ull * i;
  int bad = 0;
  for (int k = 0; k < 32; ++k) bad += b[k] != want[k];
  std::printf("counter %d, bins wrong %d, bin[5] %llu\n", c, bad, b[5]);
  EXPECT(c == 2 * n && bad == 0, "count");

  static double m[64][64];
  for (int r = 0; r < 64; ++r)
    for (int k = 0; k < 64; ++k) m[r][k] = r * 100 + k;
  CHECK(cudaMemcpyToSymbol(matrix, m, sizeof m));
  transpose_in_place<<<64, 64>>>();
  static double t[64][64];
  // Read back the second half of the rows only, through an offset.
  CHECK(cudaMemcpyFromSymbol(t[32], matrix, sizeof m / 2, sizeof m / 2));
  int badt = 0;
  for (int r = 32; r < 64; ++r)
    for (int k = 0; k < 64; ++k) badt += t[r][k] != k * 100 + r;
  std::printf("transpose: mismatches %d, t[40][3] %.0f\n", badt, t[40][3]);
  EXPECT(badt == 0, "transpose");

  int* pc = nullptr;
  CHECK(cudaGetSymbolAddress(reinterpret_cast<void**>(&pc), counter));
  add_via_pointer<<<1, 1>>>(pc, 5);
  CHECK(cudaMemcpyFromSymbol(&c, counter, sizeof c));
  std::printf("counter after pointer kernel: %d\n", c);
  EXPECT(c == 2 * n + 5, "pointer");
  return finish();
}
