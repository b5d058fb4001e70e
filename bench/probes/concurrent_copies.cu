// concurrent_copies: do N synchronous pinned copies issued at the same moment overlap when they
// come from N streams of ONE context (funnel's server: every rank's copy goes to the driver
// through the server's one context per GPU) as much as when they come from N processes (native
// time-sliced contexts, or MPS clients when an MPS daemon runs)?  The stencil's halo copies are
// that case: at 16 ranks each rank's h2d copy of its halo (64-512 KiB) starts as the ranks leave
// the same MPI exchange (issue 4).
//   threads  one process, N threads, each with its own non-blocking stream, pinned buffer and
//            device buffer: cudaMemcpyAsync + cudaStreamSynchronize
//   procs    N processes forked before any CUDA call, each with the same (its own context)
// Each round starts the N copies behind a barrier; per (mode, n, direction, bytes) one JSON line
// with the median over rounds of the makespan (first start to last end, µs) and of one copy's
// time (µs), and the aggregate bandwidth (GB/s) the makespan gives.  Options that make a
// participant's copy look like funnel's (each one alone; "variant" in the JSON line):
//   --wv 1    the copy is answered by cuStreamWriteValue32 of the round's number into a pinned
//             host word the participant spins on (funnel's GPU reply), not cudaStreamSynchronize
//   --prio 1  the stream is created one priority level up (funnel's normal clients)
//   --shm 1   the host buffer is a /dev/shm file registered with cudaHostRegister (funnel's
//             pinned memory), not cudaMallocHost memory
//   --kw 1    the copy is answered by a one-thread kernel launched after it on the stream that
//             stores the round's number into the pinned host word (a completion that neither
//             carries the stream write's barrier nor needs a thread to watch an event)
// (--wv needs the driver API; for runs under funnel-run, --mode procs, build with -DCC_NO_DRIVER
// and without -lcuda, so that only the CUDA runtime is called.)
//   nvcc -O2 -std=c++17 -o concurrent_copies bench/probes/concurrent_copies.cu -lcuda
//   ./concurrent_copies --mode threads|procs --n N [--rounds R] [--bytes B,B,...] [--wv 1]
//                       [--kw 1] [--prio 1] [--shm 1]
#if !defined(CC_NO_DRIVER)
#include <cuda.h>
#endif
#include <cuda_runtime.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../../apps/common/cuda_check.h"

namespace {

constexpr int kMaxN = 64;
constexpr int kMaxRounds = 2000;

double now_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // one clock for every process of the node
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

// Shared by the threads or processes of one run (anonymous shared mapping, process-shared barrier).
struct Shared {
  pthread_barrier_t barrier;
  double start[kMaxRounds][kMaxN];
  double end[kMaxRounds][kMaxN];
};

struct Case {
  bool h2d;
  size_t bytes;
};

struct Variant {
  bool wv = false, prio = false, shm = false, kw = false;
};

// --kw: stores `value` into the host word once the stream gets here (after the copy).
__global__ void answer_kernel(volatile unsigned* word, unsigned value) {
  __threadfence_system();
  *word = value;
}

// A /dev/shm file of `bytes`, mapped and registered with the driver (as funnel's pinned memory).
void* shm_registered(size_t bytes, int id) {
  char name[96];
  std::snprintf(name, sizeof name, "/dev/shm/concurrent_copies.%d.%d", static_cast<int>(getpid()), id);
  const int fd = ::open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    std::perror(name);
    std::exit(2);
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ::unlink(name);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::exit(2);
  }
  CK(cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped));
  return p;
}

