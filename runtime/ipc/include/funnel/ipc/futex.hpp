// Cross-process futex wake-ups on 32-bit words that live in a shared segment.
// Both sides spin briefly before they sleep (see wait_until below); every sleep
// has a timeout so that a caller can notice a dead peer.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace funnel::ipc {

static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Sleeps while *word == expected, at most `timeout`.  Returns false on timeout.
// Spurious wake-ups are allowed: callers re-check their condition.
bool futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout) noexcept;

// Wakes every sleeper on `word` (in any process that maps it).
void futex_wake_all(std::atomic<uint32_t>& word) noexcept;

// One word of futex_wait_any: sleep while *word == expected.
struct FutexWaitItem {
  std::atomic<uint32_t>* word;
  uint32_t expected;
};
// Sleeps while every item's word equals its expected value, at most `timeout` (futex_waitv,
// Linux 5.16; at most kFutexWaitAnyMax words).  Where the kernel lacks futex_waitv, or for
// more words, it sleeps on the first word for at most kFutexWaitAnyFallback instead, so a
// change of another word is seen that late.  Spurious wake-ups are allowed.
inline constexpr size_t kFutexWaitAnyMax = 128;
inline constexpr std::chrono::microseconds kFutexWaitAnyFallback{100};
void futex_wait_any(const FutexWaitItem* items, size_t n, std::chrono::nanoseconds timeout) noexcept;
// Whether futex_wait_any sleeps on all its words (futex_waitv works here), not the fallback.
bool futex_wait_any_native() noexcept;

// sched_yield(): gives the core to another runnable thread, if any.
void yield_now() noexcept;

// How long a poll spins with pause instructions before it starts to yield (WaitOptions::pause).
inline constexpr std::chrono::nanoseconds kPausePoll = std::chrono::microseconds(20);

struct WaitOptions {
  // How long to poll before sleeping: the first few microseconds with a pause loop,
  // the rest with sched_yield (the core goes to anything runnable, but the answer is
  // seen within a microsecond).  A sleeping thread takes 10-30 us to wake on the GPU
  // machine, which cost a synchronous 16 MiB copy 5 % of its bandwidth; the CUDA
  // runtime's own default wait spins and yields the same way.
  std::chrono::nanoseconds spin = std::chrono::milliseconds(2);
  // The first part of `spin` that polls with pause instructions before it yields (at most
  // `spin`): 0 when the thread that will answer shares this thread's core.
  std::chrono::nanoseconds pause = kPausePoll;
  // Each sleep lasts at most this long, so give_up() is polled at least that often.
  std::chrono::nanoseconds slice = std::chrono::milliseconds(20);
  // Incremented while this thread sleeps, so that the waker may skip the futex wake
  // (a system call) when nobody sleeps.  The waker bumps `word`, then loads *sleepers,
  // both seq_cst.
  std::atomic<uint32_t>* sleepers = nullptr;
};

// Polls pred() for up to `spin` (pause for the first `pause` of it, then sched_yield).  True
// as soon as it holds.
template <class Pred>
bool spin_until(Pred pred, std::chrono::nanoseconds spin, std::chrono::nanoseconds pause = kPausePoll) {
  using Clock = std::chrono::steady_clock;
  if (pred()) return true;
  if (spin <= std::chrono::nanoseconds::zero()) return false;
  const auto start = Clock::now();
  const auto pause_until = start + std::min(spin, pause);
  const auto yield_until = start + spin;
  for (unsigned i = 1; pause > std::chrono::nanoseconds::zero(); ++i) {
    if (pred()) return true;
    if ((i & 63) == 0 && Clock::now() >= pause_until) break;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  for (;;) {
    if (pred()) return true;
    if (Clock::now() >= yield_until) return false;
    yield_now();
  }
}

// Spin-then-sleep wait for pred() on a word that the other side bumps and wakes.
// `give_up()` is polled between sleeps (peer died, shutdown); returns false if it fired.
template <class Pred, class GiveUp>
bool wait_until(std::atomic<uint32_t>& word, Pred pred, GiveUp give_up, const WaitOptions& o = {}) {
  if (spin_until(pred, o.spin, o.pause)) return true;
  if (o.sleepers != nullptr) o.sleepers->fetch_add(1, std::memory_order_seq_cst);
  bool ok = false;
  for (;;) {
    const uint32_t seen = word.load(std::memory_order_seq_cst);
    if (pred()) {
      ok = true;
      break;
    }
    if (give_up()) break;
    futex_wait(word, seen, o.slice);
  }
  if (o.sleepers != nullptr) o.sleepers->fetch_sub(1, std::memory_order_relaxed);
  return ok;
}

}  // namespace funnel::ipc
