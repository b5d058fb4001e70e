// The driver front's graphs and stream capture (cuGraph*, cuStreamBeginCapture, ...) over the
// client core's graphs (graphs.hpp, doc/design/graphs.md).  The symbols are those CUDA 13's cuda.h
// names (cuGraphAddKernelNode is cuGraphAddKernelNode_v2, cuGraphInstantiate is
// cuGraphInstantiateWithFlags, ...); the first versions of calls whose structures or arguments
// changed stay stubs that name themselves.
#include <cstring>

#include <fmt/format.h>

#include "front.hpp"
#include "graphs.hpp"

using funnel::client::CopyParams;
using funnel::client::NodeKind;
using funnel::client::NodeObj;
using funnel::driver::to_cu;

namespace {

cudaStream_t rt(CUstream s) { return reinterpret_cast<cudaStream_t>(s); }
cudaGraph_t rt(CUgraph g) { return reinterpret_cast<cudaGraph_t>(g); }
cudaGraphNode_t rt(CUgraphNode n) { return reinterpret_cast<cudaGraphNode_t>(n); }
cudaGraphExec_t rt(CUgraphExec x) { return reinterpret_cast<cudaGraphExec_t>(x); }
cudaEvent_t rt(CUevent e) { return reinterpret_cast<cudaEvent_t>(e); }
const cudaGraphNode_t* rt(const CUgraphNode* n) { return reinterpret_cast<const cudaGraphNode_t*>(n); }
cudaGraphNode_t* rt(CUgraphNode* n) { return reinterpret_cast<cudaGraphNode_t*>(n); }

static_assert(static_cast<int>(CU_STREAM_CAPTURE_MODE_GLOBAL) == cudaStreamCaptureModeGlobal &&
              static_cast<int>(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == cudaStreamCaptureModeThreadLocal &&
              static_cast<int>(CU_STREAM_CAPTURE_MODE_RELAXED) == cudaStreamCaptureModeRelaxed);
static_assert(static_cast<int>(CU_GRAPH_NODE_TYPE_KERNEL) == cudaGraphNodeTypeKernel &&
              static_cast<int>(CU_GRAPH_NODE_TYPE_MEMCPY) == cudaGraphNodeTypeMemcpy &&
              static_cast<int>(CU_GRAPH_NODE_TYPE_MEMSET) == cudaGraphNodeTypeMemset &&
              static_cast<int>(CU_GRAPH_NODE_TYPE_GRAPH) == cudaGraphNodeTypeGraph &&
              static_cast<int>(CU_GRAPH_NODE_TYPE_EMPTY) == cudaGraphNodeTypeEmpty &&
              static_cast<int>(CU_GRAPH_NODE_TYPE_EVENT_RECORD) == cudaGraphNodeTypeEventRecord &&
              static_cast<int>(CU_GRAPH_NODE_TYPE_WAIT_EVENT) == cudaGraphNodeTypeWaitEvent);
static_assert(sizeof(CUgraphEdgeData) == sizeof(cudaGraphEdgeData));
static_assert(static_cast<int>(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED) == cudaGraphExecUpdateErrorTopologyChanged);

bool default_edges(const CUgraphEdgeData* data, size_t n) {
  for (size_t i = 0; data != nullptr && i < n; ++i)
    if (data[i].from_port != 0 || data[i].to_port != 0 || data[i].type != 0) {
      funnel::client::report_unsupported("graph edges with edge data (programmatic dependencies)");
      return false;
    }
  return true;
}
void zero_edges(CUgraphEdgeData* data, size_t n) {
  if (data != nullptr) std::memset(data, 0, n * sizeof *data);
}

// One end of a CUDA_MEMCPY3D: a pointer (host, device or unified), or an array (refused).
bool end_of(CUmemorytype type, const void* host, CUdeviceptr dev, size_t x, size_t y, size_t z, size_t pitch,
            size_t height, const void*& out, bool& is_host, bool& is_device) {
  const auto* base = static_cast<const std::byte*>(type == CU_MEMORYTYPE_HOST ? host : reinterpret_cast<const void*>(dev));
  if (type == CU_MEMORYTYPE_ARRAY || base == nullptr) return false;
  out = base + (z * height + y) * pitch + x;
  is_host = type == CU_MEMORYTYPE_HOST;
  is_device = type == CU_MEMORYTYPE_DEVICE;
  return true;
}

CUresult copy_node(const CUDA_MEMCPY3D* p, std::unique_ptr<NodeObj>& out) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY) {
    funnel::client::report_unsupported("a graph memcpy node with a CUarray");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (p->srcLOD != 0 || p->dstLOD != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  const size_t depth = p->Depth == 0 ? 1 : p->Depth;
  const size_t height = p->Height == 0 ? 1 : p->Height;
  const size_t sp = p->srcPitch != 0 ? p->srcPitch : p->WidthInBytes;
  const size_t dp = p->dstPitch != 0 ? p->dstPitch : p->WidthInBytes;
  const size_t sh = p->srcHeight != 0 ? p->srcHeight : height;
  const size_t dh = p->dstHeight != 0 ? p->dstHeight : height;
  CopyParams c;
  bool src_host = false, src_dev = false, dst_host = false, dst_dev = false;
  const void* dst = nullptr;
  if (!end_of(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcZ, sp, sh, c.src, src_host,
              src_dev) ||
      !end_of(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstZ, dp, dh, dst, dst_host,
              dst_dev))
    return CUDA_ERROR_INVALID_VALUE;
  c.dst = const_cast<void*>(dst);
  c.sp = {sp, sp * sh};
  c.dp = {dp, dp * dh};
  c.extent = {p->WidthInBytes, height, depth};
  c.kind = src_dev && dst_dev     ? cudaMemcpyDeviceToDevice
           : src_host && dst_dev  ? cudaMemcpyHostToDevice
           : src_dev && dst_host  ? cudaMemcpyDeviceToHost
           : src_host && dst_host ? cudaMemcpyHostToHost
                                  : cudaMemcpyDefault;
  out = std::make_unique<NodeObj>();
  return to_cu(funnel::client::make_copy_node(*out, c, "a graph memcpy node"));
}

CUresult memset_node(const CUDA_MEMSET_NODE_PARAMS* p, std::unique_ptr<NodeObj>& out) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  cudaMemsetParams m{};
  m.dst = reinterpret_cast<void*>(p->dst);
  m.pitch = p->pitch;
  m.value = p->value;
  m.elementSize = p->elementSize;
  m.width = p->width;
  m.height = p->height;
  out = std::make_unique<NodeObj>();
  return to_cu(funnel::client::make_memset_node(*out, m));
}

template <class Make>
CUresult add_made(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, Make make) {
  std::unique_ptr<NodeObj> node;
  if (CUresult r = make(node); r != CUDA_SUCCESS) return r;
  return to_cu(funnel::client::graph_add(rt(out), rt(g), rt(deps), n, std::move(node)));
}
template <class Make>
CUresult set_made(CUgraphNode node, Make make) {
  std::unique_ptr<NodeObj> made;
  if (CUresult r = make(made); r != CUDA_SUCCESS) return r;
  return to_cu(funnel::client::node_set(rt(node), std::move(made)));
}
template <class Make>
CUresult exec_set_made(CUgraphExec x, CUgraphNode node, Make make) {
  std::unique_ptr<NodeObj> made;
  if (CUresult r = make(made); r != CUDA_SUCCESS) return r;
  return to_cu(funnel::client::exec_set_node(rt(x), rt(node), std::move(made)));
}

CUresult begin(CUstream s, CUstreamCaptureMode mode, bool ptds) {
  return to_cu(funnel::client::begin_capture(rt(s), ptds, static_cast<cudaStreamCaptureMode>(mode), nullptr, nullptr, 0));
}
CUresult begin_to_graph(CUstream s, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData* data, size_t n,
                        CUstreamCaptureMode mode, bool ptds) {
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!default_edges(data, n)) return CUDA_ERROR_NOT_SUPPORTED;
  return to_cu(funnel::client::begin_capture(rt(s), ptds, static_cast<cudaStreamCaptureMode>(mode), rt(g), rt(deps), n));
}
CUresult update_deps(CUstream s, CUgraphNode* deps, const CUgraphEdgeData* data, size_t n, unsigned flags, bool ptds) {
  if (!default_edges(data, n)) return CUDA_ERROR_NOT_SUPPORTED;
  return to_cu(funnel::client::update_capture_deps(rt(s), ptds, rt(deps), n, flags));
}
CUresult instantiate_with_params(CUgraphExec* x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  if (p == nullptr || x == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult r = to_cu(funnel::client::instantiate(reinterpret_cast<cudaGraphExec_t*>(x), rt(g), p->flags, rt(p->hUploadStream)));
  p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  p->hErrNode_out = nullptr;
  return r;
}

}  // namespace

