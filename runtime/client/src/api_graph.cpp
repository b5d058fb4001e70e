// The runtime front's graphs and stream capture (cudaGraph*, cudaStreamBeginCapture, ...) over
// the client core's graphs (graphs.hpp, doc/design/graphs.md).  Node kinds funnel does not run
// yet (host, memory alloc/free, conditional, external semaphore nodes) stay stubs that name
// themselves.
#include <cstring>

#include <fmt/format.h>

#include "graphs.hpp"

using namespace funnel::client;

namespace {

// A kernel node's parameters as cudaKernelNodeParams gives them, on the current device.
cudaError_t kernel_node(const cudaKernelNodeParams* p, std::unique_ptr<NodeObj>& out) {
  if (p == nullptr || p->func == nullptr) return cudaErrorInvalidValue;
  if (p->extra != nullptr) {
    report_unsupported("a graph kernel node with 'extra' parameters");
    return cudaErrorNotSupported;
  }
  Kernel* k = find_kernel(p->func);
  if (k == nullptr) return cudaErrorInvalidDeviceFunction;
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  LaunchSpec l;
  l.grid = p->gridDim;
  l.block = p->blockDim;
  l.shared = p->sharedMemBytes;
  out = std::make_unique<NodeObj>();
  return make_kernel_node(*out, *k, p->func, l, p->kernelParams, current_device());
}

// cudaMemcpy3DParms between linear memory (arrays are refused by name).
cudaError_t copy_node(const cudaMemcpy3DParms* p, std::unique_ptr<NodeObj>& out) {
  if (p == nullptr) return cudaErrorInvalidValue;
  if (p->srcArray != nullptr || p->dstArray != nullptr) {
    report_unsupported("a graph memcpy node with a cudaArray");
    return cudaErrorNotSupported;
  }
  const cudaExtent& e = p->extent;
  if (p->srcPtr.ptr == nullptr || p->dstPtr.ptr == nullptr || !fits(p->srcPtr, p->srcPos, e) ||
      !fits(p->dstPtr, p->dstPos, e))
    return cudaErrorInvalidValue;
  if (cudaError_t err = attach(); err != cudaSuccess) return err;
  CopyParams c;
  c.dst = at(p->dstPtr, p->dstPos);
  c.src = at(p->srcPtr, p->srcPos);
  c.dp = {p->dstPtr.pitch, p->dstPtr.pitch * p->dstPtr.ysize};
  c.sp = {p->srcPtr.pitch, p->srcPtr.pitch * p->srcPtr.ysize};
  c.extent = {e.width, e.height, e.depth};
  c.kind = p->kind;
  out = std::make_unique<NodeObj>();
  return make_copy_node(*out, c, "a graph memcpy node");
}

cudaError_t copy_node_1d(void* dst, const void* src, size_t count, cudaMemcpyKind kind, std::unique_ptr<NodeObj>& out) {
  if (cudaError_t err = attach(); err != cudaSuccess) return err;
  CopyParams c{dst, src, {count, count}, {count, count}, {count, 1, 1}, kind};
  out = std::make_unique<NodeObj>();
  return make_copy_node(*out, c, "a graph memcpy node");
}

cudaError_t memset_node(const cudaMemsetParams* p, std::unique_ptr<NodeObj>& out) {
  if (p == nullptr) return cudaErrorInvalidValue;
  if (cudaError_t err = attach(); err != cudaSuccess) return err;
  out = std::make_unique<NodeObj>();
  return make_memset_node(*out, *p);
}

// The parameters of a copy node as cudaMemcpy3DParms (linear memory: pointers, no positions).
cudaMemcpy3DParms copy_params_of(const NodeObj& n) {
  cudaMemcpy3DParms p{};
  const CopyParams& c = n.copy;
  p.srcPtr = cudaPitchedPtr{const_cast<void*>(c.src), c.sp.pitch, c.extent.width,
                            c.sp.pitch != 0 && c.extent.depth > 1 ? c.sp.slice / c.sp.pitch : c.extent.height};
  p.dstPtr = cudaPitchedPtr{c.dst, c.dp.pitch, c.extent.width,
                            c.dp.pitch != 0 && c.extent.depth > 1 ? c.dp.slice / c.dp.pitch : c.extent.height};
  p.extent = cudaExtent{c.extent.width, c.extent.height, c.extent.depth};
  p.kind = c.kind;
  return p;
}

template <class Make>
cudaError_t add_made(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, Make make) {
  std::unique_ptr<NodeObj> node;
  if (cudaError_t e = make(node); e != cudaSuccess) return e;
  return graph_add(out, g, deps, n, std::move(node));
}

template <class Make>
cudaError_t set_made(cudaGraphNode_t node, Make make) {
  std::unique_ptr<NodeObj> made;
  if (cudaError_t e = make(made); e != cudaSuccess) return e;
  return node_set(node, std::move(made));
}

template <class Make>
cudaError_t exec_set_made(cudaGraphExec_t x, cudaGraphNode_t node, Make make) {
  std::unique_ptr<NodeObj> made;
  if (cudaError_t e = make(made); e != cudaSuccess) return e;
  return exec_set_node(x, node, std::move(made));
}

// Edge data: only the default (all zero: a full dependency) is served.
bool default_edges(const cudaGraphEdgeData* data, size_t n) {
  if (data == nullptr) return true;
  for (size_t i = 0; i < n; ++i) {
    const cudaGraphEdgeData& d = data[i];
    if (d.from_port != 0 || d.to_port != 0 || d.type != 0) {
      report_unsupported("graph edges with edge data (programmatic dependencies)");
      return false;
    }
  }
  return true;
}
// Outputs of edge data for default edges.
void zero_edges(cudaGraphEdgeData* data, size_t n) {
  if (data != nullptr) std::memset(data, 0, n * sizeof *data);
}

}  // namespace

