// FUNNEL_GPU_FRACTION / CUDA_MPS_ACTIVE_THREAD_PERCENTAGE seen from a program: the SM count it
// is told (cudaDevAttrMultiProcessorCount and cudaGetDeviceProperties) and the SMs its blocks
// really ran on (%smid).  Run natively it shows the whole GPU.
//   sm_count N props N      what the program is told
//   sms_used M              distinct SMs that 8 x 132 spinning blocks ran on (0: no kernel ran,
//                           as on the sim backend)
//   sm_list a b c ...       those SMs
// tests/gpu/mpi.sh runs it on the GPU; tests/client runs it on the sim backend.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#include <cuda_runtime.h>

#define CK(call)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      std::printf("%s failed: %s\n", #call, cudaGetErrorName(e_));                   \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

__global__ void where(unsigned* smid, long long spin_cycles) {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  const long long t0 = clock64();
  while (clock64() - t0 < spin_cycles) {
  }
  if (threadIdx.x == 0) smid[blockIdx.x] = s;
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, 0));
  std::printf("sm_count %d props %d\n", sms, p.multiProcessorCount);
  // More blocks than any H100 has SMs, each long enough that the GPU spreads them.
  const int blocks = 8 * 132;
  unsigned* d = nullptr;
  CK(cudaMalloc(&d, blocks * sizeof(unsigned)));
  CK(cudaMemset(d, 0xff, blocks * sizeof(unsigned)));
  where<<<blocks, 64>>>(d, 200000);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<unsigned> h(blocks);
  CK(cudaMemcpy(h.data(), d, blocks * sizeof(unsigned), cudaMemcpyDeviceToHost));
  std::set<unsigned> used;
  for (unsigned s : h)
    if (s != 0xffffffffu) used.insert(s);
  std::printf("sms_used %zu\n", used.size());
  std::printf("sm_list");
  for (unsigned s : used) std::printf(" %u", s);
  std::printf("\n");
  std::fflush(stdout);
  CK(cudaFree(d));
  // FRACTION_HOLD_MS: stay attached (holding the partition) this long before exiting, so
  // that tests/gpu/mpi.sh can run several at once.
  if (const char* hold = std::getenv("FRACTION_HOLD_MS")) usleep(static_cast<useconds_t>(std::atoi(hold)) * 1000);
  return 0;
}