// ---- stream capture ---------------------------------------------------------------------------

// The first cuStreamBeginCapture took no mode: global.
FUNNEL_DRIVER_API CUresult cuStreamBeginCapture(CUstream s) { return begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL, false); }
FUNNEL_DRIVER_API CUresult cuStreamBeginCapture_ptsz(CUstream s) { return begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL, true); }
FUNNEL_DRIVER_API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) { return begin(s, mode, false); }
FUNNEL_DRIVER_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) { return begin(s, mode, true); }
FUNNEL_DRIVER_API CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode* deps,
                                                       const CUgraphEdgeData* data, size_t n, CUstreamCaptureMode mode) {
  return begin_to_graph(s, g, deps, data, n, mode, false);
}
FUNNEL_DRIVER_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode* deps,
                                                            const CUgraphEdgeData* data, size_t n,
                                                            CUstreamCaptureMode mode) {
  return begin_to_graph(s, g, deps, data, n, mode, true);
}
FUNNEL_DRIVER_API CUresult cuStreamEndCapture(CUstream s, CUgraph* g) {
  return to_cu(funnel::client::end_capture(rt(s), false, reinterpret_cast<cudaGraph_t*>(g)));
}
FUNNEL_DRIVER_API CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) {
  return to_cu(funnel::client::end_capture(rt(s), true, reinterpret_cast<cudaGraph_t*>(g)));
}
FUNNEL_DRIVER_API CUresult cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode* deps,
                                                                const CUgraphEdgeData* data, size_t n, unsigned flags) {
  return update_deps(s, deps, data, n, flags, false);
}
FUNNEL_DRIVER_API CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream s, CUgraphNode* deps,
                                                                     const CUgraphEdgeData* data, size_t n,
                                                                     unsigned flags) {
  return update_deps(s, deps, data, n, flags, true);
}
FUNNEL_DRIVER_API CUresult cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode* deps, size_t n, unsigned flags) {
  return update_deps(s, deps, nullptr, n, flags, false);
}
FUNNEL_DRIVER_API CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream s, CUgraphNode* deps, size_t n,
                                                                  unsigned flags) {
  return update_deps(s, deps, nullptr, n, flags, true);
}
FUNNEL_DRIVER_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  return to_cu(funnel::client::exchange_capture_mode(reinterpret_cast<cudaStreamCaptureMode*>(mode)));
}