// ---- stream capture -------------------------------------------------------------------------

FUNNEL_API cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  return guarded(__func__, [&] { return begin_capture(s, false, mode, nullptr, nullptr, 0); });
}
FUNNEL_API cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, cudaStreamCaptureMode mode) {
  return guarded(__func__, [&] { return begin_capture(s, true, mode, nullptr, nullptr, 0); });
}
FUNNEL_API cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* deps,
                                                     const cudaGraphEdgeData* data, size_t n, cudaStreamCaptureMode mode) {
  return guarded(__func__, [&] {
    if (g == nullptr) return cudaErrorInvalidValue;
    if (!default_edges(data, n)) return cudaErrorNotSupported;
    return begin_capture(s, false, mode, g, deps, n);
  });
}
FUNNEL_API cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* deps,
                                                          const cudaGraphEdgeData* data, size_t n,
                                                          cudaStreamCaptureMode mode) {
  return guarded(__func__, [&] {
    if (g == nullptr) return cudaErrorInvalidValue;
    if (!default_edges(data, n)) return cudaErrorNotSupported;
    return begin_capture(s, true, mode, g, deps, n);
  });
}
FUNNEL_API cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  return guarded(__func__, [&] { return end_capture(s, false, g); });
}
FUNNEL_API cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t* g) {
  return guarded(__func__, [&] { return end_capture(s, true, g); });
}
FUNNEL_API cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t s, cudaGraphNode_t* deps,
                                                           const cudaGraphEdgeData* data, size_t n, unsigned flags) {
  return guarded(__func__, [&] {
    if (!default_edges(data, n)) return cudaErrorNotSupported;
    return update_capture_deps(s, false, deps, n, flags);
  });
}
FUNNEL_API cudaError_t cudaStreamUpdateCaptureDependencies_ptsz(cudaStream_t s, cudaGraphNode_t* deps,
                                                                const cudaGraphEdgeData* data, size_t n,
                                                                unsigned flags) {
  return guarded(__func__, [&] {
    if (!default_edges(data, n)) return cudaErrorNotSupported;
    return update_capture_deps(s, true, deps, n, flags);
  });
}
FUNNEL_API cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  return guarded(__func__, [&] { return exchange_capture_mode(mode); });
}

