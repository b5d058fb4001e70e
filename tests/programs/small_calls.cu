// The small calls real codes make around their work (issue 30): device flags (a scheduling
// policy; the waits then follow it), profiler start/stop around a timed region, and the limits
// beyond stack, printf FIFO and heap (persisting L2 set-aside, L2 fetch granularity, the device
// runtime's), with work after each (a kernel, a synchronisation, a memset read back).  Prints the same natively and through funnel.
#include <cuda_profiler_api.h>

#include <vector>

#include "check.h"

__global__ void add_one(int* p, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

// A launch and a synchronisation (no error), then a memset and a copy back (the data path): the
// same on a GPU and on the sim backend, which runs no kernel code.
static bool run_and_check(int* d, int n) {
  static int runs = 0;
  add_one<<<(n + 255) / 256, 256>>>(d, n);
  if (cudaDeviceSynchronize() != cudaSuccess) return false;
  ++runs;
  if (cudaMemset(d, runs, n * sizeof(int)) != cudaSuccess) return false;
  int last = 0;
  if (cudaMemcpy(&last, d + n - 1, sizeof last, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  return last == runs * 0x01010101;
}

int main() {
  // Flags first, as codes set them before their first CUDA work.
  CHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
  unsigned flags = 0;
  CHECK(cudaGetDeviceFlags(&flags));
  std::printf("scheduling policy after cudaSetDeviceFlags(BlockingSync): %s\n",
              (flags & cudaDeviceScheduleMask) == cudaDeviceScheduleBlockingSync ? "blocking sync" : "other");
  std::printf("an invalid scheduling policy: %s\n", cudaGetErrorName(cudaSetDeviceFlags(3)));
  cudaGetLastError();
  const int n = 1 << 16;
  int* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  CHECK(cudaMemset(d, 0, n * sizeof(int)));
  std::printf("work under blocking sync: %s\n", run_and_check(d, n) ? "ok" : "FAIL");
  CHECK(cudaSetDeviceFlags(cudaDeviceScheduleYield));
  CHECK(cudaGetDeviceFlags(&flags));
  std::printf("then yield: %s, work %s\n",
              (flags & cudaDeviceScheduleMask) == cudaDeviceScheduleYield ? "yes" : "no",
              run_and_check(d, n) ? "ok" : "FAIL");
  CHECK(cudaSetDeviceFlags(cudaDeviceScheduleAuto));

  // A profiled region, started twice and stopped twice (both are no-ops the second time).
  CHECK(cudaProfilerStart());
  CHECK(cudaProfilerStart());
  const bool profiled = run_and_check(d, n);
  CHECK(cudaProfilerStop());
  CHECK(cudaProfilerStop());
  std::printf("a profiled region: %s\n", profiled ? "ok" : "FAIL");

  // Limits.
  int max_persisting = 0;
  CHECK(cudaDeviceGetAttribute(&max_persisting, cudaDevAttrMaxPersistingL2CacheSize, 0));
  size_t v = 0;
  CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, static_cast<size_t>(max_persisting) / 2));
  CHECK(cudaDeviceGetLimit(&v, cudaLimitPersistingL2CacheSize));
  std::printf("persisting L2 set-aside of half the maximum: %s\n",
              v > 0 && v <= static_cast<size_t>(max_persisting) ? "set" : "FAIL");
  std::printf("work with it: %s\n", run_and_check(d, n) ? "ok" : "FAIL");
  CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0));
  CHECK(cudaDeviceGetLimit(&v, cudaLimitPersistingL2CacheSize));
  std::printf("and back to none: %s\n", v == 0 ? "ok" : "FAIL");
  CHECK(cudaDeviceSetLimit(cudaLimitMaxL2FetchGranularity, 32));
  CHECK(cudaDeviceGetLimit(&v, cudaLimitMaxL2FetchGranularity));
  std::printf("L2 fetch granularity read back: %s\n", v <= 128 ? "ok" : "FAIL");
  CHECK(cudaDeviceGetLimit(&v, cudaLimitDevRuntimePendingLaunchCount));
  std::printf("device runtime pending launch count: %s\n", v > 0 ? "ok" : "FAIL");
  // Gone with CUDA 13's device runtime on Hopper: the H100's driver refuses it.
  std::printf("device runtime sync depth: %s\n", cudaGetErrorName(cudaDeviceGetLimit(&v, cudaLimitDevRuntimeSyncDepth)));
  cudaGetLastError();
  std::printf("work after the limits: %s\n", run_and_check(d, n) ? "ok" : "FAIL");

  // Finding and initialising devices, cache and bank preferences.
  char bus[64] = {};
  CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, 0));
  int by_bus = -1, by_short = -1, chosen = -1;
  CHECK(cudaDeviceGetByPCIBusId(&by_bus, bus));
  CHECK(cudaDeviceGetByPCIBusId(&by_short, bus + 5));  // without the domain: bus:device.function
  std::printf("cudaDeviceGetByPCIBusId of device 0's id: %d, without the domain: %d\n", by_bus, by_short);
  std::printf("an id no device has: %s\n", cudaGetErrorName(cudaDeviceGetByPCIBusId(&by_bus, "ffff:ff:1f.7")));
  cudaGetLastError();
  cudaDeviceProp want = {};
  CHECK(cudaGetDeviceProperties(&want, 0));
  CHECK(cudaChooseDevice(&chosen, &want));
  std::printf("cudaChooseDevice for device 0's properties: %d\n", chosen);
  CHECK(cudaInitDevice(0, 0, 0));
  CHECK(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared));
  cudaFuncCache cache = cudaFuncCachePreferNone;
  CHECK(cudaDeviceGetCacheConfig(&cache));
  std::printf("cache preference read back: %s\n", cache == cudaFuncCachePreferShared ? "prefer shared" : "other");
  CHECK(cudaDeviceSetCacheConfig(cudaFuncCachePreferNone));
  std::printf("work after them: %s\n", run_and_check(d, n) ? "ok" : "FAIL");

  // Stream attributes: an access-policy window on a stream, read back and copied to another;
  // the synchronisation policy; a stream's priority; the persisting lines reset.
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithPriority(&s1, cudaStreamNonBlocking, -1));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaStreamAttrValue w{};
  w.accessPolicyWindow.base_ptr = d;
  w.accessPolicyWindow.num_bytes = n * sizeof(int);
  w.accessPolicyWindow.hitRatio = 0.5f;
  w.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  w.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  CHECK(cudaStreamSetAttribute(s1, cudaStreamAttributeAccessPolicyWindow, &w));
  cudaStreamAttrValue r{};
  CHECK(cudaStreamGetAttribute(s1, cudaStreamAttributeAccessPolicyWindow, &r));
  std::printf("access-policy window read back: %s, %zu bytes, hit ratio %.2f, hit %d, miss %d\n",
              r.accessPolicyWindow.base_ptr == d ? "the buffer" : "other", r.accessPolicyWindow.num_bytes,
              r.accessPolicyWindow.hitRatio, static_cast<int>(r.accessPolicyWindow.hitProp),
              static_cast<int>(r.accessPolicyWindow.missProp));
  add_one<<<(n + 255) / 256, 256, 0, s1>>>(d, n);
  CHECK(cudaStreamSynchronize(s1));
  CHECK(cudaStreamCopyAttributes(s2, s1));
  CHECK(cudaStreamGetAttribute(s2, cudaStreamAttributeAccessPolicyWindow, &r));
  std::printf("copied to another stream: %s\n", r.accessPolicyWindow.num_bytes == n * sizeof(int) ? "yes" : "no");
  cudaStreamAttrValue p{};
  p.syncPolicy = cudaSyncPolicyYield;
  CHECK(cudaStreamSetAttribute(s2, cudaStreamAttributeSynchronizationPolicy, &p));
  CHECK(cudaStreamGetAttribute(s2, cudaStreamAttributeSynchronizationPolicy, &r));
  std::printf("synchronisation policy read back: %s\n", r.syncPolicy == cudaSyncPolicyYield ? "yield" : "other");
  CHECK(cudaStreamGetAttribute(s1, cudaStreamAttributePriority, &r));
  std::printf("priority attribute of a priority -1 stream: %d\n", r.priority);
  w.accessPolicyWindow.num_bytes = 0;
  CHECK(cudaStreamSetAttribute(s1, cudaStreamAttributeAccessPolicyWindow, &w));
  CHECK(cudaCtxResetPersistingL2Cache());
  std::printf("work after the window: %s\n", run_and_check(d, n) ? "ok" : "FAIL");
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));

  // Host flags of pinned memory, peers, valid devices, the largest cluster.
  void *ph = nullptr, *pm = nullptr;
  CHECK(cudaMallocHost(&ph, 4096));
  CHECK(cudaHostAlloc(&pm, 4096, cudaHostAllocMapped | cudaHostAllocWriteCombined));
  unsigned hf = 0, mf = 0;
  CHECK(cudaHostGetFlags(&hf, ph));
  CHECK(cudaHostGetFlags(&mf, pm));
  std::printf("cudaHostGetFlags: cudaMallocHost %#x, cudaHostAlloc(mapped|write-combined) %#x\n", hf, mf);
  std::vector<int> pageable(16);
  std::printf("cudaHostGetFlags of pageable memory: %s\n", cudaGetErrorName(cudaHostGetFlags(&hf, pageable.data())));
  cudaGetLastError();
  CHECK(cudaFreeHost(ph));
  CHECK(cudaFreeHost(pm));
  int can = -1;
  CHECK(cudaDeviceCanAccessPeer(&can, 0, 0));
  std::printf("cudaDeviceCanAccessPeer(0, 0): %d; of no device: %s\n", can,
              cudaGetErrorName(cudaDeviceCanAccessPeer(&can, 0, 99)));
  cudaGetLastError();
  int valid[] = {0}, invalid[] = {99};
  std::printf("cudaSetValidDevices({0}): %s, ({99}): %s\n", cudaGetErrorName(cudaSetValidDevices(valid, 1)),
              cudaGetErrorName(cudaSetValidDevices(invalid, 1)));
  cudaGetLastError();
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(64);
  cfg.blockDim = dim3(128);
  int cluster = 0;
  CHECK(cudaOccupancyMaxPotentialClusterSize(&cluster, reinterpret_cast<const void*>(add_one), &cfg));
  std::printf("cudaOccupancyMaxPotentialClusterSize of 128-thread blocks: %d\n", cluster);
  CHECK(cudaFree(d));
  std::printf("done\n");
  return 0;
}
