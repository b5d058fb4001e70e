// Graphs, executable graphs and stream capture of both fronts: graphs.hpp.
#include "graphs.hpp"

#include <algorithm>
#include <cstring>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "device_memory.hpp"
#include "events.hpp"
#include "host_func.hpp"

namespace funnel::client {

// A graph tree of the server's: made with a graph's first conditional handle, gone (GraphTree
// Destroy) with the last graph of it (the graph, its bodies and executable graphs' copies).
struct GraphTree {
  uint64_t id = 0;
  int device = 0;
  GraphTree() = default;
  GraphTree(const GraphTree&) = delete;
  GraphTree& operator=(const GraphTree&) = delete;
  ~GraphTree() {
    ipc::GraphTreeCmd c{};
    c.tree = id;
    c.op = static_cast<uint32_t>(ipc::GraphTreeOp::Destroy);
    (void)Runtime::get().post(Opcode::GraphTree, device, 0, &c, sizeof c);
  }
};

namespace {

uint64_t tree_id(const GraphTree& t) { return t.id; }

// A GraphTree command of tree t; `reply` gets the values.
cudaError_t tree_call(const GraphTree& t, ipc::GraphTreeOp op, ipc::GraphTreeCmd c, Reply* reply = nullptr) {
  c.tree = t.id;
  c.op = static_cast<uint32_t>(op);
  return to_cuda(Runtime::get().call(Opcode::GraphTree, t.device, 0, &c, sizeof c, reply));
}

// The words of one host node of an executable graph (host_func.hpp's key).
struct HostSlot {
  uint64_t key;
  uint32_t reached;
  uint32_t done;
};

struct ExecObj {
  std::vector<HostSlot> hosts;  // its host nodes, in the order they are sent
  uint64_t id = 0;
  int device = 0;
  unsigned long long flags = 0;
  std::unique_ptr<GraphObj> graph;                    // its own copy of the graph
  std::unordered_map<const NodeObj*, NodeObj*> copy;  // the source graph's nodes -> the copy's
  std::vector<cudaEvent_t> records;                   // the events its EventRecord nodes record
};

struct Capture {
  uint64_t id = 0;
  GraphObj* graph = nullptr;
  bool own_graph = true;  // made by the capture (destroyed when it fails)
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  cudaError_t invalid = cudaSuccess;  // set: the capture was invalidated
  uint64_t origin = 0;                // the stream that began it
  std::map<uint64_t, std::vector<NodeObj*>> tips;  // per stream in it: what its next node depends on
  std::vector<cudaGraphNode_t> info;  // capture_info's answer
};

// Where an event recorded in a capture stands.
struct EventMark {
  std::weak_ptr<Capture> capture;
  std::vector<NodeObj*> deps;
};

struct Registry {
  std::mutex mu;
  std::unordered_map<GraphObj*, std::unique_ptr<GraphObj>> owned;  // the program's graphs
  std::unordered_set<GraphObj*> graphs;  // every graph a handle may name (child graphs too)
  std::unordered_set<NodeObj*> nodes;
  std::unordered_map<ExecObj*, std::unique_ptr<ExecObj>> execs;
  std::unordered_map<uint64_t, std::shared_ptr<Capture>> captures;  // by stream id
  std::unordered_map<cudaEvent_t, EventMark> marks;
  uint64_t next_capture = 1;
};

Registry& reg() {
  static Registry* r = new Registry;  // never destroyed: exit handlers may still call
  return *r;
}

std::atomic<size_t> g_capturing{0};  // streams in a capture (capture_active's fast path)
std::atomic<uint64_t> g_next_build{1}, g_next_exec{1}, g_next_tree{1};
thread_local cudaStreamCaptureMode t_capture_mode = cudaStreamCaptureModeGlobal;

cudaGraphNodeType type_of(NodeKind k) {
  switch (k) {
    case NodeKind::Kernel:
      return cudaGraphNodeTypeKernel;
    case NodeKind::Memcpy:
      return cudaGraphNodeTypeMemcpy;
    case NodeKind::Memset:
      return cudaGraphNodeTypeMemset;
    case NodeKind::EventRecord:
      return cudaGraphNodeTypeEventRecord;
    case NodeKind::EventWait:
      return cudaGraphNodeTypeWaitEvent;
    case NodeKind::Child:
      return cudaGraphNodeTypeGraph;
    case NodeKind::Host:
      return cudaGraphNodeTypeHost;
    case NodeKind::MemAlloc:
      return cudaGraphNodeTypeMemAlloc;
    case NodeKind::MemFree:
      return cudaGraphNodeTypeMemFree;
    case NodeKind::Conditional:
      return cudaGraphNodeTypeConditional;
    case NodeKind::Empty:
      break;
  }
  return cudaGraphNodeTypeEmpty;
}

// ---- the registry (r.mu held) ---------------------------------------------------------------

void register_graph(Registry& r, GraphObj& g) {
  r.graphs.insert(&g);
  for (auto& n : g.nodes) {
    r.nodes.insert(n.get());
    if (n->child) register_graph(r, *n->child);
    for (auto& b : n->bodies) register_graph(r, *b);
  }
}

void unregister_graph(Registry& r, GraphObj& g) {
  r.graphs.erase(&g);
  for (auto& n : g.nodes) {
    r.nodes.erase(n.get());
    if (n->child) unregister_graph(r, *n->child);
    for (auto& b : n->bodies) unregister_graph(r, *b);
  }
}

GraphObj* find_graph(Registry& r, cudaGraph_t h) {
  auto* g = reinterpret_cast<GraphObj*>(h);
  return r.graphs.contains(g) ? g : nullptr;
}
NodeObj* find_node(Registry& r, cudaGraphNode_t h) {
  auto* n = reinterpret_cast<NodeObj*>(h);
  return r.nodes.contains(n) ? n : nullptr;
}
ExecObj* find_exec(Registry& r, cudaGraphExec_t h) {
  auto it = r.execs.find(reinterpret_cast<ExecObj*>(h));
  return it == r.execs.end() ? nullptr : it->second.get();
}

// A copy of a graph, nodes and links (`map`: each node to its copy, when given).
std::unique_ptr<GraphObj> clone_graph(const GraphObj& g, std::unordered_map<const NodeObj*, NodeObj*>* map);

// The kernel parameters' pointers into a node's own parameter buffer.
void point_args(NodeObj& n) {
  n.args.clear();
  if (n.kernel == nullptr) return;
  for (uint64_t p : n.kernel->layout) n.args.push_back(n.params.data() + ipc::param_offset(p));
}

// The parameters of `from` (a node of the same kind) into `to`, its links and child graph kept;
// the kernel arguments point into `to`'s own buffer.
void copy_params(NodeObj& to, const NodeObj& from) {
  to.device = from.device;
  to.kernel = from.kernel;
  to.func = from.func;
  to.launch = from.launch;
  to.launch_cmd = from.launch_cmd;
  to.params = from.params;
  to.copy = from.copy;
  to.copy_cmd = from.copy_cmd;
  to.memset = from.memset;
  to.memset_cmd = from.memset_cmd;
  to.event = from.event;
  to.host_fn = from.host_fn;
  to.host_data = from.host_data;
  to.alloc = from.alloc;
  to.free_ptr = from.free_ptr;
  to.cond = from.cond;
  to.conditional = from.conditional;
  point_args(to);
}

// A copy of a node's parameters (not its links); a child graph is copied whole.  `map`: the
// conditional bodies' nodes to their copies, when given (the exec set calls name them).
std::unique_ptr<NodeObj> clone_node(const NodeObj& n, std::unordered_map<const NodeObj*, NodeObj*>* map = nullptr) {
  auto c = std::make_unique<NodeObj>();
  c->kind = n.kind;
  copy_params(*c, n);
  if (n.child) c->child = clone_graph(*n.child, nullptr);
  for (const auto& b : n.bodies) {  // an executable graph's copy: the same parts of the same tree
    c->bodies.push_back(clone_graph(*b, map));
    c->body_handles.push_back(reinterpret_cast<cudaGraph_t>(c->bodies.back().get()));
  }
  c->conditional.phGraph_out = c->body_handles.empty() ? nullptr : c->body_handles.data();
  return c;
}


std::unique_ptr<GraphObj> clone_graph(const GraphObj& g, std::unordered_map<const NodeObj*, NodeObj*>* map) {
  auto out = std::make_unique<GraphObj>();
  out->memory = g.memory;  // a clone (and an executable graph) uses the same memory
  out->tree = g.tree;
  out->part = g.part;
  std::unordered_map<const NodeObj*, NodeObj*> local;
  auto& m = map != nullptr ? *map : local;
  for (const auto& n : g.nodes) {
    auto c = clone_node(*n, map);
    c->graph = out.get();
    m[n.get()] = c.get();
    out->nodes.push_back(std::move(c));
  }
  for (const auto& n : g.nodes) {
    NodeObj* c = m[n.get()];
    for (NodeObj* d : n->deps) c->deps.push_back(m[d]);
    for (NodeObj* o : n->outs) c->outs.push_back(m[o]);
  }
  return out;
}

void link(NodeObj* from, NodeObj* to) {
  if (std::find(to->deps.begin(), to->deps.end(), from) != to->deps.end()) return;
  to->deps.push_back(from);
  from->outs.push_back(to);
}

// Whether `target` is `from` or reachable from it by dependencies (from depends on it).
bool depends_on(const NodeObj* from, const NodeObj* target) {
  std::vector<const NodeObj*> stack{from};
  std::unordered_set<const NodeObj*> seen;
  while (!stack.empty()) {
    const NodeObj* n = stack.back();
    stack.pop_back();
    if (n == target) return true;
    if (!seen.insert(n).second) continue;
    for (const NodeObj* d : n->deps) stack.push_back(d);
  }
  return false;
}

// Adds node `n` to graph `g` after `deps` (each a node of g).  r.mu held.
cudaError_t add_locked(Registry& r, GraphObj& g, std::span<NodeObj* const> deps, std::unique_ptr<NodeObj> n,
                       NodeObj*& out) {
  for (NodeObj* d : deps)
    if (d == nullptr || d->graph != &g) return cudaErrorInvalidValue;
  for (size_t i = 0; i < deps.size(); ++i)
    for (size_t j = i + 1; j < deps.size(); ++j)
      if (deps[i] == deps[j]) return cudaErrorInvalidValue;
  n->graph = &g;
  NodeObj* p = n.get();
  for (NodeObj* d : deps) link(d, p);
  if (p->child) register_graph(r, *p->child);
  r.nodes.insert(p);
  g.nodes.push_back(std::move(n));
  out = p;
  return cudaSuccess;
}

cudaError_t deps_of(Registry& r, const cudaGraphNode_t* deps, size_t count, std::vector<NodeObj*>& out) {
  if (count != 0 && deps == nullptr) return cudaErrorInvalidValue;
  for (size_t i = 0; i < count; ++i) {
    NodeObj* n = find_node(r, deps[i]);
    if (n == nullptr) return cudaErrorInvalidValue;
    out.push_back(n);
  }
  return cudaSuccess;
}

// ---- flattening and sending ----------------------------------------------------------------

// A graph as the server gets it: leaf nodes (no child graph) in an order where each follows
// what it depends on, child graphs inlined between their node's dependencies and dependents.
struct Flat {
  struct Node {
    const NodeObj* node;  // nullptr: an empty join node of a child graph
    std::vector<uint32_t> deps;
    uint32_t part = 0;  // the part of the graph's tree it goes into
  };
  std::vector<Node> nodes;
  std::vector<cudaEvent_t> records;
  std::vector<const NodeObj*> hosts;  // the host nodes, in order
};

// The nodes of g in dependency order (Kahn); false for a cycle.
bool ordered(const GraphObj& g, std::vector<const NodeObj*>& out) {
  std::unordered_map<const NodeObj*, size_t> waiting;
  std::vector<const NodeObj*> ready;
  for (const auto& n : g.nodes) {
    waiting[n.get()] = n->deps.size();
    if (n->deps.empty()) ready.push_back(n.get());
  }
  // Stable: the program's order among nodes that are ready together.
  std::reverse(ready.begin(), ready.end());
  while (!ready.empty()) {
    const NodeObj* n = ready.back();
    ready.pop_back();
    out.push_back(n);
    for (const NodeObj* o : n->outs)
      if (--waiting[o] == 0) ready.insert(ready.begin(), o);
  }
  return out.size() == g.nodes.size();
}

// A body of a conditional node holds kernels, copies, memsets, empty nodes, child graphs and
// conditional nodes only (CUDA's rule).
bool allowed_in_body(NodeKind k) {
  return k == NodeKind::Kernel || k == NodeKind::Memcpy || k == NodeKind::Memset || k == NodeKind::Empty ||
         k == NodeKind::Child || k == NodeKind::Conditional;
}

// Flattens g (nodes of tree part `part`) into f after `entry`; `exits`: the flat indices its
// ends complete at.  A conditional node's bodies follow it, each flattened into its own part.
cudaError_t flatten(const GraphObj& g, const std::vector<uint32_t>& entry, Flat& f, std::vector<uint32_t>& exits,
                    int depth, uint32_t part) {
  if (depth > 16) return cudaErrorInvalidValue;
  std::vector<const NodeObj*> order;
  if (!ordered(g, order)) return cudaErrorInvalidValue;
  std::unordered_map<const NodeObj*, std::vector<uint32_t>> done;  // a node's completion: flat indices
  for (const NodeObj* n : order) {
    std::vector<uint32_t> deps;
    if (n->deps.empty()) deps = entry;
    for (const NodeObj* d : n->deps)
      for (uint32_t i : done[d])
        if (std::find(deps.begin(), deps.end(), i) == deps.end()) deps.push_back(i);
    if (deps.size() > ipc::kMaxGraphDeps) {
      report_unsupported("a graph node with more than 1024 dependencies");
      return cudaErrorNotSupported;
    }
    if (part != 0 && !allowed_in_body(n->kind)) return cudaErrorInvalidValue;
    if (n->kind == NodeKind::Child) {
      std::vector<uint32_t> inner;
      if (cudaError_t e = flatten(*n->child, deps, f, inner, depth + 1, part); e != cudaSuccess) return e;
      // One empty node joins the child graph's ends (or stands for an empty child graph).
      f.nodes.push_back({nullptr, inner.empty() ? deps : inner, part});
    } else if (n->kind == NodeKind::Conditional) {
      f.nodes.push_back({n, std::move(deps), part});
      const uint32_t self = static_cast<uint32_t>(f.nodes.size() - 1);
      for (const auto& b : n->bodies) {
        std::vector<uint32_t> ends;
        if (cudaError_t e = flatten(*b, {}, f, ends, depth + 1, b->part); e != cudaSuccess) return e;
      }
      done[n] = {self};
      continue;
    } else {
      f.nodes.push_back({n, std::move(deps), part});
      if (n->kind == NodeKind::EventRecord) f.records.push_back(n->event);
      if (n->kind == NodeKind::Host) f.hosts.push_back(n);
    }
    if (f.nodes.size() > ipc::kMaxGraphNodes) {
      report_unsupported("a graph of more than 65536 nodes");
      return cudaErrorNotSupported;
    }
    done[n] = {static_cast<uint32_t>(f.nodes.size() - 1)};
  }
  for (const auto& n : g.nodes)
    if (n->outs.empty()) exits.insert(exits.end(), done[n.get()].begin(), done[n.get()].end());
  return cudaSuccess;
}

// The device a graph runs on: its first kernel's, copy's or memset's, else the current device;
// a graph of nodes of several devices is refused by name.
cudaError_t graph_device(const Flat& f, int& device) {
  bool found = false;
  for (const auto& fn : f.nodes) {
    const NodeObj* n = fn.node;
    if (n == nullptr || n->kind == NodeKind::Empty) continue;
    if (found && n->device != device) {
      report_unsupported("a graph with work on several devices");
      return cudaErrorNotSupported;
    }
    device = n->device;
    found = true;
  }
  if (!found) device = current_device();
  return cudaSuccess;
}

// Sends f as build `build` (GraphNode records); `hosts`: the words of f's host nodes, in order.
cudaError_t send_build(uint64_t build, const Flat& f, int device, const std::vector<HostSlot>& hosts) {
  size_t next_host = 0;
  Runtime& rt = Runtime::get();
  std::vector<std::byte> trailing;
  for (size_t i = 0; i < f.nodes.size(); ++i) {
    const Flat::Node& fn = f.nodes[i];
    ipc::GraphNodeCmd c{};
    c.graph = build;
    c.index = static_cast<uint32_t>(i);
    c.dep_count = static_cast<uint32_t>(fn.deps.size());
    trailing.resize(fn.deps.size() * 4);
    if (!fn.deps.empty()) std::memcpy(trailing.data(), fn.deps.data(), trailing.size());
    const NodeObj* n = fn.node;
    const NodeKind kind = n == nullptr ? NodeKind::Empty : n->kind;
    c.part = fn.part;
    switch (kind) {
      case NodeKind::Conditional:
        c.kind = static_cast<uint32_t>(ipc::GraphNodeKind::Conditional);
        c.cond = ipc::GraphCondRef{n->cond, 0};
        break;
      case NodeKind::Empty:
      case NodeKind::Child:
      case NodeKind::MemAlloc:  // the memory exists already (GraphMemory)
      case NodeKind::MemFree:
        c.kind = static_cast<uint32_t>(ipc::GraphNodeKind::Empty);
        break;
      case NodeKind::Kernel:
        c.kind = static_cast<uint32_t>(ipc::GraphNodeKind::Kernel);
        c.launch = n->launch_cmd;
        trailing.insert(trailing.end(), n->params.begin(), n->params.end());
        break;
      case NodeKind::Memcpy:
        c.kind = static_cast<uint32_t>(ipc::GraphNodeKind::Copy);
        c.copy = n->copy_cmd;
        break;
      case NodeKind::Memset:
        c.kind = static_cast<uint32_t>(ipc::GraphNodeKind::Memset);
        c.memset = n->memset_cmd;
        break;
      case NodeKind::Host: {
        c.kind = static_cast<uint32_t>(ipc::GraphNodeKind::Host);
        const HostSlot& h = hosts.at(next_host++);
        c.host = ipc::HostFuncCmd{h.reached, h.done, 0, 0};
        break;
      }
      case NodeKind::EventRecord:
      case NodeKind::EventWait: {
        c.kind = static_cast<uint32_t>(kind == NodeKind::EventRecord ? ipc::GraphNodeKind::EventRecord
                                                                     : ipc::GraphNodeKind::EventWait);
        const std::optional<EventRef> ev = rt.tables.use_event(reinterpret_cast<EventObj*>(n->event), EventUse::Plain);
        if (!ev) return cudaErrorInvalidResourceHandle;
        if (ev->device != device) {
          report_unsupported("a graph event node of an event of another device");
          return cudaErrorNotSupported;
        }
        c.event = ipc::EventCmd{ev->id, 0, 0};
        break;
      }
    }
    if (cudaError_t e = to_cuda(rt.post(Opcode::GraphNode, device, 0, &c, sizeof c, trailing)); e != cudaSuccess)
      return e;
  }
  return cudaSuccess;
}

// Words for each of f's host nodes, registered with the host function thread (zeroed first: the
// slots may have served events).  Nothing is kept on a failure.
cudaError_t take_host_slots(const Flat& f, std::vector<HostSlot>& out) {
  Runtime& rt = Runtime::get();
  const uint32_t slots = rt.view().header().event_slots;
  for (const NodeObj* n : f.hosts) {
    const uint32_t r = rt.tables.acquire_event_slot(slots);
    const uint32_t d = r == ipc::kNoEventSlot ? ipc::kNoEventSlot : rt.tables.acquire_event_slot(slots);
    if (d == ipc::kNoEventSlot) {
      if (r != ipc::kNoEventSlot) rt.tables.release_event_slot(r);
      for (const HostSlot& h : out) graph_host_retire(h.key);
      out.clear();
      return cudaErrorMemoryAllocation;
    }
    rt.view().event_state(r).store(0, std::memory_order_relaxed);
    rt.view().event_state(d).store(0, std::memory_order_release);
    out.push_back({graph_host_add(r, d, n->host_fn, n->host_data), r, d});
  }
  return cudaSuccess;
}

// Flattens and sends g, then GraphInstantiate (or GraphUpdate) of it into exec `exec`.  `hosts`:
// the exec's host node words (made here for an instantiation; for an update, the exec's, whose
// functions are set to g's).
cudaError_t build_on_server(const GraphObj& g, Opcode op, uint64_t exec, unsigned flags, int& device,
                            std::vector<cudaEvent_t>& records, std::vector<HostSlot>& hosts) {
  Flat f;
  std::vector<uint32_t> exits;
  if (cudaError_t e = flatten(g, {}, f, exits, 0, 0); e != cudaSuccess) return e;
  if (op == Opcode::GraphInstantiate) {
    if (cudaError_t e = graph_device(f, device); e != cudaSuccess) return e;
    if (cudaError_t e = take_host_slots(f, hosts); e != cudaSuccess) return e;
  } else {
    int d = device;
    if (cudaError_t e = graph_device(f, d); e != cudaSuccess) return e;
    if (d != device && !f.nodes.empty()) return cudaErrorInvalidValue;
    if (f.hosts.size() != hosts.size()) return cudaErrorInvalidValue;
  }
  auto give_back = [&] {
    if (op != Opcode::GraphInstantiate) return;
    for (const HostSlot& h : hosts) graph_host_retire(h.key);
    hosts.clear();
  };
  const uint64_t build = g_next_build.fetch_add(1);
  cudaError_t e = send_build(build, f, device, hosts);
  const ipc::GraphBuildCmd c{build, exec, static_cast<uint32_t>(f.nodes.size()), flags, g.tree ? tree_id(*g.tree) : 0};
  if (e == cudaSuccess) e = to_cuda(Runtime::get().call(op, device, 0, &c, sizeof c));
  if (e != cudaSuccess) {
    give_back();
    return e;
  }
  if (op != Opcode::GraphInstantiate)
    for (size_t i = 0; i < hosts.size(); ++i) graph_host_set(hosts[i].key, f.hosts[i]->host_fn, f.hosts[i]->host_data);
  records = std::move(f.records);
  return cudaSuccess;
}

// Whether two graphs have the same shape: the same kinds and dependencies, node for node (in
// their order), child graphs alike.  `bad`: the first node that differs.
bool same_shape(const GraphObj& a, const GraphObj& b, const NodeObj*& bad) {
  if (a.nodes.size() != b.nodes.size()) {
    bad = nullptr;
    return false;
  }
  std::unordered_map<const NodeObj*, size_t> ia, ib;
  for (size_t i = 0; i < a.nodes.size(); ++i) ia[a.nodes[i].get()] = i, ib[b.nodes[i].get()] = i;
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const NodeObj &x = *a.nodes[i], &y = *b.nodes[i];
    bad = &y;
    if (x.kind != y.kind || x.deps.size() != y.deps.size()) return false;
    for (size_t d = 0; d < x.deps.size(); ++d)
      if (ia[x.deps[d]] != ib[y.deps[d]]) return false;
    if (x.kind == NodeKind::Kernel && x.kernel != y.kernel) return false;
    if (x.kind == NodeKind::Child && !same_shape(*x.child, *y.child, bad)) return false;
    if (x.kind == NodeKind::Conditional) {
      if (x.cond != y.cond || x.bodies.size() != y.bodies.size()) return false;
      for (size_t k = 0; k < x.bodies.size(); ++k)
        if (!same_shape(*x.bodies[k], *y.bodies[k], bad)) return false;
    }
    if (x.kind == NodeKind::Memcpy && x.device != y.device) return false;
  }
  return true;
}

// The parameters of every node of `from` (a graph of `to`'s shape) into `to`, child graphs and
// conditional bodies too.
void copy_all_params(GraphObj& to, const GraphObj& from) {
  for (size_t i = 0; i < to.nodes.size(); ++i) {
    NodeObj& t = *to.nodes[i];
    const NodeObj& f = *from.nodes[i];
    copy_params(t, f);
    if (t.child && f.child) copy_all_params(*t.child, *f.child);
    for (size_t b = 0; b < t.bodies.size() && b < f.bodies.size(); ++b) copy_all_params(*t.bodies[b], *f.bodies[b]);
  }
}

// Takes the exec's new events (post-launch bookkeeping of EventRecord nodes).
void set_records(ExecObj& x, std::vector<cudaEvent_t> records) { x.records = std::move(records); }

// ---- capture (r.mu held) ---------------------------------------------------------------------

std::shared_ptr<Capture> capture_of_locked(Registry& r, uint64_t stream) {
  auto it = r.captures.find(stream);
  return it == r.captures.end() ? nullptr : it->second;
}

void leave_capture(Registry& r, Capture& c) {
  for (const auto& [stream, tips] : c.tips)
    if (r.captures.erase(stream) != 0) g_capturing.fetch_sub(1);
  c.tips.clear();
}

void invalidate(Capture& c, cudaError_t why) {
  if (c.invalid == cudaSuccess) c.invalid = why;
}

// Adds a node to the capture of stream s after the stream's tips; the node is the new tip.
cudaError_t capture_add(const StreamRef& s, std::unique_ptr<NodeObj> n) {
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  const std::shared_ptr<Capture> c = capture_of_locked(r, s.id);
  if (c == nullptr) return cudaErrorIllegalState;  // the capture ended meanwhile (another thread)
  if (c->invalid != cudaSuccess) return cudaErrorStreamCaptureInvalidated;
  std::vector<NodeObj*>& tips = c->tips[s.id];
  NodeObj* made = nullptr;
  if (cudaError_t e = add_locked(r, *c->graph, tips, std::move(n), made); e != cudaSuccess) return e;
  tips.assign(1, made);
  return cudaSuccess;
}

// The stream's capture state for a failed node: the capture is invalidated, as CUDA does when
// a captured call fails.
cudaError_t capture_failed(const StreamRef& s, cudaError_t e) {
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  if (auto c = capture_of_locked(r, s.id)) invalidate(*c, e);
  return e;
}

}  // namespace

