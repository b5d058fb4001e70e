// demo: a small memory/stream program (no kernels) whose output is deterministic, so the
// native run and the run through funnel-run can be diffed:
//   several streams, async copies from pinned memory, device-to-device copies, memsets,
//   events and cross-stream waits, then a checksum of everything that came back.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "demo: %s failed: %s (%d)\n", #x, cudaGetErrorString(e_), int(e_)); \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)

static uint64_t fnv1a(const unsigned char* p, size_t n, uint64_t h = 1469598103934665603ull) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

int main() {
  constexpr int kStreams = 4;
  constexpr size_t kChunk = size_t{8} << 20;  // per stream
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("a device is present: %s\n", count > 0 ? "yes" : "no");  // the count varies by node
  std::printf("device 0 has compute capability >= 7.0: %s\n", prop.major >= 7 ? "yes" : "no");

  unsigned char *src = nullptr, *dst = nullptr;
  CK(cudaMallocHost(&src, kStreams * kChunk));
  CK(cudaMallocHost(&dst, kStreams * kChunk));
  for (size_t i = 0; i < kStreams * kChunk; ++i) src[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  std::memset(dst, 0, kStreams * kChunk);

  unsigned char *d_a = nullptr, *d_b = nullptr;
  CK(cudaMalloc(&d_a, kStreams * kChunk));
  CK(cudaMalloc(&d_b, kStreams * kChunk));

  cudaStream_t st[kStreams];
  cudaEvent_t done[kStreams];
  for (int i = 0; i < kStreams; ++i) {
    CK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
  }

  // Each stream: H2D its chunk, memset the first 4 KiB of it on the device, D2D into d_b.
  for (int i = 0; i < kStreams; ++i) {
    const size_t off = size_t(i) * kChunk;
    CK(cudaMemcpyAsync(d_a + off, src + off, kChunk, cudaMemcpyHostToDevice, st[i]));
    CK(cudaMemsetAsync(d_a + off, 0x40 + i, 4096, st[i]));
    CK(cudaMemcpyAsync(d_b + off, d_a + off, kChunk, cudaMemcpyDeviceToDevice, st[i]));
    CK(cudaEventRecord(done[i], st[i]));
  }
  // Stream (i+1) brings chunk i back, after waiting for stream i's event.
  for (int i = 0; i < kStreams; ++i) {
    const size_t off = size_t(i) * kChunk;
    const int j = (i + 1) % kStreams;  // stream j brings back chunk i
    CK(cudaStreamWaitEvent(st[j], done[i], 0));
    CK(cudaMemcpyAsync(dst + off, d_b + off, kChunk, cudaMemcpyDeviceToHost, st[j]));
  }
  for (int i = 0; i < kStreams; ++i) CK(cudaStreamSynchronize(st[i]));

  // A pageable round trip through the legacy default stream, too.
  std::vector<unsigned char> page(3 * 1000 * 1000 + 17), back(page.size());
  for (size_t i = 0; i < page.size(); ++i) page[i] = static_cast<unsigned char>(i % 251);
  CK(cudaMemcpy(d_a, page.data(), page.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(back.data(), d_a, back.size(), cudaMemcpyDeviceToHost));

  bool good = std::memcmp(page.data(), back.data(), page.size()) == 0;
  for (int i = 0; i < kStreams; ++i) {
    const size_t off = size_t(i) * kChunk;
    for (size_t k = 0; k < 4096; ++k) good = good && dst[off + k] == static_cast<unsigned char>(0x40 + i);
    good = good && std::memcmp(dst + off + 4096, src + off + 4096, kChunk - 4096) == 0;
    std::printf("stream %d checksum %016llx\n", i,
                static_cast<unsigned long long>(fnv1a(dst + off, kChunk)));
  }
  std::printf("pageable checksum %016llx\n", static_cast<unsigned long long>(fnv1a(back.data(), back.size())));
  std::printf("total checksum %016llx\n", static_cast<unsigned long long>(fnv1a(dst, kStreams * kChunk)));

  size_t free_b = 0, total_b = 0;
  CK(cudaMemGetInfo(&free_b, &total_b));
  std::printf("memory info sane: %s\n", free_b > 0 && free_b <= total_b ? "yes" : "no");

  for (int i = 0; i < kStreams; ++i) {
    CK(cudaEventDestroy(done[i]));
    CK(cudaStreamDestroy(st[i]));
  }
  CK(cudaFree(d_a));
  CK(cudaFree(d_b));
  CK(cudaFreeHost(src));
  CK(cudaFreeHost(dst));
  std::printf("demo: %s\n", good ? "OK" : "DATA MISMATCH");
  return good ? 0 : 1;
}
