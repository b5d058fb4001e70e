// The ranks' CPU bindings, read and never changed: what a process is bound to, and which CPUs
// a set of ranks really claims (PlanRequest::rank_cpus).  And the one thing that is changed:
// the binding of the server's own threads, to apply a Plan.
#pragma once
#include <pthread.h>
#include <sys/types.h>

#include <vector>

#include "funnel/affinity/cpu_list.hpp"
#include "funnel/affinity/topology.hpp"

namespace funnel::affinity {

// The CPUs process `pid` may run on (sched_getaffinity; 0 = this process). Throws
// std::system_error naming the call.
CpuList process_binding(pid_t pid);

// The union of the ranks' bindings, leaving out ranks that are not bound: a rank allowed every
// CPU of the topology claims nothing (else one unbound rank would make every core look taken).
CpuList bound_cpus(const Topology& topology, const std::vector<CpuList>& rank_bindings);

// Every CPU of the topology (what the job's cgroup allows).
CpuList all_cpus(const Topology& topology);

// Binds one thread of this process: a thread id (gettid; /proc/self/task) or a pthread.
// CPUs this machine does not have are ignored by the kernel; std::system_error when none
// of them can be used.
void bind_task(pid_t tid, const CpuList& cpus);
void bind_thread(pthread_t thread, const CpuList& cpus);

}  // namespace funnel::affinity
