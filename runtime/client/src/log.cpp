#include "log.hpp"

#include <unistd.h>

#include <mutex>
#include <set>
#include <string_view>

namespace funnel::client {

void log_error(const std::string& line) noexcept {
  std::string s = line;
  s += '\n';
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void report_unsupported(const char* name) noexcept {
  try {
    static std::mutex mu;
    // Never destroyed: stubs may be called from other libraries' destructors at exit.
    static auto* seen = new std::set<std::string, std::less<>>;
    std::lock_guard lk(mu);
    if (!seen->emplace(name).second) return;
  } catch (...) {
  }
  log_error(fmt::format("funnel: {} is not supported yet", name));
}

}  // namespace funnel::client
