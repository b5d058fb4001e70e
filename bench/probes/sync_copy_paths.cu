// sync_copy_paths: where does a small synchronous pinned copy through a worker thread lose
// time against the same copy made by the calling thread?  funnel's client posts the copy to
// a worker (another thread, in another process) that issues it and answers; this probe does
// the same inside one process, with no funnel code, so that only the hop and the way the
// answer comes back differ.  Per direction and size, the median µs of one copy by:
//   rt_sync        cudaMemcpy (the native reference)
//   drv_async      cuMemcpy*Async on a non-blocking stream + cuStreamSynchronize, one thread
//   hop_wv         a worker issues the copy, then cuStreamWriteValue32 of the request's
//                  number into a host word the caller spins on, then records an event that it
//                  polls with cuEventQuery between requests (funnel's GPU reply, protocol 7)
//   hop_wv_noev    the same without the event
//   hop_query      the worker records an event after the copy, spins on cuEventQuery and
//                  stores the word itself (funnel's answer before GPU replies)
//   hop_sync       the worker calls cuStreamSynchronize after the copy and stores the word
//   hop_wv_prio    hop_wv on a stream of the next higher priority (funnel's normal clients)
//   hop_wv_shm     hop_wv from a registered /dev/shm file instead of cudaMallocHost memory
//                  (funnel's pinned memory)
//   hop_sm         a worker launches one kernel that copies through the mapped host memory
//                  with the SMs (no copy engine) and stores the request's number into the word
//                  itself after a system-scope fence, then records an event like hop_wv
// For the hop paths the JSON line also has the worker's median time in the copy's driver
// call (submit_us) and in cuStreamWriteValue32 or the wait after it (answer_us).
// The worker spins on the request word between requests (as funnel's worker does for its
// first microseconds).  Output: one JSON line per (path, direction, bytes).
//   nvcc -O2 -std=c++17 -o sync_copy_paths bench/probes/sync_copy_paths.cu -lcuda
//   ./sync_copy_paths [--iters N] [--rounds R]
#include <cuda.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {

#define CK(x)                                                                                     \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "sync_copy_paths: %s failed: %s\n", #x, cudaGetErrorString(e_));       \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)
#define DK(x)                                                                                     \
  do {                                                                                            \
    CUresult r_ = (x);                                                                            \
    if (r_ != CUDA_SUCCESS) {                                                                     \
      const char* s_ = nullptr;                                                                   \
      cuGetErrorString(r_, &s_);                                                                  \
      std::fprintf(stderr, "sync_copy_paths: %s failed: %s\n", #x, s_ ? s_ : "?");               \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

using Clock = std::chrono::steady_clock;
constexpr size_t kMax = 1 << 20;

inline void relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

enum class Path { RtSync, DrvAsync, HopWv, HopWvNoEv, HopQuery, HopSync, HopWvPrio, HopWvShm, HopSm };
const char* name(Path p) {
  switch (p) {
    case Path::RtSync: return "rt_sync";
    case Path::DrvAsync: return "drv_async";
    case Path::HopWv: return "hop_wv";
    case Path::HopWvNoEv: return "hop_wv_noev";
    case Path::HopQuery: return "hop_query";
    case Path::HopSync: return "hop_sync";
    case Path::HopWvPrio: return "hop_wv_prio";
    case Path::HopWvShm: return "hop_wv_shm";
    case Path::HopSm: return "hop_sm";
  }
  return "?";
}

// The SM copy: 16 bytes per thread and turn; every thread fences its stores system-wide, the
// last block to finish (a counter in device memory) stores the answer word.
__global__ void sm_copy(const int4* __restrict__ src, int4* __restrict__ dst, size_t n16, unsigned* blocks_done,
                        volatile unsigned* answer, unsigned seq) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n16; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (gridDim.x > 1) {
    if (atomicAdd(blocks_done, 1u) != gridDim.x - 1) return;
    *blocks_done = 0;
    __threadfence_system();
  }
  *answer = seq;
}

struct Shared {
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  CUstream prio_stream = nullptr;
  CUdeviceptr dev = 0;
  char* host = nullptr;
  char* shm_host = nullptr;
  std::atomic<uint64_t> submit_ns{0}, answer_ns{0};  // the worker's driver calls, per request
  std::atomic<uint32_t>* answer = nullptr;  // in pinned memory: the GPU may write it
  unsigned* blocks_done = nullptr;          // device memory, sm_copy's counter
  std::atomic<uint64_t> request{0};         // seq << 8 | path, 0 = none; ~0 = stop
  std::atomic<uint64_t> bytes{0};
  std::atomic<int> d2h{0};
};

void issue(Shared& s, bool d2h, size_t bytes, CUstream st = nullptr, char* host = nullptr) {
  if (st == nullptr) st = s.stream;
  if (host == nullptr) host = s.host;
  if (d2h)
    DK(cuMemcpyDtoHAsync(host, s.dev, bytes, st));
  else
    DK(cuMemcpyHtoDAsync(s.dev, host, bytes, st));
}

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

char* shm_registered(size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "/dev/shm/sync_copy_paths.%d", static_cast<int>(getpid()));
  const int fd = ::open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ::posix_fallocate(fd, 0, static_cast<off_t>(n)) != 0) {
    std::perror(name);
    std::exit(1);
  }
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ::unlink(name);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  DK(cuMemHostRegister(p, n, CU_MEMHOSTREGISTER_PORTABLE));
  return static_cast<char*>(p);
}

