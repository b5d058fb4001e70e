// The order in which workers on cores of their own take their waited calls to the driver.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "funnel/ipc/channel_layout.hpp"

namespace funnel::server {

// One ticket lock per GPU.  The server's context serves every client, so the driver calls of
// its workers contend inside it; taken in the order the workers picked their calls up, one
// call's driver calls go out together and the calls complete first come, first served.
// Only for workers that have a core to themselves (ThreadPlacement::own_core): a waiter
// spins, and a holder must not wait for a core (where workers share their ranks' cores the
// lock is a convoy).  Off unless FUNNEL_SUBMIT_ORDER=1 (ServerOptions::submit_order): it
// helped in some measurements and hurt in others (doc/performance.md, "Waited calls under
// load", "Calls in turn").
class SubmitOrder {
 public:
  // Held while alive; the next ticket's holder goes on when it ends.
  class Turn {
   public:
    Turn() noexcept = default;
    Turn(Turn&& o) noexcept : serving_(o.serving_) { o.serving_ = nullptr; }
    Turn& operator=(Turn&&) = delete;
    Turn(const Turn&) = delete;
    ~Turn() {
      if (serving_ != nullptr) serving_->fetch_add(1, std::memory_order_release);
    }
    bool held() const noexcept { return serving_ != nullptr; }

   private:
    friend class SubmitOrder;
    explicit Turn(std::atomic<uint32_t>* serving) noexcept : serving_(serving) {}
    std::atomic<uint32_t>* serving_ = nullptr;
  };

  // Waits for `device`'s next turn (ipc::spin_until: a pause loop for kPause, then it yields
  // between looks); a device out of range has no lock (the command is refused by its validation).
  Turn take(int device) noexcept;

  // Tickets drawn on `device` so far (tests: who has asked).
  uint32_t drawn(int device) const noexcept {
    return devices_[static_cast<size_t>(device)].next.load(std::memory_order_relaxed);
  }

  static constexpr std::chrono::microseconds kPause{200};

 private:
  struct alignas(64) Tickets {
    std::atomic<uint32_t> next{0};
    std::atomic<uint32_t> serving{0};
  };
  std::array<Tickets, ipc::kMaxDevices> devices_{};
};

}  // namespace funnel::server
