// The GPU busy accounting's test program (tests/client/busy.sh on the sim backend,
// tests/gpu/busy.sh on a GPU; doc/accounting.md says what is measured).
//   busy [hostfunc|kernel]
// Keeps one stream busy for BUSY_MS (default 300) milliseconds and synchronizes it, twice,
// with IDLE_MS (default 300) of nothing queued between and after: with `hostfunc` (the
// default; the sim backend runs no kernels) a host function that sleeps holds the stream,
// with `kernel` a one-thread kernel spins on the GPU's nanosecond timer.  Prints
// "measured <ms>": the stream's busy time as the program saw it (event time around each
// busy part, summed), then "hold" and waits HOLD_MS (default 0) so that a test can read
// `funnelctl clients`, then "done".  Any failed call prints "error ..." and exits 3.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

static void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::printf("error %s: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e), what);
  std::fflush(stdout);
  std::exit(3);
}

static int env_ms(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

__global__ void spin(unsigned long long ns) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

static void CUDART_CB nap(void* ms) { usleep(static_cast<useconds_t>(*static_cast<int*>(ms)) * 1000u); }

int main(int argc, char** argv) {
  const bool kernel = argc > 1 && std::strcmp(argv[1], "kernel") == 0;
  int busy_ms = env_ms("BUSY_MS", 300);
  const int idle_ms = env_ms("IDLE_MS", 300);
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  cudaEvent_t a = nullptr, b = nullptr;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  float total = 0;
  for (int round = 0; round < 2; ++round) {
    check(cudaEventRecord(a, s), "cudaEventRecord");
    if (kernel) {
      spin<<<1, 1, 0, s>>>(static_cast<unsigned long long>(busy_ms) * 1000000ull);
      check(cudaGetLastError(), "spin launch");
    } else {
      check(cudaLaunchHostFunc(s, nap, &busy_ms), "cudaLaunchHostFunc");
    }
    check(cudaEventRecord(b, s), "cudaEventRecord");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    total += ms;
    usleep(static_cast<useconds_t>(idle_ms) * 1000u);
  }
  std::printf("measured %.3f\nhold\n", static_cast<double>(total));
  std::fflush(stdout);
  usleep(static_cast<useconds_t>(env_ms("HOLD_MS", 0)) * 1000u);
  check(cudaEventDestroy(a), "cudaEventDestroy");
  check(cudaEventDestroy(b), "cudaEventDestroy");
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
  std::printf("done\n");
  return 0;
}