void worker(Shared& s) {
  DK(cuCtxSetCurrent(s.ctx));
  std::vector<CUevent> polled;  // hop_wv's events, queried between requests like funnel's pending list
  std::vector<CUevent> spare;   // and reused once complete, like funnel's event pool
  CUevent ev = nullptr;
  DK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  // An event after the request's work, queried between requests (funnel's pending list).
  auto record_polled = [&](CUstream st) {
    CUevent e = nullptr;
    if (spare.empty()) {
      DK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    } else {
      e = spare.back();
      spare.pop_back();
    }
    DK(cuEventRecord(e, st));
    polled.push_back(e);
  };
  uint64_t last = 0;
  for (;;) {
    uint64_t r;
    while ((r = s.request.load(std::memory_order_acquire)) == last) {
      for (size_t i = 0; i < polled.size();) {
        if (cuEventQuery(polled[i]) == CUDA_SUCCESS) {
          spare.push_back(polled[i]);
          polled[i] = polled.back();
          polled.pop_back();
        } else {
          ++i;
        }
      }
      relax();
    }
    last = r;
    if (r == ~uint64_t{0}) break;
    const auto seq = static_cast<uint32_t>(r >> 8);
    const auto path = static_cast<Path>(r & 0xff);
    const uint64_t t0 = now_ns();
    const CUstream st = path == Path::HopWvPrio ? s.prio_stream : s.stream;
    if (path == Path::HopSm) {
      const size_t n16 = s.bytes.load() / 16;
      const auto blocks = static_cast<unsigned>((n16 + 255) / 256);
      auto* dev = reinterpret_cast<int4*>(s.dev);
      auto* host = reinterpret_cast<int4*>(s.host);
      const bool d2h = s.d2h.load() != 0;
      sm_copy<<<blocks, 256, 0, reinterpret_cast<cudaStream_t>(st)>>>(d2h ? dev : host, d2h ? host : dev, n16,
                                                                     s.blocks_done, reinterpret_cast<unsigned*>(s.answer),
                                                                     seq);
      CK(cudaGetLastError());
    } else {
      issue(s, s.d2h.load() != 0, s.bytes.load(), st, path == Path::HopWvShm ? s.shm_host : s.host);
    }
    const uint64_t t1 = now_ns();
    s.submit_ns.store(t1 - t0, std::memory_order_relaxed);
    switch (path) {
      case Path::HopWv:
      case Path::HopWvPrio:
      case Path::HopWvShm: {
        DK(cuStreamWriteValue32(st, reinterpret_cast<CUdeviceptr>(s.answer), seq, CU_STREAM_WRITE_VALUE_DEFAULT));
        s.answer_ns.store(now_ns() - t1, std::memory_order_relaxed);
        record_polled(st);
        break;
      }
      case Path::HopSm:
        s.answer_ns.store(0, std::memory_order_relaxed);
        record_polled(st);
        break;
      case Path::HopWvNoEv:
        DK(cuStreamWriteValue32(s.stream, reinterpret_cast<CUdeviceptr>(s.answer), seq, CU_STREAM_WRITE_VALUE_DEFAULT));
        s.answer_ns.store(now_ns() - t1, std::memory_order_relaxed);
        break;
      case Path::HopQuery: {
        DK(cuEventRecord(ev, s.stream));
        CUresult q;
        while ((q = cuEventQuery(ev)) == CUDA_ERROR_NOT_READY) relax();
        DK(q);
        s.answer_ns.store(now_ns() - t1, std::memory_order_relaxed);
        s.answer->store(seq, std::memory_order_release);
        break;
      }
      case Path::HopSync:
        DK(cuStreamSynchronize(s.stream));
        s.answer_ns.store(now_ns() - t1, std::memory_order_relaxed);
        s.answer->store(seq, std::memory_order_release);
        break;
      default:
        std::fprintf(stderr, "sync_copy_paths: bad path\n");
        std::exit(1);
    }
  }
  DK(cuStreamSynchronize(s.stream));
  DK(cuStreamSynchronize(s.prio_stream));
  for (CUevent e : polled) DK(cuEventDestroy(e));
  for (CUevent e : spare) DK(cuEventDestroy(e));
  DK(cuEventDestroy(ev));
}

