// CUDA graphs through the driver API only (issue 30; no runtime): a kernel JIT-compiled from
// embedded PTX; a stream capture (cuStreamBeginCapture/cuStreamEndCapture) of cuMemsetD32Async,
// cuLaunchKernel and cuMemcpyDtoHAsync into cuMemAllocHost memory, instantiated and launched
// three times; an explicit graph (memset node -> kernel node -> memcpy node to pinned memory),
// its kernel node's argument changed in the instantiated graph (cuGraphExecKernelNodeSetParams),
// then the whole updated from a graph of the same topology (cuGraphExecUpdate); results
// checked on the CPU; conditional nodes (cuGraphConditionalHandleCreate, cuGraphAddNode) with
// kernels in their bodies.  CUDA 13 names: cuStreamBeginCapture is cuStreamBeginCapture_v2,
// cuGraphInstantiate is cuGraphInstantiateWithFlags, cuGraphAddKernelNode,
// cuGraphExecKernelNodeSetParams and cuGraphExecUpdate are their _v2.
// Build: nvcc graph_driver.cpp -L/usr/local/cuda/lib64/stubs -lcuda
#include <cuda.h>

#include <cstdio>

#include "libcheck.h"

static void expect(bool ok, const char* what) { libcheck::expect("graph_driver", ok, what); }

// p[i] += v for i < n (u32). Validated with: ptxas -arch=sm_90.
static const char* kPtx = R"(
.version 7.0
.target sm_52
.address_size 64

.visible .entry add_val(
    .param .u64 add_val_p,
    .param .u32 add_val_n,
    .param .u32 add_val_v
)
{
    .reg .pred  %p<2>;
    .reg .b32   %r<9>;
    .reg .b64   %rd<5>;

    ld.param.u64    %rd1, [add_val_p];
    ld.param.u32    %r2, [add_val_n];
    ld.param.u32    %r3, [add_val_v];
    mov.u32         %r4, %ctaid.x;
    mov.u32         %r5, %ntid.x;
    mov.u32         %r6, %tid.x;
    mad.lo.s32      %r1, %r4, %r5, %r6;
    setp.ge.u32     %p1, %r1, %r2;
    @%p1 bra        DONE;
    cvta.to.global.u64  %rd2, %rd1;
    mul.wide.u32    %rd3, %r1, 4;
    add.s64         %rd4, %rd2, %rd3;
    ld.global.u32   %r7, [%rd4];
    add.s32         %r8, %r7, %r3;
    st.global.u32   [%rd4], %r8;
DONE:
    ret;
}
)";

static const unsigned N = 5000, BLOCK = 256, GRID = (N + BLOCK - 1) / BLOCK;
static const size_t BYTES = N * sizeof(unsigned);

static bool all(const unsigned* p, unsigned v) {
  for (unsigned i = 0; i < N; ++i)
    if (p[i] != v) return false;
  return true;
}

static void clear(unsigned* p) {
  for (unsigned i = 0; i < N; ++i) p[i] = 0;
}

static size_t node_count(CUgraph g) {
  size_t n = 0;
  CU_CHECK(cuGraphGetNodes(g, nullptr, &n));
  return n;
}

// The explicit graph: memset d = value -> add_val(d, N, v) -> copy d -> h (pinned).  The nodes
// copy their parameters when added, so the locals may go.
static CUgraph explicit_graph(CUcontext ctx, CUfunction fn, CUdeviceptr d, unsigned* h, unsigned value,
                              unsigned v, CUgraphNode nodes[3]) {
  CUgraph g;
  CU_CHECK(cuGraphCreate(&g, 0));
  CUDA_MEMSET_NODE_PARAMS mp = {};
  mp.dst = d;
  mp.pitch = 0;
  mp.value = value;
  mp.elementSize = sizeof(unsigned);
  mp.width = N;
  mp.height = 1;
  CU_CHECK(cuGraphAddMemsetNode(&nodes[0], g, nullptr, 0, &mp, ctx));
  unsigned n = N;
  void* args[] = {&d, &n, &v};
  CUDA_KERNEL_NODE_PARAMS kp = {};
  kp.func = fn;
  kp.gridDimX = GRID;
  kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = BLOCK;
  kp.blockDimY = kp.blockDimZ = 1;
  kp.sharedMemBytes = 0;
  kp.kernelParams = args;
  kp.extra = nullptr;
  CU_CHECK(cuGraphAddKernelNode(&nodes[1], g, &nodes[0], 1, &kp));
  CUDA_MEMCPY3D cp = {};
  cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  cp.srcDevice = d;
  cp.srcPitch = BYTES;
  cp.srcHeight = 1;
  cp.dstMemoryType = CU_MEMORYTYPE_HOST;
  cp.dstHost = h;
  cp.dstPitch = BYTES;
  cp.dstHeight = 1;
  cp.WidthInBytes = BYTES;
  cp.Height = 1;
  cp.Depth = 1;
  CU_CHECK(cuGraphAddMemcpyNode(&nodes[2], g, &nodes[1], 1, &cp, ctx));
  return g;
}

