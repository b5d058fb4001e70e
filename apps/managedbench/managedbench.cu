// managedbench: a typical managed-memory program, for bench/managed.sh (natively, under NVIDIA
// MPS, through funnel-run).  The same work over three kinds of memory:
//
//   managedbench [--mode managed|zerocopy|device] [--elems N] [--iters I] [--sample-every K]
//
//   managed   cudaMallocManaged array; host and kernels use the one pointer.  Natively its pages
//             migrate on demand (to the GPU on a kernel's first touch, back to the host when it
//             reads them); in funnel it is a shared host buffer registered with the driver, so
//             kernels reach it over the bus and nothing migrates (zero-copy).
//   zerocopy  cudaHostAlloc(cudaHostAllocMapped) + cudaHostGetDevicePointer: kernels read and
//             write host memory over the bus, natively as in funnel.
//   device    cudaMalloc + explicit cudaMemcpy from/to a pageable host array: the reference.
//
// The program: allocate N floats (default 16 Mi = 64 MiB), the host initialises them (for
// device: its pageable array); then, timed, (device: upload with cudaMemcpy) I iterations
// (default 20) of a kernel x = fmaf(x, a, b) over every element, and after every K-th iteration
// (default 5) cudaDeviceSynchronize and the host reads a sample of 64 elements spread over the
// whole array (device: one cudaMemcpy2D of them) and checks them; the timed region ends with the
// final cudaDeviceSynchronize.  Then the whole result is brought to the host (device: cudaMemcpy;
// managed natively: page faults) and every element is checked against the value the host
// computes with the same correctly rounded fmaf (bit-exact).
// Output: one JSON line; times:
//   seconds          the timed region (upload, I kernels, the samples, the final sync)
//   first_kernel_ms  GPU time of the first kernel (events around it; native managed: with the
//                    page faults that migrate the array in)
//   kernel_ms        mean GPU time of kernels 2..I (events, the first 1000 kernels at most);
//                    kernel_gbps: 2 x bytes / kernel_ms; gbps_effective: 2 x bytes x I / seconds
//   sample_ms        all sample reads together (after their syncs)
//   upload_ms        device: the first cudaMemcpy to the GPU (else 0)
//   alloc_ms, init_ms   allocation; the host's initialisation (untimed)
//   readback_ms      the whole result to the host and its check (untimed)
// Exit 0 when every value is right, 1 on a wrong value, 2 on a CUDA or usage error.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_check.h"

using Clock = std::chrono::steady_clock;

namespace {

constexpr int kThreads = 256;
constexpr int kSamples = 64;         // elements the host reads every K-th iteration
constexpr int kPeriod = 1021;        // initial values repeat with this period (prime: not page-aligned)
constexpr float kA = 1.0009765625f;  // 1 + 2^-10: values grow slowly, every iteration changes them
constexpr float kB = 0.25f;
constexpr int kEvented = 1000;  // kernels timed with events (the first ones)

}  // namespace

__global__ void axpb(float* x, long long n, float a, float b) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = fmaf(x[i], a, b);
}

