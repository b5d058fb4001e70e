// Cross-process futex wake-ups on 32-bit words that live in a shared segment.
// Both sides spin briefly before they sleep (see wait_until below); every sleep
// has a timeout so that a caller can notice a dead peer.
#pragma once
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

// Spin-then-sleep wait for pred() on a word that the other side bumps and wakes.
// `give_up()` is polled between sleeps (peer died, shutdown); returns false if it fired.
template <class Pred, class GiveUp>
bool wait_until(std::atomic<uint32_t>& word, Pred pred, GiveUp give_up,
                int spin_iterations = 2000,
                std::chrono::nanoseconds slice = std::chrono::milliseconds(20)) {
  for (int i = 0; i < spin_iterations; ++i) {
    if (pred()) return true;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  for (;;) {
    const uint32_t seen = word.load(std::memory_order_acquire);
    if (pred()) return true;
    if (give_up()) return false;
    futex_wait(word, seen, slice);
  }
}

}  // namespace funnel::ipc
