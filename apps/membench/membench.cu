// membench: host<->device copy bandwidth and synchronisation round trips, with the CUDA
// runtime API only, so the same binary runs natively and through funnel-run.
//   membench [--reps N] [--max-bytes B] [--sync-iters N]
// Output (stdout): one JSON object per line ({"bench":...}, each line starts with '{'),
// then a human table.  Exit 1 on a data mismatch or a CUDA error.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "membench: %s failed: %s (%d)\n", #x, cudaGetErrorString(e_), int(e_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Row {
  std::string bench;
  size_t bytes;
  double value;  // GB/s or µs
  const char* unit;
};
std::vector<Row> rows;

void emit_bw(const char* bench, size_t bytes, double seconds) {
  const double gbps = double(bytes) / seconds / 1e9;
  std::printf("{\"bench\":\"%s\",\"bytes\":%zu,\"gbps\":%.4f,\"us\":%.3f}\n", bench, bytes, gbps, seconds * 1e6);
  rows.push_back({bench, bytes, gbps, "GB/s"});
}

void emit_us(const char* bench, double us) {
  std::printf("{\"bench\":\"%s\",\"bytes\":0,\"us\":%.4f}\n", bench, us);
  rows.push_back({bench, 0, us, "us"});
}

void fill(unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>((i * 131u + seed * 17u + (i >> 12)) & 0xff);
}

