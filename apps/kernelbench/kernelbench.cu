// kernelbench: what kernel launches cost, for one process of a group that bench/kernels.sh
// starts N at a time (natively, under NVIDIA MPS, through funnel-run).
//
//   kernelbench issue  [--launches N]          per-launch cost seen by the caller of <<<>>>
//   kernelbench roundtrip [--launches N]       one launch + cudaStreamSynchronize (µs): the
//                                              synchronisation round trip of a kernel
//   kernelbench throughput --kernel empty|small --seconds S --barrier DIR --clients N
//                                              launch for S seconds after all N processes are
//                                              ready; prints this process's completed launches
//              [--threads T]                  T host threads, each on its own stream (one
//                                              process, one context: the single-process
//                                              ceiling that funnel's server lives under)
//   kernelbench copies --bytes B --dir h2d|d2h --seconds S --barrier DIR --clients N [--threads T]
//                                              cudaMemcpyAsync of B bytes between pinned host
//                                              and device memory + cudaStreamSynchronize, in a
//                                              loop per thread, for S seconds after all N are
//                                              ready: whether copies of several processes
//                                              (or streams) overlap (bench/probes/copies.sh)
//   kernelbench first                          attach + one kernel + exit (start-up)
//   kernelbench idle --barrier DIR --clients N attach, run one kernel, mark ready, wait for
//                                              DIR/stop (GPU memory of idle clients)
//   --api driver                               the launches (cuLaunchKernel on the kernel's
//                                              cudaGetFuncBySymbol handle), copies
//                                              (cuMemcpyHtoDAsync/DtoHAsync) and stream
//                                              synchronisations (cuStreamSynchronize) through
//                                              the driver API instead of the runtime's
// Every mode prints one JSON line.  "small" is 4 blocks of 128 threads that spin ~5 us on the
// GPU's global timer, as the issue describes; "empty" does nothing.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda_check.h"


using Clock = std::chrono::steady_clock;

__global__ void empty_kernel() {}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void small_kernel(unsigned ns, int* sink) {
  const unsigned long long t0 = global_ns();
  while (global_ns() - t0 < ns) {
  }
  if (threadIdx.x == 0 && sink != nullptr) atomicAdd(sink, 1);
}