bool capture_active(uint64_t stream_id) noexcept {
  if (g_capturing.load(std::memory_order_acquire) == 0) return false;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  return r.captures.contains(stream_id);
}

// ---- nodes --------------------------------------------------------------------------------------

cudaError_t make_kernel_node(NodeObj& n, Kernel& k, const void* func, const LaunchSpec& l, void** args, int device) {
  if (l.flags != 0 || l.priority != 0 || l.cluster[0] != 0 || l.cluster[1] != 0 || l.cluster[2] != 0) {
    report_unsupported("a graph kernel node with a cooperative, cluster or priority attribute");
    return cudaErrorNotSupported;
  }
  n.kind = NodeKind::Kernel;
  n.kernel = &k;
  n.func = func;
  n.launch = l;
  n.launch.stream = nullptr;
  n.device = device;
  if (cudaError_t e = prepare_launch(k, l, device, args, n.launch_cmd, n.params); e != cudaSuccess) return e;
  point_args(n);
  return cudaSuccess;
}

cudaError_t make_copy_node(NodeObj& n, const CopyParams& c, const char* call) {
  n.kind = NodeKind::Memcpy;
  n.copy = c;
  return direct_copy_command(c.dst, c.dp, c.src, c.sp, c.extent, c.kind, call, n.copy_cmd, n.device);
}

