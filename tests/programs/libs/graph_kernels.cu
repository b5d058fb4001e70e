// CUDA graphs whose kernels really run (issue 30; GPU only): a capture of a chain of 100 kernels
// replayed 50 times; the same with one kernel node's scalar argument changed in the instantiated
// graph (its node found through cudaStreamGetCaptureInfo); one graph launched on two streams in
// turn; a kernel node reading mapped pinned memory that the host rewrites between replays; a
// capture over two streams whose kernels both run before a joined kernel adds their results;
// conditional nodes whose conditions kernels set (cudaGraphSetConditional): a WHILE loop counting
// down, an IF/else and a SWITCH chosen from data, and a WHILE node in a capture.
// Results checked on the CPU; sums printed.
// Build: nvcc -cudart shared graph_kernels.cu
#include <cuda_runtime.h>

#include <cstdio>

#include "libcheck.h"

static void expect(bool ok, const char* what) { libcheck::expect("graph_kernels", ok, what); }

static const int N = 4096, BLOCK = 256, GRID = (N + BLOCK - 1) / BLOCK;
static const size_t BYTES = N * sizeof(int);

__global__ void add_k(int* p, int n, int k) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += k;
}

// out[i] = 2 * in[i] + 1 (in: mapped pinned memory).
__global__ void twice_plus_one(const int* in, int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2 * in[i] + 1;
}

__global__ void add_arrays(const int* a, const int* b, int* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

// One step of a countdown: while *ctr > 0, takes one from it and adds one to *acc; the handle's
// condition is whether more steps remain.
__global__ void count_down(int* ctr, int* acc, cudaGraphConditionalHandle h) {
  if (*ctr > 0) {
    --*ctr;
    ++*acc;
  }
  cudaGraphSetConditional(h, *ctr > 0 ? 1u : 0u);
}

// The condition is *x (for a SWITCH) or whether *x is odd (for an IF).
__global__ void set_from(const int* x, cudaGraphConditionalHandle h, int odd) {
  cudaGraphSetConditional(h, odd ? static_cast<unsigned>(*x & 1) : static_cast<unsigned>(*x));
}

static bool all(const int* p, int n, int v) {
  for (int i = 0; i < n; ++i)
    if (p[i] != v) return false;
  return true;
}

static long long sum(const int* p, int n) {
  long long s = 0;
  for (int i = 0; i < n; ++i) s += p[i];
  return s;
}

static size_t node_count(cudaGraph_t g) {
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &n));
  return n;
}

static cudaGraph_t* add_conditional(cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                    cudaGraphConditionalHandle h, cudaGraphConditionalNodeType type, unsigned size,
                                    cudaGraphNode_t* out) {
  cudaGraphNodeParams p{};
  p.type = cudaGraphNodeTypeConditional;
  p.conditional.handle = h;
  p.conditional.type = type;
  p.conditional.size = size;
  CUDA_CHECK(cudaGraphAddNode(out, g, deps, nullptr, n, &p));
  return p.conditional.phGraph_out;
}

template <class... Args>
static void add_kernel(cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, void (*k)(Args...), void** args,
                       cudaGraphNode_t* out, unsigned grid = 1, unsigned block = 1) {
  cudaGraphNodeParams p{};
  p.type = cudaGraphNodeTypeKernel;
  p.kernel.func = reinterpret_cast<void*>(k);
  p.kernel.gridDim = dim3(grid);
  p.kernel.blockDim = dim3(block);
  p.kernel.kernelParams = args;
  CUDA_CHECK(cudaGraphAddNode(out, g, deps, nullptr, n, &p));
}

