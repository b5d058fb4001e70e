// Memory through funnel: malloc/memcpy/memset/pitch/2D copies, pageable and pinned,
// sizes from 1 byte to 64 MiB; checks its own results and prints deterministic lines.
#include <cstring>
#include <vector>

#include "check.h"

static void fill(unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>((i * 131u + seed) & 0xff);
}

static bool roundtrip(size_t n, bool pinned) {
  unsigned char *h = nullptr, *back = nullptr;
  std::vector<unsigned char> hv, bv;
  if (pinned) {
    CHECK(cudaMallocHost(&h, n));
    CHECK(cudaHostAlloc(&back, n, cudaHostAllocDefault));
  } else {
    hv.resize(n);
    bv.resize(n);
    h = hv.data();
    back = bv.data();
  }
  fill(h, n, static_cast<unsigned>(n));
  std::memset(back, 0, n);
  void *d = nullptr, *d2 = nullptr;
  CHECK(cudaMalloc(&d, n));
  CHECK(cudaMalloc(&d2, n));
  CHECK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d2, d, n, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(back, d2, n, cudaMemcpyDefault));
  bool ok = std::memcmp(h, back, n) == 0;
  CHECK(cudaFree(d));
  CHECK(cudaFree(d2));
  if (pinned) {
    CHECK(cudaFreeHost(h));
    CHECK(cudaFreeHost(back));
  }
  return ok;
}

