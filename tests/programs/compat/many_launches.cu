// Many launches: 100 000 tiny kernels (one block of 32 threads each), alternating between two
// streams; every 1000 launches the streams join both ways through events (B waits for A, a
// snapshot kernel on B reads A's counters, A waits for B). Each stream adds to its own half of
// the counters without atomics, so a lost update means two launches of one stream overlapped;
// the snapshots check the event ordering. `many_launches [launches]` (100000).
#include <vector>

#include "compat.h"

constexpr int kSlots = 16;       // counter rows per stream
constexpr int kJoinEvery = 1000;  // launches between two joins

// Row `row` of stream `side`: 32 counters, each thread adds `add` to one (plain read-modify-write).
__global__ void bump(int* counters, int side, int row, int add) {
  counters[(side * kSlots + row) * 32 + threadIdx.x] += add;
}

// Sum of stream A's counters (side 0) into snap[k]: it runs on B after B waited for A.
__global__ void snapshot(const int* counters, long long* snap, int k) {
  long long s = 0;
  for (int i = threadIdx.x; i < kSlots * 32; i += 32) s += counters[i];
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x == 0) snap[k] = s;
}

int main(int argc, char** argv) {
  const int launches = int_arg(argc, argv, 1, 100000);
  const int joins = launches / kJoinEvery;
  int* counters;
  long long* snap;
  CHECK(cudaMalloc(&counters, 2 * kSlots * 32 * sizeof(int)));
  CHECK(cudaMalloc(&snap, (joins + 1) * sizeof(long long)));
  CHECK(cudaMemset(counters, 0, 2 * kSlots * 32 * sizeof(int)));
  CHECK(cudaMemset(snap, 0xff, (joins + 1) * sizeof(long long)));
  cudaStream_t s[2];
  for (auto& x : s) CHECK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  cudaEvent_t a_done, b_done;
  CHECK(cudaEventCreateWithFlags(&a_done, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&b_done, cudaEventDisableTiming));
  CHECK(cudaDeviceSynchronize());

  // The CPU model: the same additions, and A's total at each join.
  std::vector<int> want(2 * kSlots * 32, 0);
  std::vector<long long> want_snap;
  long long a_total = 0;
  int k = 0;
  for (int j = 0; j < launches; ++j) {
    const int side = j % 2, row = static_cast<int>(hash32(j) % kSlots), add = 1 + j % 3;
    bump<<<1, 32, 0, s[side]>>>(counters, side, row, add);
    for (int t = 0; t < 32; ++t) want[(side * kSlots + row) * 32 + t] += add;
    if (side == 0) a_total += 32LL * add;
    if ((j + 1) % kJoinEvery == 0) {
      CHECK(cudaEventRecord(a_done, s[0]));
      CHECK(cudaStreamWaitEvent(s[1], a_done, 0));
      snapshot<<<1, 32, 0, s[1]>>>(counters, snap, k++);
      CHECK(cudaEventRecord(b_done, s[1]));
      CHECK(cudaStreamWaitEvent(s[0], b_done, 0));
      want_snap.push_back(a_total);
    }
    if (j % 10000 == 0) CHECK(cudaGetLastError());
  }
  CHECK(cudaGetLastError());
  for (auto& x : s) CHECK(cudaStreamSynchronize(x));

  std::vector<int> got(want.size());
  std::vector<long long> got_snap(joins);
  CHECK(cudaMemcpy(got.data(), counters, got.size() * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(got_snap.data(), snap, joins * sizeof(long long), cudaMemcpyDeviceToHost));
  int bad = 0;
  long long total = 0;
  uint32_t checksum = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    bad += got[i] != want[i];
    total += got[i];
    checksum = hash32(checksum ^ static_cast<uint32_t>(got[i]));
  }
  int bad_snap = 0;
  for (int i = 0; i < joins; ++i) bad_snap += got_snap[i] != want_snap[i];
  std::printf("%d launches on 2 streams + %d joins\n", launches, joins);
  std::printf("counters: mismatches %d, total %lld, checksum %08x\n", bad, total, checksum);
  std::printf("snapshots after each join: mismatches %d, last %lld\n", bad_snap,
              joins > 0 ? got_snap[joins - 1] : 0LL);
  EXPECT(bad == 0, "counters");
  EXPECT(bad_snap == 0, "snapshots");
  CHECK(cudaEventDestroy(a_done));
  CHECK(cudaEventDestroy(b_done));
  for (auto& x : s) CHECK(cudaStreamDestroy(x));
  CHECK(cudaFree(counters));
  CHECK(cudaFree(snap));
  return finish();
}
