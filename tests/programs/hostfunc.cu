// Host functions and stream callbacks run in stream order: after the stream's earlier
// work, before its later work, in order per stream, on the legacy, per-thread and
// created streams.
#include <atomic>
#include <chrono>
#include <thread>

#include "check.h"

struct Probe {
  int* host;                 // pinned
  int seen = -1;             // what the host function found in host[0]
  std::atomic<int>* order;   // sequence of calls
  int my_index = -1;
};

void CUDART_CB check_then_write(void* p) {
  auto* pr = static_cast<Probe*>(p);
  pr->seen = pr->host[0];  // written by the copy enqueued before us
  // Slow on purpose: later work of the stream must wait for us.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  pr->host[1] = 4242;      // read by the copy enqueued after us
  pr->my_index = pr->order->fetch_add(1);
}

void CUDART_CB count(void* p) {
  auto* pr = static_cast<Probe*>(p);
  pr->my_index = pr->order->fetch_add(1);
}

void CUDART_CB callback(cudaStream_t, cudaError_t status, void* p) {
  auto* pr = static_cast<Probe*>(p);
  pr->seen = status;
  pr->my_index = pr->order->fetch_add(1);
}

int run(cudaStream_t s, const char* name) {
  int* host = nullptr;
  int* dev = nullptr;
  CHECK(cudaMallocHost(&host, 4 * sizeof(int)));
  CHECK(cudaMalloc(&dev, 4 * sizeof(int)));
  host[0] = 0, host[1] = 0, host[2] = 0;
  int init = 777;
  CHECK(cudaMemcpy(dev, &init, sizeof init, cudaMemcpyHostToDevice));
  std::atomic<int> order{0};
  Probe a{host, -1, &order}, b{host, -1, &order}, c{host, -1, &order};
  // Earlier work: dev[0] -> host[0].  Then the host function.  Later work: host[1] -> dev[1] -> host[2].
  CHECK(cudaMemcpyAsync(host, dev, sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaLaunchHostFunc(s, check_then_write, &a));
  CHECK(cudaMemcpyAsync(dev + 1, host + 1, sizeof(int), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(host + 2, dev + 1, sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaLaunchHostFunc(s, count, &b));
  CHECK(cudaStreamAddCallback(s, callback, &c, 0));
  CHECK(cudaStreamSynchronize(s));
  std::printf("%s: earlier work seen %d, later work saw %d, order %d %d %d, callback status %d\n", name, a.seen,
              host[2], a.my_index, b.my_index, c.my_index, c.seen);
  CHECK(cudaFree(dev));
  CHECK(cudaFreeHost(host));
  return 0;
}

int main() {
  run(nullptr, "legacy");
  run(cudaStreamPerThread, "per-thread");
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  run(s, "created");
  // Many host functions on several streams at once: each stream's run in order.
  constexpr int kStreams = 4, kEach = 50;
  cudaStream_t ss[kStreams];
  std::atomic<int> order[kStreams];
  Probe probes[kStreams][kEach];
  for (int i = 0; i < kStreams; ++i) {
    CHECK(cudaStreamCreate(&ss[i]));
    order[i] = 0;
    for (int k = 0; k < kEach; ++k) {
      probes[i][k].order = &order[i];
      CHECK(cudaLaunchHostFunc(ss[i], count, &probes[i][k]));
    }
  }
  CHECK(cudaDeviceSynchronize());
  bool in_order = true;
  for (int i = 0; i < kStreams; ++i)
    for (int k = 0; k < kEach; ++k) in_order = in_order && probes[i][k].my_index == k;
  std::printf("many: %s\n", in_order ? "in order" : "OUT OF ORDER");
  for (auto& x : ss) CHECK(cudaStreamDestroy(x));
  CHECK(cudaStreamDestroy(s));
  // More streams with host functions than the channel has event state words for two
  // each: a synchronised stream's words are reused.
  int ran = 0;
  for (int i = 0; i < 600; ++i) {
    cudaStream_t t;
    CHECK(cudaStreamCreate(&t));
    std::atomic<int> o{0};
    Probe p;
    p.order = &o;
    CHECK(cudaLaunchHostFunc(t, count, &p));
    CHECK(cudaStreamSynchronize(t));
    CHECK(cudaStreamDestroy(t));
    ran += p.my_index == 0;
  }
  std::printf("streams one after another: %d\n", ran);
  std::printf("bad arguments: %s %s\n", cudaGetErrorName(cudaLaunchHostFunc(nullptr, nullptr, nullptr)),
              cudaGetErrorName(cudaStreamAddCallback(nullptr, callback, nullptr, 1)));
  std::printf("done\n");
  return 0;
}
