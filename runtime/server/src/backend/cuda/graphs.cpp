// The cuda backend's graphs: a client's nodes built into a CUgraph of the device's context with
// the driver's node calls, instantiated once, launched whole on the client's stream
// (doc/design/graphs.md).  An update builds the new nodes into a CUgraph of the same shape and
// hands it to cuGraphExecUpdate.  A graph tree (conditional nodes) is a CUgraph kept from its
// first handle on: its conditional nodes are made as the client makes them, and each build
// replaces the nodes of the last one around them.
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/launch.hpp"

namespace funnel::server::cuda {

namespace {

class CudaGraph final : public BackendGraph {
 public:
  CudaGraph(std::shared_ptr<const Shared> shared, int device, CUgraphExec exec)
      : shared_(std::move(shared)), device_(device), exec_(exec) {}
  ~CudaGraph() override {
    if (ok(shared_->bind(device_))) FUNNEL_CU(shared_->drv, cuGraphExecDestroy, exec_);
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  int device() const noexcept override { return device_; }
  CUgraphExec exec() const noexcept { return exec_; }

 private:
  std::shared_ptr<const Shared> shared_;
  int device_;
  CUgraphExec exec_;
};

}  // namespace

// A graph tree's CUgraphs: parts[0] the root (owned), then the bodies of its conditional nodes
// (the driver's, gone with their node); the conditional nodes; the nodes of the last build.
class CudaGraphTree final : public BackendGraphTree {
 public:
  CudaGraphTree(std::shared_ptr<const Shared> shared, int device, CUgraph root)
      : parts{root}, shared_(std::move(shared)), device_(device) {}
  ~CudaGraphTree() override { FUNNEL_CU(shared_->drv, cuGraphDestroy, parts[0]); }
  CudaGraphTree(const CudaGraphTree&) = delete;
  CudaGraphTree& operator=(const CudaGraphTree&) = delete;
  int device() const noexcept { return device_; }

  // Removes the last build's nodes (those of parts still alive) and the dependencies of the
  // conditional nodes, which stay.
  Status clear_build() {
    const Driver& drv = shared_->drv;
    for (const auto& [part, node] : built)
      if (shape.alive[part])
        if (Status st = FUNNEL_CU(drv, cuGraphDestroyNode, node); !ok(st)) return st;
    built.clear();
    std::vector<CUgraphNode> deps;
    for (size_t c = 0; c < conds.size(); ++c) {
      if (!shape.conds[c].alive) continue;
      size_t n = 0;
      if (Status st = FUNNEL_CU(drv, cuGraphNodeGetDependencies, conds[c], nullptr, nullptr, &n); !ok(st)) return st;
      if (n == 0) continue;
      deps.resize(n);
      if (Status st = FUNNEL_CU(drv, cuGraphNodeGetDependencies, conds[c], deps.data(), nullptr, &n); !ok(st))
        return st;
      const std::vector<CUgraphNode> to(n, conds[c]);
      if (Status st = FUNNEL_CU(drv, cuGraphRemoveDependencies, parts[shape.conds[c].part], deps.data(), to.data(),
                                nullptr, n);
          !ok(st))
        return st;
    }
    return Status::Success;
  }

  std::vector<CUgraph> parts;
  std::vector<CUgraphNode> conds;
  std::vector<std::pair<uint32_t, CUgraphNode>> built;