cudaError_t make_memset_node(NodeObj& n, const cudaMemsetParams& p) {
  const unsigned el = p.elementSize;
  if (el != 1 && el != 2 && el != 4) return cudaErrorInvalidValue;
  if (p.width == 0 || p.height == 0) return cudaErrorInvalidValue;
  const uint64_t width = uint64_t{p.width} * el;
  const uint64_t pitch = p.height > 1 ? p.pitch : width;
  if (p.height > 1 && p.pitch < width) return cudaErrorInvalidValue;
  const auto addr = reinterpret_cast<uint64_t>(p.dst);
  const auto alloc = Runtime::get().tables.device_range(addr, pitch * (p.height - 1) + width);
  if (!alloc) return cudaErrorInvalidValue;
  n.kind = NodeKind::Memset;
  n.memset = p;
  n.device = alloc->device;
  const uint32_t value = el >= 4 ? p.value : p.value & ((1u << (8 * el)) - 1);
  n.memset_cmd = ipc::MemsetCmd{addr, pitch, width, p.height, value, el};
  return cudaSuccess;
}

cudaError_t make_host_node(NodeObj& n, cudaHostFn_t fn, void* data, int device) {
  if (fn == nullptr) return cudaErrorInvalidValue;
  n.kind = NodeKind::Host;
  n.host_fn = fn;
  n.host_data = data;
  n.device = device;
  return cudaSuccess;
}

