#include "funnel/affinity/binding.hpp"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <system_error>

namespace funnel::affinity {

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

CpuList bound_cpus(const Topology& topology, const std::vector<CpuList>& rank_bindings) {
  CpuList all;
  for (const CpuList& core : topology.cores()) all = cpu_union(all, core);
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