// ---- graphs and nodes ---------------------------------------------------------------------------

FUNNEL_DRIVER_API CUresult cuGraphCreate(CUgraph* g, unsigned flags) {
  return to_cu(funnel::client::graph_create(reinterpret_cast<cudaGraph_t*>(g), flags));
}
FUNNEL_DRIVER_API CUresult cuGraphDestroy(CUgraph g) { return to_cu(funnel::client::graph_destroy(rt(g))); }
FUNNEL_DRIVER_API CUresult cuGraphClone(CUgraph* out, CUgraph g) {
  return to_cu(funnel::client::graph_clone(reinterpret_cast<cudaGraph_t*>(out), rt(g)));
}
FUNNEL_DRIVER_API CUresult cuGraphNodeFindInClone(CUgraphNode* out, CUgraphNode n, CUgraph clone) {
  return to_cu(funnel::client::node_find_in_clone(rt(out), rt(n), rt(clone)));
}
FUNNEL_DRIVER_API CUresult cuGraphAddEmptyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n) {
  return to_cu(funnel::client::graph_add(rt(out), rt(g), rt(deps), n, std::make_unique<NodeObj>()));
}
FUNNEL_DRIVER_API CUresult cuGraphAddKernelNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                                   const CUDA_KERNEL_NODE_PARAMS* p) {
  return add_made(out, g, deps, n, [&](auto& node) { return funnel::driver::kernel_node(p, node); });
}
FUNNEL_DRIVER_API CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return to_cu(funnel::client::with_node(rt(node), NodeKind::Kernel, [&](NodeObj& k) {
    *p = CUDA_KERNEL_NODE_PARAMS{};
    p->func = reinterpret_cast<CUfunction>(const_cast<void*>(k.func));
    p->gridDimX = k.launch.grid.x, p->gridDimY = k.launch.grid.y, p->gridDimZ = k.launch.grid.z;
    p->blockDimX = k.launch.block.x, p->blockDimY = k.launch.block.y, p->blockDimZ = k.launch.block.z;
    p->sharedMemBytes = static_cast<unsigned>(k.launch.shared);
    p->kernelParams = k.args.empty() ? nullptr : k.args.data();
    return cudaSuccess;
  }));
}
FUNNEL_DRIVER_API CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  return set_made(node, [&](auto& made) { return funnel::driver::kernel_node(p, made); });
}
FUNNEL_DRIVER_API CUresult cuGraphAddMemcpyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                                const CUDA_MEMCPY3D* p, CUcontext) {
  return add_made(out, g, deps, n, [&](auto& node) { return copy_node(p, node); });
}
FUNNEL_DRIVER_API CUresult cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D* p) {
  return set_made(node, [&](auto& made) { return copy_node(p, made); });
}
FUNNEL_DRIVER_API CUresult cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return to_cu(funnel::client::with_node(rt(node), NodeKind::Memcpy, [&](NodeObj& n) {
    const CopyParams& c = n.copy;
    *p = CUDA_MEMCPY3D{};
    p->srcMemoryType = CU_MEMORYTYPE_UNIFIED;
    p->srcDevice = reinterpret_cast<CUdeviceptr>(c.src);
    p->srcPitch = c.sp.pitch;
    p->srcHeight = c.sp.pitch != 0 && c.extent.depth > 1 ? c.sp.slice / c.sp.pitch : c.extent.height;
    p->dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    p->dstDevice = reinterpret_cast<CUdeviceptr>(c.dst);
    p->dstPitch = c.dp.pitch;
    p->dstHeight = c.dp.pitch != 0 && c.extent.depth > 1 ? c.dp.slice / c.dp.pitch : c.extent.height;
    p->WidthInBytes = c.extent.width;
    p->Height = c.extent.height;
    p->Depth = c.extent.depth;
    return cudaSuccess;
  }));
}
FUNNEL_DRIVER_API CUresult cuGraphAddMemsetNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                                const CUDA_MEMSET_NODE_PARAMS* p, CUcontext) {
  return add_made(out, g, deps, n, [&](auto& node) { return memset_node(p, node); });
}
FUNNEL_DRIVER_API CUresult cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p) {
  return set_made(node, [&](auto& made) { return memset_node(p, made); });
}
FUNNEL_DRIVER_API CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return to_cu(funnel::client::with_node(rt(node), NodeKind::Memset, [&](NodeObj& n) {
    *p = CUDA_MEMSET_NODE_PARAMS{};
    p->dst = reinterpret_cast<CUdeviceptr>(n.memset.dst);
    p->pitch = n.memset.pitch;
    p->value = n.memset.value;
    p->elementSize = n.memset.elementSize;
    p->width = n.memset.width;
    p->height = n.memset.height;
    return cudaSuccess;
  }));
}
static CUresult host_node(const CUDA_HOST_NODE_PARAMS* p, std::unique_ptr<NodeObj>& out) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  out = std::make_unique<NodeObj>();
  return to_cu(funnel::client::make_host_node(*out, reinterpret_cast<cudaHostFn_t>(p->fn), p->userData,
                                               funnel::client::current_device()));
}
FUNNEL_DRIVER_API CUresult cuGraphAddHostNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                              const CUDA_HOST_NODE_PARAMS* p) {
  return add_made(out, g, deps, n, [&](auto& node) { return host_node(p, node); });
}
FUNNEL_DRIVER_API CUresult cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return to_cu(funnel::client::with_node(rt(node), NodeKind::Host, [&](NodeObj& h) {
    *p = CUDA_HOST_NODE_PARAMS{reinterpret_cast<CUhostFn>(h.host_fn), h.host_data};
    return cudaSuccess;
  }));
}
FUNNEL_DRIVER_API CUresult cuGraphHostNodeSetParams(CUgraphNode node, const CUDA_HOST_NODE_PARAMS* p) {
  return set_made(node, [&](auto& made) { return host_node(p, made); });
}
FUNNEL_DRIVER_API CUresult cuGraphExecHostNodeSetParams(CUgraphExec x, CUgraphNode node, const CUDA_HOST_NODE_PARAMS* p) {
  return exec_set_made(x, node, [&](auto& made) { return host_node(p, made); });
}
static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS) == sizeof(cudaMemAllocNodeParams) &&
              sizeof(CUmemPoolProps) == sizeof(cudaMemPoolProps));
