// The server's side of the CPU times (funnel/common/cpu_times.hpp): where a measurement is
// kept until the job report or `funnelctl clients` reads it.
#pragma once
#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>

#include "funnel/common/cpu_times.hpp"

namespace funnel::server {

using common::CpuTimes;
using common::own_cpu_times;
using common::parse_schedstat;
using common::process_cpu_times;
using common::task_cpu_times;

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
