// A client's graphs (doc/design/graphs.md): GraphNode records build a graph node by node, each
// checked as a launch, copy, memset or event command of its kind would be; GraphInstantiate
// makes the build an executable graph of the backend's, GraphUpdate gives one new parameters,
// GraphLaunch runs it on a stream after checking again that the memory it touches is still
// the client's.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include <spdlog/spdlog.h>

#include "session/validation.hpp"
#include "session/worker.hpp"

namespace funnel::server {

namespace {

uint32_t read_u32(const std::byte* p) noexcept {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

Status Worker::add_graph_node(GraphNodes& b, const ipc::CommandHeader& h, const ipc::GraphNodeCmd& c,
                              const std::byte* trailing) {
  using Kind = ipc::GraphNodeKind;
  if (c.dep_count > ipc::kMaxGraphDeps || h.device != b.device) return Status::InvalidValue;
  GraphNodeDesc n;
  n.kind = static_cast<Kind>(c.kind);
  n.part = c.part;  // a tree's part: checked against the tree at instantiation
  for (uint32_t i = 0; i < c.dep_count; ++i) {
    const uint32_t d = read_u32(trailing + 4 * i);
    if (d >= c.index || std::find(n.deps.begin(), n.deps.end(), d) != n.deps.end() || b.nodes[d].part != c.part)
      return Status::InvalidValue;
    n.deps.push_back(d);
  }
  const std::byte* params = trailing + 4 * uint64_t{c.dep_count};
  switch (n.kind) {
    case Kind::Empty:
      break;
    case Kind::Conditional:  // the tree's node: checked at instantiation (check_tree_build)
      n.cond = c.cond.cond;
      break;
    case Kind::Kernel: {
      KernelEntry* k = kernels_.find(c.launch.kernel_id);
      if (k == nullptr) return Status::InvalidResourceHandle;
      if (Status st = check_launch(c.launch, *k); st != Status::Success) return st;
      n.launch = launch_desc(c.launch);
      // Cooperative, cluster and per-launch priority kernel nodes: the client refuses them by name.
      if (n.launch.cooperative || n.launch.priority != 0 || n.launch.cluster[0] != 0 || n.launch.cluster[1] != 0 ||
          n.launch.cluster[2] != 0)
        return Status::NotSupported;
      n.kernel = k->kernel.get();
      n.params.assign(params, params + c.launch.param_bytes);
      b.kernels.push_back(k->kernel);
      b.modules.push_back(k->module);
      break;
    }
    case Kind::Copy: {
      const ipc::CopyCmd& cp = c.copy;
      if (cp.dst.space == ipc::MemSpace::Staging || cp.src.space == ipc::MemSpace::Staging || cp.width == 0 ||
          cp.height == 0)
        return Status::InvalidValue;
      if (cp.dst.space == ipc::MemSpace::Array || cp.src.space == ipc::MemSpace::Array)
        return Status::NotSupported;  // the client refuses array copy nodes by name
      bool dst_dev = false, src_dev = false;
      if (Status st = res_.resolve_location(cp.dst, cp.dst_pitch, cp.width, cp.height, n.copy.dst, dst_dev);
          st != Status::Success)
        return st;
      if (Status st = res_.resolve_location(cp.src, cp.src_pitch, cp.width, cp.height, n.copy.src, src_dev);
          st != Status::Success)
        return st;
      n.copy.width = cp.width;
      n.copy.height = cp.height;
      n.copy.dst_pitch = cp.height > 1 ? cp.dst_pitch : cp.width;
      n.copy.src_pitch = cp.height > 1 ? cp.src_pitch : cp.width;
      b.regions.push_back({cp.dst, cp.dst_pitch, cp.width, cp.height});
      b.regions.push_back({cp.src, cp.src_pitch, cp.width, cp.height});
      break;
    }
    case Kind::Memset: {
      const ipc::MemsetCmd& m = c.memset;
      uint64_t extent = 0;
      if (Status st = region_extent(m.pitch, m.width, m.height, extent); st != Status::Success) return st;
      if (extent == 0 || !res_.device_range_ok(m.address, extent)) return Status::InvalidValue;
      MemsetShape shape{};
      if (Status st = memset_shape(m, shape); st != Status::Success) return st;
      n.memset.address = m.address;
      n.memset.pitch = shape.pitch;
      n.memset.width = m.width;
      n.memset.height = m.height;
      n.memset.value = shape.value;
      n.memset.element = shape.element;
      b.regions.push_back({{ipc::MemSpace::Device, 0, 0, m.address}, shape.pitch, m.width, m.height});
      break;
    }
    case Kind::Host: {
      const uint32_t slots = view_.header().event_slots;
      const ipc::HostFuncCmd& hc = c.host;
      if (hc.reached_slot >= slots || hc.done_slot >= slots || hc.reached_slot == hc.done_slot)
        return Status::InvalidValue;
      n.reached = &view_.event_state(hc.reached_slot);
      n.done = &view_.event_state(hc.done_slot);
      b.host_words.emplace_back(hc.reached_slot, hc.done_slot);
      break;
    }
    case Kind::EventRecord:
    case Kind::EventWait: {
      EventEntry* e = res_.find_event(c.event.event_id);
      if (e == nullptr) return Status::InvalidResourceHandle;
      if (e->device != b.device) return Status::InvalidValue;
      n.event = e->event.get();
      b.events.push_back(e->event);
      if (n.kind == Kind::EventRecord) b.recorded_events.push_back(c.event.event_id);
      break;
    }
    default:
      return Status::InvalidValue;
  }
  b.nodes.push_back(std::move(n));
  return Status::Success;
}

Status Worker::graph_node(const ipc::CommandHeader& h, const ipc::GraphNodeCmd& c, const std::byte* trailing) {
  if (c.index == 0) {
    if (Status st = check_device(h.device); st != Status::Success) return st;
    if (graphs_.builds.size() >= ipc::kMaxGraphBuilds && !graphs_.builds.contains(c.graph)) return Status::InvalidValue;
    GraphNodes fresh;
    fresh.device = h.device;
    graphs_.builds[c.graph] = std::move(fresh);
  }
  auto it = graphs_.builds.find(c.graph);
  if (it == graphs_.builds.end()) return Status::InvalidValue;
  GraphNodes& b = it->second;
  // A node out of order, or past the limit, spoils the build: the instantiation then fails.
  Status st = Status::InvalidValue;
  if (c.index == b.nodes.size() && b.nodes.size() < ipc::kMaxGraphNodes) st = add_graph_node(b, h, c, trailing);
  if (st != Status::Success) graphs_.builds.erase(it);
  return st;
}

Status Worker::take_build(const ipc::GraphBuildCmd& c, GraphNodes& out) {
  auto it = graphs_.builds.find(c.graph);
  if (it == graphs_.builds.end()) return Status::InvalidValue;
  out = std::move(it->second);
  graphs_.builds.erase(it);
  if (out.nodes.size() != c.nodes) return Status::InvalidValue;
  return Status::Success;
}

Status Worker::graph_instantiate(const ipc::CommandHeader& h, const ipc::GraphBuildCmd& c) {
  GraphNodes b;
  if (Status st = take_build(c, b); st != Status::Success) return st;
  if ((c.flags & ~(ipc::kGraphInstantiateAutoFree | ipc::kGraphInstantiateUseNodePriority)) != 0)
    return Status::InvalidValue;
  if (graphs_.execs.contains(c.exec)) return Status::InvalidValue;
  GraphExecEntry e;
  if (c.tree != 0) {
    auto t = graphs_.trees.find(c.tree);
    if (t == graphs_.trees.end()) return Status::InvalidResourceHandle;
    if (t->second->device != b.device) return Status::InvalidValue;
    // One executable graph of a tree at a time, as CUDA allows for a graph with conditional nodes.
    if (t->second->exec != 0) return Status::NotSupported;
    if (Status st = check_tree_build(*t->second, b); st != Status::Success) return st;
    e.tree = t->second;
  } else {
    for (const GraphNodeDesc& n : b.nodes)
      if (n.part != 0 || n.kind == ipc::GraphNodeKind::Conditional) return Status::InvalidValue;
  }
  if (Status st = backend_.graph_instantiate(b.device, b.nodes, e.graph, e.tree ? e.tree->tree.get() : nullptr);
      st != Status::Success)
    return st;
  if (e.tree) e.tree->exec = c.exec;
  if (!b.host_words.empty()) {
    const std::lock_guard lock(graph_hosts_->mu);
    auto& w = graph_hosts_->words;
    w.insert(w.end(), b.host_words.begin(), b.host_words.end());
    if (graph_hosts_->releasing) graph_hosts_->answer_waiting(view_);
  }
  e.nodes = std::move(b);
  graphs_.execs.emplace(c.exec, std::move(e));
  answers_.answer(h);
  return Status::Success;
}

Status Worker::graph_update(const ipc::CommandHeader& h, const ipc::GraphBuildCmd& c) {
  GraphNodes b;
  if (Status st = take_build(c, b); st != Status::Success) return st;
  auto it = graphs_.execs.find(c.exec);
  if (it == graphs_.execs.end()) return Status::InvalidResourceHandle;
  GraphExecEntry& e = it->second;
  if (b.device != e.nodes.device || !e.nodes.same_shape(b)) return Status::InvalidValue;
  if (b.host_words != e.nodes.host_words) return Status::InvalidValue;  // the client keeps them
  // An executable graph of a tree takes a build of that same tree (its handles are the tree's).
  if (e.tree) {
    auto t = graphs_.trees.find(c.tree);
    if (t == graphs_.trees.end() || t->second != e.tree) return Status::NotSupported;
    if (Status st = check_tree_build(*e.tree, b); st != Status::Success) return st;
  } else if (c.tree != 0) {
    return Status::InvalidValue;
  }
  if (Status st = backend_.graph_update(*e.graph, b.nodes, e.tree ? e.tree->tree.get() : nullptr); st != Status::Success)
    return st;
  e.nodes = std::move(b);  // the new parameters' kernels and events now kept instead
  answers_.answer(h);
  return Status::Success;
}

Status Worker::graph_launch(const ipc::CommandHeader& h, const ipc::GraphExecCmd& c) {
  auto it = graphs_.execs.find(c.exec);
  if (it == graphs_.execs.end()) return Status::InvalidResourceHandle;
  GraphExecEntry& e = it->second;
  if (h.device != e.nodes.device) return Status::InvalidValue;
  for (const GraphRegion& r : e.nodes.regions) {
    CopyEndpoint where{};
    bool device = false;
    if (res_.resolve_location(r.where, r.pitch, r.width, r.height, where, device) != Status::Success) {
      spdlog::debug("client {}: a graph launch refused: a node's memory was freed since it was made", shared_.id);
      return Status::InvalidValue;
    }
  }
  Status st;
  StreamEntry* s = find_stream(h, st);
  if (s == nullptr) return st;
  if (st = streams_.before_work(*s); st != Status::Success) return st;
  if (st = backend_.graph_launch(*s->stream, *e.graph); st != Status::Success) return st;
  streams_.after_work(*s);
  for (uint64_t id : e.nodes.recorded_events) {
    if (EventEntry* ev = res_.find_event(id); ev != nullptr) {
      ev->recorded = true;
      ev->word = nullptr;  // the graph stores no state word
    }
  }
  add(counters_.launches, 1);
  answers_.answer(h);
  return Status::Success;
}

Status Worker::graph_upload(const ipc::CommandHeader& h, const ipc::GraphExecCmd& c) {
  auto it = graphs_.execs.find(c.exec);
  if (it == graphs_.execs.end()) return Status::InvalidResourceHandle;
  if (h.device != it->second.nodes.device) return Status::InvalidValue;
  Status st;
  StreamEntry* s = find_stream(h, st);
  if (s == nullptr) return st;
  if (st = streams_.before_work(*s); st != Status::Success) return st;
  if (st = backend_.graph_upload(*s->stream, *it->second.graph); st != Status::Success) return st;
  streams_.after_work(*s);
  answers_.answer(h);
  return Status::Success;
}

Status Worker::graph_exec_destroy(const ipc::CommandHeader& h, const ipc::GraphExecCmd& c) {
  // Launches already queued still run: the backend's graph outlives them (cuGraphExecDestroy
  // waits for nothing and the driver keeps what is in flight; the default runs nodes at launch).
  auto it = graphs_.execs.find(c.exec);
  if (it == graphs_.execs.end()) return Status::InvalidResourceHandle;
  if (it->second.tree && it->second.tree->exec == c.exec) it->second.tree->exec = 0;
  graphs_.execs.erase(it);
  answers_.answer(h);
  return Status::Success;
}

Status Worker::check_tree_build(const GraphTreeEntry& t, const GraphNodes& b) {
  const GraphTreeShape& shape = t.tree->shape;
  std::vector<bool> seen(shape.conds.size(), false);
  for (const GraphNodeDesc& n : b.nodes) {
    if (n.part >= shape.alive.size() || !shape.alive[n.part]) return Status::InvalidValue;
    if (n.kind != ipc::GraphNodeKind::Conditional) continue;
    if (n.cond >= shape.conds.size() || !shape.conds[n.cond].alive || shape.conds[n.cond].part != n.part ||
        seen[n.cond])
      return Status::InvalidValue;
    seen[n.cond] = true;
  }
  for (size_t c = 0; c < shape.conds.size(); ++c)
    if (shape.conds[c].alive && !seen[c]) return Status::InvalidValue;
  // As CUDA: every handle of a live part is some live conditional node's.
  for (const GraphTreeShape::Handle& h : shape.handles)
    if (shape.alive[h.part] && !shape.handle_used(h.value)) return Status::InvalidValue;
  return Status::Success;
}

Status Worker::graph_tree(const ipc::CommandHeader& h, const ipc::GraphTreeCmd& c) {
  using Op = ipc::GraphTreeOp;
  const auto op = static_cast<Op>(c.op);
  if (op == Op::Create) {
    if (Status st = check_device(h.device); st != Status::Success) return st;
    if (c.tree == 0 || graphs_.trees.contains(c.tree) || graphs_.trees.size() >= ipc::kMaxGraphTrees)
      return Status::InvalidValue;
    auto t = std::make_shared<GraphTreeEntry>();
    t->device = h.device;
    if (Status st = backend_.graph_tree_create(h.device, t->tree); st != Status::Success) return st;
    graphs_.trees.emplace(c.tree, std::move(t));
    answers_.answer(h);
    return Status::Success;
  }
  auto it = graphs_.trees.find(c.tree);
  if (it == graphs_.trees.end()) return Status::InvalidResourceHandle;
  BackendGraphTree& tree = *it->second->tree;
  GraphTreeShape& shape = tree.shape;
  const bool part_ok = c.part < shape.alive.size() && shape.alive[c.part];
  switch (op) {
    case Op::Destroy:
      graphs_.trees.erase(it);  // an executable graph made of it keeps it
      answers_.answer(h);
      return Status::Success;
    case Op::Handle: {
      if (!part_ok || c.flags > 1 || shape.handles.size() >= ipc::kMaxGraphTreeHandles) return Status::InvalidValue;
      uint64_t handle = 0;
      if (Status st = backend_.graph_tree_handle(tree, c.part, c.value, c.flags, handle); st != Status::Success)
        return st;
      shape.handles.push_back({handle, c.part});
      answers_.answer(h, {handle});
      return Status::Success;
    }
    case Op::CondNode: {
      // IF: 1 or 2 bodies (then, else); WHILE: 1; SWITCH: 1 or more.
      const uint32_t type = c.value, size = c.flags;
      const bool size_ok = (type == 0 && (size == 1 || size == 2)) || (type == 1 && size == 1) || (type == 2 && size >= 1);
      if (!part_ok || !size_ok || !shape.has_handle(c.handle) || shape.handle_used(c.handle) ||
          shape.alive.size() + size > ipc::kMaxGraphTreeParts)
        return Status::InvalidValue;
      if (Status st = backend_.graph_tree_cond(tree, c.part, c.handle, type, size); st != Status::Success) return st;
      const auto index = static_cast<uint32_t>(shape.conds.size());
      const auto first = static_cast<uint32_t>(shape.alive.size());
      shape.conds.push_back({c.part, type, size, first, c.handle, true});
      shape.owner.insert(shape.owner.end(), size, index);
      shape.alive.insert(shape.alive.end(), size, true);
      answers_.answer(h, {index, first});
      return Status::Success;
    }
    case Op::CondDestroy: {
      if (c.value >= shape.conds.size() || !shape.conds[c.value].alive) return Status::InvalidValue;
      if (Status st = backend_.graph_tree_cond_destroy(tree, c.value); st != Status::Success) return st;
      shape.remove_cond(c.value);
      answers_.answer(h);
      return Status::Success;
    }
    case Op::Create:
      break;
  }
  return Status::InvalidValue;
}

void Worker::release_graph_hosts() noexcept {
  std::shared_ptr<GraphHostWords> w = graph_hosts_;
  {
    const std::lock_guard lock(w->mu);
    if (w->releasing || w->stopped || w->words.empty()) return;
    w->releasing = true;
  }
  try {
    // Launches already queued reach their host nodes one after another: answered as they come,
    // every 200 us, until the teardown ends (at most 10 minutes).
    std::thread([w, view = view_] {
      const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(10);
      while (std::chrono::steady_clock::now() < until) {
        {
          const std::lock_guard lock(w->mu);
          if (w->stopped) return;
          w->answer_waiting(view);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }).detach();
  } catch (const std::exception& e) {
    spdlog::error("client {}: cannot start the thread that answers its graph host nodes: {}", shared_.id, e.what());
  }
}

}  // namespace funnel::server
