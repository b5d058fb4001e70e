// stream_modes: is the H100's "fast" or "slow" small-copy latency a property of the process
// (its context) or of each stream?  Native membench runs fall into two groups on the H100
// machine: 4 KiB pinned d2h copies at ~0.60 or ~0.52 GB/s and record+synchronize at ~0.47 or
// ~0.9 us, every row of one process in the same group, whatever core it runs on.  This probe
// creates N non-blocking streams (and uses the legacy one) and, per stream, times the median
// of 4 KiB pinned d2h and h2d copies (cudaMemcpyAsync + cudaStreamSynchronize) and of an event
// record + synchronize, rounds interleaved across the streams.  Output: one JSON line per stream.
// With --contexts C it does all that C times in one process, destroying the context between
// (cudaDeviceReset) and making a new one: is the draw made per context or per process?
//   nvcc -O2 -std=c++17 -o stream_modes bench/probes/stream_modes.cu
//   ./stream_modes [--streams N] [--iters N] [--rounds R] [--contexts C]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../apps/common/cuda_check.h"

namespace {
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

void measure(int ctx, int streams, int iters, int rounds) {
  const size_t n = 4096;
  void *h = nullptr, *d = nullptr;
  CK(cudaMallocHost(&h, n));
  CK(cudaMalloc(&d, n));
  std::vector<cudaStream_t> s(size_t(streams) + 1, nullptr);  // s[0]: the legacy stream
  std::vector<cudaEvent_t> e(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0) CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e[i], cudaEventDisableTiming));
  }
  std::vector<std::vector<double>> d2h(s.size()), h2d(s.size()), rec(s.size());
  for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms up
    for (size_t i = 0; i < s.size(); ++i) {
      for (int k = 0; k < iters; ++k) {
        auto t0 = Clock::now();
        CK(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s[i]));
        CK(cudaStreamSynchronize(s[i]));
        const double a = us_since(t0);
        t0 = Clock::now();
        CK(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s[i]));
        CK(cudaStreamSynchronize(s[i]));
        const double b = us_since(t0);
        t0 = Clock::now();
        CK(cudaEventRecord(e[i], s[i]));
        CK(cudaEventSynchronize(e[i]));
        const double c = us_since(t0);
        if (r == 0) continue;
        d2h[i].push_back(a);
        h2d[i].push_back(b);
        rec[i].push_back(c);
      }
    }
  }
  for (size_t i = 0; i < s.size(); ++i)
    std::printf("{\"context\":%d,\"stream\":%zu,\"d2h_4k_us\":%.3f,\"h2d_4k_us\":%.3f,\"record_sync_us\":%.3f}\n", ctx, i, median(d2h[i]),
                median(h2d[i]), median(rec[i]));
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0) CK(cudaStreamDestroy(s[i]));
    CK(cudaEventDestroy(e[i]));
  }
  CK(cudaFreeHost(h));
  CK(cudaFree(d));
}
}  // namespace

int main(int argc, char** argv) {
  int streams = 8, iters = 200, rounds = 3, contexts = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--streams") streams = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--iters") iters = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--contexts") contexts = std::max(1, std::atoi(argv[i + 1]));
  }
  for (int ctx = 0; ctx < contexts; ++ctx) {
    if (ctx > 0) CK(cudaDeviceReset());
    measure(ctx, streams, iters, rounds);
  }
  return 0;
}
