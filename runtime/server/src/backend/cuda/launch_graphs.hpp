// Launch graphs: how the cuda backend sends a batch of launches as one CUDA graph launch
// (CudaBackend::launch_batch, launch.cpp).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda/device.hpp"
#include "backend/cuda/driver.hpp"

namespace funnel::server::cuda {

// What a launch graph's node is fixed to; its arguments are set anew for every launch.
struct NodeShape {
  CUkernel kernel;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  bool operator==(const NodeShape&) const = default;
};

// A chain of kernel nodes, instantiated once and launched again with each batch's arguments
// (cuGraphExecKernelNodeSetParams, then one cuGraphLaunch).  An exec is launched into one
// stream only: a graph exec orders each launch behind its previous one, which across streams
// would be a false dependency.
struct LaunchGraph {
  std::vector<NodeShape> shape;
  CUgraph graph = nullptr;  // kept: its node handles name the exec's nodes
  CUgraphExec exec = nullptr;
  std::vector<CUgraphNode> nodes;
  uint64_t used = 0;  // LaunchGraphs::tick of its last launch
};

// A stream's launch graphs, at most kMaxGraphs (the least recently launched goes).  A graph
// is built only for a shape seen before (kSeen remembered), so launches that never repeat
// their shape cost no instantiation.
class LaunchGraphs {
 public:
  static constexpr size_t kMaxGraphs = 16;
  static constexpr size_t kSeen = 32;
  LaunchGraphs(const Shared& shared, int device) : shared_(&shared), device_(device) {}
  ~LaunchGraphs();
  LaunchGraphs(const LaunchGraphs&) = delete;
  LaunchGraphs& operator=(const LaunchGraphs&) = delete;

  // The graph of this shape; nullptr on its first sight (remembered) or when building failed.
  // add_nodes(CUgraph, std::vector<CUgraphNode>&) -> Status adds the chain of nodes.  (A
  // template, not a std::function: this runs for every batch.)
  template <class AddNodes>
  LaunchGraph* find_or_build(const std::vector<NodeShape>& shape, uint64_t hash, AddNodes&& add_nodes) {
    ++tick_;
    for (auto& g : graphs_)
      if (g.shape == shape) {
        g.used = tick_;
        return &g;
      }
    if (std::find(seen_.begin(), seen_.end(), hash) == seen_.end()) {
      if (seen_.size() >= kSeen) seen_.erase(seen_.begin());
      seen_.push_back(hash);
      return nullptr;
    }
    LaunchGraph g;
    g.shape = shape;
    g.used = tick_;
    if (!ok(FUNNEL_CU(shared_->drv, cuGraphCreate, &g.graph, 0)) || !ok(add_nodes(g.graph, g.nodes)) ||
        !ok(FUNNEL_CU(shared_->drv, cuGraphInstantiateWithFlags, &g.exec, g.graph, 0))) {
      destroy(g);
      // Not again for this shape until it is seen anew.
      seen_.erase(std::remove(seen_.begin(), seen_.end(), hash), seen_.end());
      return nullptr;
    }
    ++stats_.built;
    if (graphs_.size() >= kMaxGraphs) {
      auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                  [](const LaunchGraph& a, const LaunchGraph& b) { return a.used < b.used; });
      ++stats_.evicted;
      destroy(*lru);
      graphs_.erase(lru);
    }
    graphs_.push_back(std::move(g));
    return &graphs_.back();
  }

  // A graph launch went out with `nodes` launches.
  void launched(size_t nodes) noexcept {
    ++stats_.graph_launches;
    stats_.graph_nodes += nodes;
  }

  // What the stream's graphs did, for the server's debug log when the stream goes.
  struct Stats {
    uint64_t built = 0, evicted = 0, graph_launches = 0, graph_nodes = 0;
  };

 private:
  void destroy(LaunchGraph& g) noexcept;

  const Shared* shared_;
  int device_;
  std::vector<LaunchGraph> graphs_;
  std::vector<uint64_t> seen_;
  uint64_t tick_ = 0;
  Stats stats_;
};

}  // namespace funnel::server::cuda