static void conditionals() {
  int *ctr, *acc, *x, *buf, *h;
  CUDA_CHECK(cudaMalloc(&ctr, sizeof(int)));
  CUDA_CHECK(cudaMalloc(&acc, sizeof(int)));
  CUDA_CHECK(cudaMalloc(&x, sizeof(int)));
  CUDA_CHECK(cudaMalloc(&buf, BYTES));
  CUDA_CHECK(cudaMallocHost(&h, BYTES));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // a) count_down -> WHILE { count_down }: *acc ends at the count it started from.
  cudaGraph_t g;
  CUDA_CHECK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle wh;
  CUDA_CHECK(cudaGraphConditionalHandleCreate(&wh, g));
  void* cargs[] = {&ctr, &acc, &wh};
  cudaGraphNode_t first, loop, body;
  add_kernel(g, nullptr, 0, count_down, cargs, &first);
  cudaGraph_t* wb = add_conditional(g, &first, 1, wh, cudaGraphCondTypeWhile, 1, &loop);
  add_kernel(wb[0], nullptr, 0, count_down, cargs, &body);
  cudaGraphExec_t x1;
  CUDA_CHECK(cudaGraphInstantiate(&x1, g, 0));
  bool counted = true;
  for (int start : {0, 1, 5, 37}) {
    CUDA_CHECK(cudaMemcpyAsync(ctr, &start, sizeof start, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemsetAsync(acc, 0, sizeof(int), s));
    CUDA_CHECK(cudaGraphLaunch(x1, s));
    int got = -1;
    CUDA_CHECK(cudaMemcpyAsync(&got, acc, sizeof got, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    std::printf("while loop from %d: %d steps\n", start, got);
    counted = counted && got == start;
  }
  expect(counted, "a WHILE node ran its body until the kernel's condition was 0");
  CUDA_CHECK(cudaGraphExecDestroy(x1));
  CUDA_CHECK(cudaGraphDestroy(g));

  // b) set_from(x, odd) -> IF { buf += 1 } else { buf += 100 }; set_from(x) -> SWITCH(3)
  //    { buf += 1000 | buf += 2000 | buf += 3000 }, x = 0..4.
  CUDA_CHECK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle ih, sh;
  CUDA_CHECK(cudaGraphConditionalHandleCreate(&ih, g));
  CUDA_CHECK(cudaGraphConditionalHandleCreate(&sh, g));
  int one = 1, zero = 0, n = N;
  int adds[5] = {1, 100, 1000, 2000, 3000};
  void* ia[] = {&x, &ih, &one};
  void* sa[] = {&x, &sh, &zero};
  cudaGraphNode_t set_if, if_n, set_sw, sw_n, k;
  add_kernel(g, nullptr, 0, set_from, ia, &set_if);
  cudaGraph_t* ib = add_conditional(g, &set_if, 1, ih, cudaGraphCondTypeIf, 2, &if_n);
  void* a0[] = {&buf, &n, &adds[0]};
  void* a1[] = {&buf, &n, &adds[1]};
  add_kernel(ib[0], nullptr, 0, add_k, a0, &k, GRID, BLOCK);
  add_kernel(ib[1], nullptr, 0, add_k, a1, &k, GRID, BLOCK);
  add_kernel(g, &if_n, 1, set_from, sa, &set_sw);
  cudaGraph_t* sb = add_conditional(g, &set_sw, 1, sh, cudaGraphCondTypeSwitch, 3, &sw_n);
  void* a2[] = {&buf, &n, &adds[2]};
  void* a3[] = {&buf, &n, &adds[3]};
  void* a4[] = {&buf, &n, &adds[4]};
  add_kernel(sb[0], nullptr, 0, add_k, a2, &k, GRID, BLOCK);
  add_kernel(sb[1], nullptr, 0, add_k, a3, &k, GRID, BLOCK);
  add_kernel(sb[2], nullptr, 0, add_k, a4, &k, GRID, BLOCK);
  CUDA_CHECK(cudaGraphInstantiate(&x1, g, 0));
  bool chosen = true;
  for (int v = 0; v < 5; ++v) {
    CUDA_CHECK(cudaMemcpyAsync(x, &v, sizeof v, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemsetAsync(buf, 0, BYTES, s));
    CUDA_CHECK(cudaGraphLaunch(x1, s));
    CUDA_CHECK(cudaMemcpyAsync(h, buf, BYTES, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    const int want = (v & 1 ? 1 : 100) + (v < 3 ? 1000 * (v + 1) : 0);
    std::printf("if/else and switch on x=%d: %d\n", v, h[0]);
    chosen = chosen && all(h, N, want);
  }
  expect(chosen, "IF/else and SWITCH nodes ran the bodies their kernels chose");
  // The IF body's kernel argument changed in the executable graph: adds 7 now.
  cudaGraphNode_t if_kernel;
  size_t one_node = 1;
  CUDA_CHECK(cudaGraphGetNodes(ib[0], &if_kernel, &one_node));
  int seven = 7;
  void* a7[] = {&buf, &n, &seven};
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(add_k);
  kp.gridDim = dim3(GRID);
  kp.blockDim = dim3(BLOCK);
  kp.kernelParams = a7;
  CUDA_CHECK(cudaGraphExecKernelNodeSetParams(x1, if_kernel, &kp));
  const int three = 3;
  CUDA_CHECK(cudaMemcpyAsync(x, &three, sizeof three, cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemsetAsync(buf, 0, BYTES, s));
  CUDA_CHECK(cudaGraphLaunch(x1, s));
  CUDA_CHECK(cudaMemcpyAsync(h, buf, BYTES, cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  std::printf("the IF body's kernel changed in the executable graph, x=3: %d\n", h[0]);
  expect(all(h, N, 7), "cudaGraphExecKernelNodeSetParams on a conditional body's kernel");
  CUDA_CHECK(cudaGraphExecDestroy(x1));
  CUDA_CHECK(cudaGraphDestroy(g));

  // c) A capture: count_down, then a WHILE node added to the capture's graph, its body captured.
  cudaStream_t bs;
  CUDA_CHECK(cudaStreamCreateWithFlags(&bs, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus st;
  cudaGraph_t cg;
  const cudaGraphNode_t* deps = nullptr;
  size_t nd = 0;
  CUDA_CHECK(cudaStreamGetCaptureInfo(s, &st, nullptr, &cg, &deps, nullptr, &nd));
  cudaGraphConditionalHandle ch;
  CUDA_CHECK(cudaGraphConditionalHandleCreate(&ch, cg));
  count_down<<<1, 1, 0, s>>>(ctr, acc, ch);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamGetCaptureInfo(s, &st, nullptr, &cg, &deps, nullptr, &nd));
  cudaGraphNode_t cw;
  cudaGraph_t* cb = add_conditional(cg, deps, nd, ch, cudaGraphCondTypeWhile, 1, &cw);
  CUDA_CHECK(cudaStreamUpdateCaptureDependencies(s, &cw, nullptr, 1, cudaStreamSetCaptureDependencies));
  CUDA_CHECK(cudaMemcpyAsync(h, acc, sizeof(int), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamEndCapture(s, &cg));
  CUDA_CHECK(cudaStreamBeginCaptureToGraph(bs, cb[0], nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
  count_down<<<1, 1, 0, bs>>>(ctr, acc, ch);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamEndCapture(bs, nullptr));
  CUDA_CHECK(cudaGraphInstantiate(&x1, cg, 0));
  const int start = 12;
  CUDA_CHECK(cudaMemcpyAsync(ctr, &start, sizeof start, cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemsetAsync(acc, 0, sizeof(int), s));
  CUDA_CHECK(cudaGraphLaunch(x1, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  std::printf("captured while loop from %d: %d steps, %zu nodes\n", start, h[0], node_count(cg));
  expect(h[0] == start, "a captured WHILE node ran its captured body");
  CUDA_CHECK(cudaGraphExecDestroy(x1));
  CUDA_CHECK(cudaGraphDestroy(cg));
  CUDA_CHECK(cudaStreamDestroy(bs));
  CUDA_CHECK(cudaStreamDestroy(s));
  for (int* p : {ctr, acc, x, buf}) CUDA_CHECK(cudaFree(p));
  CUDA_CHECK(cudaFreeHost(h));
}

int main() {
  int *d, *h;
  CUDA_CHECK(cudaMalloc(&d, BYTES));
  CUDA_CHECK(cudaMallocHost(&h, BYTES));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // 1. 100 kernels in a chain (kernel k adds k), then a copy to pinned memory; no memset in the
  // graph, so the 50 replays accumulate: every element ends at 50 * (0 + ... + 99) = 247500.
  // The node of kernel 42 is the capture's dependency just after its launch.
  CUDA_CHECK(cudaMemsetAsync(d, 0, BYTES, s));  // on s (non-blocking), where the graph runs
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaGraphNode_t node42 = nullptr;
  for (int k = 0; k < 100; ++k) {
    add_k<<<GRID, BLOCK, 0, s>>>(d, N, k);
    CUDA_CHECK(cudaGetLastError());
    if (k == 42) {
      cudaStreamCaptureStatus st;
      const cudaGraphNode_t* deps = nullptr;
      size_t nd = 0;
      CUDA_CHECK(cudaStreamGetCaptureInfo(s, &st, nullptr, nullptr, &deps, nullptr, &nd));
      if (nd == 1) node42 = deps[0];
    }
  }
  CUDA_CHECK(cudaMemcpyAsync(h, d, BYTES, cudaMemcpyDeviceToHost, s));
  cudaGraph_t chain;
  CUDA_CHECK(cudaStreamEndCapture(s, &chain));
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaGraphInstantiate(&exec, chain, 0));
  for (int r = 0; r < 50; ++r) CUDA_CHECK(cudaGraphLaunch(exec, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  std::printf("chain: %zu nodes, 50 replays, element 0 = %d, sum %lld\n", node_count(chain), h[0], sum(h, N));
  expect(all(h, N, 50 * 4950), "a captured chain of 100 kernels replayed 50 times");

  // 2. Kernel 42 adds 1042 instead: each replay adds 4950 + 1000.
  cudaGraphNodeType t = cudaGraphNodeTypeEmpty;
  if (node42 != nullptr) CUDA_CHECK(cudaGraphNodeGetType(node42, &t));
  expect(t == cudaGraphNodeTypeKernel, "cudaStreamGetCaptureInfo gives the last kernel's node");
  int* dp = d;
  int n = N, k42 = 1042;
  void* args[] = {&dp, &n, &k42};
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(add_k);
  kp.gridDim = dim3(GRID);
  kp.blockDim = dim3(BLOCK);
  kp.kernelParams = args;
  CUDA_CHECK(cudaGraphExecKernelNodeSetParams(exec, node42, &kp));
  CUDA_CHECK(cudaMemsetAsync(d, 0, BYTES, s));
  for (int r = 0; r < 50; ++r) CUDA_CHECK(cudaGraphLaunch(exec, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  std::printf("chain with kernel 42 updated: element 0 = %d, sum %lld\n", h[0], sum(h, N));
  expect(all(h, N, 50 * 5950), "cudaGraphExecKernelNodeSetParams changed one kernel's argument");
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(chain));

  // 3. One graph (add 1, copy out) launched on two streams in turn, each launch waited for.
  cudaStream_t s2;
  CUDA_CHECK(cudaStreamCreate(&s2));
  CUDA_CHECK(cudaMemsetAsync(d, 0, BYTES, s));
  cudaGraph_t one;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  add_k<<<GRID, BLOCK, 0, s>>>(d, N, 1);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMemcpyAsync(h, d, BYTES, cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamEndCapture(s, &one));
  CUDA_CHECK(cudaGraphInstantiate(&exec, one, 0));
  bool steps = true;
  for (int r = 1; r <= 20; ++r) {
    cudaStream_t on = r % 2 ? s : s2;
    CUDA_CHECK(cudaGraphLaunch(exec, on));
    CUDA_CHECK(cudaStreamSynchronize(on));
    steps = steps && all(h, N, r);
  }
  std::printf("two streams in turn: 20 launches, element 0 = %d, sum %lld\n", h[0], sum(h, N));
  expect(steps, "a graph launched on two streams alternately, each launch seen");
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(one));

  // 4. An explicit kernel node reading mapped pinned memory, then a copy out; the host rewrites
  // the input between replays.
  int *in = nullptr, *din = nullptr;
  CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&in), BYTES, cudaHostAllocMapped));
  CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&din), in, 0));
  cudaGraph_t mapped;
  CUDA_CHECK(cudaGraphCreate(&mapped, 0));
  void* margs[] = {&din, &dp, &n};
  cudaKernelNodeParams mk{};
  mk.func = reinterpret_cast<void*>(twice_plus_one);
  mk.gridDim = dim3(GRID);
  mk.blockDim = dim3(BLOCK);
  mk.kernelParams = margs;
  cudaGraphNode_t kn, cn;
  CUDA_CHECK(cudaGraphAddKernelNode(&kn, mapped, nullptr, 0, &mk));
  CUDA_CHECK(cudaGraphAddMemcpyNode1D(&cn, mapped, &kn, 1, h, d, BYTES, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaGraphInstantiate(&exec, mapped, 0));
  bool follows = true;
  long long total = 0;
  for (int r = 0; r < 10; ++r) {
    for (int i = 0; i < N; ++i) in[i] = i * (r + 1) - 7 * r;
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; ++i) follows = follows && h[i] == 2 * (i * (r + 1) - 7 * r) + 1;
    total += sum(h, N);
  }
  std::printf("mapped pinned input: 10 replays, sum of outputs %lld\n", total);
  expect(follows, "a kernel node reads mapped pinned memory as the host rewrote it");
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(mapped));
  CUDA_CHECK(cudaFreeHost(in));

  // 5. A capture over two streams: a += 3 on s, b += 5 on s2 (forked), joined, c = a + b on s,
  // copied out.  a and b accumulate over the replays: c = 8 * r after replay r.
  int *a, *b;
  CUDA_CHECK(cudaMalloc(&a, BYTES));
  CUDA_CHECK(cudaMalloc(&b, BYTES));
  CUDA_CHECK(cudaMemsetAsync(a, 0, BYTES, s));
  CUDA_CHECK(cudaMemsetAsync(b, 0, BYTES, s));
  cudaEvent_t fork, join;
  CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  cudaStream_t side;
  CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CUDA_CHECK(cudaEventRecord(fork, s));
  CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));
  add_k<<<GRID, BLOCK, 0, s>>>(a, N, 3);
  add_k<<<GRID, BLOCK, 0, side>>>(b, N, 5);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaEventRecord(join, side));
  CUDA_CHECK(cudaStreamWaitEvent(s, join, 0));
  add_arrays<<<GRID, BLOCK, 0, s>>>(a, b, d, N);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMemcpyAsync(h, d, BYTES, cudaMemcpyDeviceToHost, s));
  cudaGraph_t two;
  CUDA_CHECK(cudaStreamEndCapture(s, &two));
  size_t roots = 0;
  CUDA_CHECK(cudaGraphGetRootNodes(two, nullptr, &roots));
  CUDA_CHECK(cudaGraphInstantiate(&exec, two, 0));
  bool joined = true;
  for (int r = 1; r <= 10; ++r) {
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    joined = joined && all(h, N, 8 * r);
  }
  std::printf("two-stream capture: %zu nodes, %zu roots, 10 replays, sum %lld\n", node_count(two), roots, sum(h, N));
  expect(joined, "kernels on both streams of a capture ran before the joined kernel");
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(two));
  CUDA_CHECK(cudaEventDestroy(fork));
  CUDA_CHECK(cudaEventDestroy(join));
  CUDA_CHECK(cudaStreamDestroy(side));
  CUDA_CHECK(cudaStreamDestroy(s2));
  CUDA_CHECK(cudaStreamDestroy(s));
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(b));
  CUDA_CHECK(cudaFree(d));
  CUDA_CHECK(cudaFreeHost(h));
  conditionals();
  std::printf("graph_kernels: all ok\n");
  return 0;
}
