// Kernel argument packing: kernels with mixed parameter types launched through <<<>>>,
// cudaLaunchKernel and cudaLaunchKernelExC, from several host threads.  For every launch
// the program prints the parameter buffer it expects, computed on the host from the
// types' sizes and alignments (independent of funnel's packer):
//   expect <kernel> <grid x,y,z> <block x,y,z> <shared> <hex>
// tests/client/kernels.sh compares these lines with the sim backend's launch log.
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "check.h"

struct Padded {
  char a;
  double b;
  short c;
};
struct alignas(8) A8 {
  int x;
};
struct alignas(16) A16 {
  float v[3];
};
struct Big {
  unsigned char bytes[4000];
  int tail;
};

extern "C" __global__ void k_mixed(char c, short s, int i, float f, double d, int* p) {
  if (p != nullptr) p[0] = c + s + i + static_cast<int>(f + d);
}
extern "C" __global__ void k_pad(char c, Padded s, char c2, int* p) {
  if (p != nullptr) p[0] = c + s.a + static_cast<int>(s.b) + s.c + c2;
}
extern "C" __global__ void k_align(char c, A8 a, char c2, A16 b, short s) {
  if (c == 1) printf("%d %d %f %d\n", a.x, c2, b.v[0], s);
}
extern "C" __global__ void k_big(int n, Big b, double d) {
  if (n == 1) printf("%d %d %f\n", b.bytes[0], b.tail, d);
}
extern "C" __global__ void k_many(int a0, int a1, int a2, int a3, int a4, int a5, int a6, int a7, int a8, int a9,
                                  int a10, int a11) {
  if (a0 == -1) printf("%d\n", a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11);
}
extern "C" __global__ void k_none() {}

// The expected parameter buffer: each value at the next offset aligned for its type.
struct Expect {
  std::vector<unsigned char> buf;
  template <class T>
  Expect& add(const T& v) {
    const size_t off = (buf.size() + alignof(T) - 1) / alignof(T) * alignof(T);
    buf.resize(off + sizeof(T));
    std::memcpy(&buf[off], &v, sizeof(T));
    return *this;
  }
  // One line, written at once so that threads' lines do not mix.
  void print(const char* kernel, dim3 g, dim3 b, size_t shared) const {
    std::string hex;
    char two[3];
    for (unsigned char c : buf) {
      std::snprintf(two, sizeof two, "%02x", c);
      hex += two;
    }
    std::printf("expect %s %u,%u,%u %u,%u,%u %zu %s\n", kernel, g.x, g.y, g.z, b.x, b.y, b.z, shared, hex.c_str());
  }
};

// Values with every byte meaningful; structs zeroed first so that padding is zero on
// both sides.
template <class T>
T zeroed() {
  T t;
  std::memset(static_cast<void*>(&t), 0, sizeof t);
  return t;
}

void launch_mixed(int seed, cudaStream_t stream) {
  char c = static_cast<char>(0x11 + seed);
  short s = static_cast<short>(0x2233 + seed);
  int i = 0x44556677 + seed;
  float f = 1.5f + seed;
  double d = -2.25 - seed;
  int* p = reinterpret_cast<int*>(0x7f0000001000ull + 16 * seed);
  dim3 g(2 + seed, 1, 1), b(32, 2, 1);
  k_mixed<<<g, b, 0, stream>>>(c, s, i, f, d, p);
  CHECK(cudaGetLastError());
  Expect().add(c).add(s).add(i).add(f).add(d).add(p).print("k_mixed", g, b, 0);
}

void launch_all(cudaStream_t stream) {
  // <<<>>> with a struct that has padding.
  {
    Padded s = zeroed<Padded>();
    s.a = 'x', s.b = 3.5, s.c = 0x1234;
    char c = 'a', c2 = 'b';
    int* p = nullptr;
    k_pad<<<3, 64, 128, stream>>>(c, s, c2, p);
    CHECK(cudaGetLastError());
    Expect().add(c).add(s).add(c2).add(p).print("k_pad", dim3(3), dim3(64), 128);
  }
  // cudaLaunchKernel with over-aligned structs.
  {
    char c = 5, c2 = 6;
    A8 a = zeroed<A8>();
    a.x = 0x0a0b0c0d;
    A16 v = zeroed<A16>();
    v.v[0] = 1, v.v[1] = 2, v.v[2] = 3;
    short s = -2;
    void* args[] = {&c, &a, &c2, &v, &s};
    dim3 g(4, 3, 2), b(8, 4, 2);
    CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(&k_align), g, b, args, 0, stream));
    Expect().add(c).add(a).add(c2).add(v).add(s).print("k_align", g, b, 0);
  }
  // A ~4 KB struct parameter, through cudaLaunchKernelExC with a priority attribute.
  {
    int n = 7;
    Big big = zeroed<Big>();
    for (size_t k = 0; k < sizeof big.bytes; ++k) big.bytes[k] = static_cast<unsigned char>(k * 7 + 1);
    big.tail = 0x5a5a5a5a;
    double d = 6.125;
    void* args[] = {&n, &big, &d};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributePriority;
    attr[0].val.priority = -1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, 1, 1);
    cfg.blockDim = dim3(1, 1, 1);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CHECK(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(&k_big), args));
    Expect().add(n).add(big).add(d).print("k_big", cfg.gridDim, cfg.blockDim, 0);
  }
  // Twelve parameters, via the C++ cudaLaunchKernelEx template.
  {
    int a[12];
    for (int k = 0; k < 12; ++k) a[k] = 1000 * k + 3;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(5);
    cfg.blockDim = dim3(96);
    cfg.stream = stream;
    CHECK(cudaLaunchKernelEx(&cfg, k_many, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                             a[11]));
    Expect e;
    for (int k = 0; k < 12; ++k) e.add(a[k]);
    e.print("k_many", cfg.gridDim, cfg.blockDim, 0);
  }
  // No parameters at all (args may be null).
  {
    CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(&k_none), dim3(1), dim3(1), nullptr, 0, stream));
    Expect().print("k_none", dim3(1), dim3(1), 0);
  }
}

int main() {
  launch_all(nullptr);  // the legacy default stream
  launch_mixed(0, nullptr);
  // Several host threads at once, each on its own stream and on its per-thread stream.
  std::vector<std::thread> threads;
  for (int t = 1; t <= 4; ++t) {
    threads.emplace_back([t] {
      cudaStream_t s;
      CHECK(cudaStreamCreate(&s));
      for (int r = 0; r < 5; ++r) launch_mixed(t * 10 + r, r % 2 == 0 ? s : cudaStreamPerThread);
      launch_all(s);
      CHECK(cudaStreamSynchronize(s));
      CHECK(cudaStreamDestroy(s));
    });
  }
  for (auto& th : threads) th.join();
  CHECK(cudaDeviceSynchronize());
  std::printf("done\n");
  return 0;
}
