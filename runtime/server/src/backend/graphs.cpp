// Backend's default graphs: the nodes kept as they came and run one by one, in their order
// (each after those it depends on), on the launching stream through the backend's own calls.
// The sim backend uses it; the cuda backend builds CUDA graphs (backend/cuda/graphs.cpp).
#include <vector>

#include "funnel/server/backend.hpp"

namespace funnel::server {

namespace {

class NodeList final : public BackendGraph {
 public:
  NodeList(int device, std::span<const GraphNodeDesc> nodes) : device_(device), nodes_(nodes.begin(), nodes.end()) {}
  int device() const noexcept override { return device_; }
  std::vector<GraphNodeDesc>& nodes() noexcept { return nodes_; }

 private:
  int device_;
  std::vector<GraphNodeDesc> nodes_;
};

}  // namespace

Status Backend::graph_instantiate(int device, std::span<const GraphNodeDesc> nodes, std::unique_ptr<BackendGraph>& out) {
  if (device < 0 || device >= device_count()) return Status::InvalidDevice;
  out = std::make_unique<NodeList>(device, nodes);
  return Status::Success;
}

Status Backend::graph_update(BackendGraph& g, std::span<const GraphNodeDesc> nodes) {
  auto& list = static_cast<NodeList&>(g).nodes();
  if (list.size() != nodes.size()) return Status::InvalidValue;
  list.assign(nodes.begin(), nodes.end());
  return Status::Success;
}

Status Backend::graph_launch(BackendStream& s, BackendGraph& g) {
  for (const GraphNodeDesc& n : static_cast<NodeList&>(g).nodes()) {
    Status st = Status::Success;
    switch (n.kind) {
      case ipc::GraphNodeKind::Empty:
        break;
      case ipc::GraphNodeKind::Kernel:
        st = launch(s, *n.kernel, n.launch, n.params);
        break;
      case ipc::GraphNodeKind::Copy:
        st = copy(s, n.copy);
        break;
      case ipc::GraphNodeKind::Memset:
        st = memset(s, n.memset.address, n.memset.pitch, n.memset.width, n.memset.height, n.memset.value,
                    n.memset.element);
        break;
      case ipc::GraphNodeKind::EventRecord:
        st = record(*n.event, s);
        break;
      case ipc::GraphNodeKind::EventWait:
        st = wait(s, *n.event);
        break;
      case ipc::GraphNodeKind::Host:
        st = write_value(s, *n.reached, 1);
        if (st == Status::Success) st = wait_value(s, *n.done, 1);
        if (st == Status::Success) st = write_value(s, *n.reached, 0);
        if (st == Status::Success) st = write_value(s, *n.done, 0);
        break;
    }
    if (st != Status::Success) return st;
  }
  return Status::Success;
}

Status Backend::graph_upload(BackendStream&, BackendGraph&) { return Status::Success; }

}  // namespace funnel::server