 private:
  std::shared_ptr<const Shared> shared_;
  int device_;
};

namespace {

// Destroys a CUgraph at the end of a scope.
struct GraphGuard {
  const Driver& drv;
  CUgraph g = nullptr;
  ~GraphGuard() {
    if (g != nullptr) FUNNEL_CU(drv, cuGraphDestroy, g);
  }
};

CUDA_MEMCPY3D memcpy_params(const CopyDesc& c) {
  CUDA_MEMCPY3D m{};
  const uint64_t src_pitch = c.height > 1 ? c.src_pitch : c.width;
  const uint64_t dst_pitch = c.height > 1 ? c.dst_pitch : c.width;
  if (c.src.device) {
    m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    m.srcDevice = device_pointer(c.src.address);
  } else {
    m.srcMemoryType = CU_MEMORYTYPE_HOST;
    m.srcHost = host_pointer(c.src.address);
  }
  m.srcPitch = src_pitch;
  m.srcHeight = c.height;
  if (c.dst.device) {
    m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    m.dstDevice = device_pointer(c.dst.address);
  } else {
    m.dstMemoryType = CU_MEMORYTYPE_HOST;
    m.dstHost = host_pointer(c.dst.address);
  }
  m.dstPitch = dst_pitch;
  m.dstHeight = c.height;
  m.WidthInBytes = c.width;
  m.Height = c.height;
  m.Depth = 1;
  return m;
}

}  // namespace

Status CudaBackend::build_graph(int device, std::span<const GraphNodeDesc> nodes, CUgraph graph, CudaGraphTree* tree) {
  const Driver& drv = s_->drv;
  if (Status st = s_->bind(device); !ok(st)) return st;
  const CUcontext ctx = s_->devices[static_cast<size_t>(device)].context.load(std::memory_order_acquire);
  if (tree != nullptr)
    if (Status st = tree->clear_build(); !ok(st)) return st;
  std::vector<CUgraphNode> made;
  made.reserve(nodes.size());
  std::vector<CUgraphNode> deps;
  for (const GraphNodeDesc& n : nodes) {
    deps.clear();
    for (uint32_t d : n.deps) deps.push_back(made[d]);
    if (tree != nullptr) graph = tree->parts[n.part];
    CUgraphNode node = nullptr;
    Status st = Status::Success;
    switch (n.kind) {
      case ipc::GraphNodeKind::Empty:
        st = FUNNEL_CU(drv, cuGraphAddEmptyNode, &node, graph, deps.data(), deps.size());
        break;
      case ipc::GraphNodeKind::Conditional: {
        // Made with the tree (graph_tree_cond): only its dependencies are this build's.
        if (tree == nullptr) return Status::InvalidValue;
        node = tree->conds[n.cond];
        if (!deps.empty()) {
          const std::vector<CUgraphNode> to(deps.size(), node);
          st = FUNNEL_CU(drv, cuGraphAddDependencies, graph, deps.data(), to.data(), nullptr, deps.size());
        }
        made.push_back(node);
        if (!ok(st)) return st;
        continue;
      }
      case ipc::GraphNodeKind::Kernel: {
        auto& k = static_cast<CudaKernel&>(*n.kernel);
        const KernelArgs args(k, n.params);
        CUDA_KERNEL_NODE_PARAMS p{};
        p.gridDimX = n.launch.grid[0];
        p.gridDimY = n.launch.grid[1];
        p.gridDimZ = n.launch.grid[2];
        p.blockDimX = n.launch.block[0];
        p.blockDimY = n.launch.block[1];
        p.blockDimZ = n.launch.block[2];
        p.sharedMemBytes = n.launch.shared_bytes;
        p.kernelParams = args.get();
        p.kern = k.handle();  // in the current context (ctx null)
        st = FUNNEL_CU(drv, cuGraphAddKernelNode, &node, graph, deps.data(), deps.size(), &p);
        break;
      }
      case ipc::GraphNodeKind::Copy: {
        const CUDA_MEMCPY3D m = memcpy_params(n.copy);
        st = FUNNEL_CU(drv, cuGraphAddMemcpyNode, &node, graph, deps.data(), deps.size(), &m, ctx);
        break;
      }
      case ipc::GraphNodeKind::Memset: {
        CUDA_MEMSET_NODE_PARAMS m{};
        m.dst = device_pointer(n.memset.address);
        m.elementSize = n.memset.element;
        m.width = n.memset.width / n.memset.element;
        m.height = n.memset.height;
        m.pitch = n.memset.height > 1 ? n.memset.pitch : n.memset.width;
        m.value = n.memset.value;
        st = FUNNEL_CU(drv, cuGraphAddMemsetNode, &node, graph, deps.data(), deps.size(), &m, ctx);
        break;
      }
      case ipc::GraphNodeKind::EventRecord:
        st = FUNNEL_CU(drv, cuGraphAddEventRecordNode, &node, graph, deps.data(), deps.size(),
                       static_cast<CudaEvent&>(*n.event).handle());
        break;
      case ipc::GraphNodeKind::EventWait:
        st = FUNNEL_CU(drv, cuGraphAddEventWaitNode, &node, graph, deps.data(), deps.size(),
                       static_cast<CudaEvent&>(*n.event).handle());
        break;
      case ipc::GraphNodeKind::Host: {
        // Four memory operations on the channel's words, each its own node after the one before
        // (registered host memory the GPU reaches at the same address: host_word_op's condition).
        if (!s_->devices[static_cast<size_t>(device)].host_pointer_is_device_pointer) return Status::NotSupported;
        const auto op = [&](bool wait, std::atomic<uint32_t>* word, uint32_t value) {
          CUstreamBatchMemOpParams p{};
          if (wait) {
            p.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
            p.waitValue.address = reinterpret_cast<CUdeviceptr>(word);
            p.waitValue.value = value;
            p.waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
          } else {
            p.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
            p.writeValue.address = reinterpret_cast<CUdeviceptr>(word);
            p.writeValue.value = value;
            p.writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
          }
          return p;
        };
        CUstreamBatchMemOpParams steps[4] = {op(false, n.reached, 1), op(true, n.done, 1), op(false, n.reached, 0),
                                             op(false, n.done, 0)};
        for (CUstreamBatchMemOpParams& step : steps) {
          CUDA_BATCH_MEM_OP_NODE_PARAMS p{ctx, 1, &step, 0};
          CUgraphNode next = nullptr;
          st = FUNNEL_CU(drv, cuGraphAddBatchMemOpNode, &next, graph, deps.data(), deps.size(), &p);
          if (!ok(st)) break;
          deps.assign(1, next);
          node = next;
        }
        break;
      }
    }
    if (tree != nullptr && node != nullptr && n.kind != ipc::GraphNodeKind::Host) tree->built.emplace_back(n.part, node);
    if (!ok(st)) return st;
    made.push_back(node);
  }
  return Status::Success;
}

Status CudaBackend::graph_instantiate(int device, std::span<const GraphNodeDesc> nodes,
                                      std::unique_ptr<BackendGraph>& out, BackendGraphTree* bt) {
  if (device < 0 || device >= device_count()) return Status::InvalidDevice;
  auto* tree = static_cast<CudaGraphTree*>(bt);
  if (tree != nullptr && tree->device() != device) return Status::InvalidValue;
  GraphGuard own{s_->drv};
  if (tree == nullptr)
    if (Status st = FUNNEL_CU(s_->drv, cuGraphCreate, &own.g, 0); !ok(st)) return st;
  const CUgraph graph = tree != nullptr ? tree->parts[0] : own.g;
  if (Status st = build_graph(device, nodes, graph, tree); !ok(st)) return st;
  CUgraphExec exec = nullptr;
  if (Status st = FUNNEL_CU(s_->drv, cuGraphInstantiateWithFlags, &exec, graph, 0); !ok(st)) return st;
  out = std::make_unique<CudaGraph>(s_, device, exec);
  return Status::Success;
}

Status CudaBackend::graph_tree_create(int device, std::unique_ptr<BackendGraphTree>& out) {
  if (device < 0 || device >= device_count()) return Status::InvalidDevice;
  CUgraph root = nullptr;
  if (Status st = FUNNEL_CU(s_->drv, cuGraphCreate, &root, 0); !ok(st)) return st;
  out = std::make_unique<CudaGraphTree>(s_, device, root);
  return Status::Success;
}

Status CudaBackend::graph_tree_handle(BackendGraphTree& bt, uint32_t part, uint32_t default_value, uint32_t flags,
                                      uint64_t& handle) {
  auto& tree = static_cast<CudaGraphTree&>(bt);
  if (Status st = s_->bind(tree.device()); !ok(st)) return st;
  const CUcontext ctx = s_->devices[static_cast<size_t>(tree.device())].context.load(std::memory_order_acquire);
  CUgraphConditionalHandle h = 0;
  if (Status st = FUNNEL_CU(s_->drv, cuGraphConditionalHandleCreate, &h, tree.parts[part], ctx, default_value, flags);
      !ok(st))
    return st;
  handle = h;
  return Status::Success;
}

Status CudaBackend::graph_tree_cond(BackendGraphTree& bt, uint32_t part, uint64_t handle, uint32_t type, uint32_t size) {
  auto& tree = static_cast<CudaGraphTree&>(bt);
  if (Status st = s_->bind(tree.device()); !ok(st)) return st;
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.handle = handle;
  p.conditional.type = static_cast<CUgraphConditionalNodeType>(type);
  p.conditional.size = size;
  p.conditional.ctx = s_->devices[static_cast<size_t>(tree.device())].context.load(std::memory_order_acquire);
  CUgraphNode node = nullptr;
  if (Status st = FUNNEL_CU(s_->drv, cuGraphAddNode, &node, tree.parts[part], nullptr, nullptr, 0, &p); !ok(st))
    return st;
  tree.conds.push_back(node);
  for (uint32_t b = 0; b < size; ++b) tree.parts.push_back(p.conditional.phGraph_out[b]);
  return Status::Success;
}

Status CudaBackend::graph_tree_cond_destroy(BackendGraphTree& bt, uint32_t cond) {
  auto& tree = static_cast<CudaGraphTree&>(bt);
  const CUgraphNode node = std::exchange(tree.conds[cond], nullptr);
  return FUNNEL_CU(s_->drv, cuGraphDestroyNode, node);
}

Status CudaBackend::graph_update(BackendGraph& bg, std::span<const GraphNodeDesc> nodes, BackendGraphTree* bt) {
  auto& g = static_cast<CudaGraph&>(bg);
  if (auto* tree = static_cast<CudaGraphTree*>(bt); tree != nullptr) {
    // The tree's own graph rebuilt with the new parameters (its conditional nodes and handles
    // stay), then the executable graph made of it updated from it.
    if (Status st = build_graph(g.device(), nodes, tree->parts[0], tree); !ok(st)) return st;
    CUgraphExecUpdateResultInfo info{};
    return FUNNEL_CU(s_->drv, cuGraphExecUpdate, g.exec(), tree->parts[0], &info);
  }
  GraphGuard graph{s_->drv};
  if (Status st = FUNNEL_CU(s_->drv, cuGraphCreate, &graph.g, 0); !ok(st)) return st;
  if (Status st = build_graph(g.device(), nodes, graph.g, nullptr); !ok(st)) return st;
  CUgraphExecUpdateResultInfo info{};
  return FUNNEL_CU(s_->drv, cuGraphExecUpdate, g.exec(), graph.g, &info);
}

Status CudaBackend::graph_launch(BackendStream& bs, BackendGraph& bg) {
  CudaStream& s = enqueue_on(bs);
  if (Status st = s_->bind(s.device()); !ok(st)) return st;
  return FUNNEL_CU(s_->drv, cuGraphLaunch, static_cast<CudaGraph&>(bg).exec(), s.handle());
}

Status CudaBackend::graph_upload(BackendStream& bs, BackendGraph& bg) {
  CudaStream& s = enqueue_on(bs);
  if (Status st = s_->bind(s.device()); !ok(st)) return st;
  return FUNNEL_CU(s_->drv, cuGraphUpload, static_cast<CudaGraph&>(bg).exec(), s.handle());
}

}  // namespace funnel::server::cuda