// ---- graphs and nodes ---------------------------------------------------------------------------

FUNNEL_API cudaError_t cudaGraphCreate(cudaGraph_t* g, unsigned flags) {
  return guarded(__func__, [&] { return graph_create(g, flags); });
}
FUNNEL_API cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  return guarded(__func__, [&] { return graph_destroy(g); });
}
FUNNEL_API cudaError_t cudaGraphClone(cudaGraph_t* out, cudaGraph_t g) {
  return guarded(__func__, [&] { return graph_clone(out, g); });
}
FUNNEL_API cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t* out, cudaGraphNode_t n, cudaGraph_t clone) {
  return guarded(__func__, [&] { return node_find_in_clone(out, n, clone); });
}
FUNNEL_API cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n) {
  return guarded(__func__, [&] { return graph_add(out, g, deps, n, std::make_unique<NodeObj>()); });
}
FUNNEL_API cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                              size_t n, const cudaKernelNodeParams* p) {
  return guarded(__func__, [&] { return add_made(out, g, deps, n, [&](auto& node) { return kernel_node(p, node); }); });
}
FUNNEL_API cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, cudaKernelNodeParams* p) {
  return guarded(__func__, [&] {
    if (p == nullptr) return cudaErrorInvalidValue;
    return with_node(node, NodeKind::Kernel, [&](NodeObj& k) {
      *p = cudaKernelNodeParams{};
      p->func = const_cast<void*>(k.func);
      p->gridDim = k.launch.grid;
      p->blockDim = k.launch.block;
      p->sharedMemBytes = static_cast<unsigned>(k.launch.shared);
      p->kernelParams = k.args.empty() ? nullptr : k.args.data();
      return cudaSuccess;
    });
  });
}
FUNNEL_API cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const cudaKernelNodeParams* p) {
  return guarded(__func__, [&] { return set_made(node, [&](auto& made) { return kernel_node(p, made); }); });
}
FUNNEL_API cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                              size_t n, const cudaMemcpy3DParms* p) {
  return guarded(__func__, [&] { return add_made(out, g, deps, n, [&](auto& node) { return copy_node(p, node); }); });
}
FUNNEL_API cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                                size_t n, void* dst, const void* src, size_t count,
                                                cudaMemcpyKind kind) {
  return guarded(__func__, [&] {
    return add_made(out, g, deps, n, [&](auto& node) { return copy_node_1d(dst, src, count, kind, node); });
  });
}
FUNNEL_API cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, cudaMemcpy3DParms* p) {
  return guarded(__func__, [&] {
    if (p == nullptr) return cudaErrorInvalidValue;
    return with_node(node, NodeKind::Memcpy, [&](NodeObj& c) {
      *p = copy_params_of(c);
      return cudaSuccess;
    });
  });
}
FUNNEL_API cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node, const cudaMemcpy3DParms* p) {
  return guarded(__func__, [&] { return set_made(node, [&](auto& made) { return copy_node(p, made); }); });
}
FUNNEL_API cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void* dst, const void* src, size_t count,
                                                      cudaMemcpyKind kind) {
  return guarded(__func__, [&] {
    return set_made(node, [&](auto& made) { return copy_node_1d(dst, src, count, kind, made); });
  });
}
FUNNEL_API cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                              size_t n, const cudaMemsetParams* p) {
  return guarded(__func__, [&] { return add_made(out, g, deps, n, [&](auto& node) { return memset_node(p, node); }); });
}
FUNNEL_API cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, cudaMemsetParams* p) {
  return guarded(__func__, [&] {
    if (p == nullptr) return cudaErrorInvalidValue;
    return with_node(node, NodeKind::Memset, [&](NodeObj& m) {
      *p = m.memset;
      return cudaSuccess;
    });
  });
}
FUNNEL_API cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node, const cudaMemsetParams* p) {
  return guarded(__func__, [&] { return set_made(node, [&](auto& made) { return memset_node(p, made); }); });
}
static cudaError_t host_node(const cudaHostNodeParams* p, std::unique_ptr<NodeObj>& out) {
  if (p == nullptr) return cudaErrorInvalidValue;
  out = std::make_unique<NodeObj>();
  return make_host_node(*out, p->fn, p->userData, current_device());
}
FUNNEL_API cudaError_t cudaGraphAddHostNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                            const cudaHostNodeParams* p) {
  return guarded(__func__, [&] { return add_made(out, g, deps, n, [&](auto& node) { return host_node(p, node); }); });
}
FUNNEL_API cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, cudaHostNodeParams* p) {
  return guarded(__func__, [&] {
    if (p == nullptr) return cudaErrorInvalidValue;
    return with_node(node, NodeKind::Host, [&](NodeObj& h) {
      *p = cudaHostNodeParams{h.host_fn, h.host_data};
      return cudaSuccess;
    });
  });
}
FUNNEL_API cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const cudaHostNodeParams* p) {
  return guarded(__func__, [&] { return set_made(node, [&](auto& made) { return host_node(p, made); }); });
}
FUNNEL_API cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t x, cudaGraphNode_t node,
                                                      const cudaHostNodeParams* p) {
  return guarded(__func__, [&] { return exec_set_made(x, node, [&](auto& made) { return host_node(p, made); }); });
}
FUNNEL_API cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                                size_t n, cudaMemAllocNodeParams* p) {
  return guarded(__func__, [&] { return graph_add_mem_alloc(out, g, deps, n, p); });
}
FUNNEL_API cudaError_t cudaGraphMemAllocNodeGetParams(cudaGraphNode_t node, cudaMemAllocNodeParams* p) {
  return guarded(__func__, [&] {
    if (p == nullptr) return cudaErrorInvalidValue;
    return with_node(node, NodeKind::MemAlloc, [&](NodeObj& a) {
      *p = a.alloc;
      return cudaSuccess;
    });
  });
}
FUNNEL_API cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                               size_t n, void* ptr) {
  return guarded(__func__, [&] { return graph_add_mem_free(out, g, deps, n, ptr); });
}
FUNNEL_API cudaError_t cudaGraphMemFreeNodeGetParams(cudaGraphNode_t node, void* ptr_out) {
  return guarded(__func__, [&] {
    if (ptr_out == nullptr) return cudaErrorInvalidValue;
    return with_node(node, NodeKind::MemFree, [&](NodeObj& f) {
      std::memcpy(ptr_out, &f.free_ptr, sizeof f.free_ptr);
      return cudaSuccess;
    });
  });
}
FUNNEL_API cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                                  size_t n, cudaGraph_t child) {
  return guarded(__func__, [&] { return graph_add_child(out, g, deps, n, child); });
}
FUNNEL_API cudaError_t cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t* g) {
  return guarded(__func__, [&] {
    if (g == nullptr) return cudaErrorInvalidValue;
    return with_node(node, NodeKind::Child, [&](NodeObj& c) {
      *g = reinterpret_cast<cudaGraph_t>(c.child.get());
      return cudaSuccess;
    });
  });
}
FUNNEL_API cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                                   size_t n, cudaEvent_t e) {
  return guarded(__func__, [&] { return graph_add_event(out, g, deps, n, e, true); });
}
FUNNEL_API cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                                 size_t n, cudaEvent_t e) {
  return guarded(__func__, [&] { return graph_add_event(out, g, deps, n, e, false); });
}
static cudaError_t event_of(cudaGraphNode_t node, cudaEvent_t* e, NodeKind kind) {
  if (e == nullptr) return cudaErrorInvalidValue;
  return with_node(node, kind, [&](NodeObj& n) {
    *e = n.event;
    return cudaSuccess;
  });
}
FUNNEL_API cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t* e) {
  return guarded(__func__, [&] { return event_of(node, e, NodeKind::EventRecord); });
}
FUNNEL_API cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t* e) {
  return guarded(__func__, [&] { return event_of(node, e, NodeKind::EventWait); });
}
FUNNEL_API cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t e) {
  return guarded(__func__, [&] { return node_set_event(node, e, true); });
}
FUNNEL_API cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t e) {
  return guarded(__func__, [&] { return node_set_event(node, e, false); });
}
FUNNEL_API cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* t) {
  return guarded(__func__, [&] { return node_type(node, t); });
}
FUNNEL_API cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* n) {
  return guarded(__func__, [&] { return graph_nodes(g, nodes, n, false); });
}
FUNNEL_API cudaError_t cudaGraphGetRootNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* n) {
  return guarded(__func__, [&] { return graph_nodes(g, nodes, n, true); });
}
FUNNEL_API cudaError_t cudaGraphGetEdges(cudaGraph_t g, cudaGraphNode_t* from, cudaGraphNode_t* to,
                                         cudaGraphEdgeData* data, size_t* n) {
  return guarded(__func__, [&] {
    const cudaError_t e = graph_edge_list(g, from, to, n);
    if (e == cudaSuccess && from != nullptr) zero_edges(data, *n);
    return e;
  });
}
FUNNEL_API cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t* deps,
                                                    cudaGraphEdgeData* data, size_t* n) {
  return guarded(__func__, [&] {
    const cudaError_t e = node_links(node, deps, n, false);
    if (e == cudaSuccess && deps != nullptr) zero_edges(data, *n);
    return e;
  });
}
FUNNEL_API cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t* outs,
                                                      cudaGraphEdgeData* data, size_t* n) {
  return guarded(__func__, [&] {
    const cudaError_t e = node_links(node, outs, n, true);
    if (e == cudaSuccess && outs != nullptr) zero_edges(data, *n);
    return e;
  });
}
FUNNEL_API cudaError_t cudaGraphAddDependencies(cudaGraph_t g, const cudaGraphNode_t* from, const cudaGraphNode_t* to,
                                                const cudaGraphEdgeData* data, size_t n) {
  return guarded(__func__, [&] {
    if (!default_edges(data, n)) return cudaErrorNotSupported;
    return graph_edges(g, from, to, n, true);
  });
}
FUNNEL_API cudaError_t cudaGraphRemoveDependencies(cudaGraph_t g, const cudaGraphNode_t* from,
                                                   const cudaGraphNode_t* to, const cudaGraphEdgeData* data,
                                                   size_t n) {
  return guarded(__func__, [&] {
    if (!default_edges(data, n)) return cudaErrorNotSupported;
    return graph_edges(g, from, to, n, false);
  });
}
FUNNEL_API cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node) {
  return guarded(__func__, [&] { return node_destroy(node); });
}