// ---- graphs -------------------------------------------------------------------------------------

cudaError_t graph_create(cudaGraph_t* out, unsigned flags) {
  if (out == nullptr || flags != 0) return cudaErrorInvalidValue;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  auto g = std::make_unique<GraphObj>();
  GraphObj* p = g.get();
  r.graphs.insert(p);
  r.owned.emplace(p, std::move(g));
  *out = reinterpret_cast<cudaGraph_t>(p);
  return cudaSuccess;
}

cudaError_t graph_destroy(cudaGraph_t h) {
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  auto it = r.owned.find(reinterpret_cast<GraphObj*>(h));
  if (it == r.owned.end()) return cudaErrorInvalidValue;
  unregister_graph(r, *it->second);
  r.owned.erase(it);
  return cudaSuccess;
}

cudaError_t graph_clone(cudaGraph_t* out, cudaGraph_t h) {
  if (out == nullptr) return cudaErrorInvalidValue;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  GraphObj* g = find_graph(r, h);
  if (g == nullptr) return cudaErrorInvalidValue;
  if (g->tree) return cudaErrorNotSupported;  // CUDA does not clone a graph with conditional nodes
  auto c = clone_graph(*g, nullptr);
  GraphObj* p = c.get();
  register_graph(r, *p);
  r.owned.emplace(p, std::move(c));
  *out = reinterpret_cast<cudaGraph_t>(p);
  return cudaSuccess;
}

cudaError_t graph_add(cudaGraphNode_t* out, cudaGraph_t h, const cudaGraphNode_t* deps, size_t count,
                      std::unique_ptr<NodeObj> n) {
  if (out == nullptr) return cudaErrorInvalidValue;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  GraphObj* g = find_graph(r, h);
  if (g == nullptr) return cudaErrorInvalidValue;
  std::vector<NodeObj*> d;
  if (cudaError_t e = deps_of(r, deps, count, d); e != cudaSuccess) return e;
  NodeObj* made = nullptr;
  if (cudaError_t e = add_locked(r, *g, d, std::move(n), made); e != cudaSuccess) return e;
  *out = reinterpret_cast<cudaGraphNode_t>(made);
  return cudaSuccess;
}

cudaError_t graph_add_child(cudaGraphNode_t* out, cudaGraph_t h, const cudaGraphNode_t* deps, size_t count,
                            cudaGraph_t child) {
  auto n = std::make_unique<NodeObj>();
  n->kind = NodeKind::Child;
  {
    Registry& r = reg();
    std::lock_guard lk(r.mu);
    GraphObj* c = find_graph(r, child);
    if (c == nullptr || c == find_graph(r, h) || c->tree) return cudaErrorInvalidValue;
    n->child = clone_graph(*c, nullptr);
  }
  return graph_add(out, h, deps, count, std::move(n));
}

cudaError_t graph_add_event(cudaGraphNode_t* out, cudaGraph_t h, const cudaGraphNode_t* deps, size_t count,
                            cudaEvent_t e, bool record) {
  if (!Runtime::get().tables.has_event(reinterpret_cast<EventObj*>(e))) return cudaErrorInvalidValue;
  auto n = std::make_unique<NodeObj>();
  n->kind = record ? NodeKind::EventRecord : NodeKind::EventWait;
  n->event = e;
  n->device = current_device();
  return graph_add(out, h, deps, count, std::move(n));
}

cudaError_t conditional_handle_create(cudaGraphConditionalHandle* out, cudaGraph_t h, unsigned default_value,
                                      unsigned flags) {
  if (out == nullptr || (flags & ~unsigned{cudaGraphCondAssignDefault}) != 0) return cudaErrorInvalidValue;
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  GraphObj* g = find_graph(r, h);
  if (g == nullptr) return cudaErrorInvalidValue;
  if (!g->tree) {
    // A graph of the program's own (or a capture's): a child graph's copy cannot hold one.
    if (!r.owned.contains(g) && !std::any_of(r.captures.begin(), r.captures.end(),
                                             [&](const auto& c) { return c.second->graph == g; })) {
      report_unsupported("a conditional handle of a child graph node's graph");
      return cudaErrorNotSupported;
    }
    auto t = std::make_shared<GraphTree>();
    t->device = current_device();
    ipc::GraphTreeCmd c{};
    c.tree = g_next_tree.fetch_add(1);
    c.op = static_cast<uint32_t>(ipc::GraphTreeOp::Create);
    if (cudaError_t e = to_cuda(Runtime::get().call(Opcode::GraphTree, t->device, 0, &c, sizeof c)); e != cudaSuccess)
      return e;
    t->id = c.tree;
    g->tree = std::move(t);
  }
  ipc::GraphTreeCmd c{};
  c.part = g->part;
  c.value = default_value;
  c.flags = flags;
  Reply reply;
  if (cudaError_t e = tree_call(*g->tree, ipc::GraphTreeOp::Handle, c, &reply); e != cudaSuccess) return e;
  *out = reply.value[0];
  return cudaSuccess;
}

cudaError_t graph_add_conditional(cudaGraphNode_t* out, cudaGraph_t h, const cudaGraphNode_t* deps, size_t count,
                                  cudaConditionalNodeParams* p) {
  if (out == nullptr || p == nullptr || p->size == 0) return cudaErrorInvalidValue;
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  GraphObj* g = find_graph(r, h);
  if (g == nullptr || !g->tree) return cudaErrorInvalidValue;  // the handle is of g's tree, made first
  std::vector<NodeObj*> d;
  if (cudaError_t e = deps_of(r, deps, count, d); e != cudaSuccess) return e;
  for (NodeObj* dep : d)
    if (dep->graph != g) return cudaErrorInvalidValue;
  ipc::GraphTreeCmd c{};
  c.part = g->part;
  c.handle = p->handle;
  c.value = static_cast<uint32_t>(p->type);
  c.flags = p->size;
  Reply reply;
  if (cudaError_t e = tree_call(*g->tree, ipc::GraphTreeOp::CondNode, c, &reply); e != cudaSuccess) return e;
  auto n = std::make_unique<NodeObj>();
  n->kind = NodeKind::Conditional;
  n->device = g->tree->device;
  n->cond = static_cast<uint32_t>(reply.value[0]);
  for (uint32_t b = 0; b < p->size; ++b) {
    auto body = std::make_unique<GraphObj>();
    body->tree = g->tree;
    body->part = static_cast<uint32_t>(reply.value[1]) + b;
    n->body_handles.push_back(reinterpret_cast<cudaGraph_t>(body.get()));
    n->bodies.push_back(std::move(body));
  }
  n->conditional = *p;
  n->conditional.phGraph_out = n->body_handles.data();
  p->phGraph_out = n->body_handles.data();
  NodeObj* made = nullptr;
  if (cudaError_t e = add_locked(r, *g, d, std::move(n), made); e != cudaSuccess) {
    ipc::GraphTreeCmd undo{};
    undo.value = static_cast<uint32_t>(reply.value[0]);
    (void)tree_call(*g->tree, ipc::GraphTreeOp::CondDestroy, undo);
    return e;
  }
  for (auto& b : made->bodies) register_graph(r, *b);
  *out = reinterpret_cast<cudaGraphNode_t>(made);
  return cudaSuccess;
}

