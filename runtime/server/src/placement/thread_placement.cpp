#include "placement/thread_placement.hpp"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "funnel/affinity/binding.hpp"
#include "funnel/common/config.hpp"

namespace funnel::server {

namespace aff = funnel::affinity;

namespace {

// The threads of this process (/proc/self/task).
std::vector<pid_t> own_threads() {
  std::vector<pid_t> tids;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return tids;
  while (const dirent* e = ::readdir(dir)) {
    const int tid = std::atoi(e->d_name);
    if (tid > 0) tids.push_back(tid);
  }
  ::closedir(dir);
  return tids;
}

std::string share_text(const ThreadPlacement::Client& c) {
  if (c.share_bp == 0) return "the whole GPU";
  return fmt::format("{:g}% of its SMs, {}", c.share_bp / 100.0, c.disjoint ? "disjoint" : "shared");
}

}  // namespace

ThreadPlacement::ThreadPlacement(std::vector<std::string> gpu_bus_ids, bool enabled, bool follow_rank)
    : bus_ids_(std::move(gpu_bus_ids)), enabled_(enabled), follow_rank_(follow_rank) {}

bool ThreadPlacement::load_topology() {
  if (loaded_) return topology_.has_value();
  loaded_ = true;
  try {
    topology_.emplace(aff::Topology::this_machine());
    all_ = aff::all_cpus(*topology_);
  } catch (const std::exception& e) {
    topology_error_ = e.what();
    spdlog::warn("placement: cannot read this node's topology ({}); the server's threads stay where they started",
                 topology_error_);
  }
  return topology_.has_value();
}

// As bound_cpus() sees it: a binding to every CPU of the job binds nothing.
bool ThreadPlacement::is_bound(const Client& c) const {
  return !c.binding.empty() && !std::includes(c.binding.begin(), c.binding.end(), all_.begin(), all_.end());
}

void ThreadPlacement::add_client(uint32_t id, Client c) { clients_[id] = std::move(c); }

void ThreadPlacement::remove_client(uint32_t id) { clients_.erase(id); }

void ThreadPlacement::replan(bool even_if_off) {
  if ((!enabled_ && !even_if_off) || !load_topology()) return;
  aff::PlanRequest req;
  req.gpu_bus_ids = bus_ids_;
  std::vector<aff::CpuList> bindings;
  std::map<int, unsigned> per_device;
  size_t bound = 0;
  for (const auto& [id, c] : clients_) {
    if (!c.binding.empty()) bindings.push_back(c.binding);
    if (is_bound(c)) ++bound;
    ++per_device[c.device];
  }
  req.rank_cpus = aff::bound_cpus(*topology_, bindings);
  for (const auto& [device, n] : per_device) req.workers_per_gpu = std::max(req.workers_per_gpu, n);
  if (workers_cap_ != 0) req.workers_per_gpu = std::min(req.workers_per_gpu, workers_cap_);
  plan_ = aff::make_plan(*topology_, req);
  // Logged when where the threads go changes, not at every attach of a job's ranks.
  std::string text = aff::to_text(plan_);
  if (text != last_text_) {
    spdlog::info("placement plan ({} client(s), {} of them bound):\n{}", clients_.size(), bound,
                 text.empty() ? "(empty)" : text);
    last_text_ = std::move(text);
    warned_ = false;
  }
}

aff::CpuList ThreadPlacement::worker_cpus(int device) const {
  if (device >= 0 && static_cast<size_t>(device) < plan_.gpus.size() && !plan_.gpus[static_cast<size_t>(device)].worker_cpus.empty())
    return plan_.gpus[static_cast<size_t>(device)].worker_cpus;
  return all_;
}

bool ThreadPlacement::follows_rank(int device, uint32_t id) const {
  // Ranks are bound to every core, so the workers run on ranks' cores whatever we do.  On its
  // own rank's core a worker takes the core from the one rank that waits for it anyway (a
  // synchronous call; the client yields at once, Completion::worker_on_client_cpus); spread
  // over all of the GPU's cores it preempts ranks that are computing or exchanging halos.
  // A pooled thread (FUNNEL_SERVER_WORKERS) serves several clients: it follows none.
  if (!follow_rank_ || workers_cap_ != 0 || device < 0 || static_cast<size_t>(device) >= plan_.gpus.size() ||
      !plan_.gpus[static_cast<size_t>(device)].shared_with_ranks)
    return false;
  const auto c = clients_.find(id);
  return c != clients_.end() && is_bound(c->second);
}

namespace {
std::string own_text(const aff::CpuList& own) {
  return own.empty() ? std::string() : ", its worker alone on CPUs " + aff::format_cpu_list(own);
}
}  // namespace

aff::CpuList ThreadPlacement::own_core(int device, uint32_t id) const {
  if (workers_cap_ != 0 || !topology_ || device < 0 || static_cast<size_t>(device) >= plan_.gpus.size())
    return {};
  const aff::GpuPlacement& g = plan_.gpus[static_cast<size_t>(device)];
  if (g.shared_with_ranks || g.worker_cpus.empty() || !clients_.contains(id)) return {};
  size_t k = 0, on_device = 0;
  for (const auto& [cid, c] : clients_) {
    // An unbound client may run on any core, these included: no core is a worker's own then.
    if (!is_bound(c)) return {};
    if (c.device != device) continue;
    if (cid < id) ++k;
    ++on_device;
  }
  std::vector<const aff::CpuList*> cores;
  for (const aff::CpuList& core : topology_->cores())
    if (std::all_of(core.begin(), core.end(), [&](unsigned pu) { return aff::contains(g.worker_cpus, pu); }))
      cores.push_back(&core);
  if (cores.size() < on_device) return {};
  return *cores[k];
}

aff::CpuList ThreadPlacement::worker_cpus(int device, uint32_t id) const {
  if (follows_rank(device, id)) return clients_.at(id).binding;
  if (aff::CpuList own = own_core(device, id); !own.empty()) return own;
  return worker_cpus(device);
}

aff::CpuList ThreadPlacement::server_cpus() const { return plan_.server_cpus.empty() ? all_ : plan_.server_cpus; }

void ThreadPlacement::apply(const std::vector<Worker>& workers) {
  if (!binds() || all_.empty()) return;
  auto warn_once = [&](const std::exception& e) {
    if (!warned_) spdlog::warn("placement: {}; that thread stays where it was", e.what());
    warned_ = true;
  };
  std::set<pid_t> worker_tids;
  for (const Worker& w : workers)
    if (w.tid > 0) worker_tids.insert(w.tid);
  const aff::CpuList server = server_cpus();
  for (pid_t tid : own_threads()) {
    if (worker_tids.contains(tid)) continue;
    try {
      aff::bind_task(tid, server);
    } catch (const std::system_error& e) {
      if (e.code().value() != ESRCH) warn_once(e);  // ESRCH: the thread has just ended
    }
  }
  for (const Worker& w : workers) {
    try {
      aff::bind_thread(w.thread, worker_cpus(w.device, w.client));
    } catch (const std::system_error& e) {
      if (e.code().value() != ESRCH) warn_once(e);
    }
  }
}

nlohmann::json ThreadPlacement::to_json() const {
  using nlohmann::json;
  json gpus = json::array();
  for (size_t d = 0; d < plan_.gpus.size(); ++d) {
    const aff::GpuPlacement& g = plan_.gpus[d];
    gpus.push_back({{"device", d},
                    {"bus_id", g.bus_id},
                    {"where", g.where},
                    {"local_cpus", aff::format_cpu_list(g.local_cpus)},
                    {"worker_cpus", aff::format_cpu_list(g.worker_cpus)},
                    {"shared_with_ranks", g.shared_with_ranks},
                    {"reason", g.reason}});
  }
  json clients = json::array();
  for (const auto& [id, c] : clients_)
    clients.push_back({{"id", id},
                       {"pid", c.pid},
                       {"mpi_rank", c.mpi_rank},
                       {"device", c.device},
                       {"gpu_share_bp", c.share_bp},
                       {"disjoint", c.disjoint},
                       {"binding", aff::format_cpu_list(c.binding)},
                       {"worker_shares_binding", follows_rank(c.device, id)},
                       {"worker_own_core", aff::format_cpu_list(own_core(c.device, id))}});
  return {{"applied", binds()},
          {"affinity", server_affinity_name(enabled_, follow_rank_)},
          {"topology_error", topology_error_},
          {"job_cpus", aff::format_cpu_list(all_)},
          {"gpus", gpus},
          {"server_cpus", aff::format_cpu_list(plan_.server_cpus)},
          {"server_reason", plan_.server_reason},
          {"clients", clients},
          {"text", text()}};
}

std::string ThreadPlacement::text() const {
  std::string out;
  if (!topology_) out += fmt::format("no topology ({}): nothing is pinned\n", topology_error_.empty() ? "not read" : topology_error_);
  else out += aff::to_text(plan_);
  if (!enabled_) out += "FUNNEL_SERVER_AFFINITY=off: this plan is not applied\n";
  for (const auto& [id, c] : clients_) {
    const std::string who = c.mpi_rank >= 0 ? fmt::format("rank {} (client {}, pid {})", c.mpi_rank, id, c.pid)
                                            : fmt::format("client {} (pid {})", id, c.pid);
    out += fmt::format("{}: GPU {}, {}, {}{}\n", who, c.device, share_text(c),
                       is_bound(c) ? "bound to CPUs " + aff::format_cpu_list(c.binding) : "not bound",
                       follows_rank(c.device, id) ? ", its worker shares them" : own_text(own_core(c.device, id)));
  }
  return out;
}

}  // namespace funnel::server