FUNNEL_DRIVER_API CUresult cuGraphAddMemAllocNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                                  CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  return to_cu(funnel::client::graph_add_mem_alloc(rt(out), rt(g), rt(deps), n,
                                                   reinterpret_cast<cudaMemAllocNodeParams*>(p)));
}
FUNNEL_DRIVER_API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return to_cu(funnel::client::with_node(rt(node), NodeKind::MemAlloc, [&](NodeObj& a) {
    std::memcpy(p, &a.alloc, sizeof *p);
    return cudaSuccess;
  }));
}
FUNNEL_DRIVER_API CUresult cuGraphAddMemFreeNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                                 CUdeviceptr ptr) {
  return to_cu(funnel::client::graph_add_mem_free(rt(out), rt(g), rt(deps), n, reinterpret_cast<void*>(ptr)));
}
FUNNEL_DRIVER_API CUresult cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* ptr) {
  if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return to_cu(funnel::client::with_node(rt(node), NodeKind::MemFree, [&](NodeObj& f) {
    *ptr = reinterpret_cast<CUdeviceptr>(f.free_ptr);
    return cudaSuccess;
  }));
}
FUNNEL_DRIVER_API CUresult cuGraphAddChildGraphNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                                    CUgraph child) {
  return to_cu(funnel::client::graph_add_child(rt(out), rt(g), rt(deps), n, rt(child)));
}
FUNNEL_DRIVER_API CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* g) {
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return to_cu(funnel::client::with_node(rt(node), NodeKind::Child, [&](NodeObj& c) {
    *g = reinterpret_cast<CUgraph>(c.child.get());
    return cudaSuccess;
  }));
}
FUNNEL_DRIVER_API CUresult cuGraphAddEventRecordNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                                     CUevent e) {
  return to_cu(funnel::client::graph_add_event(rt(out), rt(g), rt(deps), n, rt(e), true));
}
FUNNEL_DRIVER_API CUresult cuGraphAddEventWaitNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                                   CUevent e) {
  return to_cu(funnel::client::graph_add_event(rt(out), rt(g), rt(deps), n, rt(e), false));
}
static CUresult event_of(CUgraphNode node, CUevent* e, NodeKind kind) {
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return to_cu(funnel::client::with_node(rt(node), kind, [&](NodeObj& n) {
    *e = reinterpret_cast<CUevent>(n.event);
    return cudaSuccess;
  }));
}
FUNNEL_DRIVER_API CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent* e) {
  return event_of(node, e, NodeKind::EventRecord);
}
FUNNEL_DRIVER_API CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode node, CUevent* e) {
  return event_of(node, e, NodeKind::EventWait);
}
FUNNEL_DRIVER_API CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode node, CUevent e) {
  return to_cu(funnel::client::node_set_event(rt(node), rt(e), true));
}
FUNNEL_DRIVER_API CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode node, CUevent e) {
  return to_cu(funnel::client::node_set_event(rt(node), rt(e), false));
}
FUNNEL_DRIVER_API CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* t) {
  return to_cu(funnel::client::node_type(rt(node), reinterpret_cast<cudaGraphNodeType*>(t)));
}
FUNNEL_DRIVER_API CUresult cuGraphGetNodes(CUgraph g, CUgraphNode* nodes, size_t* n) {
  return to_cu(funnel::client::graph_nodes(rt(g), rt(nodes), n, false));
}
FUNNEL_DRIVER_API CUresult cuGraphGetRootNodes(CUgraph g, CUgraphNode* nodes, size_t* n) {
  return to_cu(funnel::client::graph_nodes(rt(g), rt(nodes), n, true));
}
FUNNEL_DRIVER_API CUresult cuGraphGetEdges_v2(CUgraph g, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* data,
                                              size_t* n) {
  const CUresult r = to_cu(funnel::client::graph_edge_list(rt(g), rt(from), rt(to), n));
  if (r == CUDA_SUCCESS && from != nullptr) zero_edges(data, *n);
  return r;
}
FUNNEL_DRIVER_API CUresult cuGraphGetEdges(CUgraph g, CUgraphNode* from, CUgraphNode* to, size_t* n) {
  return to_cu(funnel::client::graph_edge_list(rt(g), rt(from), rt(to), n));
}
FUNNEL_DRIVER_API CUresult cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData* data,
                                                         size_t* n) {
  const CUresult r = to_cu(funnel::client::node_links(rt(node), rt(deps), n, false));
  if (r == CUDA_SUCCESS && deps != nullptr) zero_edges(data, *n);
  return r;
}
FUNNEL_DRIVER_API CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* deps, size_t* n) {
  return to_cu(funnel::client::node_links(rt(node), rt(deps), n, false));
}
FUNNEL_DRIVER_API CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode node, CUgraphNode* outs, CUgraphEdgeData* data,
                                                           size_t* n) {
  const CUresult r = to_cu(funnel::client::node_links(rt(node), rt(outs), n, true));
  if (r == CUDA_SUCCESS && outs != nullptr) zero_edges(data, *n);
  return r;
}
FUNNEL_DRIVER_API CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode* outs, size_t* n) {
  return to_cu(funnel::client::node_links(rt(node), rt(outs), n, true));
}
FUNNEL_DRIVER_API CUresult cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                                     const CUgraphEdgeData* data, size_t n) {
  if (!default_edges(data, n)) return CUDA_ERROR_NOT_SUPPORTED;
  return to_cu(funnel::client::graph_edges(rt(g), rt(from), rt(to), n, true));
}
FUNNEL_DRIVER_API CUresult cuGraphAddDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to, size_t n) {
  return to_cu(funnel::client::graph_edges(rt(g), rt(from), rt(to), n, true));
}
FUNNEL_DRIVER_API CUresult cuGraphRemoveDependencies_v2(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                                        const CUgraphEdgeData* data, size_t n) {
  if (!default_edges(data, n)) return CUDA_ERROR_NOT_SUPPORTED;
  return to_cu(funnel::client::graph_edges(rt(g), rt(from), rt(to), n, false));
}
FUNNEL_DRIVER_API CUresult cuGraphRemoveDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                                     size_t n) {
  return to_cu(funnel::client::graph_edges(rt(g), rt(from), rt(to), n, false));
}
FUNNEL_DRIVER_API CUresult cuGraphDestroyNode(CUgraphNode node) { return to_cu(funnel::client::node_destroy(rt(node))); }

