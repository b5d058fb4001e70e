// A set of logical CPUs (PUs), named by the operating system's CPU numbers as taskset,
// sched_setaffinity and /proc/<pid>/status ("Cpus_allowed_list") name them.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace funnel::affinity {

// Ascending, without duplicates.
using CpuList = std::vector<unsigned>;

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}. Throws std::invalid_argument naming the text.
CpuList parse_cpu_list(std::string_view text);
// The inverse: ranges collapsed, "" for an empty list.
std::string format_cpu_list(const CpuList& cpus);

// Sorted union; both inputs ascending.
CpuList cpu_union(const CpuList& a, const CpuList& b);
bool intersects(const CpuList& a, const CpuList& b);
bool contains(const CpuList& set, unsigned cpu);

}  // namespace funnel::affinity
