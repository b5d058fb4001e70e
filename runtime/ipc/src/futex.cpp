#include "funnel/ipc/futex.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <ctime>

namespace funnel::ipc {

namespace {
// futex_waitv's ABI (linux/futex.h of 5.16 and later), spelled out so that older headers build.
struct WaitvEntry {
  uint64_t val;
  uint64_t uaddr;
  uint32_t flags;
  uint32_t reserved;
};
constexpr uint32_t kFutexSize32 = 2;  // FUTEX_32
#ifdef SYS_futex_waitv
constexpr long kSysFutexWaitv = SYS_futex_waitv;
#else
constexpr long kSysFutexWaitv = 449;  // the same number on every architecture
#endif

std::atomic<bool> g_no_waitv{false};  // futex_waitv failed with ENOSYS or EPERM once

// futex_waitv, or false where the kernel (or a seccomp filter) refuses it.
bool waitv(const FutexWaitItem* items, size_t n, std::chrono::nanoseconds timeout) noexcept {
  if (n > kFutexWaitAnyMax || g_no_waitv.load(std::memory_order_relaxed)) return false;
  WaitvEntry w[kFutexWaitAnyMax] = {};
  for (size_t i = 0; i < n; ++i) {
    w[i].val = items[i].expected;
    w[i].uaddr = reinterpret_cast<uintptr_t>(items[i].word);
    w[i].flags = kFutexSize32;  // shared between processes: no FUTEX_PRIVATE_FLAG
  }
  // futex_waitv takes an absolute time on the given clock.
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const int64_t ns = std::max<int64_t>(timeout.count(), 0) + now.tv_nsec;
  timespec until{static_cast<time_t>(now.tv_sec + ns / 1000000000), static_cast<long>(ns % 1000000000)};
  const long rc = syscall(kSysFutexWaitv, w, static_cast<unsigned>(n), 0u, &until, CLOCK_MONOTONIC);
  if (rc != -1 || (errno != ENOSYS && errno != EPERM)) return true;  // EPERM: a seccomp filter
  g_no_waitv.store(true, std::memory_order_relaxed);
  return false;
}
}  // namespace

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

void futex_wait_any(const FutexWaitItem* items, size_t n, std::chrono::nanoseconds timeout) noexcept {
  if (n == 0 || waitv(items, n, timeout)) return;
  futex_wait(*items[0].word, items[0].expected, std::min<std::chrono::nanoseconds>(timeout, kFutexWaitAnyFallback));
}

bool futex_wait_any_native() noexcept {
  std::atomic<uint32_t> word{1};
  const FutexWaitItem probe{&word, 0};  // differs: returns at once where it works
  return waitv(&probe, 1, std::chrono::nanoseconds::zero());
}

void yield_now() noexcept { sched_yield(); }

}  // namespace funnel::ipc