namespace {

struct Args {
  std::string mode;
  std::string kernel = "empty";
  double seconds = 2.0;
  std::string barrier;
  int clients = 1;
  int threads = 1;
  int launches = 20000;
  unsigned small_ns = 5000;
  size_t bytes = size_t{384} << 10;
  std::string dir = "h2d";
  bool driver = false;  // --api driver
};

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) {
    std::fprintf(stderr, "usage: kernelbench issue|roundtrip|throughput|copies|first|idle [options]\n");
    std::exit(2);
  }
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kernelbench: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--kernel") a.kernel = next();
    else if (k == "--seconds") a.seconds = std::atof(next().c_str());
    else if (k == "--barrier") a.barrier = next();
    else if (k == "--clients") a.clients = std::atoi(next().c_str());
    else if (k == "--threads") a.threads = std::max(1, std::atoi(next().c_str()));
    else if (k == "--launches") a.launches = std::atoi(next().c_str());
    else if (k == "--small-ns") a.small_ns = static_cast<unsigned>(std::atoi(next().c_str()));
    else if (k == "--bytes") a.bytes = std::max<size_t>(1, std::strtoull(next().c_str(), nullptr, 0));
    else if (k == "--dir") a.dir = next();
    else if (k == "--api") {
      const std::string api = next();
      if (api != "runtime" && api != "driver") {
        std::fprintf(stderr, "kernelbench: --api must be runtime or driver\n");
        std::exit(2);
      }
      a.driver = api == "driver";
    } else {
      std::fprintf(stderr, "kernelbench: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (a.dir != "h2d" && a.dir != "d2h") {
    std::fprintf(stderr, "kernelbench: --dir must be h2d or d2h\n");
    std::exit(2);
  }
  if (a.kernel != "empty" && a.kernel != "small") {
    std::fprintf(stderr, "kernelbench: --kernel must be empty or small\n");
    std::exit(2);
  }
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

void touch(const std::string& path) {
  if (FILE* f = std::fopen(path.c_str(), "w")) std::fclose(f);
}

// Marks this process ready and waits (at most 2 minutes) until `clients` are.
void barrier(const Args& a) {
  if (a.barrier.empty()) return;
  touch(a.barrier + "/ready." + std::to_string(getpid()));
  const auto give_up = Clock::now() + std::chrono::minutes(2);
  while (count_prefix(a.barrier, "ready.") < a.clients) {
    if (Clock::now() > give_up) {
      std::fprintf(stderr, "kernelbench: barrier timed out\n");
      std::exit(2);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// The kernels as driver functions (--api driver): the runtime's handles, which are CUfunctions.
CUfunction driver_function(const void* kernel) {
  cudaFunction_t f = nullptr;
  CK(cudaGetFuncBySymbol(&f, kernel));
  return reinterpret_cast<CUfunction>(f);
}

void launch(const Args& a, cudaStream_t s, int* sink) {
  if (a.driver) {
    static const CUfunction empty = driver_function(reinterpret_cast<const void*>(empty_kernel));
    static const CUfunction small = driver_function(reinterpret_cast<const void*>(small_kernel));
    const auto stream = reinterpret_cast<CUstream>(s);
    if (a.kernel == "empty") {
      CU(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr));
    } else {
      unsigned ns = a.small_ns;
      void* params[] = {&ns, &sink};
      CU(cuLaunchKernel(small, 4, 1, 1, 128, 1, 1, 0, stream, params, nullptr));
    }
    return;
  }
  if (a.kernel == "empty") empty_kernel<<<1, 1, 0, s>>>();
  else small_kernel<<<4, 128, 0, s>>>(a.small_ns, sink);
}

void sync(const Args& a, cudaStream_t s) {
  if (a.driver) CU(cuStreamSynchronize(reinterpret_cast<CUstream>(s)));
  else CK(cudaStreamSynchronize(s));
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const auto t_start = Clock::now();
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* sink = nullptr;
  CK(cudaMalloc(&sink, sizeof(int)));
  CK(cudaMemset(sink, 0, sizeof(int)));

  if (a.mode == "first") {
    empty_kernel<<<1, 1, 0, s>>>();
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t_start).count();
    std::printf("{\"bench\":\"first\",\"ms\":%.3f}\n", ms);
    return 0;
  }

  // warm up: module load, first launch
  for (int i = 0; i < 10; ++i) launch(a, s, sink);
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(s));

  if (a.mode == "issue") {
    // bursts of 50 with the stream drained in between, so the queue never fills and the
    // time is the caller's cost of one <<<>>>
    std::vector<double> t;
    t.reserve(static_cast<size_t>(a.launches));
    for (int i = 0; i < a.launches; ++i) {
      if (i % 50 == 0) sync(a, s);
      const auto t0 = Clock::now();
      launch(a, s, sink);
      t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    std::sort(t.begin(), t.end());
    std::printf("{\"bench\":\"issue_%s\",\"us\":%.3f,\"p10_us\":%.3f,\"p90_us\":%.3f}\n", a.kernel.c_str(),
                t[t.size() / 2], t[t.size() / 10], t[t.size() * 9 / 10]);
    return 0;
  }

  if (a.mode == "roundtrip") {
    // launch + synchronize, one at a time: what a step that waits for its kernel pays
    const int iters = std::max(100, a.launches / 4);
    std::vector<double> t;
    t.reserve(static_cast<size_t>(iters));
    for (int i = 0; i < iters; ++i) {
      const auto t0 = Clock::now();
      launch(a, s, sink);
      sync(a, s);
      t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    std::printf("{\"bench\":\"roundtrip_%s\",\"us\":%.3f,\"p10_us\":%.3f,\"p90_us\":%.3f}\n", a.kernel.c_str(),
                t[t.size() / 2], t[t.size() / 10], t[t.size() * 9 / 10]);
    return 0;
  }

  if (a.mode == "throughput") {
    // Thread 0 uses the stream warmed up above; the others make and warm their own.
    std::vector<cudaStream_t> streams(static_cast<size_t>(a.threads), s);
    for (size_t t = 1; t < streams.size(); ++t) {
      CK(cudaStreamCreateWithFlags(&streams[t], cudaStreamNonBlocking));
      for (int i = 0; i < 10; ++i) launch(a, streams[t], sink);
      CK(cudaStreamSynchronize(streams[t]));
    }
    barrier(a);
    const auto t0 = Clock::now();
    const auto until = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
    std::vector<long long> counts(streams.size(), 0);
    auto run = [&](size_t t) {
      long long c = 0;
      while (Clock::now() < until) {
        for (int i = 0; i < 64; ++i) launch(a, streams[t], sink);
        c += 64;
      }
      CK(cudaGetLastError());
      sync(a, streams[t]);
      counts[t] = c;
    };
    std::vector<std::thread> workers;
    for (size_t t = 1; t < streams.size(); ++t) workers.emplace_back(run, t);
    run(0);
    for (auto& w : workers) w.join();
    long long n = 0;
    for (long long c : counts) n += c;
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    int counted = 0;
    CK(cudaMemcpy(&counted, sink, sizeof counted, cudaMemcpyDeviceToHost));
    // small kernels count their blocks' executions: 4 per launch (+ 10 warm-up launches
    // per stream)
    const bool ok = a.kernel == "empty" || counted == 4 * (n + 10LL * a.threads);
    std::printf("{\"bench\":\"throughput_%s\",\"launches\":%lld,\"seconds\":%.4f,\"per_s\":%.1f,\"ok\":%s}\n",
                a.kernel.c_str(), n, secs, static_cast<double>(n) / secs, ok ? "true" : "false");
    return ok ? 0 : 1;
  }

  if (a.mode == "copies") {
    struct Lane {
      cudaStream_t stream;
      char* host;
      char* dev;
      long long copies = 0;
    };
    std::vector<Lane> lanes(static_cast<size_t>(a.threads));
    for (size_t t = 0; t < lanes.size(); ++t) {
      Lane& l = lanes[t];
      l.stream = t == 0 ? s : nullptr;
      if (t != 0) CK(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking));
      CK(cudaMallocHost(&l.host, a.bytes));
      CK(cudaMalloc(&l.dev, a.bytes));
      std::memset(l.host, int(t + 1), a.bytes);
      CK(cudaMemcpy(l.dev, l.host, a.bytes, cudaMemcpyHostToDevice));
    }
    const bool h2d = a.dir == "h2d";
    if (!h2d)
      for (Lane& l : lanes) std::memset(l.host, 0, a.bytes);  // the copies bring the pattern back
    auto copy = [&](Lane& l) {
      if (a.driver) {
        const auto stream = reinterpret_cast<CUstream>(l.stream);
        const auto dev = reinterpret_cast<CUdeviceptr>(l.dev);
        if (h2d) CU(cuMemcpyHtoDAsync(dev, l.host, a.bytes, stream));
        else CU(cuMemcpyDtoHAsync(l.host, dev, a.bytes, stream));
      } else if (h2d) {
        CK(cudaMemcpyAsync(l.dev, l.host, a.bytes, cudaMemcpyHostToDevice, l.stream));
      } else {
        CK(cudaMemcpyAsync(l.host, l.dev, a.bytes, cudaMemcpyDeviceToHost, l.stream));
      }
      sync(a, l.stream);
    };
    for (Lane& l : lanes)
      for (int i = 0; i < 10; ++i) copy(l);
    barrier(a);
    const auto t0 = Clock::now();
    const auto until = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
    auto run = [&](size_t t) {
      while (Clock::now() < until) {
        copy(lanes[t]);
        ++lanes[t].copies;
      }
    };
    std::vector<std::thread> workers;
    for (size_t t = 1; t < lanes.size(); ++t) workers.emplace_back(run, t);
    run(0);
    for (auto& w : workers) w.join();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    long long n = 0;
    for (const Lane& l : lanes) n += l.copies;
    // The data arrived: the pattern is at both ends of the destination (h2d: read back).
    bool ok = true;
    for (size_t t = 0; t < lanes.size() && ok; ++t) {
      std::vector<char> back(a.bytes);
      if (h2d) CK(cudaMemcpy(back.data(), lanes[t].dev, a.bytes, cudaMemcpyDeviceToHost));
      else std::memcpy(back.data(), lanes[t].host, a.bytes);
      ok = back[0] == char(t + 1) && back[a.bytes - 1] == char(t + 1);
    }
    std::printf("{\"bench\":\"copies_%s\",\"bytes\":%zu,\"copies\":%lld,\"seconds\":%.4f,\"per_s\":%.1f,"
                "\"gbps\":%.3f,\"us_per_copy\":%.2f,\"ok\":%s}\n",
                a.dir.c_str(), a.bytes, n, secs, double(n) / secs, double(n) * double(a.bytes) / secs / 1e9,
                secs * 1e6 * double(lanes.size()) / double(std::max(n, 1LL)), ok ? "true" : "false");
    return ok ? 0 : 1;
  }

  if (a.mode == "idle") {
    barrier(a);
    const auto give_up = Clock::now() + std::chrono::minutes(10);
    const std::string stop = a.barrier + "/stop";
    struct stat st;
    while (stat(stop.c_str(), &st) != 0 && Clock::now() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::printf("{\"bench\":\"idle\"}\n");
    return 0;
  }

  std::fprintf(stderr, "kernelbench: unknown mode %s\n", a.mode.c_str());
  return 2;
}