// ---- executable graphs ------------------------------------------------------------------------

FUNNEL_DRIVER_API CUresult cuGraphInstantiateWithFlags(CUgraphExec* x, CUgraph g, unsigned long long flags) {
  return to_cu(funnel::client::instantiate(reinterpret_cast<cudaGraphExec_t*>(x), rt(g), flags));
}
FUNNEL_DRIVER_API CUresult cuGraphInstantiateWithParams(CUgraphExec* x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return instantiate_with_params(x, g, p);
}
FUNNEL_DRIVER_API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* x, CUgraph g,
                                                             CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return instantiate_with_params(x, g, p);
}
FUNNEL_DRIVER_API CUresult cuGraphExecGetFlags(CUgraphExec x, cuuint64_t* flags) {
  static_assert(sizeof(cuuint64_t) == sizeof(unsigned long long));
  return to_cu(funnel::client::exec_flags(rt(x), reinterpret_cast<unsigned long long*>(flags)));
}
FUNNEL_DRIVER_API CUresult cuGraphLaunch(CUgraphExec x, CUstream s) {
  return to_cu(funnel::client::exec_launch(rt(x), rt(s), false));
}
FUNNEL_DRIVER_API CUresult cuGraphLaunch_ptsz(CUgraphExec x, CUstream s) {
  return to_cu(funnel::client::exec_launch(rt(x), rt(s), true));
}
FUNNEL_DRIVER_API CUresult cuGraphUpload(CUgraphExec x, CUstream s) {
  return to_cu(funnel::client::exec_upload(rt(x), rt(s), false));
}
FUNNEL_DRIVER_API CUresult cuGraphUpload_ptsz(CUgraphExec x, CUstream s) {
  return to_cu(funnel::client::exec_upload(rt(x), rt(s), true));
}
FUNNEL_DRIVER_API CUresult cuGraphExecDestroy(CUgraphExec x) { return to_cu(funnel::client::exec_destroy(rt(x))); }
FUNNEL_DRIVER_API CUresult cuGraphExecUpdate_v2(CUgraphExec x, CUgraph g, CUgraphExecUpdateResultInfo* info) {
  cudaGraphExecUpdateResult result = cudaGraphExecUpdateSuccess;
  cudaGraphNode_t bad = nullptr, from = nullptr;
  const CUresult r = to_cu(funnel::client::exec_update(rt(x), rt(g), &result, &bad, &from));
  if (info != nullptr)
    *info = CUgraphExecUpdateResultInfo{static_cast<CUgraphExecUpdateResult>(result), reinterpret_cast<CUgraphNode>(bad),
                                        reinterpret_cast<CUgraphNode>(from)};
  return r;
}
FUNNEL_DRIVER_API CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec x, CUgraphNode node,
                                                             const CUDA_KERNEL_NODE_PARAMS* p) {
  return exec_set_made(x, node, [&](auto& made) { return funnel::driver::kernel_node(p, made); });
}
FUNNEL_DRIVER_API CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec x, CUgraphNode node, const CUDA_MEMCPY3D* p,
                                                          CUcontext) {
  return exec_set_made(x, node, [&](auto& made) { return copy_node(p, made); });
}
FUNNEL_DRIVER_API CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec x, CUgraphNode node,
                                                          const CUDA_MEMSET_NODE_PARAMS* p, CUcontext) {
  return exec_set_made(x, node, [&](auto& made) { return memset_node(p, made); });
}
FUNNEL_DRIVER_API CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec x, CUgraphNode node, CUgraph g) {
  return to_cu(funnel::client::exec_set_child(rt(x), rt(node), rt(g)));
}
FUNNEL_DRIVER_API CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec x, CUgraphNode node, CUevent e) {
  return to_cu(funnel::client::exec_set_event(rt(x), rt(node), rt(e), true));
}
FUNNEL_DRIVER_API CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec x, CUgraphNode node, CUevent e) {
  return to_cu(funnel::client::exec_set_event(rt(x), rt(node), rt(e), false));
}

