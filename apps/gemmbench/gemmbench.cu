// gemmbench: cuBLAS as HPC ranks use it, one process of a group that bench/gemm.sh starts N at a
// time (natively, under NVIDIA MPS, through funnel-run).  cuBLAS carries its own static runtime
// and opens libcuda.so.1 itself: through funnel-run it runs on funnel's client driver.
//
//   gemmbench first [--n N]          start-up: cublasCreate, one N x N SGEMM, its result
//                                    checked, exit; prints the time from main() on
//   gemmbench throughput [--n N] --seconds S [--barrier DIR --clients N] [--sync-every K]
//                                    N x N SGEMMs (default 256) on one stream for S seconds
//                                    after all N processes are ready, a stream synchronisation
//                                    every K (default 16); prints this process's GEMMs
// A and B hold 1 and 2, so every element of C is 2N: checked at the end (exactly, in float).
// Every mode prints one JSON line; exit 1 on a wrong result.
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cuda_check.h"

using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string mode;
  int n = 256;
  double seconds = 2.0;
  std::string barrier;
  int clients = 1;
  int sync_every = 16;
};

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) {
    std::fprintf(stderr, "usage: gemmbench first|throughput [--n N] [--seconds S] [--barrier DIR --clients N] "
                         "[--sync-every K]\n");
    std::exit(2);
  }
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "gemmbench: %s needs a value\n", k.c_str());
      std::exit(2);
    }
    const char* v = argv[++i];
    if (k == "--n") a.n = std::atoi(v);
    else if (k == "--seconds") a.seconds = std::atof(v);
    else if (k == "--barrier") a.barrier = v;
    else if (k == "--clients") a.clients = std::atoi(v);
    else if (k == "--sync-every") a.sync_every = std::atoi(v);
    else {
      std::fprintf(stderr, "gemmbench: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (a.n < 1 || a.n > 8192 || a.sync_every < 1 || (a.mode != "first" && a.mode != "throughput")) {
    std::fprintf(stderr, "gemmbench: bad arguments (mode first|throughput, --n 1..8192, --sync-every >= 1)\n");
    std::exit(2);
  }
  return a;
}

// Marks this process ready and waits (at most 2 minutes) until `clients` are.
void barrier(const Args& a) {
  if (a.barrier.empty()) return;
  if (FILE* f = std::fopen((a.barrier + "/ready." + std::to_string(getpid())).c_str(), "w")) std::fclose(f);
  const auto give_up = Clock::now() + std::chrono::minutes(2);
  for (;;) {
    int ready = 0;
    if (DIR* d = opendir(a.barrier.c_str())) {
      while (dirent* e = readdir(d)) ready += std::strncmp(e->d_name, "ready.", 6) == 0;
      closedir(d);
    }
    if (ready >= a.clients) return;
    if (Clock::now() > give_up) {
      std::fprintf(stderr, "gemmbench: barrier timed out\n");
      std::exit(2);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const auto t_start = Clock::now();
  const Args a = parse(argc, argv);
  const size_t n = static_cast<size_t>(a.n), bytes = n * n * sizeof(float);
  cublasHandle_t h = nullptr;
  CB(cublasCreate(&h));
  cudaStream_t s = nullptr;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CB(cublasSetStream(h, s));
  float *A = nullptr, *B = nullptr, *C = nullptr;
  CK(cudaMalloc(&A, bytes));
  CK(cudaMalloc(&B, bytes));
  CK(cudaMalloc(&C, bytes));
  std::vector<float> host(n * n, 1.0f);
  CK(cudaMemcpy(A, host.data(), bytes, cudaMemcpyHostToDevice));
  std::fill(host.begin(), host.end(), 2.0f);
  CK(cudaMemcpy(B, host.data(), bytes, cudaMemcpyHostToDevice));
  const float alpha = 1.0f, beta = 0.0f;
  auto gemm = [&] { CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, a.n, a.n, a.n, &alpha, A, a.n, B, a.n, &beta, C, a.n)); };
  auto check = [&] {
    CK(cudaMemset(C, 0, bytes));
    gemm();
    CK(cudaMemcpyAsync(host.data(), C, bytes, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (float c : host)
      if (c != 2.0f * static_cast<float>(a.n)) return false;
    return true;
  };

  bool ok = true;
  if (a.mode == "first") {
    ok = check();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t_start).count();
    std::printf("{\"bench\":\"gemm_first\",\"n\":%d,\"ms\":%.3f,\"ok\":%s}\n", a.n, ms, ok ? "true" : "false");
  } else {
    for (int i = 0; i < 8; ++i) gemm();  // warm up: the kernels' modules, the heuristics
    CK(cudaStreamSynchronize(s));
    barrier(a);
    const auto t0 = Clock::now();
    const auto until = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
    long long done = 0;
    while (Clock::now() < until) {
      for (int i = 0; i < a.sync_every; ++i) gemm();
      CK(cudaStreamSynchronize(s));
      done += a.sync_every;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    ok = check();
    std::printf("{\"bench\":\"gemm_throughput\",\"n\":%d,\"gemms\":%lld,\"seconds\":%.4f,\"per_s\":%.1f,"
                "\"gflops\":%.2f,\"ok\":%s}\n",
                a.n, done, secs, double(done) / secs, 2.0 * double(n * n * n) * double(done) / secs / 1e9,
                ok ? "true" : "false");
  }
  CK(cudaFree(A));
  CK(cudaFree(B));
  CK(cudaFree(C));
  CB(cublasDestroy(h));
  return ok ? 0 : 1;
}