namespace {

enum class Mode { Managed, ZeroCopy, Device };

struct Args {
  Mode mode = Mode::Managed;
  std::string mode_name = "managed";
  long long elems = 16LL << 20;
  int iters = 20;
  int sample_every = 5;
};

[[noreturn]] void usage_exit(const char* why, const std::string& what) {
  std::fprintf(stderr, "managedbench: %s%s\n", why, what.c_str());
  std::fprintf(stderr,
               "usage: managedbench [--mode managed|zerocopy|device] [--elems N] [--iters I] "
               "[--sample-every K]\n");
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage_exit("a value is missing after ", k);
      return argv[++i];
    };
    if (k == "--mode") {
      a.mode_name = next();
      if (a.mode_name == "managed")
        a.mode = Mode::Managed;
      else if (a.mode_name == "zerocopy")
        a.mode = Mode::ZeroCopy;
      else if (a.mode_name == "device")
        a.mode = Mode::Device;
      else
        usage_exit("unknown mode ", a.mode_name);
    } else if (k == "--elems")
      a.elems = std::atoll(next().c_str());
    else if (k == "--iters")
      a.iters = std::atoi(next().c_str());
    else if (k == "--sample-every")
      a.sample_every = std::atoi(next().c_str());
    else if (k == "-h" || k == "--help")
      usage_exit("", "a managed-memory program over managed, mapped or device memory");
    else
      usage_exit("unknown option ", k);
  }
  if (a.elems < 1 || a.iters < 1 || a.sample_every < 1)
    usage_exit("--elems, --iters and --sample-every must be >= 1", "");
  if (a.iters > 50000) usage_exit("--iters must be <= 50000 (the values would overflow)", "");
  return a;
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const long long n = a.elems;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);

  // expected[k][p]: the value of an element with initial value expected[0][p] after k kernels,
  // kept for k = 0, the sampled iterations and the last (the others stay empty)
  std::vector<std::vector<float>> expected(a.iters + 1);
  {
    std::vector<float> v(kPeriod);
    for (int p = 0; p < kPeriod; ++p) v[p] = 1.0f + static_cast<float>(p) / kPeriod;
    expected[0] = v;
    for (int k = 1; k <= a.iters; ++k) {
      for (float& x : v) x = std::fmaf(x, kA, kB);
      if (k % a.sample_every == 0 || k == a.iters) expected[k] = v;
    }
  }
  // the sample: kSamples elements spread over the whole array
  const int samples = static_cast<int>(std::min<long long>(kSamples, n));
  const long long sample_stride = n / samples;

  CK(cudaFree(nullptr));  // the context (or funnel's connection) before anything is timed
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const long long want_blocks = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::min<long long>(want_blocks, static_cast<long long>(sms) * 32));

  // allocation (host pointer `h` the host uses, device pointer `d` the kernels use)
  const auto ta = Clock::now();
  float* h = nullptr;
  float* d = nullptr;
  std::vector<float> staging;  // device mode: the program's own (pageable) array
  switch (a.mode) {
    case Mode::Managed:
      CK(cudaMallocManaged(&d, bytes, cudaMemAttachGlobal));
      h = d;
      break;
    case Mode::ZeroCopy:
      CK(cudaHostAlloc(&h, bytes, cudaHostAllocMapped));
      CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d), h, 0));
      break;
    case Mode::Device:
      CK(cudaMalloc(&d, bytes));
      staging.resize(static_cast<size_t>(n));
      h = staging.data();
      break;
  }
  const auto tb = Clock::now();
  const double alloc_ms = ms_between(ta, tb);

  // the host initialises the array (untimed)
  for (long long i = 0, p = 0; i < n; ++i) {
    h[i] = expected[0][p];
    if (++p == kPeriod) p = 0;
  }
  const double init_ms = ms_between(tb, Clock::now());

  // events around the first kEvented kernels (GPU times; nothing waits on them before the end)
  const int evented = std::min(a.iters, kEvented);
  std::vector<cudaEvent_t> ev(2 * evented);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  std::vector<float> sample(samples);
  double checksum = 0, sample_ms = 0, upload_ms = 0;
  long long sample_bad = 0;

  // ---- timed: (upload,) iterations, samples, final sync ----
  const auto t0 = Clock::now();
  if (a.mode == Mode::Device) {
    CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    upload_ms = ms_between(t0, Clock::now());
  }
  for (int it = 0; it < a.iters; ++it) {
    if (it < evented) CK(cudaEventRecord(ev[2 * it], 0));
    axpb<<<blocks, kThreads>>>(d, n, kA, kB);
    CK(cudaGetLastError());
    if (it < evented) CK(cudaEventRecord(ev[2 * it + 1], 0));
    if ((it + 1) % a.sample_every != 0) continue;
    CK(cudaDeviceSynchronize());
    const auto ts = Clock::now();
    if (a.mode == Mode::Device) {
      CK(cudaMemcpy2D(sample.data(), sizeof(float), d, static_cast<size_t>(sample_stride) * sizeof(float),
                      sizeof(float), samples, cudaMemcpyDeviceToHost));
    } else {
      for (int s = 0; s < samples; ++s) sample[s] = h[s * sample_stride];
    }
    for (int s = 0; s < samples; ++s) {
      checksum += sample[s];
      if (sample[s] != expected[it + 1][(s * sample_stride) % kPeriod]) ++sample_bad;
    }
    sample_ms += ms_between(ts, Clock::now());
  }
  CK(cudaDeviceSynchronize());
  const auto t1 = Clock::now();
  const double secs = std::chrono::duration<double>(t1 - t0).count();

  // ---- untimed: the whole result to the host, checked ----
  if (a.mode == Mode::Device) CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
  long long wrong = 0, first_bad = -1;
  const std::vector<float>& want = expected[a.iters];
  for (long long i = 0, p = 0; i < n; ++i) {
    if (h[i] != want[p] && wrong++ == 0) first_bad = i;
    if (++p == kPeriod) p = 0;
  }
  const double readback_ms = ms_between(t1, Clock::now());
  const bool ok = wrong == 0 && sample_bad == 0;
  if (sample_bad != 0)
    std::fprintf(stderr, "managedbench: %lld sampled values wrong (stale or missing iterations)\n", sample_bad);
  if (wrong != 0)
    std::fprintf(stderr, "managedbench: %lld of %lld elements wrong: x[%lld] = %.9g, expected %.9g\n", wrong, n,
                 first_bad, h[first_bad], want[first_bad % kPeriod]);

  float first_kernel_ms = 0, kernel_ms_sum = 0;
  for (int k = 0; k < evented; ++k) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, ev[2 * k], ev[2 * k + 1]));
    if (k == 0)
      first_kernel_ms = ms;
    else
      kernel_ms_sum += ms;
  }
  for (auto& e : ev) CK(cudaEventDestroy(e));
  switch (a.mode) {
    case Mode::Managed:
      CK(cudaFree(d));
      break;
    case Mode::ZeroCopy:
      CK(cudaFreeHost(h));
      break;
    case Mode::Device:
      CK(cudaFree(d));
      break;
  }

  const double kernel_ms = evented > 1 ? kernel_ms_sum / (evented - 1) : first_kernel_ms;
  std::printf(
      "{\"bench\":\"managed\",\"mode\":\"%s\",\"elems\":%lld,\"bytes\":%zu,\"iters\":%d,\"sample_every\":%d,"
      "\"samples\":%d,\"seconds\":%.6f,\"first_kernel_ms\":%.3f,\"kernel_ms\":%.4f,\"kernel_gbps\":%.2f,"
      "\"gbps_effective\":%.2f,\"sample_ms\":%.3f,\"upload_ms\":%.3f,\"alloc_ms\":%.3f,\"init_ms\":%.3f,"
      "\"readback_ms\":%.3f,\"checksum\":%.6f,\"ok\":%s}\n",
      a.mode_name.c_str(), n, bytes, a.iters, a.sample_every, samples, secs, first_kernel_ms, kernel_ms,
      kernel_ms > 0 ? 2.0 * bytes / (kernel_ms * 1e-3) / 1e9 : 0.0, 2.0 * bytes * a.iters / secs / 1e9, sample_ms,
      upload_ms, alloc_ms, init_ms, readback_ms, checksum, ok ? "true" : "false");
  return ok ? 0 : 1;
}
