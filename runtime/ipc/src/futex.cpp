#include "funnel/ipc/futex.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

namespace funnel::ipc {

// The words are shared between processes, so no FUTEX_PRIVATE_FLAG.
bool futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout) noexcept {
  const auto ns = timeout.count() < 0 ? 0 : timeout.count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  const long rc = syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
  return !(rc == -1 && errno == ETIMEDOUT);
}

void futex_wake_all(std::atomic<uint32_t>& word) noexcept {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void yield_now() noexcept { sched_yield(); }

}  // namespace funnel::ipc
