#include "backend/cuda/launch_graphs.hpp"

#include <spdlog/spdlog.h>

namespace funnel::server::cuda {

LaunchGraphs::~LaunchGraphs() {
  if (stats_.built != 0)
    spdlog::debug("device {}: a stream's launch graphs: {} built, {} dropped for newer ones, {} graph launches of {} kernels",
                  device_, stats_.built, stats_.evicted, stats_.graph_launches, stats_.graph_nodes);
  if (graphs_.empty() || !ok(shared_->bind(device_))) return;
  for (auto& g : graphs_) destroy(g);
}

void LaunchGraphs::destroy(LaunchGraph& g) noexcept {
  if (g.exec != nullptr) FUNNEL_CU(shared_->drv, cuGraphExecDestroy, g.exec);
  if (g.graph != nullptr) FUNNEL_CU(shared_->drv, cuGraphDestroy, g.graph);
  g.exec = nullptr;
  g.graph = nullptr;
}

}  // namespace funnel::server::cuda
