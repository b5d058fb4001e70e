#include "backend/cuda/launch_graphs.hpp"

namespace funnel::server::cuda {

LaunchGraphs::~LaunchGraphs() {
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
