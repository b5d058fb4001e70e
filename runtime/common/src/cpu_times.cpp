#include "funnel/common/cpu_times.hpp"

#include <charconv>
#include <fstream>
#include <string>
#include <system_error>

namespace funnel::common {
namespace fs = std::filesystem;

std::optional<CpuTimes> parse_schedstat(std::string_view text) noexcept {
  uint64_t v[3];
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (uint64_t& x : v) {
    while (p != end && *p == ' ') ++p;
    const auto [next, ec] = std::from_chars(p, end, x);
    if (ec != std::errc() || next == p) return std::nullopt;
    p = next;
  }
  while (p != end && (*p == ' ' || *p == '\n')) ++p;
  if (p != end) return std::nullopt;
  return CpuTimes{v[0], v[1]};
}

std::optional<CpuTimes> thread_cpu_times(const fs::path& schedstat) noexcept {
  try {
    std::ifstream in(schedstat);
    std::string line;
    if (!in || !std::getline(in, line)) return std::nullopt;
    return parse_schedstat(line);
  } catch (...) {
    return std::nullopt;
  }
}

std::optional<CpuTimes> own_cpu_times() noexcept { return thread_cpu_times("/proc/thread-self/schedstat"); }

std::optional<CpuTimes> task_cpu_times(pid_t tid) noexcept {
  return thread_cpu_times("/proc/self/task/" + std::to_string(tid) + "/schedstat");
}

std::optional<CpuTimes> process_cpu_times(pid_t pid) noexcept {
  try {
    std::error_code ec;
    fs::directory_iterator it("/proc/" + std::to_string(pid) + "/task", ec);
    if (ec) return std::nullopt;
    std::optional<CpuTimes> sum;
    for (const auto& task : it) {
      // A thread that ended between the listing and the read is simply not counted.
      if (const auto t = thread_cpu_times(task.path() / "schedstat")) {
        if (!sum) sum.emplace();
        *sum += *t;
      }
    }
    return sum;
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace funnel::common
