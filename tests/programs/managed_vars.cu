// __managed__ variables (doc/design/managed.md): scalars, an array, a struct, with and without
// initial values.  The first CUDA call is a kernel launch (the module loads there and places the
// variables); then the host reads the initial values and changes them; the symbol calls
// (cudaGetSymbolAddress, cudaGetSymbolSize, cudaMemcpyToSymbol/FromSymbol, their Async forms) and
// plain copies and memsets at the variable's address reach the same storage; pointer attributes
// say managed.  Every printed value comes from host code, copies and memsets, never from a
// kernel's effect (the sim backend runs no kernel code): the kernels that really change the
// variables are tests/programs/libs/managed_kernels.cu's, on the GPU.
#include <cstring>

#include "check.h"

__managed__ int count = 42;
__managed__ float table[64] = {1.f, 2.f, 3.f};
__managed__ double unset;
struct Pair {
  int a;
  double b;
};
__managed__ Pair pair = {7, 2.5};
__managed__ int scratch;  // only the kernel below writes it; never printed

__global__ void touch(int v) { scratch = v + count; }

static const char* ok(bool b) { return b ? "ok" : "FAIL"; }

int main() {
  touch<<<1, 1>>>(1);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::printf("initial: count %d, table %g %g %g %g, unset %g, pair %d %g\n", count, table[0], table[1], table[2],
              table[63], unset, pair.a, pair.b);

  // Host writes, read back through the symbol calls.
  count = 5;
  for (int i = 0; i < 64; ++i) table[i] = static_cast<float>(i) * 0.5f;
  int c = 0;
  CHECK(cudaMemcpyFromSymbol(&c, count, sizeof c));
  float t[64];
  CHECK(cudaMemcpyFromSymbol(t, table, sizeof t, 0, cudaMemcpyDeviceToHost));
  std::printf("host writes, read by cudaMemcpyFromSymbol: count %d, table[10] %g, table[63] %g\n", c, t[10], t[63]);

  // Copies to the symbols, read by the host.
  const int v = 1234;
  CHECK(cudaMemcpyToSymbol(count, &v, sizeof v));
  const double d = -0.125;
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaMemcpyToSymbolAsync(unset, &d, sizeof d, 0, cudaMemcpyHostToDevice, s));
  const Pair p{99, 1e3};
  CHECK(cudaMemcpyToSymbolAsync(pair, &p.b, sizeof p.b, offsetof(Pair, b), cudaMemcpyHostToDevice, s));
  CHECK(cudaStreamSynchronize(s));
  std::printf("cudaMemcpyToSymbol(Async), read by the host: count %d, unset %g, pair %d %g\n", count, unset, pair.a,
              pair.b);

  // The symbol's address and size; device memory copied in, a memset, pointer attributes.
  void* address = nullptr;
  size_t size = 0;
  CHECK(cudaGetSymbolAddress(&address, table));
  CHECK(cudaGetSymbolSize(&size, table));
  std::printf("cudaGetSymbolAddress(table) is &table: %s; cudaGetSymbolSize %zu\n",
              ok(address == static_cast<void*>(table)), size);
  float* dev = nullptr;
  CHECK(cudaMalloc(&dev, sizeof t));
  for (int i = 0; i < 64; ++i) t[i] = 100.f + static_cast<float>(i);
  CHECK(cudaMemcpy(dev, t, sizeof t, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(address, dev, sizeof t, cudaMemcpyDeviceToDevice));
  std::printf("device memory copied to the symbol's address: table[0] %g, table[63] %g\n", table[0], table[63]);
  CHECK(cudaMemset(&count, 0, sizeof count));
  CHECK(cudaDeviceSynchronize());
  std::printf("cudaMemset of count: %d\n", count);
  CHECK(cudaMemcpy(dev, &pair, sizeof pair, cudaMemcpyDefault));
  Pair back{};
  CHECK(cudaMemcpy(&back, dev, sizeof back, cudaMemcpyDeviceToHost));
  std::printf("pair copied to device memory and back: %d %g\n", back.a, back.b);
  cudaPointerAttributes a{};
  CHECK(cudaPointerGetAttributes(&a, &pair));
  std::printf("pointer attributes of &pair: managed %s\n", ok(a.type == cudaMemoryTypeManaged));

  // The kernel again, after everything (its write to scratch is not read).
  touch<<<1, 1>>>(2);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(dev));
  CHECK(cudaDeviceSynchronize());
  std::printf("done\n");
  return 0;
}
