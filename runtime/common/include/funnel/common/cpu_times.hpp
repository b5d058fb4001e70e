// CPU time of threads as the kernel's scheduler counts it (/proc/.../schedstat): time on a
// core, and time runnable but waiting for one (the run queue).  The job report and
// `funnelctl clients` show both for each client's worker thread and for the client's own
// threads (doc/accounting.md): a waited call that lies long in its ring (call_pickup_us)
// with much run-queue time says the node's cores are oversubscribed.  The server reads its
// worker threads'; a client reads its own at its Detach and sends them along (ipc::DetachCmd).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

namespace funnel::common {

struct CpuTimes {
  uint64_t run_ns = 0;   // on a core
  uint64_t wait_ns = 0;  // runnable, waiting for a core
  CpuTimes& operator+=(const CpuTimes& o) noexcept {
    run_ns += o.run_ns;
    wait_ns += o.wait_ns;
    return *this;
  }
};

// One schedstat line: "<run ns> <run-queue ns> <timeslices>"; nullopt if it is not one.
std::optional<CpuTimes> parse_schedstat(std::string_view text) noexcept;
// A thread's, from its schedstat file; nullopt if unreadable (no such thread, a kernel
// without CONFIG_SCHED_INFO).
std::optional<CpuTimes> thread_cpu_times(const std::filesystem::path& schedstat) noexcept;
// The calling thread's.
std::optional<CpuTimes> own_cpu_times() noexcept;
// One thread of this process (by tid), or the sum over every thread of process `pid`.
std::optional<CpuTimes> task_cpu_times(pid_t tid) noexcept;
std::optional<CpuTimes> process_cpu_times(pid_t pid) noexcept;

}  // namespace funnel::common
