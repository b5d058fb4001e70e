// The cuda backend's graphs: a client's nodes built into a CUgraph of the device's context with
// the driver's node calls, instantiated once, launched whole on the client's stream
// (doc/design/graphs.md).  An update builds the new nodes into a CUgraph of the same shape and
// hands it to cuGraphExecUpdate.
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

Status CudaBackend::build_graph(int device, std::span<const GraphNodeDesc> nodes, CUgraph& out) {
  const Driver& drv = s_->drv;
  if (Status st = s_->bind(device); !ok(st)) return st;
  const CUcontext ctx = s_->devices[static_cast<size_t>(device)].context.load(std::memory_order_acquire);
  GraphGuard graph{drv};
  if (Status st = FUNNEL_CU(drv, cuGraphCreate, &graph.g, 0); !ok(st)) return st;
  std::vector<CUgraphNode> made;
  made.reserve(nodes.size());
  std::vector<CUgraphNode> deps;
  for (const GraphNodeDesc& n : nodes) {
    deps.clear();
    for (uint32_t d : n.deps) deps.push_back(made[d]);
    CUgraphNode node = nullptr;
    Status st = Status::Success;
    switch (n.kind) {
      case ipc::GraphNodeKind::Empty:
        st = FUNNEL_CU(drv, cuGraphAddEmptyNode, &node, graph.g, deps.data(), deps.size());
        break;
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
        st = FUNNEL_CU(drv, cuGraphAddKernelNode, &node, graph.g, deps.data(), deps.size(), &p);
        break;
      }
      case ipc::GraphNodeKind::Copy: {
        const CUDA_MEMCPY3D m = memcpy_params(n.copy);
        st = FUNNEL_CU(drv, cuGraphAddMemcpyNode, &node, graph.g, deps.data(), deps.size(), &m, ctx);
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
        st = FUNNEL_CU(drv, cuGraphAddMemsetNode, &node, graph.g, deps.data(), deps.size(), &m, ctx);
        break;
      }
      case ipc::GraphNodeKind::EventRecord:
        st = FUNNEL_CU(drv, cuGraphAddEventRecordNode, &node, graph.g, deps.data(), deps.size(),
                       static_cast<CudaEvent&>(*n.event).handle());
        break;
      case ipc::GraphNodeKind::EventWait:
        st = FUNNEL_CU(drv, cuGraphAddEventWaitNode, &node, graph.g, deps.data(), deps.size(),
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
          st = FUNNEL_CU(drv, cuGraphAddBatchMemOpNode, &next, graph.g, deps.data(), deps.size(), &p);
          if (!ok(st)) break;
          deps.assign(1, next);
          node = next;
        }
        break;
      }
    }
    if (!ok(st)) return st;
    made.push_back(node);
  }
  out = graph.g;
  graph.g = nullptr;
  return Status::Success;
}

Status CudaBackend::graph_instantiate(int device, std::span<const GraphNodeDesc> nodes,
                                      std::unique_ptr<BackendGraph>& out) {
  if (device < 0 || device >= device_count()) return Status::InvalidDevice;
  GraphGuard graph{s_->drv};
  if (Status st = build_graph(device, nodes, graph.g); !ok(st)) return st;
  CUgraphExec exec = nullptr;
  if (Status st = FUNNEL_CU(s_->drv, cuGraphInstantiateWithFlags, &exec, graph.g, 0); !ok(st)) return st;
  out = std::make_unique<CudaGraph>(s_, device, exec);
  return Status::Success;
}

Status CudaBackend::graph_update(BackendGraph& bg, std::span<const GraphNodeDesc> nodes) {
  auto& g = static_cast<CudaGraph&>(bg);
  GraphGuard graph{s_->drv};
  if (Status st = build_graph(g.device(), nodes, graph.g); !ok(st)) return st;
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