// ---- conditional nodes and the generic node calls ---------------------------------------------

FUNNEL_DRIVER_API CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle* out, CUgraph g, CUcontext,
                                                          unsigned default_value, unsigned flags) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cudaGraphConditionalHandle h = 0;
  const CUresult r = to_cu(funnel::client::conditional_handle_create(&h, rt(g), default_value, flags));
  if (r == CUDA_SUCCESS) *out = h;
  return r;
}

namespace {

static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS_v2) == sizeof(cudaMemAllocNodeParams));
static_assert(static_cast<int>(CU_GRAPH_NODE_TYPE_CONDITIONAL) == cudaGraphNodeTypeConditional &&
              static_cast<int>(CU_GRAPH_NODE_TYPE_MEM_ALLOC) == cudaGraphNodeTypeMemAlloc &&
              static_cast<int>(CU_GRAPH_NODE_TYPE_MEM_FREE) == cudaGraphNodeTypeMemFree &&
              static_cast<int>(CU_GRAPH_NODE_TYPE_HOST) == cudaGraphNodeTypeHost);

// The node a CUgraphNodeParams of a kind with parameters to make (kernel, memcpy, memset, host)
// describes; `call` names the generic call for what it refuses.
CUresult node_of(const CUgraphNodeParams* p, std::unique_ptr<NodeObj>& out, const char* call) {
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const CUDA_KERNEL_NODE_PARAMS_v3& k = p->kernel;
      CUDA_KERNEL_NODE_PARAMS v2{};
      v2.func = k.func;
      v2.gridDimX = k.gridDimX, v2.gridDimY = k.gridDimY, v2.gridDimZ = k.gridDimZ;
      v2.blockDimX = k.blockDimX, v2.blockDimY = k.blockDimY, v2.blockDimZ = k.blockDimZ;
      v2.sharedMemBytes = k.sharedMemBytes;
      v2.kernelParams = k.kernelParams;
      v2.extra = k.extra;
      v2.kern = k.kern;
      v2.ctx = k.ctx;
      return funnel::driver::kernel_node(&v2, out);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (p->memcpy.flags != 0) return CUDA_ERROR_INVALID_VALUE;
      return copy_node(&p->memcpy.copyParams, out);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS_v2& m = p->memset;
      const CUDA_MEMSET_NODE_PARAMS v1{m.dst, m.pitch, m.value, m.elementSize, m.width, m.height};
      return memset_node(&v1, out);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
      const CUDA_HOST_NODE_PARAMS v1{p->host.fn, p->host.userData};
      return host_node(&v1, out);
    }
    default:
      funnel::client::report_unsupported(fmt::format("{} of a node of type {}", call, static_cast<int>(p->type)).c_str());
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

