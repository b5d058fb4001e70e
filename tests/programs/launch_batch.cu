// Launches back to back, as a server sees them from a client that launches faster than the
// driver takes launches: through funnel they go out in batches (FUNNEL_LAUNCH_BATCH: CUDA graphs
// whose nodes' arguments are set anew each time).  Each check depends on every launch running
// once, in its stream's order, with its own arguments.
#include <cstdint>
#include <vector>

#include "check.h"

// x = x * 3 + i: the result depends on the order of the launches and on each one's i.
__global__ void step(unsigned* x, unsigned i) { *x = *x * 3u + i; }
// The same with another shape (2 blocks of 32; thread 0 of block 1 does it).
__global__ void step_wide(unsigned* x, unsigned i) {
  if (blockIdx.x == 1 && threadIdx.x == 0) *x = *x * 5u + i;
}
__global__ void put(unsigned* out, unsigned i, unsigned v) { out[i] = v; }
__global__ void snapshot(unsigned* dst, const unsigned* x, unsigned i) { dst[i] = *x; }

int main() {
  unsigned* d = nullptr;
  constexpr unsigned kPuts = 4096, kSnaps = 64;
  CHECK(cudaMalloc(&d, (8 + kPuts + kSnaps) * sizeof(unsigned)));
  CHECK(cudaMemset(d, 0, (8 + kPuts + kSnaps) * sizeof(unsigned)));
  unsigned *x1 = d, *x2 = d + 1, *x3 = d + 2, *puts = d + 8, *snaps = d + 8 + kPuts;
  cudaStream_t s1, s2, s3;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CHECK(cudaStreamCreate(&s3));  // blocking: ordered with the legacy default stream

  // 1. One stream, one shape: 20000 launches, each with its own argument.
  unsigned want1 = 0;
  for (unsigned i = 0; i < 20000; ++i) {
    step<<<1, 1, 0, s1>>>(x1, i);
    want1 = want1 * 3u + i;
  }
  // 2. Two shapes in a repeating pattern (2 narrow, 1 wide), so batches mix kernels.
  unsigned want2 = 0;
  for (unsigned i = 0; i < 9000; ++i) {
    if (i % 3 == 2) {
      step_wide<<<2, 32, 0, s2>>>(x2, i);
      want2 = want2 * 5u + i;
    } else {
      step<<<1, 1, 0, s2>>>(x2, i);
      want2 = want2 * 3u + i;
    }
  }
  // 3. Many different arguments: every launch writes its own element.
  for (unsigned i = 0; i < kPuts; ++i) put<<<1, 1, 0, s1>>>(puts, i, i * 7u + 1u);
  // 4. Bursts on a blocking stream, each followed by a snapshot on the legacy default stream,
  // which must see the whole burst and nothing of the next.
  unsigned want3 = 0;
  std::vector<unsigned> want_snaps(kSnaps);
  for (unsigned b = 0; b < kSnaps; ++b) {
    for (unsigned i = 0; i < 50; ++i) {
      step<<<1, 1, 0, s3>>>(x3, b * 50u + i);
      want3 = want3 * 3u + b * 50u + i;
    }
    snapshot<<<1, 1>>>(snaps, x3, b);
    want_snaps[b] = want3;
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  std::vector<unsigned> h(8 + kPuts + kSnaps);
  CHECK(cudaMemcpy(h.data(), d, h.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
  std::printf("one stream, 20000 launches: %s\n", h[0] == want1 ? "ok" : "WRONG");
  std::printf("two shapes, 9000 launches: %s\n", h[1] == want2 ? "ok" : "WRONG");
  unsigned bad = 0;
  for (unsigned i = 0; i < kPuts; ++i) bad += h[8 + i] != i * 7u + 1u;
  std::printf("%u launches with their own arguments: %u wrong\n", kPuts, bad);
  bad = 0;
  for (unsigned b = 0; b < kSnaps; ++b) bad += h[8 + kPuts + b] != want_snaps[b];
  std::printf("blocking stream and legacy stream, %u snapshots: %u wrong, final %s\n", kSnaps, bad,
              h[2] == want3 ? "ok" : "WRONG");
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaStreamDestroy(s3));
  CHECK(cudaFree(d));
  return 0;
}
