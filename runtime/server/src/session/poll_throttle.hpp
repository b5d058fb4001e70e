// When a worker's turn polls its pending completions (Completions::due).
#pragma once
#include <chrono>

namespace funnel::server {

// Work that only the worker can answer (an event it must see complete before it replies)
// is polled at every turn: its client waits for that.  Work the GPU answers itself
// (gpu_reply: the stream writes the client's reply word) needs the worker only to wake a
// client that went to sleep or to release what the work held, so it is polled at most once
// per `every` (a poll cost a driver call per entry, and a command that arrives meanwhile waits
// for it: doc/performance.md, "Polling answered work less often"); such entries watch their
// reply word and ask the driver only once they are old (Completions::word_entry_done).
class PollThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  explicit PollThrottle(std::chrono::nanoseconds every) noexcept : every_(every) {}

  // pending: entries to watch; urgent: some of them only this worker can answer.
  bool due(bool pending, bool urgent, Clock::time_point now) noexcept {
    if (!pending) return false;
    if (!urgent && now - last_ < every_) return false;
    last_ = now;
    return true;
  }

 private:
  std::chrono::nanoseconds every_;
  Clock::time_point last_{};
};

}  // namespace funnel::server
