// Multiple streams: a chunked pipeline (H2D copy, kernel, D2H copy per chunk on 4 streams,
// pinned memory), events recorded on one stream and waited on by another
// (cudaStreamWaitEvent), cudaEventQuery/Synchronize, non-blocking streams, priorities.
#include <vector>

#include "compat.h"

__global__ void work(float* x, int n, float k) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    for (int r = 0; r < 64; ++r) v = v * k + 1.0f / (1.0f + r);
    x[i] = v;
  }
}

__global__ void combine(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] - b[i];
}

int main() {
  const int kStreams = 4, chunk = 1 << 18, n = kStreams * 4 * chunk;
  float* h;
  CHECK(cudaMallocHost(&h, n * sizeof(float)));
  for (int i = 0; i < n; ++i) h[i] = rnd(i);
  std::vector<float> ref(h, h + n);
  float* d;
  CHECK(cudaMalloc(&d, n * sizeof(float)));
  cudaStream_t s[kStreams];
  for (int k = 0; k < kStreams; ++k) CHECK(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
  for (int off = 0, k = 0; off < n; off += chunk, k = (k + 1) % kStreams) {
    CHECK(cudaMemcpyAsync(d + off, h + off, chunk * sizeof(float), cudaMemcpyHostToDevice, s[k]));
    work<<<chunk / 256, 256, 0, s[k]>>>(d + off, chunk, 0.5f);
    CHECK(cudaMemcpyAsync(h + off, d + off, chunk * sizeof(float), cudaMemcpyDeviceToHost, s[k]));
  }
  for (int k = 0; k < kStreams; ++k) CHECK(cudaStreamSynchronize(s[k]));
  // Recompute one chunk per stream in one launch to compare (same code, same results).
  float* d2;
  CHECK(cudaMalloc(&d2, n * sizeof(float)));
  CHECK(cudaMemcpy(d2, ref.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  work<<<n / 256, 256>>>(d2, n, 0.5f);
  std::vector<float> one(n);
  CHECK(cudaMemcpy(one.data(), d2, n * sizeof(float), cudaMemcpyDeviceToHost));
  int bad = 0;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    bad += h[i] != one[i];
    sum += h[i];
  }
  std::printf("pipeline on %d streams: mismatches %d, checksum %.4f\n", kStreams, bad, sum);
  EXPECT(bad == 0, "pipeline");

  // Fork/join with events: s0 produces a, s1 produces b, s2 waits on both and combines.
  float *a, *b, *c;
  const int m = 1 << 20;
  CHECK(cudaMalloc(&a, m * sizeof(float)));
  CHECK(cudaMalloc(&b, m * sizeof(float)));
  CHECK(cudaMalloc(&c, m * sizeof(float)));
  cudaEvent_t ea, eb, ec;
  CHECK(cudaEventCreateWithFlags(&ea, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&eb, cudaEventDisableTiming));
  CHECK(cudaEventCreate(&ec));
  CHECK(cudaMemcpyAsync(a, ref.data(), m * sizeof(float), cudaMemcpyHostToDevice, s[0]));
  work<<<m / 256, 256, 0, s[0]>>>(a, m, 0.9f);
  CHECK(cudaEventRecord(ea, s[0]));
  CHECK(cudaMemcpyAsync(b, ref.data(), m * sizeof(float), cudaMemcpyHostToDevice, s[1]));
  work<<<m / 256, 256, 0, s[1]>>>(b, m, 0.9f);
  CHECK(cudaEventRecord(eb, s[1]));
  CHECK(cudaStreamWaitEvent(s[2], ea, 0));
  CHECK(cudaStreamWaitEvent(s[2], eb, 0));
  combine<<<m / 256, 256, 0, s[2]>>>(a, b, c, m);
  CHECK(cudaEventRecord(ec, s[2]));
  CHECK(cudaEventSynchronize(ec));
  std::printf("event after sync: %s\n", cudaGetErrorName(cudaEventQuery(ec)));
  std::vector<float> hc(m);
  CHECK(cudaMemcpyAsync(hc.data(), c, m * sizeof(float), cudaMemcpyDeviceToHost, s[3]));
  CHECK(cudaStreamSynchronize(s[3]));
  int nonzero = 0;
  for (float v : hc) nonzero += v != 0.0f;
  std::printf("fork/join: nonzero differences %d\n", nonzero);
  EXPECT(nonzero == 0, "fork/join");

  // Priority streams run kernels like any other.
  int lo = 0, hi = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  cudaStream_t ps;
  CHECK(cudaStreamCreateWithPriority(&ps, cudaStreamNonBlocking, hi));
  int prio = 0;
  CHECK(cudaStreamGetPriority(ps, &prio));
  combine<<<m / 256, 256, 0, ps>>>(a, a, c, m);
  CHECK(cudaStreamSynchronize(ps));
  std::printf("priority stream: greatest priority used %s\n", prio == hi ? "yes" : "no");
  CHECK(cudaStreamDestroy(ps));
  for (auto& st : s) CHECK(cudaStreamDestroy(st));
  for (auto e : {ea, eb, ec}) CHECK(cudaEventDestroy(e));
  CHECK(cudaFreeHost(h));
  for (float* p : {d, d2, a, b, c}) CHECK(cudaFree(p));
  return finish();
}