CUresult add_node(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData* data, size_t n,
                  CUgraphNodeParams* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!default_edges(data, n)) return CUDA_ERROR_NOT_SUPPORTED;
  namespace c = funnel::client;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return to_cu(c::graph_add(rt(out), rt(g), rt(deps), n, std::make_unique<NodeObj>()));
    case CU_GRAPH_NODE_TYPE_GRAPH:
      if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE) {
        c::report_unsupported("cuGraphAddNode of a child graph moved into its parent (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)");
        return CUDA_ERROR_NOT_SUPPORTED;
      }
      return to_cu(c::graph_add_child(rt(out), rt(g), rt(deps), n, rt(p->graph.graph)));
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return to_cu(c::graph_add_event(rt(out), rt(g), rt(deps), n, rt(p->eventRecord.event), true));
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return to_cu(c::graph_add_event(rt(out), rt(g), rt(deps), n, rt(p->eventWait.event), false));
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      return to_cu(c::graph_add_mem_alloc(rt(out), rt(g), rt(deps), n, reinterpret_cast<cudaMemAllocNodeParams*>(&p->alloc)));
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return to_cu(c::graph_add_mem_free(rt(out), rt(g), rt(deps), n, reinterpret_cast<void*>(p->free.dptr)));
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
      cudaConditionalNodeParams cp{};
      cp.handle = p->conditional.handle;
      cp.type = static_cast<cudaGraphConditionalNodeType>(p->conditional.type);
      cp.size = p->conditional.size;
      const CUresult r = to_cu(c::graph_add_conditional(rt(out), rt(g), rt(deps), n, &cp));
      if (r == CUDA_SUCCESS) p->conditional.phGraph_out = reinterpret_cast<CUgraph*>(cp.phGraph_out);
      return r;
    }
    default:
      return add_made(out, g, deps, n, [&](auto& node) { return node_of(p, node, "cuGraphAddNode"); });
  }
}

}  // namespace

