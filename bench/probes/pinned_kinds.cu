// pinned_kinds: is a copy from funnel's kind of pinned memory slower than from cudaMallocHost's,
// with no funnel in between?  funnel's cudaMallocHost is a /dev/shm file that the server maps
// and registers (cuMemHostRegister, PORTABLE) and the client maps too (doc/design/channel.md);
// native cudaMallocHost memory comes from the driver.  This program, run natively, times
// cudaMemcpy and cudaMemcpyAsync + cudaStreamSynchronize between device memory and
//   malloc_host  cudaMallocHost
//   shm_reg      a /dev/shm file, posix_fallocate'd, mapped shared, cudaHostRegister'ed (funnel's kind)
//   shm_reg_thp  the same with madvise(MADV_HUGEPAGE) before it is touched (used only where
//                /sys/kernel/mm/transparent_hugepage/shmem_enabled allows it)
//   anon_reg     anonymous memory, cudaHostRegister'ed
// Output: one JSON line per (kind, direction, mode, bytes): the median µs of one copy.
//   nvcc -O2 -o pinned_kinds bench/probes/pinned_kinds.cu && ./pinned_kinds [--iters N] [--rounds R]
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace {

#define CK(x)                                                                                     \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "pinned_kinds: %s failed: %s\n", #x, cudaGetErrorString(e_));          \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

using Clock = std::chrono::steady_clock;
constexpr size_t kMax = 1 << 20;

struct Kind {
  std::string name;
  void* p = nullptr;
};

void* shm_registered(bool thp) {
  char name[64];
  std::snprintf(name, sizeof name, "/dev/shm/pinned_kinds.%d.%d", static_cast<int>(getpid()), thp ? 1 : 0);
  const int fd = ::open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ::posix_fallocate(fd, 0, kMax) != 0) {
    std::perror(name);
    std::exit(1);
  }
  void* p = ::mmap(nullptr, kMax, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ::unlink(name);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  if (thp && ::madvise(p, kMax, MADV_HUGEPAGE) != 0) std::perror("madvise(MADV_HUGEPAGE)");
  std::memset(p, 1, kMax);
  CK(cudaHostRegister(p, kMax, cudaHostRegisterPortable));
  return p;
}

void* anon_registered() {
  void* p = ::mmap(nullptr, kMax, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  std::memset(p, 1, kMax);
  CK(cudaHostRegister(p, kMax, cudaHostRegisterPortable));
  return p;
}

std::string read_file(const char* path) {
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return "(unreadable)";
  char buf[256] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string s(buf, n);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 2000, rounds = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc) iters = std::max(10, std::atoi(argv[++i]));
    else if (a == "--rounds" && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: pinned_kinds [--iters N] [--rounds R]\n");
      return 2;
    }
  }
  const std::string shmem_thp = read_file("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::printf("{\"shmem_enabled\":\"%s\",\"thp_enabled\":\"%s\"}\n", shmem_thp.c_str(),
              read_file("/sys/kernel/mm/transparent_hugepage/enabled").c_str());
  std::vector<Kind> kinds(4);
  kinds[0].name = "malloc_host";
  CK(cudaMallocHost(&kinds[0].p, kMax));
  std::memset(kinds[0].p, 1, kMax);
  kinds[1] = {"shm_reg", shm_registered(false)};
  kinds[2] = {"shm_reg_thp", shm_registered(true)};
  kinds[3] = {"anon_reg", anon_registered()};
  void* dev = nullptr;
  CK(cudaMalloc(&dev, kMax));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // (kind, dir, mode, bytes) -> per-round medians
  std::map<std::tuple<std::string, std::string, std::string, size_t>, std::vector<double>> out;
  std::vector<double> t(static_cast<size_t>(iters));
  for (int r = 0; r < rounds; ++r) {
    for (size_t bytes : {size_t{4096}, size_t{65536}, kMax}) {
      for (const char* dir : {"h2d", "d2h"}) {
        for (const char* mode : {"sync", "async"}) {
          for (const Kind& k : kinds) {
            const bool h2d = dir[0] == 'h';
            const bool async = mode[0] == 'a';
            auto one = [&] {
              void* dst = h2d ? dev : k.p;
              const void* src = h2d ? k.p : dev;
              const auto kind = h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
              if (async) {
                CK(cudaMemcpyAsync(dst, src, bytes, kind, s));
                CK(cudaStreamSynchronize(s));
              } else {
                CK(cudaMemcpy(dst, src, bytes, kind));
              }
            };
            for (int i = 0; i < 100; ++i) one();
            for (int i = 0; i < iters; ++i) {
              const auto a = Clock::now();
              one();
              t[static_cast<size_t>(i)] = std::chrono::duration<double, std::micro>(Clock::now() - a).count();
            }
            std::nth_element(t.begin(), t.begin() + iters / 2, t.end());
            out[{k.name, dir, mode, bytes}].push_back(t[static_cast<size_t>(iters / 2)]);
          }
        }
      }
    }
  }
  for (auto& [key, v] : out) {
    std::sort(v.begin(), v.end());
    const auto& [kind, dir, mode, bytes] = key;
    std::printf("{\"kind\":\"%s\",\"dir\":\"%s\",\"mode\":\"%s\",\"bytes\":%zu,\"us\":%.3f}\n", kind.c_str(),
                dir.c_str(), mode.c_str(), bytes, v[v.size() / 2]);
  }
  for (const Kind& k : kinds) {
    if (k.name == "malloc_host") {
      CK(cudaFreeHost(k.p));
    } else {
      CK(cudaHostUnregister(k.p));
      ::munmap(k.p, kMax);
    }
  }
  CK(cudaFree(dev));
  return 0;
}
