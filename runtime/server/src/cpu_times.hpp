// CPU time of threads as the kernel's scheduler counts it (/proc/.../schedstat): time on a
// core, and time runnable but waiting for one (the run queue).  The job report and
// `funnelctl clients` show both for each client's worker thread and for the client's own
// threads (doc/accounting.md): a waited call that lies long in its ring (call_pickup_us)
// with much run-queue time says the node's cores are oversubscribed.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string_view>

namespace funnel::server {

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

// A measurement kept in two relaxed atomics, written once by one thread: kUnmeasured
// until then.
struct CpuTimesCell {
  static constexpr uint64_t kUnmeasured = std::numeric_limits<uint64_t>::max();
  std::atomic<uint64_t> run_ns{kUnmeasured}, wait_ns{kUnmeasured};
  void store(const std::optional<CpuTimes>& t) noexcept {
    if (!t) return;
    wait_ns.store(t->wait_ns, std::memory_order_relaxed);
    run_ns.store(t->run_ns, std::memory_order_release);
  }
  std::optional<CpuTimes> load() const noexcept {
    const uint64_t run = run_ns.load(std::memory_order_acquire);
    if (run == kUnmeasured) return std::nullopt;
    return CpuTimes{run, wait_ns.load(std::memory_order_relaxed)};
  }
};

}  // namespace funnel::server
