// Kernel parameters: mixed sizes with padding between them, alignas(16) structs, a 4 KB
// struct by value, 24 scalar parameters, pointers, enums, bool, and an empty struct.
// Each kernel writes back what it received; the host compares it with what it passed.
#include <cstring>

#include "compat.h"

struct alignas(16) Vec4 {
  float x, y, z, w;
};
struct Padded {  // char, then 7 bytes of padding, then a double
  char c;
  double d;
  short s;
};
struct Big {  // 4 KB
  int v[1024];
};
struct Empty {};
enum class Mode : unsigned char { kA = 3, kB = 200 };

__global__ void mixed(char c, double d, short s, Vec4 v, int i, Padded p, bool b, Mode m, Empty, long long ll, float f,
                      unsigned char uc, double* out) {
  out[0] = c;
  out[1] = d;
  out[2] = s;
  out[3] = v.x + 2 * v.y + 4 * v.z + 8 * v.w;
  out[4] = i;
  out[5] = p.c + p.d + p.s;
  out[6] = b;
  out[7] = static_cast<double>(m);
  out[8] = static_cast<double>(ll);
  out[9] = f;
  out[10] = uc;
}

__global__ void big(int tag, Big b, char tail, long long* out) {
  long long s = 0;
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) s += static_cast<long long>(b.v[i]) * (i + 1);
  atomicAdd(reinterpret_cast<unsigned long long*>(out), static_cast<unsigned long long>(s));
  if (threadIdx.x == 0) {
    out[1] = tag;
    out[2] = tail;
  }
}

__global__ void many(int a0, int a1, int a2, int a3, int a4, int a5, int a6, int a7, double a8, int a9, int a10,
                     int a11, char a12, int a13, int a14, int a15, short a16, int a17, int a18, int a19, float a20,
                     int a21, int a22, long long* out) {
  *out = a0 + 2LL * a1 + 3LL * a2 + 4LL * a3 + 5LL * a4 + 6LL * a5 + 7LL * a6 + 8LL * a7 +
         static_cast<long long>(9 * a8) + 10LL * a9 + 11LL * a10 + 12LL * a11 + 13LL * a12 + 14LL * a13 + 15LL * a14 +
         16LL * a15 + 17LL * a16 + 18LL * a17 + 19LL * a18 + 20LL * a19 + static_cast<long long>(21 * a20) +
         22LL * a21 + 23LL * a22;
}

int main() {
  double* dout;
  CHECK(cudaMalloc(&dout, 16 * sizeof(double)));
  CHECK(cudaMemset(dout, 0, 16 * sizeof(double)));
  Vec4 v{1.5f, -2.0f, 3.25f, 0.125f};
  Padded p{'x', 1e10, -123};
  mixed<<<1, 1>>>('A', 3.141592653589793, -7, v, 123456789, p, true, Mode::kB, Empty{}, -(1LL << 40), 0.5f, 250, dout);
  CHECK(cudaGetLastError());
  double got[16];
  CHECK(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
  const double want[11] = {
      'A', 3.141592653589793, -7, 1.5 - 4.0 + 13.0 + 1.0, 123456789, 'x' + 1e10 - 123, 1, 200, -1099511627776.0, 0.5,
      250};
  for (int i = 0; i < 11; ++i) {
    std::printf("mixed[%2d] = %.17g\n", i, got[i]);
    EXPECT(got[i] == want[i], "mixed param %d: %.17g != %.17g", i, got[i], want[i]);
  }

  Big b;
  long long wantbig = 0;
  for (int i = 0; i < 1024; ++i) {
    b.v[i] = static_cast<int>(hash32(i) % 100000);
    wantbig += static_cast<long long>(b.v[i]) * (i + 1);
  }
  long long* dl;
  CHECK(cudaMalloc(&dl, 3 * sizeof(long long)));
  CHECK(cudaMemset(dl, 0, 3 * sizeof(long long)));
  big<<<1, 256>>>(77, b, 'z', dl);
  CHECK(cudaGetLastError());
  long long gb[3];
  CHECK(cudaMemcpy(gb, dl, sizeof gb, cudaMemcpyDeviceToHost));
  std::printf("4 KB struct: weighted sum %lld, tag %lld, tail %lld\n", gb[0], gb[1], gb[2]);
  EXPECT(gb[0] == wantbig && gb[1] == 77 && gb[2] == 'z', "4 KB struct");

  many<<<1, 1>>>(1, 2, 3, 4, 5, 6, 7, 8, 9.5, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21.0f, 22, 23, dl);
  CHECK(cudaGetLastError());
  long long m = 0;
  CHECK(cudaMemcpy(&m, dl, sizeof m, cudaMemcpyDeviceToHost));
  long long wm = 0;
  for (int i = 0; i < 23; ++i) wm += (i + 1LL) * (i + 1);
  wm += static_cast<long long>(9 * 9.5) - 81;
  std::printf("24 parameters: %lld\n", m);
  EXPECT(m == wm, "24 params: %lld != %lld", m, wm);

  // The same kernels through cudaLaunchKernel and an args array.
  Vec4 v2{0, 0, 0, 1};
  char c = 'B';
  double d = -0.25;
  short s = 5;
  int i = -1;
  bool bo = false;
  Mode md = Mode::kA;
  Empty e;
  long long ll = 42;
  float f = 2.0f;
  unsigned char uc = 1;
  void* args[] = {&c, &d, &s, &v2, &i, &p, &bo, &md, &e, &ll, &f, &uc, &dout};
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(mixed), dim3(1), dim3(1), args, 0, nullptr));
  CHECK(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
  std::printf("cudaLaunchKernel: %g %g %g %g %g %g %g %g\n", got[0], got[1], got[2], got[3], got[4], got[6], got[7],
              got[8]);
  EXPECT(got[0] == 'B' && got[1] == -0.25 && got[2] == 5 && got[3] == 8 && got[4] == -1 && got[6] == 0 && got[7] == 3 &&
             got[8] == 42,
         "cudaLaunchKernel args");
  CHECK(cudaFree(dout));
  CHECK(cudaFree(dl));
  return finish();
}