FUNNEL_DRIVER_API CUresult cuGraphAddNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                             const CUgraphEdgeData* data, size_t n, CUgraphNodeParams* p) {
  return add_node(out, g, deps, data, n, p);
}
// The first cuGraphAddNode took no edge data.
FUNNEL_DRIVER_API CUresult cuGraphAddNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                          CUgraphNodeParams* p) {
  return add_node(out, g, deps, nullptr, n, p);
}
FUNNEL_DRIVER_API CUresult cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (p->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD || p->type == CU_GRAPH_NODE_TYPE_WAIT_EVENT)
    return to_cu(funnel::client::node_set_event(rt(node), rt(p->eventRecord.event),
                                                p->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD));
  return set_made(node, [&](auto& made) { return node_of(p, made, "cuGraphNodeSetParams"); });
}
FUNNEL_DRIVER_API CUresult cuGraphExecNodeSetParams(CUgraphExec x, CUgraphNode node, CUgraphNodeParams* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (p->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD || p->type == CU_GRAPH_NODE_TYPE_WAIT_EVENT)
    return to_cu(funnel::client::exec_set_event(rt(x), rt(node), rt(p->eventRecord.event),
                                                p->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD));
  if (p->type == CU_GRAPH_NODE_TYPE_GRAPH)
    return to_cu(funnel::client::exec_set_child(rt(x), rt(node), rt(p->graph.graph)));
  return exec_set_made(x, node, [&](auto& made) { return node_of(p, made, "cuGraphExecNodeSetParams"); });
}
