// Host functions in streams: cudaLaunchHostFunc and cudaStreamAddCallback run in stream
// order (after the kernels and copies before them, before the work after them); a host
// function that writes pinned memory which a later async copy in the same stream uploads;
// callbacks on two streams joined by an event.
#include <mutex>
#include <string>
#include <vector>

#include "compat.h"

__global__ void set(int* d, int v) { d[threadIdx.x] = v + static_cast<int>(threadIdx.x); }
__global__ void add(int* d, const int* src) { d[threadIdx.x] += src[threadIdx.x]; }

struct Log {
  std::mutex m;
  std::vector<std::string> lines;
  void add(std::string s) {
    std::lock_guard<std::mutex> g(m);
    lines.push_back(std::move(s));
  }
};
Log log_;
int* pinned;  // 32 ints, filled by D2H copies and read by host functions
int* upload;  // 32 ints, written by a host function, then copied H2D

struct Step {
  int expect;
  const char* name;
};

void CUDART_CB check_step(void* p) {
  auto* s = static_cast<Step*>(p);
  log_.add(std::string(s->name) +
           (pinned[0] == s->expect && pinned[31] == s->expect + 31 ? " saw its copy" : " saw STALE data"));
}

void CUDART_CB fill_upload(void*) {
  for (int i = 0; i < 32; ++i) upload[i] = 1000 * (i + 1);
  log_.add("fill_upload ran");
}

void CUDART_CB callback(cudaStream_t, cudaError_t status, void* p) {
  auto* s = static_cast<Step*>(p);
  log_.add(std::string("callback ") + s->name + " status " + cudaGetErrorName(status) +
           (pinned[0] == s->expect ? " saw its copy" : " saw STALE data"));
}

int main() {
  CHECK(cudaMallocHost(&pinned, 32 * sizeof(int)));
  CHECK(cudaMallocHost(&upload, 32 * sizeof(int)));
  for (int i = 0; i < 32; ++i) upload[i] = -1;
  int *d, *du;
  CHECK(cudaMalloc(&d, 32 * sizeof(int)));
  CHECK(cudaMalloc(&du, 32 * sizeof(int)));
  cudaStream_t s, t;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));

  static Step steps[] = {{10, "step1"}, {20, "step2"}, {30, "step3"}, {40, "step4"}};
  for (int k = 0; k < 3; ++k) {
    set<<<1, 32, 0, s>>>(d, steps[k].expect);
    CHECK(cudaMemcpyAsync(pinned, d, 32 * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaLaunchHostFunc(s, check_step, &steps[k]));
  }
  set<<<1, 32, 0, s>>>(d, steps[3].expect);
  CHECK(cudaMemcpyAsync(pinned, d, 32 * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamAddCallback(s, callback, &steps[3], 0));
  // A host function produces data that the stream then uploads and uses.
  CHECK(cudaLaunchHostFunc(s, fill_upload, nullptr));
  CHECK(cudaMemcpyAsync(du, upload, 32 * sizeof(int), cudaMemcpyHostToDevice, s));
  add<<<1, 32, 0, s>>>(d, du);
  CHECK(cudaMemcpyAsync(pinned, d, 32 * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  int bad = 0;
  for (int i = 0; i < 32; ++i) bad += pinned[i] != 40 + i + 1000 * (i + 1);
  std::printf("upload after host function: mismatches %d\n", bad);
  EXPECT(bad == 0, "host function data uploaded");

  // Two streams: t's callback waits (through an event) for s's work.
  cudaEvent_t e;
  CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  static Step last{50, "joined"};
  set<<<1, 32, 0, s>>>(d, 50);
  CHECK(cudaMemcpyAsync(pinned, d, 32 * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaEventRecord(e, s));
  CHECK(cudaStreamWaitEvent(t, e, 0));
  CHECK(cudaLaunchHostFunc(t, check_step, &last));
  CHECK(cudaStreamSynchronize(t));
  // Many host functions in a row keep their order.
  static int order[200];
  static int next = 0;
  for (int k = 0; k < 200; ++k) {
    CHECK(cudaLaunchHostFunc(
        t, [](void* p) { order[next++] = static_cast<int>(reinterpret_cast<intptr_t>(p)); },
        reinterpret_cast<void*>(static_cast<intptr_t>(k))));
  }
  CHECK(cudaDeviceSynchronize());
  int out_of_order = 0;
  for (int k = 0; k < 200; ++k) out_of_order += order[k] != k;
  for (const auto& l : log_.lines) std::printf("%s\n", l.c_str());
  std::printf("200 host functions: ran %d, out of order %d\n", next, out_of_order);
  EXPECT(next == 200 && out_of_order == 0, "order");
  for (const auto& l : log_.lines) EXPECT(l.find("STALE") == std::string::npos, "%s", l.c_str());
  EXPECT(log_.lines.size() == 6, "log lines %zu", log_.lines.size());
  CHECK(cudaEventDestroy(e));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(t));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFreeHost(upload));
  CHECK(cudaFree(d));
  CHECK(cudaFree(du));
  return finish();
}
