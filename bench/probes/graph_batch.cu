// graph_batch: does batching a stream's consecutive launches into one CUDA graph launch lift the
// single-process launch ceiling that funnel's server lives under (doc/performance.md, "Kernels")?
// One process, T host threads, each on its own non-blocking stream, launching for S seconds:
//   launch          one <<<>>> per kernel (what the server does with a launch it finds alone)
//   graph B         a graph of B kernel nodes per thread, instantiated once; per batch every
//                   node's arguments are set (cudaGraphExecKernelNodeSetParams, as the server
//                   would for B different records), then one cudaGraphLaunch
//   graph-same B    the same graph launched without updating its nodes (the upper bound)
// Prints one JSON line per run: kernels completed per second, and whether every small kernel's
// blocks ran (the blocks count themselves).
//   graph_batch --mode launch|graph|graph-same --batch B --threads T --kernel empty|small
//               --seconds S
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_check.h"

using Clock = std::chrono::steady_clock;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void empty_kernel(unsigned, int*) {}

__global__ void small_kernel(unsigned ns, int* sink) {
  const unsigned long long t0 = global_ns();
  while (global_ns() - t0 < ns) {
  }
  if (threadIdx.x == 0) atomicAdd(sink, 1);
}

int main(int argc, char** argv) {
  std::string mode = "launch", kernel = "small";
  int batch = 16, threads = 1;
  double seconds = 1.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--mode") mode = v;
    else if (k == "--batch") batch = std::atoi(v.c_str());
    else if (k == "--threads") threads = std::atoi(v.c_str());
    else if (k == "--kernel") kernel = v;
    else if (k == "--seconds") seconds = std::atof(v.c_str());
  }
  void* fn = kernel == "small" ? reinterpret_cast<void*>(small_kernel) : reinterpret_cast<void*>(empty_kernel);
  const dim3 grid(kernel == "small" ? 4 : 1), block(kernel == "small" ? 128 : 1);
  const unsigned ns = 5000;
  CK(cudaFree(nullptr));

  struct Lane {
    cudaStream_t s{};
    int* sink{};
    cudaGraph_t graph{};
    cudaGraphExec_t exec{};
    std::vector<cudaGraphNode_t> nodes;
    long long launched = 0;
  };
  std::vector<Lane> lanes(static_cast<size_t>(threads));
  for (auto& l : lanes) {
    CK(cudaStreamCreateWithFlags(&l.s, cudaStreamNonBlocking));
    CK(cudaMalloc(&l.sink, sizeof(int)));
    CK(cudaMemset(l.sink, 0, sizeof(int)));
    if (mode != "launch") {
      cudaGraph_t g;
      CK(cudaGraphCreate(&g, 0));
      cudaGraphNode_t prev{};
      for (int b = 0; b < batch; ++b) {
        unsigned a0 = ns;
        int* a1 = l.sink;
        void* args[] = {&a0, &a1};
        cudaKernelNodeParams p{};
        p.func = fn;
        p.gridDim = grid;
        p.blockDim = block;
        p.kernelParams = args;
        cudaGraphNode_t n;
        CK(cudaGraphAddKernelNode(&n, g, b == 0 ? nullptr : &prev, b == 0 ? 0 : 1, &p));
        l.nodes.push_back(n);
        prev = n;
      }
      CK(cudaGraphInstantiate(&l.exec, g, 0));
      CK(cudaGraphUpload(l.exec, l.s));
      l.graph = g;  // the nodes' handles stay valid only while their graph lives
    }
    CK(cudaStreamSynchronize(l.s));
  }
  CK(cudaDeviceSynchronize());
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  Clock::time_point until;
  auto run = [&](Lane& l) {
    ready.fetch_add(1);
    while (!go.load()) {
    }
    long long c = 0;
    unsigned a0 = ns;
    int* a1 = l.sink;
    void* args[] = {&a0, &a1};
    while (Clock::now() < until) {
      if (mode == "launch") {
        for (int i = 0; i < 64; ++i) CK(cudaLaunchKernel(fn, grid, block, args, 0, l.s));
        c += 64;
      } else {
        if (mode == "graph") {
          cudaKernelNodeParams p{};
          p.func = fn;
          p.gridDim = grid;
          p.blockDim = block;
          p.kernelParams = args;
          for (auto n : l.nodes) CK(cudaGraphExecKernelNodeSetParams(l.exec, n, &p));
        }
        CK(cudaGraphLaunch(l.exec, l.s));
        c += batch;
      }
    }
    CK(cudaStreamSynchronize(l.s));
    l.launched = c;
  };
  std::vector<std::thread> ts;
  for (auto& l : lanes) ts.emplace_back(run, std::ref(l));
  while (ready.load() < threads) {
  }
  const auto t0 = Clock::now();
  until = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  go.store(true);
  for (auto& t : ts) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  long long n = 0;
  bool ok = true;
  for (auto& l : lanes) {
    n += l.launched;
    int counted = 0;
    CK(cudaMemcpy(&counted, l.sink, sizeof counted, cudaMemcpyDeviceToHost));
    if (kernel == "small" && counted != 4 * l.launched) ok = false;
  }
  std::printf("{\"mode\":\"%s\",\"batch\":%d,\"threads\":%d,\"kernel\":\"%s\",\"per_s\":%.0f,\"ok\":%s}\n",
              mode.c_str(), mode == "launch" ? 1 : batch, threads, kernel.c_str(), n / secs, ok ? "true" : "false");
  return ok ? 0 : 1;
}
