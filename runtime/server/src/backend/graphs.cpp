// Backend's default graphs: the nodes kept as they came and run one by one, in their order
// (each after those it depends on), on the launching stream through the backend's own calls.
// The sim backend uses it; the cuda backend builds CUDA graphs (backend/cuda/graphs.cpp).
// Conditional nodes run their bodies by their handles' values, which only a handle's default
// sets here (no kernel runs): a WHILE node whose value is not 0 would never end, and is refused.
#include <vector>

#include <spdlog/spdlog.h>

#include "funnel/server/backend.hpp"

namespace funnel::server {

namespace {

// A tree's handles: handle h is handles[h - 1].
class HandleTree final : public BackendGraphTree {
 public:
  struct Handle {
    uint32_t default_value;
    bool assign_default;
    uint32_t value;
  };
  std::vector<Handle> handles;
};

class NodeList final : public BackendGraph {
 public:
  NodeList(int device, std::span<const GraphNodeDesc> nodes, HandleTree* tree)
      : device_(device), nodes_(nodes.begin(), nodes.end()), tree_(tree) {}
  int device() const noexcept override { return device_; }
  std::vector<GraphNodeDesc>& nodes() noexcept { return nodes_; }
  HandleTree* tree() const noexcept { return tree_; }

 private:
  int device_;
  std::vector<GraphNodeDesc> nodes_;
  HandleTree* tree_;  // kept by the worker while the graph lives
};

Status run_part(Backend& b, BackendStream& s, NodeList& g, uint32_t part);

// The body a conditional node runs now (kNone: none).
constexpr uint32_t kNone = UINT32_MAX;
Status body_of(const HandleTree& t, const GraphNodeDesc& n, uint32_t& body) {
  const GraphTreeShape::Cond& c = t.shape.conds[n.cond];
  const uint32_t value = t.handles[c.handle - 1].value;
  body = kNone;
  switch (c.type) {
    case 0:  // if (else)
      if (value != 0) body = c.first_body;
      else if (c.size == 2) body = c.first_body + 1;
      return Status::Success;
    case 2:  // switch
      if (value < c.size) body = c.first_body + value;
      return Status::Success;
    default:  // while: nothing here can change the value
      if (value == 0) return Status::Success;
      spdlog::warn("a graph's WHILE node runs with its condition {}: the backend runs no kernels that could end it",
                   value);
      return Status::NotSupported;
  }
}

Status run_node(Backend& b, BackendStream& s, NodeList& g, const GraphNodeDesc& n) {
  switch (n.kind) {
    case ipc::GraphNodeKind::Empty:
      return Status::Success;
    case ipc::GraphNodeKind::Kernel:
      return b.launch(s, *n.kernel, n.launch, n.params);
    case ipc::GraphNodeKind::Copy:
      return b.copy(s, n.copy);
    case ipc::GraphNodeKind::Memset:
      return b.memset(s, n.memset.address, n.memset.pitch, n.memset.width, n.memset.height, n.memset.value,
                      n.memset.element);
    case ipc::GraphNodeKind::EventRecord:
      return b.record(*n.event, s);
    case ipc::GraphNodeKind::EventWait:
      return b.wait(s, *n.event);
    case ipc::GraphNodeKind::Host: {
      Status st = b.write_value(s, *n.reached, 1);
      if (st == Status::Success) st = b.wait_value(s, *n.done, 1);
      if (st == Status::Success) st = b.write_value(s, *n.reached, 0);
      if (st == Status::Success) st = b.write_value(s, *n.done, 0);
      return st;
    }
    case ipc::GraphNodeKind::Conditional: {
      if (g.tree() == nullptr) return Status::InvalidValue;
      uint32_t body = kNone;
      if (Status st = body_of(*g.tree(), n, body); st != Status::Success) return st;
      return body == kNone ? Status::Success : run_part(b, s, g, body);
    }
  }
  return Status::InvalidValue;
}

Status run_part(Backend& b, BackendStream& s, NodeList& g, uint32_t part) {
  for (const GraphNodeDesc& n : g.nodes()) {
    if (n.part != part) continue;
    if (Status st = run_node(b, s, g, n); st != Status::Success) return st;
  }
  return Status::Success;
}

}  // namespace

Status Backend::graph_instantiate(int device, std::span<const GraphNodeDesc> nodes, std::unique_ptr<BackendGraph>& out,
                                  BackendGraphTree* tree) {
  if (device < 0 || device >= device_count()) return Status::InvalidDevice;
  out = std::make_unique<NodeList>(device, nodes, static_cast<HandleTree*>(tree));
  return Status::Success;
}

Status Backend::graph_tree_create(int device, std::unique_ptr<BackendGraphTree>& out) {
  if (device < 0 || device >= device_count()) return Status::InvalidDevice;
  out = std::make_unique<HandleTree>();
  return Status::Success;
}

Status Backend::graph_tree_handle(BackendGraphTree& t, uint32_t, uint32_t default_value, uint32_t flags,
                                  uint64_t& handle) {
  auto& tree = static_cast<HandleTree&>(t);
  tree.handles.push_back({default_value, (flags & 1) != 0, default_value});
  handle = tree.handles.size();
  return Status::Success;
}

Status Backend::graph_tree_cond(BackendGraphTree&, uint32_t, uint64_t, uint32_t, uint32_t) { return Status::Success; }

Status Backend::graph_tree_cond_destroy(BackendGraphTree&, uint32_t) { return Status::Success; }

Status Backend::graph_update(BackendGraph& g, std::span<const GraphNodeDesc> nodes, BackendGraphTree*) {
  auto& list = static_cast<NodeList&>(g).nodes();
  if (list.size() != nodes.size()) return Status::InvalidValue;
  list.assign(nodes.begin(), nodes.end());
  return Status::Success;
}

Status Backend::graph_launch(BackendStream& s, BackendGraph& g) {
  auto& list = static_cast<NodeList&>(g);
  if (HandleTree* t = list.tree(); t != nullptr)
    for (HandleTree::Handle& h : t->handles)
      if (h.assign_default) h.value = h.default_value;
  return run_part(*this, s, list, 0);
}

Status Backend::graph_upload(BackendStream&, BackendGraph&) { return Status::Success; }

}  // namespace funnel::server