// One participant: its buffers, then for every case `rounds` timed copies behind the barrier.
void participant(Shared* sh, int id, const std::vector<Case>& cases, int rounds, int warmup, Variant v) {
  CK(cudaSetDevice(0));
  size_t most = 0;
  for (const Case& c : cases) most = std::max(most, c.bytes);
  void* host = nullptr;
  void* dev = nullptr;
  if (v.shm)
    host = shm_registered(most, id);
  else
    CK(cudaMallocHost(&host, most));
  CK(cudaMalloc(&dev, most));
  std::memset(host, id, most);
  unsigned* word = nullptr;
  CK(cudaMallocHost(reinterpret_cast<void**>(&word), 64));
  *word = 0;
  [[maybe_unused]] unsigned answer = 0;
  cudaStream_t s;
  int least = 0, greatest = 0;
  CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, v.prio ? std::max(greatest, least - 1) : least));
  for (const Case& c : cases) {
    for (int r = -warmup; r < rounds; ++r) {
      pthread_barrier_wait(&sh->barrier);
      const double t0 = now_us();
      if (c.h2d)
        CK(cudaMemcpyAsync(dev, host, c.bytes, cudaMemcpyHostToDevice, s));
      else
        CK(cudaMemcpyAsync(host, dev, c.bytes, cudaMemcpyDeviceToHost, s));
      if (v.wv) {
#if defined(CC_NO_DRIVER)
        std::fprintf(stderr, "--wv needs the driver API: build without -DCC_NO_DRIVER, with -lcuda\n");
        std::exit(2);
#else
        ++answer;
        if (cuStreamWriteValue32(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(word), answer,
                                 CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS) {
          std::fprintf(stderr, "cuStreamWriteValue32 failed\n");
          std::exit(2);
        }
        while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != answer) {
#if defined(__x86_64__)
          __builtin_ia32_pause();
#endif
        }
#endif
      } else if (v.kw) {
        ++answer;
        answer_kernel<<<1, 1, 0, s>>>(word, answer);
        CK(cudaGetLastError());
        while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != answer) {
#if defined(__x86_64__)
          __builtin_ia32_pause();
#endif
        }
      } else {
        CK(cudaStreamSynchronize(s));
      }
      const double t1 = now_us();
      if (r >= 0) {
        sh->start[r][id] = t0;
        sh->end[r][id] = t1;
      }
      pthread_barrier_wait(&sh->barrier);  // everyone done before the next round starts
    }
    pthread_barrier_wait(&sh->barrier);  // the report of this case
    pthread_barrier_wait(&sh->barrier);  // report written: the times may be overwritten
  }
  CK(cudaStreamDestroy(s));
  CK(cudaFree(dev));
  CK(cudaFreeHost(word));
  if (v.shm) {
    CK(cudaHostUnregister(host));
    ::munmap(host, most);
  } else {
    CK(cudaFreeHost(host));
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void report(const Shared* sh, const char* mode, const char* variant, int n, const Case& c, int rounds) {
  std::vector<double> span, one;
  for (int r = 0; r < rounds; ++r) {
    double lo = 1e300, hi = 0;
    for (int i = 0; i < n; ++i) {
      lo = std::min(lo, sh->start[r][i]);
      hi = std::max(hi, sh->end[r][i]);
      one.push_back(sh->end[r][i] - sh->start[r][i]);
    }
    span.push_back(hi - lo);
  }
  const double ms = median(span);
  std::printf("{\"mode\":\"%s\",\"variant\":\"%s\",\"n\":%d,\"dir\":\"%s\",\"bytes\":%zu,"
              "\"makespan_us\":%.2f,\"copy_us\":%.2f,"
              "\"agg_gbps\":%.2f}\n",
              mode, variant, n, c.h2d ? "h2d" : "d2h", c.bytes, ms, median(one),
              static_cast<double>(c.bytes) * n / (ms * 1e3));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "threads";
  int n = 1, rounds = 200, warmup = 20;
  Variant v;
  std::vector<size_t> sizes = {65536, 262144, 524288, 1048576};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mode") mode = argv[i + 1];
    else if (a == "--wv") v.wv = std::atoi(argv[i + 1]) != 0;
    else if (a == "--prio") v.prio = std::atoi(argv[i + 1]) != 0;
    else if (a == "--shm") v.shm = std::atoi(argv[i + 1]) != 0;
    else if (a == "--kw") v.kw = std::atoi(argv[i + 1]) != 0;
    else if (a == "--n") n = std::atoi(argv[i + 1]);
    else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (a == "--bytes") {
      sizes.clear();
      for (char* p = std::strtok(argv[i + 1], ","); p != nullptr; p = std::strtok(nullptr, ","))
        sizes.push_back(std::strtoull(p, nullptr, 0));
    } else {
      std::fprintf(stderr,
                   "usage: %s --mode threads|procs --n N [--rounds R] [--bytes B,B,...] [--wv 1] [--kw 1] "
                   "[--prio 1] [--shm 1]\n",
                   argv[0]);
      return 2;
    }
  }
  if (n < 1 || n > kMaxN || rounds < 1 || rounds > kMaxRounds || (mode != "threads" && mode != "procs")) {
    std::fprintf(stderr, "bad arguments: n 1..%d, rounds 1..%d, mode threads|procs\n", kMaxN, kMaxRounds);
    return 2;
  }
  std::string variant =
      std::string(v.wv ? "wv" : v.kw ? "kw" : "sync") + (v.prio ? "+prio" : "") + (v.shm ? "+shm" : "");
  std::vector<Case> cases;
  for (bool h2d : {true, false})
    for (size_t b : sizes) cases.push_back({h2d, b});
  void* m = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 2;
  auto* sh = static_cast<Shared*>(m);
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  // n participants and the reporter (this thread or the parent process)
  pthread_barrier_init(&sh->barrier, &attr, static_cast<unsigned>(n + 1));
  std::vector<std::thread> threads;
  std::vector<pid_t> kids;
  for (int i = 0; i < n; ++i) {
    if (mode == "threads") {
      threads.emplace_back(participant, sh, i, cases, rounds, warmup, v);
    } else {
      const pid_t p = fork();
      if (p == 0) {
        participant(sh, i, cases, rounds, warmup, v);
        _exit(0);
      }
      kids.push_back(p);
    }
  }
  for (const Case& c : cases) {
    for (int r = -warmup; r < rounds; ++r) {
      pthread_barrier_wait(&sh->barrier);
      pthread_barrier_wait(&sh->barrier);
    }
    pthread_barrier_wait(&sh->barrier);
    report(sh, mode.c_str(), variant.c_str(), n, c, rounds);
    pthread_barrier_wait(&sh->barrier);
  }
  for (auto& t : threads) t.join();
  int bad = 0;
  for (pid_t p : kids) {
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++bad;
  }
  return bad == 0 ? 0 : 1;
}
