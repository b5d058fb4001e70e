// Placement rules (doc/placement.md): each GPU's workers get whole cores near the GPU that no
// rank is bound to, disjoint across GPUs; then free cores elsewhere; then, when every core is
// taken, the GPU's own cores shared with ranks. The server's main thread takes a leftover free
// core near the first GPU, else shares that GPU's worker cores.
#include "funnel/affinity/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace funnel::affinity {

namespace {

struct CoreState {
  CpuList pus;
  bool free = false;   // no rank is bound to any of its PUs
  bool taken = false;  // given to a GPU's workers
};

std::vector<std::size_t> cores_where(const std::vector<CoreState>& cores, auto&& pred) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < cores.size(); ++i)
    if (pred(cores[i])) out.push_back(i);
  return out;
}

bool inside(const CpuList& pus, const CpuList& set) {
  return std::all_of(pus.begin(), pus.end(), [&](unsigned cpu) { return contains(set, cpu); });
}

CpuList pus_of(const std::vector<CoreState>& cores, const std::vector<std::size_t>& picked) {
  CpuList cpus;
  for (std::size_t i : picked) cpus = cpu_union(cpus, cores[i].pus);
  return cpus;
}

const char* plural(std::size_t n) { return n == 1 ? "" : "s"; }

}  // namespace

Plan make_plan(const Topology& topology, const PlanRequest& request) {
  Plan plan;
  CpuList ranks = request.rank_cpus;
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  const std::size_t cap = std::max(1U, request.workers_per_gpu);

  std::vector<CoreState> cores;
  for (const CpuList& pus : topology.cores()) cores.push_back({pus, !intersects(pus, ranks), false});

  // Locate the GPUs and group those that share a locality: they split its free cores.
  std::map<CpuList, std::vector<std::size_t>> groups;
  std::vector<CpuList> group_order;
  for (const std::string& id : request.gpu_bus_ids) {
    GpuPlacement gpu;
    gpu.bus_id = id;
    if (auto where = topology.locate_gpu(id)) {
      gpu.where = where->where;
      gpu.local_cpus = where->cpus;
      auto& members = groups[gpu.local_cpus];
      if (members.empty()) group_order.push_back(gpu.local_cpus);
      members.push_back(plan.gpus.size());
    } else {
      gpu.reason = fmt::format("no PCI device {} in this node's topology: its workers are not pinned", id);
    }
    plan.gpus.push_back(std::move(gpu));
  }

  // Pass 1: free cores near each group of GPUs, split evenly, disjoint where there are enough.
  std::vector<std::size_t> without_local;
  for (const CpuList& local : group_order) {
    const auto& members = groups[local];
    const auto free_near = cores_where(cores, [&](const CoreState& c) { return c.free && !c.taken && inside(c.pus, local); });
    const std::size_t n = free_near.size();
    const std::size_t k = members.size();
    if (n == 0) {
      without_local.insert(without_local.end(), members.begin(), members.end());
      continue;
    }
    const std::size_t per = std::min(cap, std::max<std::size_t>(1, n / k));
    for (std::size_t j = 0; j < k; ++j) {
      std::vector<std::size_t> picked;
      if (n >= k) {
        picked.assign(free_near.begin() + static_cast<std::ptrdiff_t>(j * per),
                      free_near.begin() + static_cast<std::ptrdiff_t>((j + 1) * per));
      } else {
        picked.push_back(free_near[j % n]);
      }
      for (std::size_t i : picked) cores[i].taken = true;
      GpuPlacement& gpu = plan.gpus[members[j]];
      gpu.worker_cpus = pus_of(cores, picked);
      gpu.reason = n >= k ? fmt::format("{} core{} near the GPU that no rank is bound to", per, plural(per))
                          : fmt::format("only {} free core{} near {} GPUs: shared among them", n, plural(n), k);
    }
  }

  // Pass 2: GPUs whose every near core is bound by a rank.
  for (std::size_t g : without_local) {
    GpuPlacement& gpu = plan.gpus[g];
    auto elsewhere = cores_where(cores, [](const CoreState& c) { return c.free && !c.taken; });
    if (!elsewhere.empty()) {
      elsewhere.resize(std::min(cap, elsewhere.size()));
      for (std::size_t i : elsewhere) cores[i].taken = true;
      gpu.worker_cpus = pus_of(cores, elsewhere);
      gpu.reason = fmt::format("ranks are bound to every core near the GPU: using {} free core{} away from it",
                               elsewhere.size(), plural(elsewhere.size()));
    } else if (!gpu.local_cpus.empty()) {
      // Least harmful: the GPU's own cores, whose ranks at least share the GPU's memory locality.
      gpu.worker_cpus = gpu.local_cpus;
      gpu.reason = "ranks are bound to every core: shares the cores near the GPU with ranks";
    } else {
      // The job may use no CPU near this GPU (its cgroup holds other sockets only).
      for (const CoreState& core : cores) gpu.worker_cpus = cpu_union(gpu.worker_cpus, core.pus);
      gpu.reason = "the job has no CPU near the GPU and ranks are bound to every core: shares all the job's CPUs with ranks";
    }
    gpu.shared_with_ranks = intersects(gpu.worker_cpus, ranks);
  }

  // The server's main thread: mostly asleep in epoll, so it may share when cores run out.
  const auto first = std::find_if(plan.gpus.begin(), plan.gpus.end(), [](const GpuPlacement& g) { return !g.worker_cpus.empty(); });
  if (first == plan.gpus.end()) {
    plan.server_reason = request.gpu_bus_ids.empty() ? "no GPUs to serve: nothing pinned"
                                                     : "none of the GPUs was found in the topology: nothing pinned";
    return plan;
  }
  const auto index = static_cast<std::size_t>(first - plan.gpus.begin());
  auto spare = cores_where(cores, [&](const CoreState& c) { return c.free && !c.taken && inside(c.pus, first->local_cpus); });
  if (!spare.empty()) {
    plan.server_cpus = cores[spare.front()].pus;
    plan.server_reason = fmt::format("a free core near GPU {}", index);
  } else if (spare = cores_where(cores, [](const CoreState& c) { return c.free && !c.taken; }); !spare.empty()) {
    plan.server_cpus = cores[spare.front()].pus;
    plan.server_reason = fmt::format("a free core away from GPU {} (none left near it)", index);
  } else {
    plan.server_cpus = first->worker_cpus;
    plan.server_reason = fmt::format("no free core left: shares GPU {}'s worker cores", index);
  }
  return plan;
}

std::string to_text(const Plan& plan) {
  std::string out;
  for (std::size_t i = 0; i < plan.gpus.size(); ++i) {
    const GpuPlacement& gpu = plan.gpus[i];
    out += fmt::format("GPU {} {}: ", i, gpu.bus_id);
    if (gpu.where.empty()) {
      out += fmt::format("not found; {}\n", gpu.reason);
      continue;
    }
    const std::string local = gpu.local_cpus.empty() ? "none of the job's" : format_cpu_list(gpu.local_cpus);
    out += fmt::format("{} (CPUs {}); workers on CPUs {}{}; {}\n", gpu.where, local,
                       format_cpu_list(gpu.worker_cpus), gpu.shared_with_ranks ? " SHARED WITH RANKS" : "", gpu.reason);
  }
  if (plan.server_cpus.empty())
    out += fmt::format("server: not pinned; {}\n", plan.server_reason);
  else
    out += fmt::format("server: CPUs {}; {}\n", format_cpu_list(plan.server_cpus), plan.server_reason);
  return out;
}

}  // namespace funnel::affinity