cudaError_t graph_edges(cudaGraph_t h, const cudaGraphNode_t* from, const cudaGraphNode_t* to, size_t count, bool add) {
  if (count != 0 && (from == nullptr || to == nullptr)) return cudaErrorInvalidValue;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  GraphObj* g = find_graph(r, h);
  if (g == nullptr) return cudaErrorInvalidValue;
  for (size_t i = 0; i < count; ++i) {
    NodeObj* a = find_node(r, from[i]);
    NodeObj* b = find_node(r, to[i]);
    if (a == nullptr || b == nullptr || a->graph != g || b->graph != g || a == b) return cudaErrorInvalidValue;
    const bool present = std::find(b->deps.begin(), b->deps.end(), a) != b->deps.end();
    if (add) {
      if (present || depends_on(a, b)) return cudaErrorInvalidValue;  // a duplicate, or a cycle
      link(a, b);
    } else {
      if (!present) return cudaErrorInvalidValue;
      std::erase(b->deps, a);
      std::erase(a->outs, b);
    }
  }
  return cudaSuccess;
}

cudaError_t graph_nodes(cudaGraph_t h, cudaGraphNode_t* out, size_t* count, bool roots_only) {
  if (count == nullptr) return cudaErrorInvalidValue;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  GraphObj* g = find_graph(r, h);
  if (g == nullptr) return cudaErrorInvalidValue;
  size_t n = 0;
  for (const auto& node : g->nodes) {
    if (roots_only && !node->deps.empty()) continue;
    if (out != nullptr && n < *count) out[n] = reinterpret_cast<cudaGraphNode_t>(node.get());
    ++n;
  }
  if (out == nullptr) {
    *count = n;
  } else if (n < *count) {
    for (size_t i = n; i < *count; ++i) out[i] = nullptr;
    *count = n;
  }
  return cudaSuccess;
}

cudaError_t graph_edge_list(cudaGraph_t h, cudaGraphNode_t* from, cudaGraphNode_t* to, size_t* count) {
  if (count == nullptr || (from == nullptr) != (to == nullptr)) return cudaErrorInvalidValue;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  GraphObj* g = find_graph(r, h);
  if (g == nullptr) return cudaErrorInvalidValue;
  size_t n = 0;
  for (const auto& node : g->nodes)
    for (NodeObj* d : node->deps) {
      if (from != nullptr && n < *count) {
        from[n] = reinterpret_cast<cudaGraphNode_t>(d);
        to[n] = reinterpret_cast<cudaGraphNode_t>(node.get());
      }
      ++n;
    }
  if (from == nullptr) {
    *count = n;
  } else if (n < *count) {
    for (size_t i = n; i < *count; ++i) from[i] = to[i] = nullptr;
    *count = n;
  }
  return cudaSuccess;
}

cudaError_t node_destroy(cudaGraphNode_t h) {
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  NodeObj* n = find_node(r, h);
  if (n == nullptr) return cudaErrorInvalidValue;
  if (n->kind == NodeKind::Conditional) {
    ipc::GraphTreeCmd c{};
    c.value = n->cond;
    if (cudaError_t e = tree_call(*n->graph->tree, ipc::GraphTreeOp::CondDestroy, c); e != cudaSuccess) return e;
    for (auto& b : n->bodies) unregister_graph(r, *b);
  }
  for (NodeObj* d : n->deps) std::erase(d->outs, n);
  for (NodeObj* o : n->outs) std::erase(o->deps, n);
  if (n->child) unregister_graph(r, *n->child);
  r.nodes.erase(n);
  std::erase_if(n->graph->nodes, [&](const std::unique_ptr<NodeObj>& p) { return p.get() == n; });
  return cudaSuccess;
}

cudaError_t node_type(cudaGraphNode_t h, cudaGraphNodeType* type) {
  if (type == nullptr) return cudaErrorInvalidValue;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  NodeObj* n = find_node(r, h);
  if (n == nullptr) return cudaErrorInvalidValue;
  *type = type_of(n->kind);
  return cudaSuccess;
}

cudaError_t node_links(cudaGraphNode_t h, cudaGraphNode_t* out, size_t* count, bool dependents) {
  if (count == nullptr) return cudaErrorInvalidValue;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  NodeObj* n = find_node(r, h);
  if (n == nullptr) return cudaErrorInvalidValue;
  const auto& list = dependents ? n->outs : n->deps;
  if (out == nullptr) {
    *count = list.size();
    return cudaSuccess;
  }
  for (size_t i = 0; i < *count; ++i) out[i] = i < list.size() ? reinterpret_cast<cudaGraphNode_t>(list[i]) : nullptr;
  *count = std::min(*count, list.size());
  return cudaSuccess;
}

cudaError_t node_find_in_clone(cudaGraphNode_t* out, cudaGraphNode_t original, cudaGraph_t clone) {
  if (out == nullptr) return cudaErrorInvalidValue;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  NodeObj* n = find_node(r, original);
  GraphObj* c = find_graph(r, clone);
  if (n == nullptr || c == nullptr) return cudaErrorInvalidValue;
  // A clone keeps the order of the nodes.
  const auto& src = n->graph->nodes;
  for (size_t i = 0; i < src.size(); ++i)
    if (src[i].get() == n) {
      if (i >= c->nodes.size() || c->nodes[i]->kind != n->kind) return cudaErrorInvalidValue;
      *out = reinterpret_cast<cudaGraphNode_t>(c->nodes[i].get());
      return cudaSuccess;
    }
  return cudaErrorInvalidValue;
}

cudaError_t with_node(cudaGraphNode_t h, NodeKind kind, const std::function<cudaError_t(NodeObj&)>& f) {
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  NodeObj* n = find_node(r, h);
  if (n == nullptr || n->kind != kind) return cudaErrorInvalidValue;
  return f(*n);
}


cudaError_t node_set(cudaGraphNode_t h, std::unique_ptr<NodeObj> made) {
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  NodeObj* n = find_node(r, h);
  if (n == nullptr || n->kind != made->kind) return cudaErrorInvalidValue;
  copy_params(*n, *made);
  return cudaSuccess;
}

cudaError_t node_set_event(cudaGraphNode_t h, cudaEvent_t e, bool record) {
  if (!Runtime::get().tables.has_event(reinterpret_cast<EventObj*>(e))) return cudaErrorInvalidValue;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  NodeObj* n = find_node(r, h);
  if (n == nullptr || n->kind != (record ? NodeKind::EventRecord : NodeKind::EventWait)) return cudaErrorInvalidValue;
  n->event = e;
  return cudaSuccess;
}

// ---- memory nodes -------------------------------------------------------------------------------

GraphMemory::~GraphMemory() {
  Runtime& rt = Runtime::get();
  for (const auto& [ptr, device] : allocations) {
    const auto addr = reinterpret_cast<uint64_t>(ptr);
    if (!rt.tables.remove_alloc(addr)) continue;
    const ipc::AddressCmd c{addr};
    (void)rt.call(Opcode::MemFree, device, 0, &c, sizeof c);  // after the work that uses it
  }
}

namespace {

// Device memory for a memory alloc node: `p` checked (pinned device memory, no IPC handle types,
// access descriptors of its own device only), the allocation made and marked as a graph's.
cudaError_t make_graph_memory(cudaMemAllocNodeParams& p, int& device) {
  const cudaMemPoolProps& pp = p.poolProps;
  if (p.bytesize == 0 || pp.allocType != cudaMemAllocationTypePinned || pp.location.type != cudaMemLocationTypeDevice)
    return cudaErrorInvalidValue;
  if (pp.handleTypes != cudaMemHandleTypeNone) {
    report_unsupported("a graph memory alloc node with shareable handle types");
    return cudaErrorNotSupported;
  }
  if (p.accessDescCount != 0 && p.accessDescs == nullptr) return cudaErrorInvalidValue;
  for (size_t i = 0; i < p.accessDescCount; ++i)
    if (p.accessDescs[i].location.type != cudaMemLocationTypeDevice || p.accessDescs[i].location.id != pp.location.id) {
      report_unsupported("a graph memory alloc node with peer access");
      return cudaErrorNotSupported;
    }
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  device = pp.location.id;
  if (device < 0 || device >= Runtime::get().device_count()) return cudaErrorInvalidDevice;
  void* ptr = nullptr;
  if (cudaError_t e = device_alloc(&ptr, p.bytesize, Opcode::MemAlloc, StreamRef{0, device}); e != cudaSuccess) return e;
  Runtime::get().tables.set_graph_alloc(reinterpret_cast<uint64_t>(ptr));
  p.dptr = ptr;
  return cudaSuccess;
}

// Gives back a graph's memory made for a node that was not added.
void drop_graph_memory(void* ptr, int device) {
  GraphMemory m;
  m.allocations.emplace_back(ptr, device);
}

// The graph's memory list, made on first use.  r.mu held.
GraphMemory& memory_of(GraphObj& g) {
  if (!g.memory) g.memory = std::make_shared<GraphMemory>();
  return *g.memory;
}

bool graph_owned(const void* ptr) {
  const Classified c = Runtime::get().tables.classify(ptr);
  return c.kind == Classified::Device && c.graph && c.base == reinterpret_cast<uint64_t>(ptr);
}

}  // namespace