int main() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  std::printf("devices>=1: %s\n", count >= 1 ? "yes" : "no");

  const size_t sizes[] = {1, 7, 4096, 65537, (1u << 20) + 3, 5u << 20, 64u << 20};
  for (size_t n : sizes) {
    std::printf("pageable %zu: %s\n", n, roundtrip(n, false) ? "ok" : "MISMATCH");
    std::printf("pinned %zu: %s\n", n, roundtrip(n, true) ? "ok" : "MISMATCH");
  }

  // memset
  {
    const size_t n = 3u << 20;
    unsigned char* d = nullptr;
    CHECK(cudaMalloc(&d, n));
    CHECK(cudaMemset(d, 0xab, n));
    CHECK(cudaMemset(d + 100, 0x01, 10));
    std::vector<unsigned char> h(n);
    CHECK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
    bool ok = true;
    for (size_t i = 0; i < n; ++i) ok &= h[i] == ((i >= 100 && i < 110) ? 0x01 : 0xab);
    std::printf("memset: %s\n", ok ? "ok" : "MISMATCH");
    CHECK(cudaFree(d));
  }

  // pitch + 2D copies (pageable and pinned host sides) + memset2D
  {
    const size_t w = 1000, hgt = 37;
    void* d = nullptr;
    size_t pitch = 0;
    CHECK(cudaMallocPitch(&d, &pitch, w, hgt));
    std::printf("pitch>=width: %s, pitch%%512==0: %s\n", pitch >= w ? "yes" : "no", pitch % 512 == 0 ? "yes" : "no");
    std::vector<unsigned char> src(w * hgt), dst(w * hgt, 0);
    fill(src.data(), src.size(), 7);
    CHECK(cudaMemcpy2D(d, pitch, src.data(), w, w, hgt, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2D(dst.data(), w, d, pitch, w, hgt, cudaMemcpyDeviceToHost));
    std::printf("2d pageable: %s\n", src == dst ? "ok" : "MISMATCH");
    unsigned char* pin = nullptr;
    CHECK(cudaMallocHost(&pin, w * hgt));
    CHECK(cudaMemset2D(d, pitch, 0x5a, w / 2, hgt));
    CHECK(cudaMemcpy2D(pin, w, d, pitch, w, hgt, cudaMemcpyDeviceToHost));
    bool ok = true;
    for (size_t r = 0; r < hgt; ++r)
      for (size_t c = 0; c < w; ++c) ok &= pin[r * w + c] == (c < w / 2 ? 0x5a : src[r * w + c]);
    std::printf("2d pinned + memset2d: %s\n", ok ? "ok" : "MISMATCH");
    // Wide rows (wider than a staging slot) take the per-row path.
    const size_t ww = (3u << 20) + 5, hh = 3;
    void* dw = nullptr;
    size_t pw = 0;
    CHECK(cudaMallocPitch(&dw, &pw, ww, hh));
    std::vector<unsigned char> a(ww * hh), b(ww * hh, 0);
    fill(a.data(), a.size(), 3);
    CHECK(cudaMemcpy2D(dw, pw, a.data(), ww, ww, hh, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2D(b.data(), ww, dw, pw, ww, hh, cudaMemcpyDeviceToHost));
    std::printf("2d wide rows: %s\n", a == b ? "ok" : "MISMATCH");
    CHECK(cudaFree(dw));
    CHECK(cudaFreeHost(pin));
    CHECK(cudaFree(d));
  }

  // async copies on a stream, pageable and pinned; host-to-host
  {
    const size_t n = (6u << 20) + 11;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    std::vector<unsigned char> a(n), b(n, 0);
    fill(a.data(), n, 9);
    unsigned char *pa = nullptr, *pb = nullptr, *d = nullptr;
    CHECK(cudaMallocHost(&pa, n));
    CHECK(cudaMallocHost(&pb, n));
    CHECK(cudaMalloc(&d, n));
    CHECK(cudaMemcpyAsync(d, a.data(), n, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(pa, d, n, cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyAsync(pb, pa, n, cudaMemcpyHostToHost, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpyAsync(b.data(), d, n, cudaMemcpyDeviceToHost, s));
    std::printf("async: %s %s\n", std::memcmp(pb, a.data(), n) == 0 ? "ok" : "MISMATCH", a == b ? "ok" : "MISMATCH");
    CHECK(cudaFree(d));
    CHECK(cudaFreeHost(pa));
    CHECK(cudaFreeHost(pb));
    CHECK(cudaStreamDestroy(s));
  }

  // stream-ordered allocation
  {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void* d = nullptr;
    CHECK(cudaMallocAsync(&d, 1 << 20, s));
    CHECK(cudaMemsetAsync(d, 3, 1 << 20, s));
    unsigned char h[16];
    CHECK(cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(d, s));
    CHECK(cudaStreamSynchronize(s));
    std::printf("mallocAsync: %s\n", h[0] == 3 && h[15] == 3 ? "ok" : "MISMATCH");
    CHECK(cudaStreamDestroy(s));
  }

  // memory info and pointer attributes
  {
    size_t free_b = 0, total = 0;
    CHECK(cudaMemGetInfo(&free_b, &total));
    std::printf("meminfo: %s\n", total > 0 && free_b <= total ? "ok" : "BAD");
    void* d = nullptr;
    void* p = nullptr;
    int x = 0;
    CHECK(cudaMalloc(&d, 256));
    CHECK(cudaMallocHost(&p, 256));
    cudaPointerAttributes a{};
    CHECK(cudaPointerGetAttributes(&a, static_cast<char*>(d) + 8));
    std::printf("attr device: %s\n", a.type == cudaMemoryTypeDevice ? "ok" : "BAD");
    CHECK(cudaPointerGetAttributes(&a, p));
    std::printf("attr pinned: %s\n", a.type == cudaMemoryTypeHost ? "ok" : "BAD");
    CHECK(cudaPointerGetAttributes(&a, &x));
    std::printf("attr unregistered: %s\n", a.type == cudaMemoryTypeUnregistered ? "ok" : "BAD");
    CHECK(cudaHostRegister(&x, sizeof x, cudaHostRegisterDefault));
    CHECK(cudaPointerGetAttributes(&a, &x));
    std::printf("attr registered: %s\n", a.type == cudaMemoryTypeHost ? "ok" : "BAD");
    CHECK(cudaHostUnregister(&x));
    CHECK(cudaFree(d));
    CHECK(cudaFreeHost(p));
    CHECK(cudaFree(nullptr));
  }
  std::printf("done\n");
  return 0;
}