static bool launch_and_check(CUgraphExec exec, CUstream s, unsigned* h, unsigned want) {
  clear(h);
  CU_CHECK(cuGraphLaunch(exec, s));
  CU_CHECK(cuStreamSynchronize(s));
  return all(h, want);
}

int main() {
  CU_CHECK(cuInit(0));
  CUdevice dev;
  CU_CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU_CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CU_CHECK(cuModuleLoadData(&mod, kPtx));
  CUfunction fn;
  CU_CHECK(cuModuleGetFunction(&fn, mod, "add_val"));
  CUstream s;
  CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr d;
  CU_CHECK(cuMemAlloc(&d, BYTES));
  unsigned* h = nullptr;
  CU_CHECK(cuMemAllocHost(reinterpret_cast<void**>(&h), BYTES));

  // 1. A stream capture: memset 10, add 5, copy to pinned memory.
  CU_CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus during = CU_STREAM_CAPTURE_STATUS_NONE, after = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  CU_CHECK(cuStreamIsCapturing(s, &during));
  CU_CHECK(cuMemsetD32Async(d, 10, N, s));
  unsigned n = N, v = 5;
  void* params[] = {&d, &n, &v};
  CU_CHECK(cuLaunchKernel(fn, GRID, 1, 1, BLOCK, 1, 1, 0, s, params, nullptr));
  CU_CHECK(cuMemcpyDtoHAsync(h, d, BYTES, s));
  CUgraph g;
  CU_CHECK(cuStreamEndCapture(s, &g));
  CU_CHECK(cuStreamIsCapturing(s, &after));
  expect(during == CU_STREAM_CAPTURE_STATUS_ACTIVE && after == CU_STREAM_CAPTURE_STATUS_NONE,
         "cuStreamIsCapturing active during the capture, none after");
  CUgraphExec exec;
  CU_CHECK(cuGraphInstantiate(&exec, g, 0));
  bool ok = true;
  for (int r = 0; r < 3; ++r) ok = launch_and_check(exec, s, h, 15) && ok;
  std::printf("driver capture: %zu nodes, 3 launches, element 0 = %u\n", node_count(g), h[0]);
  expect(ok, "a captured memset, launch and copy to pinned memory, launched 3 times");
  CU_CHECK(cuGraphExecDestroy(exec));
  CU_CHECK(cuGraphDestroy(g));

  // 2. An explicit graph: memset 20, add 7; then add 100 (the kernel node's argument changed in
  // the instantiated graph); then memset 30, add 1 (cuGraphExecUpdate from a new graph).
  CUgraphNode nodes[3];
  g = explicit_graph(ctx, fn, d, h, 20, 7, nodes);
  CU_CHECK(cuGraphInstantiate(&exec, g, 0));
  ok = launch_and_check(exec, s, h, 27);
  std::printf("driver explicit graph: %zu nodes, element 0 = %u\n", node_count(g), h[0]);
  expect(ok, "cuGraphAddMemsetNode -> cuGraphAddKernelNode -> cuGraphAddMemcpyNode (to pinned memory)");

  unsigned v2 = 100;
  void* params2[] = {&d, &n, &v2};
  CUDA_KERNEL_NODE_PARAMS kp = {};
  kp.func = fn;
  kp.gridDimX = GRID;
  kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = BLOCK;
  kp.blockDimY = kp.blockDimZ = 1;
  kp.kernelParams = params2;
  CU_CHECK(cuGraphExecKernelNodeSetParams(exec, nodes[1], &kp));
  ok = launch_and_check(exec, s, h, 120);
  std::printf("driver kernel node updated: element 0 = %u\n", h[0]);
  expect(ok, "cuGraphExecKernelNodeSetParams");

  CUgraphNode nodes2[3];
  CUgraph g2 = explicit_graph(ctx, fn, d, h, 30, 1, nodes2);
  CUgraphExecUpdateResultInfo info = {};
  info.result = CU_GRAPH_EXEC_UPDATE_ERROR;
  CU_CHECK(cuGraphExecUpdate(exec, g2, &info));
  ok = info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS && launch_and_check(exec, s, h, 31);
  std::printf("driver graph updated: result %d, element 0 = %u\n", static_cast<int>(info.result), h[0]);
  expect(ok, "cuGraphExecUpdate from a graph of the same topology");
  CU_CHECK(cuGraphExecDestroy(exec));
  CU_CHECK(cuGraphDestroy(g));
  CU_CHECK(cuGraphDestroy(g2));

  // Conditional nodes through cuGraphAddNode, their conditions the handles' defaults (assigned
  // at every launch): memset d = 5 -> IF (default 1) {add_val(d, 10)} -> SWITCH (default 1)
  // {add_val 100 | add_val 200} -> WHILE (default 0) {add_val 1000} -> copy d -> h.
  CUgraph cg;
  CU_CHECK(cuGraphCreate(&cg, 0));
  CUgraphConditionalHandle hif, hsw, hwh;
  CU_CHECK(cuGraphConditionalHandleCreate(&hif, cg, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
  CU_CHECK(cuGraphConditionalHandleCreate(&hsw, cg, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
  CU_CHECK(cuGraphConditionalHandleCreate(&hwh, cg, ctx, 0, CU_GRAPH_COND_ASSIGN_DEFAULT));
  unsigned cn = N;
  unsigned vals[4] = {10, 100, 200, 1000};
  void* kargs[4][3] = {{&d, &cn, &vals[0]}, {&d, &cn, &vals[1]}, {&d, &cn, &vals[2]}, {&d, &cn, &vals[3]}};
  auto kernel_in = [&](CUgraph body, int which) {
    CUgraphNodeParams p = {};
    p.type = CU_GRAPH_NODE_TYPE_KERNEL;
    p.kernel.func = fn;
    p.kernel.gridDimX = GRID;
    p.kernel.gridDimY = p.kernel.gridDimZ = 1;
    p.kernel.blockDimX = BLOCK;
    p.kernel.blockDimY = p.kernel.blockDimZ = 1;
    p.kernel.kernelParams = kargs[which];
    CUgraphNode node;
    CU_CHECK(cuGraphAddNode(&node, body, nullptr, nullptr, 0, &p));
  };
  auto conditional = [&](const CUgraphNode* dep, CUgraphConditionalHandle hd, CUgraphConditionalNodeType type,
                         unsigned size, CUgraphNode* out) {
    CUgraphNodeParams p = {};
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional.handle = hd;
    p.conditional.type = type;
    p.conditional.size = size;
    p.conditional.ctx = ctx;
    CU_CHECK(cuGraphAddNode(out, cg, dep, nullptr, dep != nullptr ? 1 : 0, &p));
    return p.conditional.phGraph_out;
  };
  CUgraphNode cnodes[5];
  CUDA_MEMSET_NODE_PARAMS mp = {};
  mp.dst = d;
  mp.value = 5;
  mp.elementSize = sizeof(unsigned);
  mp.width = N;
  mp.height = 1;
  CU_CHECK(cuGraphAddMemsetNode(&cnodes[0], cg, nullptr, 0, &mp, ctx));
  CUgraph* ifb = conditional(&cnodes[0], hif, CU_GRAPH_COND_TYPE_IF, 1, &cnodes[1]);
  kernel_in(ifb[0], 0);
  CUgraph* swb = conditional(&cnodes[1], hsw, CU_GRAPH_COND_TYPE_SWITCH, 2, &cnodes[2]);
  kernel_in(swb[0], 1);
  kernel_in(swb[1], 2);
  CUgraph* whb = conditional(&cnodes[2], hwh, CU_GRAPH_COND_TYPE_WHILE, 1, &cnodes[3]);
  kernel_in(whb[0], 3);
  CUDA_MEMCPY3D cp = {};
  cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  cp.srcDevice = d;
  cp.dstMemoryType = CU_MEMORYTYPE_HOST;
  cp.dstHost = h;
  cp.WidthInBytes = BYTES;
  cp.Height = 1;
  cp.Depth = 1;
  CU_CHECK(cuGraphAddMemcpyNode(&cnodes[4], cg, &cnodes[3], 1, &cp, ctx));
  CU_CHECK(cuGraphInstantiateWithFlags(&exec, cg, 0));
  ok = launch_and_check(exec, s, h, 5 + 10 + 200) && launch_and_check(exec, s, h, 5 + 10 + 200);
  std::printf("driver conditional nodes: element 0 = %u\n", h[0]);
  expect(ok, "IF, SWITCH and WHILE nodes made by cuGraphAddNode ran the bodies of their handles' defaults");
  CU_CHECK(cuGraphExecDestroy(exec));
  CU_CHECK(cuGraphDestroy(cg));

  CU_CHECK(cuStreamDestroy(s));
  CU_CHECK(cuMemFree(d));
  CU_CHECK(cuMemFreeHost(h));
  CU_CHECK(cuModuleUnload(mod));
  CU_CHECK(cuCtxSetCurrent(nullptr));
  CU_CHECK(cuDevicePrimaryCtxRelease(dev));
  std::printf("graph_driver: all ok\n");
  return 0;
}