cudaError_t graph_add_mem_alloc(cudaGraphNode_t* out, cudaGraph_t h, const cudaGraphNode_t* deps, size_t count,
                                cudaMemAllocNodeParams* p) {
  if (out == nullptr || p == nullptr) return cudaErrorInvalidValue;
  int device = 0;
  if (cudaError_t e = make_graph_memory(*p, device); e != cudaSuccess) return e;
  auto n = std::make_unique<NodeObj>();
  n->kind = NodeKind::MemAlloc;
  n->alloc = *p;
  n->alloc.accessDescs = nullptr;  // not kept (the caller's)
  n->alloc.accessDescCount = 0;
  n->device = device;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  GraphObj* g = find_graph(r, h);
  std::vector<NodeObj*> d;
  cudaError_t e = g == nullptr ? cudaErrorInvalidValue : deps_of(r, deps, count, d);
  NodeObj* made = nullptr;
  if (e == cudaSuccess) e = add_locked(r, *g, d, std::move(n), made);
  if (e != cudaSuccess) {
    drop_graph_memory(p->dptr, device);
    p->dptr = nullptr;
    return e;
  }
  memory_of(*g).allocations.emplace_back(p->dptr, device);
  *out = reinterpret_cast<cudaGraphNode_t>(made);
  return cudaSuccess;
}

cudaError_t graph_add_mem_free(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t count,
                               void* ptr) {
  if (!graph_owned(ptr)) {
    if (Runtime::get().tables.classify(ptr).kind == Classified::Device)
      report_unsupported("a graph memory free node of memory no graph allocated");
    return Runtime::get().tables.classify(ptr).kind == Classified::Device ? cudaErrorNotSupported : cudaErrorInvalidValue;
  }
  auto n = std::make_unique<NodeObj>();
  n->kind = NodeKind::MemFree;
  n->free_ptr = ptr;
  n->device = Runtime::get().tables.classify(ptr).device;
  return graph_add(out, g, deps, count, std::move(n));
}

// ---- executable graphs -----------------------------------------------------------------------

cudaError_t instantiate(cudaGraphExec_t* out, cudaGraph_t h, unsigned long long flags, cudaStream_t upload_stream) {
  if (out == nullptr) return cudaErrorInvalidValue;
  constexpr unsigned long long kTaken = cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload |
                                        cudaGraphInstantiateFlagUseNodePriority;
  if ((flags & cudaGraphInstantiateFlagDeviceLaunch) != 0) {
    report_unsupported("cudaGraphInstantiate with cudaGraphInstantiateFlagDeviceLaunch");
    return cudaErrorNotSupported;
  }
  if ((flags & ~kTaken) != 0) return cudaErrorInvalidValue;
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  auto x = std::make_unique<ExecObj>();
  x->id = g_next_exec.fetch_add(1);
  x->flags = flags;
  {
    Registry& r = reg();
    std::lock_guard lk(r.mu);
    GraphObj* g = find_graph(r, h);
    if (g == nullptr) return cudaErrorInvalidValue;
    x->graph = clone_graph(*g, &x->copy);
  }
  const unsigned server_flags = static_cast<unsigned>(flags & (cudaGraphInstantiateFlagAutoFreeOnLaunch |
                                                               cudaGraphInstantiateFlagUseNodePriority));
  std::vector<cudaEvent_t> records;
  if (cudaError_t e =
          build_on_server(*x->graph, Opcode::GraphInstantiate, x->id, server_flags, x->device, records, x->hosts);
      e != cudaSuccess)
    return e;
  set_records(*x, std::move(records));
  ExecObj* p = x.get();
  {
    Registry& r = reg();
    std::lock_guard lk(r.mu);
    r.execs.emplace(p, std::move(x));
  }
  *out = reinterpret_cast<cudaGraphExec_t>(p);
  if ((flags & cudaGraphInstantiateFlagUpload) != 0) return exec_upload(*out, upload_stream, false);
  return cudaSuccess;
}

cudaError_t exec_destroy(cudaGraphExec_t h) {
  Registry& r = reg();
  std::unique_ptr<ExecObj> x;
  {
    std::lock_guard lk(r.mu);
    auto it = r.execs.find(reinterpret_cast<ExecObj*>(h));
    if (it == r.execs.end()) return cudaErrorInvalidValue;
    x = std::move(it->second);
    r.execs.erase(it);
  }
  for (const HostSlot& slot : x->hosts) graph_host_retire(slot.key);  // the words go once every launch ran
  const ipc::GraphExecCmd c{x->id};
  return to_cuda(Runtime::get().post(Opcode::GraphExecDestroy, x->device, 0, &c, sizeof c));
}

cudaError_t exec_flags(cudaGraphExec_t h, unsigned long long* flags) {
  if (flags == nullptr) return cudaErrorInvalidValue;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  ExecObj* x = find_exec(r, h);
  if (x == nullptr) return cudaErrorInvalidValue;
  *flags = x->flags;
  return cudaSuccess;
}

cudaError_t exec_launch(cudaGraphExec_t h, cudaStream_t stream, bool ptds) {
  StreamRef s;
  if (cudaError_t e = resolve_stream(stream, ptds, s); e != cudaSuccess) return e;
  Registry& r = reg();
  uint64_t id = 0;
  int device = 0;
  std::vector<cudaEvent_t> records;
  std::vector<uint64_t> host_keys;
  std::unique_ptr<NodeObj> child;
  {
    std::lock_guard lk(r.mu);
    ExecObj* x = find_exec(r, h);
    if (x == nullptr) return cudaErrorInvalidValue;
    id = x->id;
    device = x->device;
    if (!x->records.empty()) records = x->records;
    for (const HostSlot& hs : x->hosts) host_keys.push_back(hs.key);
    if (s.id != 0 && r.captures.contains(s.id)) {  // captured: the graph becomes a child graph node
      child = std::make_unique<NodeObj>();
      child->kind = NodeKind::Child;
      child->device = device;
      child->child = clone_graph(*x->graph, nullptr);
    }
  }
  if (child) return capture_add(s, std::move(child));
  if (s.id != 0 && s.device != device) return cudaErrorInvalidValue;
  Runtime& rt = Runtime::get();
  // A record by the graph stores no state word: the event's next query asks the server.
  for (cudaEvent_t e : records) rt.tables.use_event(reinterpret_cast<EventObj*>(e), EventUse::Graph);
  // Announced first: the host function thread must be looking when the GPU gets there.
  for (uint64_t k : host_keys) graph_host_launched(k);
  const ipc::GraphExecCmd c{id};
  if (cudaError_t e = to_cuda(rt.post(Opcode::GraphLaunch, device, s.id, &c, sizeof c)); e != cudaSuccess) return e;
  for (cudaEvent_t e : records) {
    forget_event_mark(e);
    if (rt.tables.has_event(reinterpret_cast<EventObj*>(e)))
      reinterpret_cast<EventObj*>(e)->written.fetch_add(1, std::memory_order_release);
  }
  return cudaSuccess;
}

cudaError_t exec_upload(cudaGraphExec_t h, cudaStream_t stream, bool ptds) {
  StreamRef s;
  if (cudaError_t e = resolve_stream(stream, ptds, s); e != cudaSuccess) return e;
  if (s.capturing()) return capture_refuse(s, "cudaGraphUpload on a capturing stream");
  uint64_t id = 0;
  int device = 0;
  {
    Registry& r = reg();
    std::lock_guard lk(r.mu);
    ExecObj* x = find_exec(r, h);
    if (x == nullptr) return cudaErrorInvalidValue;
    id = x->id;
    device = x->device;
  }
  if (s.id != 0 && s.device != device) return cudaErrorInvalidValue;
  const ipc::GraphExecCmd c{id};
  return to_cuda(Runtime::get().post(Opcode::GraphUpload, device, s.id, &c, sizeof c));
}

// Sends the exec's (changed) copy of its graph as its new parameters.  r.mu not held.
static cudaError_t push_update(uint64_t id, int device, const GraphObj& g, std::vector<cudaEvent_t>& records,
                               std::vector<HostSlot> hosts) {
  int d = device;
  return build_on_server(g, Opcode::GraphUpdate, id, 0, d, records, hosts);
}

