// Where the server's threads run (doc/placement.md): the affinity library's Plan for this
// node's topology, the server's GPUs and its clients' CPU bindings, re-made as clients
// attach and leave, and applied to the server's threads.  Only the main-loop thread uses it.
#pragma once
#include <pthread.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "funnel/affinity/plan.hpp"
#include "funnel/affinity/topology.hpp"

namespace funnel::server {

class ThreadPlacement {
 public:
  // What the plan knows of a client.
  struct Client {
    pid_t pid = 0;
    int mpi_rank = -1;
    int device = 0;             // its home device (MappedMsg::home_device)
    affinity::CpuList binding;  // its CPU binding when it attached; empty when unreadable
    uint32_t share_bp = 0;      // FUNNEL_GPU_FRACTION in 1/10000; 0: the whole GPU
    bool disjoint = false;
  };
  // A worker thread to bind: the pthread and, once the thread has published it, its tid;
  // the client it serves alone (0: a pooled thread that serves several).
  struct Worker {
    pthread_t thread;
    pid_t tid = 0;
    int device = 0;
    uint32_t client = 0;
  };

  // enabled = false (FUNNEL_SERVER_AFFINITY=off): plans for `funnelctl plan` but binds
  // nothing.  Loads this machine's topology (hwloc honours HWLOC_XMLFILE); when that fails
  // it logs why and binds nothing either.
  // follow_rank (FUNNEL_SERVER_AFFINITY=auto; gpu: false): where a GPU's workers must share
  // cores with ranks (no core is free), the thread of a bound client shares that client's
  // CPUs, not every core near the GPU.
  ThreadPlacement(std::vector<std::string> gpu_bus_ids, bool enabled, bool follow_rank = true);
  ThreadPlacement(const ThreadPlacement&) = delete;
  ThreadPlacement& operator=(const ThreadPlacement&) = delete;

  // FUNNEL_SERVER_WORKERS: a GPU has at most this many worker threads, whatever its
  // clients (0: one per client).
  void cap_workers(unsigned per_gpu) noexcept { workers_cap_ = per_gpu; }
  void add_client(uint32_t id, Client c);
  void remove_client(uint32_t id);

  // Re-plans (when enabled, or when `even_if_off`: for funnelctl plan); logs the plan when
  // it differs from the last one.
  void replan(bool even_if_off = false);
  // Binds the server's threads: every thread of the process but the workers to the
  // server's CPUs, each worker to its device's worker CPUs.  A failed bind is logged once
  // per plan and left as it is: placement is advice, never a reason to fail a client.
  void apply(const std::vector<Worker>& workers);

  bool binds() const noexcept { return enabled_ && topology_.has_value(); }
  // CPUs of the current plan: a GPU's workers' (every CPU of the job when not pinned), the
  // server's other threads'.
  affinity::CpuList worker_cpus(int device) const;
  // Where the worker of client `id` on `device` goes: its client's CPUs when it follows its
  // rank (above), else its own core (own_core) where it has one, else worker_cpus(device).
  affinity::CpuList worker_cpus(int device, uint32_t id) const;
  // The one physical core of the GPU's worker CPUs that the worker of client `id` gets to
  // itself, or empty.  Only where every client is bound and the GPU's worker CPUs are free of
  // ranks (placement rules 1-2) and hold a core for each of the GPU's clients: the k-th client
  // of the GPU by id gets the k-th core.  Sharing the set, two polling workers could land on
  // one core, and a sched_yield that hands it to the other one looks like a rank that wants
  // the core (Worker::back_off): the worker then naps for 100 ms.
  affinity::CpuList own_core(int device, uint32_t id) const;
  // Whether the worker of client `id` on `device` goes to its client's CPUs (as above; never
  // with pooled workers, cap_workers).
  bool follows_rank(int device, uint32_t id) const;
  affinity::CpuList server_cpus() const;

  // The plan and the clients, for the control verb `plan` (funnelctl plan) and the log.
  nlohmann::json to_json() const;
  std::string text() const;

 private:
  // Loads the topology at the first plan: a Server that never plans (affinity off, no
  // funnelctl plan) never runs hwloc.
  bool load_topology();
  bool is_bound(const Client& c) const;

  std::vector<std::string> bus_ids_;
  bool enabled_;
  bool follow_rank_;
  std::optional<affinity::Topology> topology_;
  bool loaded_ = false;
  std::string topology_error_;
  affinity::CpuList all_;  // every CPU the job may use
  std::map<uint32_t, Client> clients_;
  unsigned workers_cap_ = 0;
  affinity::Plan plan_;
  std::string last_text_;
  bool warned_ = false;
};

}  // namespace funnel::server
