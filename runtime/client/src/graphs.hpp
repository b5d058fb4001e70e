// CUDA graphs and stream capture of both fronts (doc/design/graphs.md).  A graph lives in the
// client: nodes (kernel, copy, memset, event record and wait, empty, child graph) with their
// dependencies, built by the graph calls or recorded by a stream capture.  Instantiation sends
// the graph, child graphs flattened, node by node to the server (GraphNode), which builds a real
// CUDA graph of its context and instantiates it (GraphInstantiate); a launch is one GraphLaunch
// record on the stream.  A capture is recorded here, not by the driver: work sent to a capturing
// stream becomes nodes, so funnel's own work on a stream is never captured and nothing
// synchronises a capturing stream behind the program's back.
//
// Handles: cudaGraph_t/CUgraph is a GraphObj*, cudaGraphNode_t/CUgraphNode a NodeObj*,
// cudaGraphExec_t/CUgraphExec an ExecObj*; each is checked against the registry (an unknown
// handle is cudaErrorInvalidValue, as CUDA answers).  One lock guards every graph.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "api.hpp"
#include "copy_engine.hpp"
#include "launch.hpp"

namespace funnel::client {

struct GraphObj;

enum class NodeKind { Empty, Kernel, Memcpy, Memset, EventRecord, EventWait, Child, Host, MemAlloc, MemFree, Conditional };

// A graph tree of the server's (graphs.cpp; doc/design/graphs.md, "Conditional nodes").
struct GraphTree;

// A copy as the program described it (for a node's parameters), and its command.
struct CopyParams {
  void* dst = nullptr;
  const void* src = nullptr;
  Pitches dp{0, 0}, sp{0, 0};
  Extent3 extent{0, 0, 0};
  cudaMemcpyKind kind = cudaMemcpyDefault;
};

struct NodeObj {
  GraphObj* graph = nullptr;
  NodeKind kind = NodeKind::Empty;
  std::vector<NodeObj*> deps;  // the nodes it depends on
  std::vector<NodeObj*> outs;  // the nodes that depend on it
  int device = 0;
  // Kernel: the handle the program gave (host stub or CUfunction), its shape and its packed
  // parameters; `args` points into `params` (cudaGraphKernelNodeGetParams' kernelParams).
  Kernel* kernel = nullptr;
  const void* func = nullptr;
  LaunchSpec launch{};
  ipc::LaunchCmd launch_cmd{};
  std::vector<std::byte> params;
  std::vector<void*> args;
  // Memcpy
  CopyParams copy{};
  ipc::CopyCmd copy_cmd{};
  // Memset (elementSize 1, 2 or 4)
  cudaMemsetParams memset{};
  ipc::MemsetCmd memset_cmd{};
  // EventRecord, EventWait
  cudaEvent_t event = nullptr;
  // MemAlloc (alloc.dptr: the memory, made with the node) and MemFree (the memory it names)
  cudaMemAllocNodeParams alloc{};
  void* free_ptr = nullptr;
  // Host: run by this process when a launch gets there (host_func.hpp)
  cudaHostFn_t host_fn = nullptr;
  void* host_data = nullptr;
  // Child: the node's own copy of the graph it was given
  std::unique_ptr<GraphObj> child;
  // Conditional: its index in the tree, handle, type and size; its bodies (graphs of the tree,
  // the node's) and their handles (phGraph_out points there)
  uint32_t cond = 0;
  cudaConditionalNodeParams conditional{};
  std::vector<std::unique_ptr<GraphObj>> bodies;
  std::vector<cudaGraph_t> body_handles;
};

// The memory of a graph's memory alloc nodes: device allocations made with the nodes, kept for
// the graph's launches (a free node frees nothing), freed when the graph, its clones and its
// executable graphs are all gone.
struct GraphMemory {
  std::vector<std::pair<void*, int>> allocations;  // pointer, device
  GraphMemory() = default;
  GraphMemory(const GraphMemory&) = delete;
  GraphMemory& operator=(const GraphMemory&) = delete;
  ~GraphMemory();
};

struct GraphObj {
  std::vector<std::unique_ptr<NodeObj>> nodes;
  std::shared_ptr<GraphMemory> memory;  // null until it has a memory alloc node
  // From its first conditional handle on (and for the bodies of conditional nodes): the server's
  // graph tree it is part `part` of.  Such a graph is not cloned nor made a child graph, and one
  // executable graph of it lives at a time, as CUDA has it.
  std::shared_ptr<GraphTree> tree;
  uint32_t part = 0;
};

// ---- building nodes (the node's fields filled and checked; the node not yet in a graph) ----
// A kernel node of `k` (current device `device`) with `args` as cudaLaunchKernel takes them.
cudaError_t make_kernel_node(NodeObj& n, Kernel& k, const void* func, const LaunchSpec& l, void** args, int device);
// A copy between device memory and pinned buffers (pageable memory: refused naming `call`).
cudaError_t make_copy_node(NodeObj& n, const CopyParams& c, const char* call);
// cudaMemsetParams: dst, pitch, value, elementSize (1, 2, 4), width (elements), height.
cudaError_t make_memset_node(NodeObj& n, const cudaMemsetParams& p);
// A host node of `fn(data)` (fn not null) on `device`.
cudaError_t make_host_node(NodeObj& n, cudaHostFn_t fn, void* data, int device);

// ---- graphs ----------------------------------------------------------------------------------
cudaError_t graph_create(cudaGraph_t* out, unsigned flags);
cudaError_t graph_destroy(cudaGraph_t g);
cudaError_t graph_clone(cudaGraph_t* out, cudaGraph_t g);
// Adds `n` (made by a make_*_node, or of kind Empty/EventRecord/EventWait/Child with its field
// set) to `g` after `deps`; *out is the node.
cudaError_t graph_add(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t count,
                      std::unique_ptr<NodeObj> n);
// A child graph node: a copy of `child`.
cudaError_t graph_add_child(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t count,
                            cudaGraph_t child);
cudaError_t graph_add_event(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t count,
                            cudaEvent_t e, bool record);
// cudaGraphAddMemAllocNode: the memory is made now (p->dptr), on p's device, the graph's until it
// goes; cudaGraphAddMemFreeNode of a graph's memory (a node that frees nothing: the memory stays
// for the next launch).
cudaError_t graph_add_mem_alloc(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t count,
                                cudaMemAllocNodeParams* p);
cudaError_t graph_add_mem_free(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t count,
                               void* ptr);
// cudaGraphConditionalHandleCreate: a handle of g's tree (made with the first handle).
cudaError_t conditional_handle_create(cudaGraphConditionalHandle* out, cudaGraph_t g, unsigned default_value,
                                      unsigned flags);
// A conditional node (p->handle of g's tree, p->type, p->size); p->phGraph_out: its bodies.
cudaError_t graph_add_conditional(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t count,
                                  cudaConditionalNodeParams* p);
cudaError_t graph_edges(cudaGraph_t g, const cudaGraphNode_t* from, const cudaGraphNode_t* to, size_t count, bool add);
// cudaGraphGetNodes / cudaGraphGetRootNodes: the nodes (all, or those without dependencies).
cudaError_t graph_nodes(cudaGraph_t g, cudaGraphNode_t* out, size_t* count, bool roots_only);
cudaError_t graph_edge_list(cudaGraph_t g, cudaGraphNode_t* from, cudaGraphNode_t* to, size_t* count);
cudaError_t node_destroy(cudaGraphNode_t n);
cudaError_t node_type(cudaGraphNode_t n, cudaGraphNodeType* type);
// A node's dependencies (`dependents` false) or dependent nodes.
cudaError_t node_links(cudaGraphNode_t n, cudaGraphNode_t* out, size_t* count, bool dependents);
cudaError_t node_find_in_clone(cudaGraphNode_t* out, cudaGraphNode_t original, cudaGraph_t clone);
// Runs f(node) under the graphs' lock for a node of the expected kind (cudaErrorInvalidValue
// otherwise): the get and set calls of every node kind.
cudaError_t with_node(cudaGraphNode_t n, NodeKind kind, const std::function<cudaError_t(NodeObj&)>& f);
// Replaces a node's parameters with those of `made` (a node built as for graph_add).
cudaError_t node_set(cudaGraphNode_t n, std::unique_ptr<NodeObj> made);
cudaError_t node_set_event(cudaGraphNode_t n, cudaEvent_t e, bool record);

// ---- executable graphs -------------------------------------------------------------------------
// Flags: cudaGraphInstantiateFlagAutoFreeOnLaunch and UseNodePriority are taken (nothing to do:
// funnel's graphs have no memory nodes), Upload uploads on `upload_stream`; DeviceLaunch is
// refused by name.
cudaError_t instantiate(cudaGraphExec_t* out, cudaGraph_t g, unsigned long long flags,
                        cudaStream_t upload_stream = nullptr);
cudaError_t exec_destroy(cudaGraphExec_t x);
cudaError_t exec_flags(cudaGraphExec_t x, unsigned long long* flags);
// cudaGraphLaunch: one GraphLaunch record; on a capturing stream a child graph node.
cudaError_t exec_launch(cudaGraphExec_t x, cudaStream_t s, bool ptds);
cudaError_t exec_upload(cudaGraphExec_t x, cudaStream_t s, bool ptds);
// cudaGraphExecUpdate: `g`'s parameters into x when it has x's shape (kinds and dependencies,
// node for node), else cudaErrorGraphExecUpdateFailure with the reason in *result / *error_node.
cudaError_t exec_update(cudaGraphExec_t x, cudaGraph_t g, cudaGraphExecUpdateResult* result,
                        cudaGraphNode_t* error_node, cudaGraphNode_t* error_from);
// cudaGraphExec*NodeSetParams: the exec's copy of `node` (a node of the graph it was made from)
// gets the parameters of `made` (same kind), then the exec is updated on the server.
cudaError_t exec_set_node(cudaGraphExec_t x, cudaGraphNode_t node, std::unique_ptr<NodeObj> made);
cudaError_t exec_set_event(cudaGraphExec_t x, cudaGraphNode_t node, cudaEvent_t e, bool record);
cudaError_t exec_set_child(cudaGraphExec_t x, cudaGraphNode_t node, cudaGraph_t child);

// ---- stream capture --------------------------------------------------------------------------
// cudaStreamBeginCapture (into a new graph) and cudaStreamBeginCaptureToGraph (into `into`,
// after `deps`).  The legacy stream cannot be captured (cudaErrorStreamCaptureUnsupported).
cudaError_t begin_capture(cudaStream_t s, bool ptds, cudaStreamCaptureMode mode, cudaGraph_t into,
                          const cudaGraphNode_t* deps, size_t count);
cudaError_t end_capture(cudaStream_t s, bool ptds, cudaGraph_t* out);
cudaError_t capture_status(cudaStream_t s, bool ptds, cudaStreamCaptureStatus* status) noexcept;
// cudaStreamGetCaptureInfo and the driver's: every output that is asked for; `deps` points into
// storage valid until the stream's next captured call.
cudaError_t capture_info(cudaStream_t s, bool ptds, cudaStreamCaptureStatus* status, unsigned long long* id,
                         cudaGraph_t* graph, const cudaGraphNode_t** deps, const void** edges,
                         size_t* count) noexcept;
// cudaStreamUpdateCaptureDependencies: flags cudaStreamAddCaptureDependencies or Set.
cudaError_t update_capture_deps(cudaStream_t s, bool ptds, const cudaGraphNode_t* deps, size_t count,
                                unsigned flags);
cudaError_t exchange_capture_mode(cudaStreamCaptureMode* mode);

// The hooks of the calls that queue work (StreamRef::capturing() true): each becomes a node.
cudaError_t capture_launch(const StreamRef& s, Kernel& k, const LaunchSpec& l, void** args);
cudaError_t capture_copy(const StreamRef& s, const CopyParams& c);
cudaError_t capture_memset(const StreamRef& s, const cudaMemsetParams& p);
// cudaMallocAsync / cudaFreeAsync on a capturing stream: memory alloc and free nodes.
cudaError_t capture_alloc(const StreamRef& s, void** ptr, size_t size);
cudaError_t capture_free(const StreamRef& s, void* ptr);
// cudaLaunchHostFunc on a capturing stream: a host node.
cudaError_t capture_host(const StreamRef& s, cudaHostFn_t fn, void* data);
// cudaEventRecord on a capturing stream: the event stands for the stream's place in the
// capture (cudaEventRecordExternal: an event record node too).
cudaError_t capture_record(const StreamRef& s, cudaEvent_t e, unsigned flags);
// cudaStreamWaitEvent of an event recorded in a capture: the stream joins the capture (or, in
// it already, depends on the event's place too).  `handled` false: not a capture's event and the
// stream is not capturing (the ordinary wait applies).
cudaError_t capture_wait(const StreamRef& s, cudaEvent_t e, unsigned flags, bool& handled);
// A call that cannot be captured on a capturing stream (a synchronisation, a query; `what`
// names it for anything funnel does not capture yet): the capture is invalidated, as CUDA does.
cudaError_t capture_refuse(const StreamRef& s, const char* what = nullptr);
// An event that is recorded anew outside a capture, or destroyed, no longer stands for a place
// in a capture.
void forget_event_mark(cudaEvent_t e) noexcept;

}  // namespace funnel::client
