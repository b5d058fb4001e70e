// Kernel parameter buffers beyond the old 4 KB limit (CUDA 12.1+, Volta and later: up to
// 32764 bytes): an 8 KB and a 32000-byte struct by value, with scalars around them.
#include "compat.h"

template <int kBytes>
struct Blob {
  unsigned char b[kBytes];
};

template <int kBytes>
__global__ void digest(int head, Blob<kBytes> blob, int tail, unsigned long long* out) {
  unsigned long long s = 0;
  for (int i = threadIdx.x; i < kBytes; i += blockDim.x) s += static_cast<unsigned long long>(blob.b[i]) * (i + 1);
  atomicAdd(out, s);
  if (threadIdx.x == 0) {
    out[1] = static_cast<unsigned long long>(head);
    out[2] = static_cast<unsigned long long>(tail);
  }
}

template <int kBytes>
void run() {
  static Blob<kBytes> blob;
  unsigned long long want = 0;
  for (int i = 0; i < kBytes; ++i) {
    blob.b[i] = static_cast<unsigned char>(hash32(i + kBytes));
    want += static_cast<unsigned long long>(blob.b[i]) * (i + 1);
  }
  unsigned long long* d;
  CHECK(cudaMalloc(&d, 3 * sizeof *d));
  CHECK(cudaMemset(d, 0, 3 * sizeof *d));
  digest<kBytes><<<1, 256>>>(-5, blob, 99, d);
  CHECK(cudaGetLastError());
  unsigned long long got[3];
  CHECK(cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost));
  std::printf("%5d-byte struct: sum %llu (cpu %llu), head %lld, tail %llu\n", kBytes, got[0], want,
              static_cast<long long>(got[1]), got[2]);
  EXPECT(got[0] == want && static_cast<long long>(got[1]) == -5 && got[2] == 99, "%d bytes", kBytes);
  CHECK(cudaFree(d));
}

int main() {
  run<4000>();
  run<8192>();
  run<32000>();
  return finish();
}
