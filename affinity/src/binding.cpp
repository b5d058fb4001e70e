#include "funnel/affinity/binding.hpp"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <system_error>

namespace funnel::affinity {

namespace {

cpu_set_t to_set(const CpuList& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned cpu : cpus)
    if (cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  return set;
}

}  // namespace

void bind_task(pid_t tid, const CpuList& cpus) {
  const cpu_set_t set = to_set(cpus);
  if (sched_setaffinity(tid, sizeof set, &set) != 0)
    throw std::system_error(errno, std::generic_category(),
                            "sched_setaffinity(" + std::to_string(tid) + ", CPUs " + format_cpu_list(cpus) + ") failed");
}

void bind_thread(pthread_t thread, const CpuList& cpus) {
  const cpu_set_t set = to_set(cpus);
  if (const int rc = pthread_setaffinity_np(thread, sizeof set, &set); rc != 0)
    throw std::system_error(rc, std::generic_category(), "pthread_setaffinity_np(CPUs " + format_cpu_list(cpus) + ") failed");
}

CpuList process_binding(pid_t pid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(pid, sizeof set, &set) != 0)
    throw std::system_error(errno, std::generic_category(), "sched_getaffinity(" + std::to_string(pid) + ") failed");
  CpuList cpus;
  for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

CpuList all_cpus(const Topology& topology) {
  CpuList all;
  for (const CpuList& core : topology.cores()) all = cpu_union(all, core);
  return all;
}

CpuList bound_cpus(const Topology& topology, const std::vector<CpuList>& rank_bindings) {
  const CpuList all = all_cpus(topology);
  CpuList claimed;
  for (const CpuList& rank : rank_bindings) {
    CpuList mine = rank;
    std::sort(mine.begin(), mine.end());
    mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
    bool everything = true;
    for (unsigned cpu : all)
      if (!contains(mine, cpu)) everything = false;
    if (!everything) claimed = cpu_union(claimed, mine);
  }
  return claimed;
}

}  // namespace funnel::affinity