// ---- executable graphs ------------------------------------------------------------------------

FUNNEL_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t* x, cudaGraph_t g, unsigned long long flags) {
  return guarded(__func__, [&] { return instantiate(x, g, flags); });
}
FUNNEL_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* x, cudaGraph_t g, unsigned long long flags) {
  return guarded(__func__, [&] { return instantiate(x, g, flags); });
}
static cudaError_t instantiate_with_params(cudaGraphExec_t* x, cudaGraph_t g, cudaGraphInstantiateParams* p) {
  if (p == nullptr) return cudaErrorInvalidValue;
  const cudaError_t e = instantiate(x, g, p->flags, p->uploadStream);
  p->result_out = e == cudaSuccess ? cudaGraphInstantiateSuccess : cudaGraphInstantiateError;
  p->errNode_out = nullptr;
  return e;
}
FUNNEL_API cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t* x, cudaGraph_t g, cudaGraphInstantiateParams* p) {
  return guarded(__func__, [&] { return instantiate_with_params(x, g, p); });
}
FUNNEL_API cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t* x, cudaGraph_t g,
                                                           cudaGraphInstantiateParams* p) {
  return guarded(__func__, [&] { return instantiate_with_params(x, g, p); });
}
FUNNEL_API cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t x, unsigned long long* flags) {
  return guarded(__func__, [&] { return exec_flags(x, flags); });
}
FUNNEL_API cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s) {
  return guarded(__func__, [&] { return exec_launch(x, s, false); });
}
FUNNEL_API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t x, cudaStream_t s) {
  return guarded(__func__, [&] { return exec_launch(x, s, true); });
}
FUNNEL_API cudaError_t cudaGraphUpload(cudaGraphExec_t x, cudaStream_t s) {
  return guarded(__func__, [&] { return exec_upload(x, s, false); });
}
FUNNEL_API cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t x, cudaStream_t s) {
  return guarded(__func__, [&] { return exec_upload(x, s, true); });
}
FUNNEL_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) {
  return guarded(__func__, [&] { return exec_destroy(x); });
}
FUNNEL_API cudaError_t cudaGraphExecUpdate(cudaGraphExec_t x, cudaGraph_t g, cudaGraphExecUpdateResultInfo* info) {
  return guarded(__func__, [&] {
    cudaGraphExecUpdateResult result = cudaGraphExecUpdateSuccess;
    cudaGraphNode_t bad = nullptr, from = nullptr;
    const cudaError_t e = exec_update(x, g, &result, &bad, &from);
    if (info != nullptr) *info = cudaGraphExecUpdateResultInfo{result, bad, from};
    return e;
  });
}
FUNNEL_API cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t x, cudaGraphNode_t node,
                                                        const cudaKernelNodeParams* p) {
  return guarded(__func__, [&] { return exec_set_made(x, node, [&](auto& made) { return kernel_node(p, made); }); });
}
FUNNEL_API cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t x, cudaGraphNode_t node,
                                                        const cudaMemcpy3DParms* p) {
  return guarded(__func__, [&] { return exec_set_made(x, node, [&](auto& made) { return copy_node(p, made); }); });
}
FUNNEL_API cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t x, cudaGraphNode_t node, void* dst,
                                                          const void* src, size_t count, cudaMemcpyKind kind) {
  return guarded(__func__, [&] {
    return exec_set_made(x, node, [&](auto& made) { return copy_node_1d(dst, src, count, kind, made); });
  });
}
FUNNEL_API cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t x, cudaGraphNode_t node,
                                                        const cudaMemsetParams* p) {
  return guarded(__func__, [&] { return exec_set_made(x, node, [&](auto& made) { return memset_node(p, made); }); });
}
FUNNEL_API cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t x, cudaGraphNode_t node, cudaGraph_t g) {
  return guarded(__func__, [&] { return exec_set_child(x, node, g); });
}
FUNNEL_API cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t x, cudaGraphNode_t node, cudaEvent_t e) {
  return guarded(__func__, [&] { return exec_set_event(x, node, e, true); });
}
FUNNEL_API cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t x, cudaGraphNode_t node, cudaEvent_t e) {
  return guarded(__func__, [&] { return exec_set_event(x, node, e, false); });
}