// Copy there and back, compare.  `pinned` selects the host memory kind.
bool verify(size_t n, bool pinned, bool async, cudaStream_t s) {
  unsigned char *a = nullptr, *b = nullptr, *d = nullptr;
  std::vector<unsigned char> va, vb;
  if (pinned) {
    CK(cudaMallocHost(&a, n));
    CK(cudaMallocHost(&b, n));
  } else {
    va.resize(n);
    vb.resize(n);
    a = va.data();
    b = vb.data();
  }
  CK(cudaMalloc(&d, n));
  fill(a, n, 7);
  std::memset(b, 0, n);
  if (async) {
    CK(cudaMemcpyAsync(d, a, n, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(b, d, n, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
  } else {
    CK(cudaMemcpy(d, a, n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b, d, n, cudaMemcpyDeviceToHost));
  }
  const bool good = std::memcmp(a, b, n) == 0;
  CK(cudaFree(d));
  if (pinned) {
    CK(cudaFreeHost(a));
    CK(cudaFreeHost(b));
  }
  return good;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  size_t max_bytes = size_t{256} << 20;
  int sync_iters = 10000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--max-bytes" && i + 1 < argc) max_bytes = std::strtoull(argv[++i], nullptr, 0);
    else if (a == "--sync-iters" && i + 1 < argc) sync_iters = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: membench [--reps N] [--max-bytes B] [--sync-iters N]\n");
      return 2;
    }
  }
  const size_t sizes_all[] = {size_t{4} << 10, size_t{64} << 10, size_t{1} << 20,
                              size_t{16} << 20, size_t{64} << 20, size_t{256} << 20};
  std::vector<size_t> sizes;
  for (size_t s : sizes_all)
    if (s <= max_bytes) sizes.push_back(s);
  if (sizes.empty()) sizes.push_back(size_t{4} << 10);
  const size_t big = sizes.back();

  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // Data checks first: one copy of each kind, there and back.
  const size_t vn = (size_t{16} << 20) + 4097;  // odd size: several staging chunks and a tail
  const bool ok_pageable = verify(vn, false, false, s);
  const bool ok_pinned = verify(vn, true, false, s);
  const bool ok_pinned_async = verify(vn, true, true, s);
  std::printf("{\"bench\":\"verify\",\"pageable\":%s,\"pinned\":%s,\"pinned_async\":%s}\n", ok_pageable ? "true" : "false",
              ok_pinned ? "true" : "false", ok_pinned_async ? "true" : "false");

  unsigned char *hp = nullptr, *dp = nullptr;
  CK(cudaMallocHost(&hp, big));
  std::vector<unsigned char> hv(big);
  CK(cudaMalloc(&dp, big));
  fill(hp, big, 1);
  fill(hv.data(), big, 2);

  enum Kind { H2D, D2H };
  auto bench_copy = [&](const char* name, Kind k, bool pinned, bool async) {
    unsigned char* h = pinned ? hp : hv.data();
    for (size_t n : sizes) {
      auto once = [&] {
        const auto t0 = Clock::now();
        if (async) {
          if (k == H2D) CK(cudaMemcpyAsync(dp, h, n, cudaMemcpyHostToDevice, s));
          else CK(cudaMemcpyAsync(h, dp, n, cudaMemcpyDeviceToHost, s));
          CK(cudaStreamSynchronize(s));
        } else {
          if (k == H2D) CK(cudaMemcpy(dp, h, n, cudaMemcpyHostToDevice));
          else CK(cudaMemcpy(h, dp, n, cudaMemcpyDeviceToHost));
        }
        return std::chrono::duration<double>(Clock::now() - t0).count();
      };
      for (int w = 0; w < 3; ++w) once();
      // small copies are cheap: take more samples of them
      const int n_reps = n <= (size_t{1} << 20) ? reps * 10 : reps;
      std::vector<double> t;
      t.reserve(size_t(n_reps));
      for (int r = 0; r < n_reps; ++r) t.push_back(once());
      emit_bw(name, n, median(t));
    }
  };
  bench_copy("h2d_pinned", H2D, true, false);
  bench_copy("d2h_pinned", D2H, true, false);
  bench_copy("h2d_pinned_async", H2D, true, true);
  bench_copy("d2h_pinned_async", D2H, true, true);
  bench_copy("h2d_pageable", H2D, false, false);
  bench_copy("d2h_pageable", D2H, false, false);

  // A round trip: `once` 100 times to warm up, then sync_iters times timed; the median (µs).
  auto round_trip = [&](const char* name, auto once) {
    std::vector<double> t;
    t.reserve(size_t(sync_iters));
    for (int w = 0; w < 100; ++w) once();
    for (int i = 0; i < sync_iters; ++i) {
      const auto t0 = Clock::now();
      once();
      t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    emit_us(name, median(t));
  };
  round_trip("stream_sync_empty", [&] { CK(cudaStreamSynchronize(s)); });
  {
    cudaEvent_t ev;
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    round_trip("event_record_sync", [&] {
      CK(cudaEventRecord(ev, s));
      CK(cudaEventSynchronize(ev));
    });
    // The same with work before the record: a 4-byte memset, so the record is not of an idle stream.
    round_trip("memset_event_sync", [&] {
      CK(cudaMemsetAsync(dp, 0, 4, s));
      CK(cudaEventRecord(ev, s));
      CK(cudaEventSynchronize(ev));
    });
    CK(cudaEventDestroy(ev));
  }
  {  // cudaEventQuery of a completed event: a polling loop's steady state
    cudaEvent_t ev;
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CK(cudaEventRecord(ev, s));
    while (cudaEventQuery(ev) == cudaErrorNotReady) {
    }
    CK(cudaEventRecord(ev, s));
    CK(cudaEventSynchronize(ev));
    for (int w = 0; w < 100; ++w) CK(cudaEventQuery(ev));
    std::vector<double> t;
    t.reserve(size_t(sync_iters));
    for (int i = 0; i < sync_iters; ++i) {
      const auto t0 = Clock::now();
      CK(cudaEventQuery(ev));
      t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    emit_us("event_query_done", median(t));
    CK(cudaEventDestroy(ev));
  }

  CK(cudaFree(dp));
  CK(cudaFreeHost(hp));
  CK(cudaStreamDestroy(s));

  std::printf("\n%-20s %12s %12s\n", "bench", "bytes", "value");
  for (const Row& r : rows) std::printf("%-20s %12zu %12.3f %s\n", r.bench.c_str(), r.bytes, r.value, r.unit);
  const bool good = ok_pageable && ok_pinned && ok_pinned_async;
  std::printf("data check: %s\n", good ? "OK" : "MISMATCH");
  return good ? 0 : 1;
}
