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

// sched_yield(): gives the core to another runnable thread, if any.
void yield_now() noexcept;

struct WaitOptions {
  // How long to poll before sleeping: the first few microseconds with a pause loop,
  // the rest with sched_yield (the core goes to anything runnable, but the answer is
  // seen within a microsecond).  A sleeping thread takes 10-30 us to wake on the GPU
  // machine, which cost a synchronous 16 MiB copy 5 % of its bandwidth; the CUDA
  // runtime's own default wait spins and yields the same way.
  std::chrono::nanoseconds spin = std::chrono::milliseconds(2);
  // Each sleep lasts at most this long, so give_up() is polled at least that often.
  std::chrono::nanoseconds slice = std::chrono::milliseconds(20);
  // Incremented while this thread sleeps, so that the waker may skip the futex wake
  // (a system call) when nobody sleeps.  The waker bumps `word`, then loads *sleepers,
  // both seq_cst.
  std::atomic<uint32_t>* sleepers = nullptr;
};

// Polls pred() for up to `spin` (pause, then sched_yield).  True as soon as it holds.
template <class Pred>
bool spin_until(Pred pred, std::chrono::nanoseconds spin) {
  using Clock = std::chrono::steady_clock;
  if (pred()) return true;
  if (spin <= std::chrono::nanoseconds::zero()) return false;
  const auto start = Clock::now();
  const auto pause_until = start + std::min<std::chrono::nanoseconds>(spin, std::chrono::microseconds(20));
  const auto yield_until = start + spin;
  for (unsigned i = 1;; ++i) {
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
  if (spin_until(pred, o.spin)) return true;
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