// ---- conditional nodes and the generic node calls ---------------------------------------------

FUNNEL_API cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle* out, cudaGraph_t g,
                                                        unsigned default_value, unsigned flags) {
  return guarded(__func__, [&] { return conditional_handle_create(out, g, default_value, flags); });
}

namespace {

static_assert(sizeof(cudaMemAllocNodeParamsV2) == sizeof(cudaMemAllocNodeParams));

// The node a cudaGraphNodeParams of a kind with parameters to make (kernel, memcpy, memset, host)
// describes; `call` names the generic call for what it refuses.
cudaError_t node_of(const cudaGraphNodeParams* p, std::unique_ptr<NodeObj>& out, const char* call) {
  switch (p->type) {
    case cudaGraphNodeTypeKernel: {
      const cudaKernelNodeParamsV2& k = p->kernel;
      const cudaKernelNodeParams v1{k.func, k.gridDim, k.blockDim, k.sharedMemBytes, k.kernelParams, k.extra};
      return kernel_node(&v1, out);
    }
    case cudaGraphNodeTypeMemcpy:
      if (p->memcpy.flags != 0) return cudaErrorInvalidValue;
      return copy_node(&p->memcpy.copyParams, out);
    case cudaGraphNodeTypeMemset: {
      const cudaMemsetParamsV2& m = p->memset;
      const cudaMemsetParams v1{m.dst, m.pitch, m.value, m.elementSize, m.width, m.height};
      return memset_node(&v1, out);
    }
    case cudaGraphNodeTypeHost:
      if (p->host.fn == nullptr) return cudaErrorInvalidValue;
      out = std::make_unique<NodeObj>();
      return make_host_node(*out, p->host.fn, p->host.userData, current_device());
    default:
      report_unsupported(fmt::format("{} of a node of type {}", call, static_cast<int>(p->type)).c_str());
      return cudaErrorNotSupported;
  }
}

}  // namespace

