// The placement plan: which cores the server's main thread and each GPU's worker threads run
// on. Pure computation on a Topology; applying it (sched_setaffinity) is the server's business.
// The rules and fallbacks are in doc/placement.md.
#pragma once
#include <string>
#include <vector>

#include "funnel/affinity/cpu_list.hpp"
#include "funnel/affinity/topology.hpp"

namespace funnel::affinity {

struct PlanRequest {
  std::vector<std::string> gpu_bus_ids;  // the GPUs the server serves, in device order
  CpuList rank_cpus;                     // union of the ranks' bindings; read, never widened
  unsigned workers_per_gpu = 1;          // how many of a GPU's worker threads want a core each
};

struct GpuPlacement {
  std::string bus_id;
  std::string where;          // the GPU's locality; empty when the GPU was not found
  CpuList local_cpus;         // every PU near the GPU
  CpuList worker_cpus;        // where this GPU's worker threads go; empty: not pinned
  bool shared_with_ranks = false;  // worker_cpus include CPUs a rank is bound to
  std::string reason;         // why this placement, for the log and `funnelctl plan`
};

struct Plan {
  std::vector<GpuPlacement> gpus;  // one per requested GPU, same order
  CpuList server_cpus;             // the server's main thread; empty: not pinned
  std::string server_reason;
};

Plan make_plan(const Topology& topology, const PlanRequest& request);

// Several lines: one per GPU (bus id, locality, worker CPUs, reason), then the server.
std::string to_text(const Plan& plan);

}  // namespace funnel::affinity