cudaError_t exec_update(cudaGraphExec_t h, cudaGraph_t gh, cudaGraphExecUpdateResult* result,
                        cudaGraphNode_t* error_node, cudaGraphNode_t* error_from) {
  Registry& r = reg();
  auto set = [&](cudaGraphExecUpdateResult res, const NodeObj* bad) {
    if (result != nullptr) *result = res;
    if (error_node != nullptr) *error_node = reinterpret_cast<cudaGraphNode_t>(const_cast<NodeObj*>(bad));
    if (error_from != nullptr) *error_from = nullptr;
  };
  std::unique_ptr<GraphObj> fresh;
  std::unordered_map<const NodeObj*, NodeObj*> map;
  std::vector<HostSlot> hosts;
  uint64_t id = 0;
  int device = 0;
  {
    std::lock_guard lk(r.mu);
    ExecObj* x = find_exec(r, h);
    GraphObj* g = find_graph(r, gh);
    if (x == nullptr || g == nullptr) return cudaErrorInvalidValue;
    // With conditional nodes, only the graph the executable graph was made of (its handles are
    // that graph's tree's) can update it.
    if (g->tree != x->graph->tree) {
      report_unsupported("cudaGraphExecUpdate between graphs with conditional nodes other than the one the "
                         "executable graph was made of");
      return cudaErrorNotSupported;
    }
    const NodeObj* bad = nullptr;
    if (!same_shape(*x->graph, *g, bad)) {
      const bool count = x->graph->nodes.size() != g->nodes.size();
      set(count ? cudaGraphExecUpdateErrorTopologyChanged
                : (bad != nullptr && bad->kind == NodeKind::Kernel ? cudaGraphExecUpdateErrorFunctionChanged
                                                                   : cudaGraphExecUpdateErrorTopologyChanged),
          bad);
      return cudaErrorGraphExecUpdateFailure;
    }
    fresh = clone_graph(*g, &map);
    id = x->id;
    device = x->device;
    hosts = x->hosts;
  }
  std::vector<cudaEvent_t> records;
  if (cudaError_t e = push_update(id, device, *fresh, records, hosts); e != cudaSuccess) {
    set(cudaGraphExecUpdateError, nullptr);
    return e == cudaErrorInvalidValue ? cudaErrorGraphExecUpdateFailure : e;
  }
  {
    std::lock_guard lk(r.mu);
    ExecObj* x = find_exec(r, h);
    if (x == nullptr) return cudaErrorInvalidValue;
    // The exec's nodes stay those of the graph it was made from (the set calls name them).
    copy_all_params(*x->graph, *fresh);
    set_records(*x, std::move(records));
  }
  set(cudaGraphExecUpdateSuccess, nullptr);
  return cudaSuccess;
}

// Changes the exec's copy of `node` with f, then updates the exec on the server; on a failure
// the copy is restored.
static cudaError_t exec_change(cudaGraphExec_t h, cudaGraphNode_t node, const std::function<cudaError_t(NodeObj&)>& f) {
  Registry& r = reg();
  std::unique_ptr<GraphObj> snapshot;
  std::vector<HostSlot> hosts;
  uint64_t id = 0;
  int device = 0;
  NodeObj* target = nullptr;
  std::unique_ptr<NodeObj> before;
  {
    std::lock_guard lk(r.mu);
    ExecObj* x = find_exec(r, h);
    NodeObj* n = find_node(r, node);
    if (x == nullptr || n == nullptr) return cudaErrorInvalidValue;
    auto it = x->copy.find(n);
    if (it == x->copy.end()) return cudaErrorInvalidValue;
    target = it->second;
    before = clone_node(*target);
    if (cudaError_t e = f(*target); e != cudaSuccess) return e;
    snapshot = clone_graph(*x->graph, nullptr);
    id = x->id;
    device = x->device;
    hosts = x->hosts;
  }
  std::vector<cudaEvent_t> records;
  const cudaError_t e = push_update(id, device, *snapshot, records, hosts);
  std::lock_guard lk(r.mu);
  ExecObj* x = find_exec(r, h);
  if (x == nullptr) return cudaErrorInvalidValue;
  if (e != cudaSuccess) {
    copy_params(*target, *before);
    return e;
  }
  set_records(*x, std::move(records));
  return cudaSuccess;
}

cudaError_t exec_set_node(cudaGraphExec_t h, cudaGraphNode_t node, std::unique_ptr<NodeObj> made) {
  return exec_change(h, node, [&](NodeObj& n) {
    if (n.kind != made->kind) return cudaErrorInvalidValue;
    if (n.kind == NodeKind::Kernel && n.kernel != made->kernel) return cudaErrorInvalidValue;
    if (n.device != made->device) return cudaErrorInvalidValue;
    copy_params(n, *made);
    return cudaSuccess;
  });
}

cudaError_t exec_set_event(cudaGraphExec_t h, cudaGraphNode_t node, cudaEvent_t e, bool record) {
  if (!Runtime::get().tables.has_event(reinterpret_cast<EventObj*>(e))) return cudaErrorInvalidValue;
  return exec_change(h, node, [&](NodeObj& n) {
    if (n.kind != (record ? NodeKind::EventRecord : NodeKind::EventWait)) return cudaErrorInvalidValue;
    n.event = e;
    return cudaSuccess;
  });
}

cudaError_t exec_set_child(cudaGraphExec_t h, cudaGraphNode_t node, cudaGraph_t child) {
  std::unique_ptr<GraphObj> copy;
  {
    Registry& r = reg();
    std::lock_guard lk(r.mu);
    GraphObj* c = find_graph(r, child);
    if (c == nullptr) return cudaErrorInvalidValue;
    copy = clone_graph(*c, nullptr);
  }
  return exec_change(h, node, [&](NodeObj& n) {
    const NodeObj* bad = nullptr;
    if (n.kind != NodeKind::Child || !same_shape(*n.child, *copy, bad)) return cudaErrorInvalidValue;
    for (size_t i = 0; i < n.child->nodes.size(); ++i) copy_params(*n.child->nodes[i], *copy->nodes[i]);
    return cudaSuccess;
  });
}

// ---- stream capture ----------------------------------------------------------------------------

cudaError_t begin_capture(cudaStream_t stream, bool ptds, cudaStreamCaptureMode mode, cudaGraph_t into,
                          const cudaGraphNode_t* deps, size_t count) {
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return cudaErrorInvalidValue;
  StreamRef s;
  if (cudaError_t e = resolve_stream(stream, ptds, s); e != cudaSuccess) return e;
  if (s.id == 0) return cudaErrorStreamCaptureUnsupported;  // the legacy stream
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  if (r.captures.contains(s.id)) return cudaErrorIllegalState;
  auto c = std::make_shared<Capture>();
  c->id = r.next_capture++;
  c->mode = mode;
  c->origin = s.id;
  if (into != nullptr) {
    c->graph = find_graph(r, into);
    if (c->graph == nullptr) return cudaErrorInvalidValue;
    c->own_graph = false;
    std::vector<NodeObj*> d;
    if (cudaError_t e = deps_of(r, deps, count, d); e != cudaSuccess) return e;
    for (NodeObj* n : d)
      if (n->graph != c->graph) return cudaErrorInvalidValue;
    c->tips[s.id] = std::move(d);
  } else {
    auto g = std::make_unique<GraphObj>();
    c->graph = g.get();
    r.graphs.insert(g.get());
    r.owned.emplace(g.get(), std::move(g));
    c->tips[s.id] = {};
  }
  r.captures.emplace(s.id, std::move(c));
  g_capturing.fetch_add(1);
  return cudaSuccess;
}

cudaError_t end_capture(cudaStream_t stream, bool ptds, cudaGraph_t* out) {
  StreamRef s;
  if (cudaError_t e = resolve_stream(stream, ptds, s); e != cudaSuccess) return e;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  if (out != nullptr) *out = nullptr;
  const std::shared_ptr<Capture> c = s.id != 0 ? capture_of_locked(r, s.id) : nullptr;
  if (c == nullptr) return cudaErrorIllegalState;
  // The graph is asked for unless the capture went into the program's own graph.
  cudaGraph_t unused = nullptr;
  if (out == nullptr && c->own_graph) return cudaErrorInvalidValue;
  if (out == nullptr) out = &unused;
  if (c->origin != s.id) {
    invalidate(*c, cudaErrorStreamCaptureUnmatched);
    return cudaErrorStreamCaptureUnmatched;
  }
  cudaError_t e = c->invalid != cudaSuccess ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
  if (e == cudaSuccess) {
    // Every stream that joined must have been joined back: its last work is something the
    // origin stream now depends on.
    const std::vector<NodeObj*>& origin = c->tips[c->origin];
    for (const auto& [stream_id, tips] : c->tips) {
      if (stream_id == c->origin) continue;
      for (const NodeObj* t : tips) {
        const bool joined = std::any_of(origin.begin(), origin.end(), [&](const NodeObj* o) { return depends_on(o, t); });
        if (!joined) e = cudaErrorStreamCaptureUnjoined;
      }
    }
  }
  leave_capture(r, *c);
  if (e != cudaSuccess) {
    if (c->own_graph) {
      auto it = r.owned.find(c->graph);
      if (it != r.owned.end()) {
        unregister_graph(r, *it->second);
        r.owned.erase(it);
      }
    }
    return e;
  }
  *out = reinterpret_cast<cudaGraph_t>(c->graph);
  return cudaSuccess;
}

cudaError_t capture_status(cudaStream_t stream, bool ptds, cudaStreamCaptureStatus* status) noexcept {
  return capture_info(stream, ptds, status, nullptr, nullptr, nullptr, nullptr, nullptr);
}

