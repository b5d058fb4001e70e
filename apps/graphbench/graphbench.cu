// graphbench: replays of a captured CUDA graph, for one process of a group that bench/graphs.sh
// starts N at a time (natively, under NVIDIA MPS, through funnel-run).  The issue's case: a graph
// of 100 small kernels captured once, replayed 1000 times.
//
//   graphbench [--kernels N] [--replays R] [--warmup W] [--spin-ns NS]
//              [--barrier DIR --clients C]
//
// The process captures, on a non-blocking stream of its own (cudaStreamBeginCapture, global
// mode), N launches of a tiny kernel (1 block of 128 threads, each adding 1 to its element of a
// 128-int buffer; --spin-ns > 0 makes each also spin NS ns on the GPU's global timer),
// instantiates the graph, replays it W times and synchronises (warm-up), marks itself ready and
// waits until C processes are (--barrier: ready.<pid> files in DIR, as kernelbench does), then
// launches it R times with cudaGraphLaunch back to back and synchronises once at the end.
// Prints one JSON line: the timed replays' seconds (first launch to the end of the final
// synchronisation), graphs/s, kernels/s, the host's issue time of the R launches, capture and
// instantiation times, and t0_ns/t1_ns (steady clock, CLOCK_MONOTONIC: comparable between the
// processes of one host, so the script can take the group's common window).
// The kernels add to the buffer non-atomically, so kernels of the graph that ran out of order or
// overlapped, ran outside the graph (e.g. during the capture) or not at all leave a wrong count:
// every element must be N * (W + R).  A wrong count prints "ok":false and exits 1; a failed CUDA
// call exits 2.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_check.h"

using Clock = std::chrono::steady_clock;

constexpr int kThreads = 128;  // one block; one buffer element per thread

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void add_one(int* buf, unsigned spin_ns) {
  if (spin_ns != 0) {
    const unsigned long long t0 = global_ns();
    while (global_ns() - t0 < spin_ns) {
    }
  }
  buf[threadIdx.x] += 1;  // not atomic on purpose: the graph's order is what keeps it right
}

namespace {

struct Args {
  int kernels = 100;
  int replays = 1000;
  int warmup = 10;
  unsigned spin_ns = 0;
  std::string barrier;
  int clients = 1;
};

[[noreturn]] void usage_exit(const char* why, const std::string& what) {
  std::fprintf(stderr, "graphbench: %s%s\n", why, what.c_str());
  std::fprintf(stderr,
               "usage: graphbench [--kernels N] [--replays R] [--warmup W] [--spin-ns NS] "
               "[--barrier DIR --clients C]\n");
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage_exit("a value is missing after ", k);
      return argv[++i];
    };
    if (k == "--kernels") a.kernels = std::atoi(next().c_str());
    else if (k == "--replays") a.replays = std::atoi(next().c_str());
    else if (k == "--warmup") a.warmup = std::atoi(next().c_str());
    else if (k == "--spin-ns") a.spin_ns = static_cast<unsigned>(std::strtoul(next().c_str(), nullptr, 0));
    else if (k == "--barrier") a.barrier = next();
    else if (k == "--clients") a.clients = std::atoi(next().c_str());
    else if (k == "-h" || k == "--help") usage_exit("", "replays of a captured graph of small kernels");
    else usage_exit("unknown option ", k);
  }
  if (a.kernels < 1 || a.replays < 1 || a.warmup < 0 || a.clients < 1)
    usage_exit("--kernels, --replays and --clients must be >= 1, --warmup >= 0", "");
  // the count per element must fit an int
  if (static_cast<long long>(a.kernels) * (a.warmup + a.replays) > 2000000000LL)
    usage_exit("--kernels x (--warmup + --replays) is too large", "");
  return a;
}

int count_prefix(const std::string& dir, const char* prefix) {
  int n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, prefix, std::strlen(prefix)) == 0) ++n;
    closedir(d);
  }
  return n;
}

// Marks this process ready and waits (at most 2 minutes) until `clients` are (kernelbench's).
void barrier(const Args& a) {
  if (a.barrier.empty()) return;
  const std::string mine = a.barrier + "/ready." + std::to_string(getpid());
  if (FILE* f = std::fopen(mine.c_str(), "w")) std::fclose(f);
  const auto give_up = Clock::now() + std::chrono::minutes(2);
  while (count_prefix(a.barrier, "ready.") < a.clients) {
    if (Clock::now() > give_up) {
      std::fprintf(stderr, "graphbench: barrier timed out\n");
      std::exit(2);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

long long ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* buf = nullptr;
  CK(cudaMalloc(&buf, kThreads * sizeof(int)));
  CK(cudaMemsetAsync(buf, 0, kThreads * sizeof(int), s));
  CK(cudaStreamSynchronize(s));

  // capture N launches into one graph
  const auto tc = Clock::now();
  cudaGraph_t graph = nullptr;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int k = 0; k < a.kernels; ++k) add_one<<<1, kThreads, 0, s>>>(buf, a.spin_ns);
  CK(cudaGetLastError());
  CK(cudaStreamEndCapture(s, &graph));
  const double capture_ms = ms_since(tc);

  const auto ti = Clock::now();
  cudaGraphExec_t exec = nullptr;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  const double instantiate_ms = ms_since(ti);

  // warm-up replays (first launch uploads the graph)
  for (int i = 0; i < a.warmup; ++i) CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));

  barrier(a);
  const auto t0 = Clock::now();
  for (int i = 0; i < a.replays; ++i) CK(cudaGraphLaunch(exec, s));
  const auto t_issued = Clock::now();
  CK(cudaStreamSynchronize(s));
  const auto t1 = Clock::now();
  const double secs = std::chrono::duration<double>(t1 - t0).count();
  const double issue_secs = std::chrono::duration<double>(t_issued - t0).count();

  std::vector<int> host(kThreads, -1);
  CK(cudaMemcpy(host.data(), buf, kThreads * sizeof(int), cudaMemcpyDeviceToHost));
  const int expected = a.kernels * (a.warmup + a.replays);
  int wrong = 0, first_bad = -1;
  for (int i = 0; i < kThreads; ++i)
    if (host[i] != expected) {
      if (wrong++ == 0) first_bad = i;
    }
  const bool ok = wrong == 0;
  if (!ok)
    std::fprintf(stderr, "graphbench: %d of %d elements wrong: buf[%d] = %d, expected %d\n", wrong, kThreads,
                 first_bad, host[first_bad], expected);

  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaFree(buf));
  CK(cudaStreamDestroy(s));

  std::printf("{\"bench\":\"graph_replay\",\"kernels\":%d,\"replays\":%d,\"warmup\":%d,\"spin_ns\":%u,"
              "\"seconds\":%.6f,\"graphs_per_s\":%.1f,\"kernels_per_s\":%.1f,\"issue_seconds\":%.6f,"
              "\"capture_ms\":%.3f,\"instantiate_ms\":%.3f,\"t0_ns\":%lld,\"t1_ns\":%lld,\"ok\":%s}\n",
              a.kernels, a.replays, a.warmup, a.spin_ns, secs, a.replays / secs,
              static_cast<double>(a.replays) * a.kernels / secs, issue_secs, capture_ms, instantiate_ms, ns_of(t0),
              ns_of(t1), ok ? "true" : "false");
  return ok ? 0 : 1;
}
