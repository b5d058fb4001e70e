// The cuda backend's launches: one at a time (cuLaunchKernelEx), or a batch as CUDA graph
// launches (launch_graphs.hpp).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <iterator>
#include <span>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/launch.hpp"
#include "backend/cuda/launch_graphs.hpp"
// kMaxLaunchBatch (FUNNEL_LAUNCH_BATCH's largest value) is declared there.
#include "funnel/server/server.hpp"

namespace funnel::server::cuda {

namespace {

// The most launches one graph of a batch holds.
constexpr size_t kMaxGraphNodes = kMaxLaunchBatch;

// A reused buffer per thread (workers of several clients share the backend).
std::vector<NodeShape>& shape_scratch() {
  thread_local std::vector<NodeShape> shape;
  return shape;
}

}  // namespace

Status CudaBackend::launch(BackendStream& bs, BackendKernel& bk, const LaunchDesc& l,
                           std::span<const std::byte> params) {
  CudaStream& s = enqueue_on(bs);
  auto& k = static_cast<CudaKernel&>(bk);
  if (Status st = s_->bind(s.device()); !ok(st)) return st;
  const KernelArgs args(k, params);
  LaunchConfig c(l, s.handle());
  return FUNNEL_CU(s_->drv, cuLaunchKernelEx, &c.config, reinterpret_cast<CUfunction>(k.handle()), args.get(),
                   nullptr);
}

// Pieces of 2^k launches (at most kMaxGraphNodes) each go as one graph launch once their
// shape has a graph (LaunchGraphs: built on its second sight); the rest one by one.
// The worker holds back only plain launches (no cooperative, cluster or priority attribute).
// Not on a partition's (green context's) stream: there each launch goes alone.
Status CudaBackend::launch_batch(BackendStream& bs, std::span<const BatchedLaunch> launches, size_t& launched) {
  launched = 0;
  CudaStream& s = enqueue_on(bs);
  if (s.partitioned()) return Status::NotSupported;
  if (Status st = s_->bind(s.device()); !ok(st)) return st;
  while (launched < launches.size()) {
    size_t piece = std::min(std::bit_floor(launches.size() - launched), kMaxGraphNodes);
    const auto part = launches.subspan(launched, piece);
    if (piece < 2 || !ok(launch_graph(s, part))) {
      for (const BatchedLaunch& l : part) {
        if (Status st = launch(bs, *l.kernel, l.desc, l.params); !ok(st)) return st;
        ++launched;
      }
      continue;
    }
    launched += piece;
  }
  return Status::Success;
}

// One graph launch of `part` when its shape has a graph; NotSupported when it has none
// (yet), or when the driver refused a step before the launch (nothing went out).
Status CudaBackend::launch_graph(CudaStream& s, std::span<const BatchedLaunch> part) {
  std::vector<NodeShape>& shape = shape_scratch();
  shape.clear();
  uint64_t hash = part.size();
  for (const BatchedLaunch& l : part) {
    NodeShape n{static_cast<CudaKernel&>(*l.kernel).handle(), {}, {}, l.desc.shared_bytes};
    std::copy(std::begin(l.desc.grid), std::end(l.desc.grid), n.grid);
    std::copy(std::begin(l.desc.block), std::end(l.desc.block), n.block);
    shape.push_back(n);
    for (uint64_t v : {reinterpret_cast<uint64_t>(n.kernel), uint64_t{n.grid[0]} << 32 | n.block[0],
                       uint64_t{n.grid[1]} << 32 | n.grid[2], uint64_t{n.block[1]} << 32 | n.block[2],
                       uint64_t{n.shared_bytes}})
      hash = (hash ^ v) * 0x100000001b3ull;  // FNV-1a over words
  }
  const auto params_of = [&](const BatchedLaunch& l, const KernelArgs& args) {
    CUDA_KERNEL_NODE_PARAMS p{};
    p.gridDimX = l.desc.grid[0];
    p.gridDimY = l.desc.grid[1];
    p.gridDimZ = l.desc.grid[2];
    p.blockDimX = l.desc.block[0];
    p.blockDimY = l.desc.block[1];
    p.blockDimZ = l.desc.block[2];
    p.sharedMemBytes = l.desc.shared_bytes;
    p.kernelParams = args.get();
    p.kern = static_cast<CudaKernel&>(*l.kernel).handle();  // in the current context (ctx null)
    return p;
  };
  bool fresh = false;  // built now, with these launches' arguments
  LaunchGraph* g = s.graphs().find_or_build(shape, hash, [&](CUgraph graph, std::vector<CUgraphNode>& nodes) {
    fresh = true;
    for (const BatchedLaunch& l : part) {
      const KernelArgs args(static_cast<CudaKernel&>(*l.kernel), l.params);
      const CUDA_KERNEL_NODE_PARAMS p = params_of(l, args);
      CUgraphNode node = nullptr;
      if (Status st = FUNNEL_CU_QUIET(s_->drv, cuGraphAddKernelNode, &node, graph, nodes.empty() ? nullptr : &nodes.back(),
                                      nodes.empty() ? 0 : 1, &p);
          !ok(st))
        return st;
      nodes.push_back(node);
    }
    return Status::Success;
  });
  if (g == nullptr) return Status::NotSupported;
  if (!fresh) {
    for (size_t i = 0; i < part.size(); ++i) {
      const KernelArgs args(static_cast<CudaKernel&>(*part[i].kernel), part[i].params);
      const CUDA_KERNEL_NODE_PARAMS p = params_of(part[i], args);
      if (!ok(FUNNEL_CU(s_->drv, cuGraphExecKernelNodeSetParams, g->exec, g->nodes[i], &p))) return Status::NotSupported;
    }
  }
  const Status st = FUNNEL_CU(s_->drv, cuGraphLaunch, g->exec, s.handle());
  if (ok(st)) s.graphs().launched(part.size());
  return st;
}

}  // namespace funnel::server::cuda
