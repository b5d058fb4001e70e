// __device__ and __constant__ variables: copies to and from symbols (with offsets, async,
// through cudaGetSymbolAddress) give the data back; bad symbols and ranges fail as CUDA's do.
#include <cstring>

#include "check.h"

__device__ int d_values[16];
__constant__ float c_coeffs[8];
__device__ double d_scalar;
// Initialised data makes the fat binary ~270 KB: uploaded in several staging pieces when
// slots are small (client.program.symbols-small-slots).
__device__ unsigned int d_table[64 * 1024] = {1, 2, 3};

__global__ void use(int* out) { out[0] = d_values[0] + static_cast<int>(c_coeffs[0] + d_scalar); }

int main() {
  int in[16], out[16] = {};
  for (int i = 0; i < 16; ++i) in[i] = i * i + 1;
  CHECK(cudaMemcpyToSymbol(d_values, in, sizeof in));
  CHECK(cudaMemcpyFromSymbol(out, d_values, sizeof out));
  std::printf("round trip: %s\n", std::memcmp(in, out, sizeof in) == 0 ? "ok" : "MISMATCH");

  // With an offset: overwrite elements 4..7, read back 2..9.
  int patch[4] = {-1, -2, -3, -4}, part[8] = {};
  CHECK(cudaMemcpyToSymbol(d_values, patch, sizeof patch, 4 * sizeof(int)));
  CHECK(cudaMemcpyFromSymbol(part, d_values, sizeof part, 2 * sizeof(int)));
  std::printf("offset:");
  for (int v : part) std::printf(" %d", v);
  std::printf("\n");

  // __constant__, async on a stream.
  float coeffs[8] = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f, 7.5f}, back[8] = {};
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaMemcpyToSymbolAsync(c_coeffs, coeffs, sizeof coeffs, 0, cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyFromSymbolAsync(back, c_coeffs, sizeof back, 0, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  std::printf("constant: %s\n", std::memcmp(coeffs, back, sizeof back) == 0 ? "ok" : "MISMATCH");

  // Address and size; the address works with ordinary copies, device to device too.
  void* addr = nullptr;
  size_t size = 0;
  CHECK(cudaGetSymbolAddress(&addr, d_scalar));
  CHECK(cudaGetSymbolSize(&size, d_scalar));
  std::printf("size: %zu %s\n", size, addr != nullptr ? "address ok" : "null address");
  double x = 42.75, y = 0;
  CHECK(cudaMemcpy(addr, &x, sizeof x, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpyFromSymbol(&y, d_scalar, sizeof y));
  std::printf("via address: %g\n", y);
  int* dev = nullptr;
  CHECK(cudaMalloc(&dev, sizeof in));
  CHECK(cudaMemcpyFromSymbol(dev, d_values, sizeof in, 0, cudaMemcpyDeviceToDevice));
  int again[16] = {};
  CHECK(cudaMemcpy(again, dev, sizeof again, cudaMemcpyDeviceToHost));
  std::printf("device to device: %d %d %d\n", again[0], again[4], again[15]);

  unsigned head[4] = {}, last = 9;
  CHECK(cudaMemcpyFromSymbol(head, d_table, sizeof head));
  CHECK(cudaMemcpyFromSymbol(&last, d_table, sizeof last, sizeof(unsigned) * (64 * 1024 - 1)));
  std::printf("initialised: %u %u %u %u, last %u\n", head[0], head[1], head[2], head[3], last);

  // Errors.
  int not_a_symbol = 0;
  std::printf("unknown symbol: %s\n", cudaGetErrorName(cudaMemcpyToSymbol(not_a_symbol, in, sizeof(int))));
  std::printf("past the end: %s\n", cudaGetErrorName(cudaMemcpyToSymbol(d_values, in, sizeof in, 4)));
  std::printf("wrong direction: %s\n",
              cudaGetErrorName(cudaMemcpyToSymbol(d_values, in, sizeof(int), 0, cudaMemcpyDeviceToHost)));
  cudaGetLastError();
  CHECK(cudaFree(dev));
  CHECK(cudaStreamDestroy(s));
  std::printf("done\n");
  return 0;
}
