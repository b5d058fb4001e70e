// Streams and events through funnel: ordering, query, elapsed time, wait-event,
// per-thread default stream, priorities, device properties.
#include <cstring>
#include <vector>

#include "check.h"

int main() {
  cudaDeviceProp p{};
  CHECK(cudaGetDeviceProperties(&p, 0));
  std::printf("name set: %s, memory>0: %s\n", p.name[0] != '\0' ? "yes" : "no", p.totalGlobalMem > 0 ? "yes" : "no");
  int v = 0;
  CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 0));
  std::printf("warp attr == prop: %s\n", v == p.warpSize ? "yes" : "no");
  char bus[32];
  CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, 0));
  std::printf("pci bus id set: %s\n", bus[0] != '\0' ? "yes" : "no");
  int rv = 0, dv = 0;
  CHECK(cudaRuntimeGetVersion(&rv));
  CHECK(cudaDriverGetVersion(&dv));
  std::printf("versions: %d %d\n", rv, dv);
  CHECK(cudaSetDevice(0));
  int dev = -1;
  CHECK(cudaGetDevice(&dev));
  std::printf("device: %d\n", dev);
  int lo = 1, hi = 1;
  CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  std::printf("priorities: %d %d\n", lo, hi);

  const size_t n = 8u << 20;
  cudaStream_t a, b, pr;
  CHECK(cudaStreamCreate(&a));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithPriority(&pr, cudaStreamDefault, -1));
  cudaEvent_t e0, e1, done;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  std::printf("query unrecorded event: %s\n", cudaGetErrorName(cudaEventQuery(done)));

  unsigned char *d1, *d2, *h;
  CHECK(cudaMalloc(&d1, n));
  CHECK(cudaMalloc(&d2, n));
  CHECK(cudaMallocHost(&h, n));
  // a: memset d1, record; b waits, then copies d1 -> d2 -> host.
  CHECK(cudaEventRecord(e0, a));
  CHECK(cudaMemsetAsync(d1, 0x42, n, a));
  CHECK(cudaEventRecord(e1, a));
  CHECK(cudaStreamWaitEvent(b, e1, 0));
  CHECK(cudaMemcpyAsync(d2, d1, n, cudaMemcpyDeviceToDevice, b));
  CHECK(cudaMemcpyAsync(h, d2, n, cudaMemcpyDeviceToHost, b));
  CHECK(cudaEventRecord(done, b));
  CHECK(cudaEventSynchronize(done));
  bool ok = true;
  for (size_t i = 0; i < n; i += 4097) ok &= h[i] == 0x42;
  std::printf("wait-event ordering: %s\n", ok && h[n - 1] == 0x42 ? "ok" : "MISMATCH");
  std::printf("query after sync: %s %s\n", cudaGetErrorName(cudaEventQuery(done)),
              cudaGetErrorName(cudaStreamQuery(b)));
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, e0, e1));
  std::printf("elapsed >= 0: %s\n", ms >= 0 ? "yes" : "no");

  // Legacy default stream orders blocking streams.
  CHECK(cudaMemsetAsync(d1, 0x11, n, a));
  CHECK(cudaMemcpy(h, d1, n, cudaMemcpyDeviceToHost));
  std::printf("legacy stream after blocking stream: %s\n", h[0] == 0x11 && h[n - 1] == 0x11 ? "ok" : "MISMATCH");

  // Per-thread default stream handle and the priority stream.
  CHECK(cudaMemsetAsync(d2, 0x77, n, cudaStreamPerThread));
  CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  CHECK(cudaMemcpyAsync(h, d2, 16, cudaMemcpyDeviceToHost, pr));
  CHECK(cudaStreamSynchronize(pr));
  std::printf("per-thread stream: %s\n", h[0] == 0x77 ? "ok" : "MISMATCH");

  CHECK(cudaDeviceSynchronize());
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  CHECK(cudaEventDestroy(done));
  CHECK(cudaStreamDestroy(a));
  CHECK(cudaStreamDestroy(b));
  CHECK(cudaStreamDestroy(pr));
  CHECK(cudaFree(d1));
  CHECK(cudaFree(d2));
  CHECK(cudaFreeHost(h));
  std::printf("done\n");
  return 0;
}