// sm_copy must copy what a copy engine copies, both ways and at every size the probe uses.
void check_sm_copy(Shared& s) {
  std::vector<char> want(kMax), got(kMax);
  for (size_t bytes : {size_t{4096}, size_t{16384}, size_t{65536}, size_t{262144}, kMax}) {
    for (size_t i = 0; i < bytes; ++i) want[i] = static_cast<char>((i * 7 + bytes) & 0xff);
    std::memcpy(s.host, want.data(), bytes);
    const auto blocks = static_cast<unsigned>((bytes / 16 + 255) / 256);
    auto* dev = reinterpret_cast<int4*>(s.dev);
    auto* host = reinterpret_cast<int4*>(s.host);
    sm_copy<<<blocks, 256>>>(host, dev, bytes / 16, s.blocks_done, reinterpret_cast<unsigned*>(s.answer), 77);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got.data(), dev, bytes, cudaMemcpyDeviceToHost));
    const bool h2d_ok = std::memcmp(got.data(), want.data(), bytes) == 0;
    std::memset(s.host, 0, bytes);
    sm_copy<<<blocks, 256>>>(dev, host, bytes / 16, s.blocks_done, reinterpret_cast<unsigned*>(s.answer), 78);
    CK(cudaDeviceSynchronize());
    const bool d2h_ok = std::memcmp(s.host, want.data(), bytes) == 0;
    if (!h2d_ok || !d2h_ok || s.answer->load() != 78) {
      std::fprintf(stderr, "sync_copy_paths: sm_copy of %zu bytes wrong (h2d %d d2h %d answer %u)\n", bytes,
                   h2d_ok, d2h_ok, s.answer->load());
      std::exit(1);
    }
  }
  std::memset(s.host, 1, kMax);
  s.answer->store(0);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 2000, rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
  }
  CK(cudaFree(nullptr));
  Shared s;
  DK(cuCtxGetCurrent(&s.ctx));
  DK(cuStreamCreate(&s.stream, CU_STREAM_NON_BLOCKING));
  DK(cuStreamCreateWithPriority(&s.prio_stream, CU_STREAM_NON_BLOCKING, -1));
  s.shm_host = shm_registered(kMax);
  std::memset(s.shm_host, 1, kMax);
  DK(cuMemAlloc(&s.dev, kMax));
  CK(cudaMalloc(reinterpret_cast<void**>(&s.blocks_done), sizeof(unsigned)));
  CK(cudaMemset(s.blocks_done, 0, sizeof(unsigned)));
  CK(cudaMallocHost(reinterpret_cast<void**>(&s.host), kMax));
  std::memset(s.host, 1, kMax);
  void* word = nullptr;
  CK(cudaMallocHost(&word, 4096));
  s.answer = new (word) std::atomic<uint32_t>(0);
  check_sm_copy(s);
  std::thread w(worker, std::ref(s));

  const std::vector<Path> paths{Path::RtSync,   Path::DrvAsync, Path::HopWv,     Path::HopWvNoEv,
                                Path::HopQuery, Path::HopSync,  Path::HopWvPrio, Path::HopWvShm,
                                Path::HopSm};
  const std::vector<size_t> sizes{4096, 16384, 65536, 262144, 1 << 20};
  std::map<std::tuple<int, int, size_t>, std::vector<double>> us;  // path, d2h, bytes
  std::map<std::tuple<int, int, size_t>, std::vector<double>> submit_us, answer_us;
  uint32_t seq = 0;
  for (int round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < paths.size(); ++k) {
      const Path p = paths[(k + static_cast<size_t>(round)) % paths.size()];  // rotate the order
      for (int d2h = 0; d2h < 2; ++d2h) {
        for (size_t bytes : sizes) {
          s.bytes.store(bytes);
          s.d2h.store(d2h);
          std::vector<double> one, sub, ans;
          one.reserve(static_cast<size_t>(iters));
          for (int i = 0; i < iters + 50; ++i) {
            const auto t0 = Clock::now();
            if (p == Path::RtSync) {
              if (d2h)
                CK(cudaMemcpy(s.host, reinterpret_cast<void*>(s.dev), bytes, cudaMemcpyDeviceToHost));
              else
                CK(cudaMemcpy(reinterpret_cast<void*>(s.dev), s.host, bytes, cudaMemcpyHostToDevice));
            } else if (p == Path::DrvAsync) {
              issue(s, d2h != 0, bytes);
              DK(cuStreamSynchronize(s.stream));
            } else {
              if (++seq == 0x00ffffffu) seq = 1;
              s.request.store((uint64_t{seq} << 8) | static_cast<uint64_t>(p), std::memory_order_release);
              while (s.answer->load(std::memory_order_acquire) != seq) relax();
            }
            const auto t1 = Clock::now();
            if (i < 50) continue;
            one.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
            if (p != Path::RtSync && p != Path::DrvAsync) {
              // Stored by the worker before it answered (hop_wv*: before the GPU could write the word).
              sub.push_back(1e-3 * static_cast<double>(s.submit_ns.load()));
              ans.push_back(1e-3 * static_cast<double>(s.answer_ns.load()));
            }
          }
          auto med = [](std::vector<double>& v) {
            std::sort(v.begin(), v.end());
            return v.empty() ? 0.0 : v[v.size() / 2];
          };
          const std::tuple<int, int, size_t> key{static_cast<int>(p), d2h, bytes};
          us[key].push_back(med(one));
          submit_us[key].push_back(med(sub));
          answer_us[key].push_back(med(ans));
        }
      }
    }
  }
  s.request.store(~uint64_t{0}, std::memory_order_release);
  w.join();
  for (auto& [key, v] : us) {
    std::sort(v.begin(), v.end());
    const auto [p, d2h, bytes] = key;
    auto& sv = submit_us[key];
    auto& av = answer_us[key];
    std::sort(sv.begin(), sv.end());
    std::sort(av.begin(), av.end());
    std::printf("{\"path\": \"%s\", \"dir\": \"%s\", \"bytes\": %zu, \"median_us\": %.3f, \"min_us\": %.3f, "
                "\"max_us\": %.3f, \"submit_us\": %.3f, \"answer_us\": %.3f}\n",
                name(static_cast<Path>(p)), d2h ? "d2h" : "h2d", bytes, v[v.size() / 2], v.front(), v.back(),
                sv[sv.size() / 2], av[av.size() / 2]);
  }
  return 0;
}