FUNNEL_API cudaError_t cudaGraphAddNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                                        const cudaGraphEdgeData* data, size_t n, cudaGraphNodeParams* p) {
  return guarded(__func__, [&]() -> cudaError_t {
    if (p == nullptr) return cudaErrorInvalidValue;
    if (!default_edges(data, n)) return cudaErrorNotSupported;
    switch (p->type) {
      case cudaGraphNodeTypeEmpty:
        return graph_add(out, g, deps, n, std::make_unique<NodeObj>());
      case cudaGraphNodeTypeGraph:
        if (p->graph.ownership != cudaGraphChildGraphOwnershipClone) {
          report_unsupported("cudaGraphAddNode of a child graph moved into its parent (cudaGraphChildGraphOwnershipMove)");
          return cudaErrorNotSupported;
        }
        return graph_add_child(out, g, deps, n, p->graph.graph);
      case cudaGraphNodeTypeEventRecord:
        return graph_add_event(out, g, deps, n, p->eventRecord.event, true);
      case cudaGraphNodeTypeWaitEvent:
        return graph_add_event(out, g, deps, n, p->eventWait.event, false);
      case cudaGraphNodeTypeMemAlloc:
        return graph_add_mem_alloc(out, g, deps, n, reinterpret_cast<cudaMemAllocNodeParams*>(&p->alloc));
      case cudaGraphNodeTypeMemFree:
        return graph_add_mem_free(out, g, deps, n, p->free.dptr);
      case cudaGraphNodeTypeConditional:
        return graph_add_conditional(out, g, deps, n, &p->conditional);
      default:
        return add_made(out, g, deps, n, [&](auto& node) { return node_of(p, node, "cudaGraphAddNode"); });
    }
  });
}
FUNNEL_API cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node, cudaGraphNodeParams* p) {
  return guarded(__func__, [&]() -> cudaError_t {
    if (p == nullptr) return cudaErrorInvalidValue;
    if (p->type == cudaGraphNodeTypeEventRecord || p->type == cudaGraphNodeTypeWaitEvent)
      return node_set_event(node, p->eventRecord.event, p->type == cudaGraphNodeTypeEventRecord);
    return set_made(node, [&](auto& made) { return node_of(p, made, "cudaGraphNodeSetParams"); });
  });
}
FUNNEL_API cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t x, cudaGraphNode_t node, cudaGraphNodeParams* p) {
  return guarded(__func__, [&]() -> cudaError_t {
    if (p == nullptr) return cudaErrorInvalidValue;
    if (p->type == cudaGraphNodeTypeEventRecord || p->type == cudaGraphNodeTypeWaitEvent)
      return exec_set_event(x, node, p->eventRecord.event, p->type == cudaGraphNodeTypeEventRecord);
    if (p->type == cudaGraphNodeTypeGraph) return exec_set_child(x, node, p->graph.graph);
    return exec_set_made(x, node, [&](auto& made) { return node_of(p, made, "cudaGraphExecNodeSetParams"); });
  });
}