cudaError_t capture_info(cudaStream_t stream, bool ptds, cudaStreamCaptureStatus* status, unsigned long long* id,
                         cudaGraph_t* graph, const cudaGraphNode_t** deps, const void** edges,
                         size_t* count) noexcept {
  if (status == nullptr) return cudaErrorInvalidValue;
  StreamRef s;
  if (cudaError_t e = resolve_stream(stream, ptds, s); e != cudaSuccess) return e;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  const std::shared_ptr<Capture> c = s.id != 0 ? capture_of_locked(r, s.id) : nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (c == nullptr) {
    *status = cudaStreamCaptureStatusNone;
    if (id != nullptr) *id = 0;
    if (graph != nullptr) *graph = nullptr;
    if (deps != nullptr) *deps = nullptr;
    if (count != nullptr) *count = 0;
    return cudaSuccess;
  }
  *status = c->invalid != cudaSuccess ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  if (id != nullptr) *id = c->id;
  if (graph != nullptr) *graph = reinterpret_cast<cudaGraph_t>(c->graph);
  const auto& tips = c->tips[s.id];
  c->info.assign(tips.size(), nullptr);
  for (size_t i = 0; i < tips.size(); ++i) c->info[i] = reinterpret_cast<cudaGraphNode_t>(tips[i]);
  if (deps != nullptr) *deps = c->info.empty() ? nullptr : c->info.data();
  if (count != nullptr) *count = tips.size();
  return cudaSuccess;
}

cudaError_t update_capture_deps(cudaStream_t stream, bool ptds, const cudaGraphNode_t* deps, size_t count,
                                unsigned flags) {
  if (flags != cudaStreamAddCaptureDependencies && flags != cudaStreamSetCaptureDependencies)
    return cudaErrorInvalidValue;
  StreamRef s;
  if (cudaError_t e = resolve_stream(stream, ptds, s); e != cudaSuccess) return e;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  const std::shared_ptr<Capture> c = s.id != 0 ? capture_of_locked(r, s.id) : nullptr;
  if (c == nullptr) return cudaErrorIllegalState;
  std::vector<NodeObj*> d;
  if (cudaError_t e = deps_of(r, deps, count, d); e != cudaSuccess) return e;
  for (NodeObj* n : d)
    if (n->graph != c->graph) return cudaErrorInvalidValue;
  auto& tips = c->tips[s.id];
  if (flags == cudaStreamSetCaptureDependencies) tips.clear();
  for (NodeObj* n : d)
    if (std::find(tips.begin(), tips.end(), n) == tips.end()) tips.push_back(n);
  return cudaSuccess;
}

cudaError_t exchange_capture_mode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr) return cudaErrorInvalidValue;
  if (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
      *mode != cudaStreamCaptureModeRelaxed)
    return cudaErrorInvalidValue;
  std::swap(*mode, t_capture_mode);
  return cudaSuccess;
}

// ---- capture hooks ----------------------------------------------------------------------------

cudaError_t capture_launch(const StreamRef& s, Kernel& k, const LaunchSpec& l, void** args) {
  auto n = std::make_unique<NodeObj>();
  if (cudaError_t e = make_kernel_node(*n, k, nullptr, l, args, s.device); e != cudaSuccess)
    return capture_failed(s, e);
  n->func = k.host;
  return capture_add(s, std::move(n));
}

cudaError_t capture_copy(const StreamRef& s, const CopyParams& c) {
  auto n = std::make_unique<NodeObj>();
  if (cudaError_t e = make_copy_node(*n, c, "a copy in a stream capture"); e != cudaSuccess)
    return capture_failed(s, e);
  return capture_add(s, std::move(n));
}

cudaError_t capture_memset(const StreamRef& s, const cudaMemsetParams& p) {
  auto n = std::make_unique<NodeObj>();
  if (cudaError_t e = make_memset_node(*n, p); e != cudaSuccess) return capture_failed(s, e);
  return capture_add(s, std::move(n));
}

cudaError_t capture_alloc(const StreamRef& s, void** ptr, size_t size) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  cudaMemAllocNodeParams p{};
  p.poolProps.allocType = cudaMemAllocationTypePinned;
  p.poolProps.location = {cudaMemLocationTypeDevice, s.device};
  p.bytesize = size;
  int device = 0;
  if (cudaError_t e = make_graph_memory(p, device); e != cudaSuccess) return capture_failed(s, e);
  auto n = std::make_unique<NodeObj>();
  n->kind = NodeKind::MemAlloc;
  n->alloc = p;
  n->device = device;
  if (cudaError_t e = capture_add(s, std::move(n)); e != cudaSuccess) {
    drop_graph_memory(p.dptr, device);
    return e;
  }
  {
    Registry& r = reg();
    std::lock_guard lk(r.mu);
    if (auto c = capture_of_locked(r, s.id)) memory_of(*c->graph).allocations.emplace_back(p.dptr, device);
  }
  *ptr = p.dptr;
  return cudaSuccess;
}

cudaError_t capture_free(const StreamRef& s, void* ptr) {
  if (!graph_owned(ptr)) {
    report_unsupported("cudaFreeAsync in a stream capture of memory no graph allocated");
    return capture_failed(s, cudaErrorNotSupported);
  }
  auto n = std::make_unique<NodeObj>();
  n->kind = NodeKind::MemFree;
  n->free_ptr = ptr;
  n->device = s.device;
  return capture_add(s, std::move(n));
}

cudaError_t capture_host(const StreamRef& s, cudaHostFn_t fn, void* data) {
  auto n = std::make_unique<NodeObj>();
  if (cudaError_t e = make_host_node(*n, fn, data, s.device); e != cudaSuccess) return capture_failed(s, e);
  return capture_add(s, std::move(n));
}

cudaError_t capture_record(const StreamRef& s, cudaEvent_t e, unsigned flags) {
  if (!Runtime::get().tables.has_event(reinterpret_cast<EventObj*>(e))) return cudaErrorInvalidResourceHandle;
  if ((flags & cudaEventRecordExternal) != 0) {
    auto n = std::make_unique<NodeObj>();
    n->kind = NodeKind::EventRecord;
    n->event = e;
    n->device = s.device;
    if (cudaError_t err = capture_add(s, std::move(n)); err != cudaSuccess) return err;
  }
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  const std::shared_ptr<Capture> c = capture_of_locked(r, s.id);
  if (c == nullptr) return cudaErrorIllegalState;
  if (c->invalid != cudaSuccess) return cudaErrorStreamCaptureInvalidated;
  r.marks[e] = EventMark{c, c->tips[s.id]};
  return cudaSuccess;
}

cudaError_t capture_wait(const StreamRef& s, cudaEvent_t e, unsigned flags, bool& handled) {
  handled = false;
  Registry& r = reg();
  std::unique_lock lk(r.mu);
  const std::shared_ptr<Capture> mine = s.id != 0 ? capture_of_locked(r, s.id) : nullptr;
  auto it = r.marks.find(e);
  std::shared_ptr<Capture> theirs = it != r.marks.end() ? it->second.capture.lock() : nullptr;
  if (theirs != nullptr && !theirs->tips.empty() && (flags & cudaEventWaitExternal) == 0) {
    handled = true;
    if (mine != nullptr && mine != theirs) {
      invalidate(*mine, cudaErrorStreamCaptureIsolation);
      return cudaErrorStreamCaptureIsolation;
    }
    if (theirs->invalid != cudaSuccess) return cudaErrorStreamCaptureInvalidated;
    if (s.id == 0) {  // the legacy stream cannot join a capture
      invalidate(*theirs, cudaErrorStreamCaptureImplicit);
      return cudaErrorStreamCaptureImplicit;
    }
    auto& tips = theirs->tips[s.id];
    if (mine == nullptr) {
      tips.clear();
      r.captures.emplace(s.id, theirs);
      g_capturing.fetch_add(1);
    }
    for (NodeObj* n : it->second.deps)
      if (std::find(tips.begin(), tips.end(), n) == tips.end()) tips.push_back(n);
    return cudaSuccess;
  }
  if (mine == nullptr) return cudaSuccess;  // not a capture's: the ordinary wait
  handled = true;
  if ((flags & cudaEventWaitExternal) != 0) {
    lk.unlock();
    auto n = std::make_unique<NodeObj>();
    n->kind = NodeKind::EventWait;
    n->event = e;
    n->device = s.device;
    return capture_add(s, std::move(n));
  }
  // An event recorded outside the capture: CUDA refuses the wait (the capture would depend on
  // work outside it).
  invalidate(*mine, cudaErrorStreamCaptureIsolation);
  return cudaErrorStreamCaptureIsolation;
}

cudaError_t capture_refuse(const StreamRef& s, const char* what) {
  if (what != nullptr) report_unsupported(what);
  const cudaError_t e = what != nullptr ? cudaErrorNotSupported : cudaErrorStreamCaptureUnsupported;
  return capture_failed(s, what != nullptr ? e : cudaErrorStreamCaptureUnsupported);
}

void forget_event_mark(cudaEvent_t e) noexcept {
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  r.marks.erase(e);
}

}  // namespace funnel::client
