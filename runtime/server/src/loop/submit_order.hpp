// The order in which workers on cores of their own take their waited calls to the driver.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "funnel/ipc/channel_layout.hpp"

namespace funnel::server {

// One ticket lock per GPU.  The server's context serves every client, so the driver calls of
// its workers contend inside it: measured on the H100 (apps/stencil, 8 ranks bound to cores,
// a worker alone on a core each), a waited copy's cuMemcpyHtoDAsync took 7 us and its
// cuStreamWriteValue32 4 us at the median while the ranks came out of their MPI exchange
// together, against 1.9 and 1.0 us for one client alone.  Taken in the order the workers
// picked their calls up, one call's driver calls go out together and the calls complete
// first come, first served: there, 0.442 ms per step against 0.509 (MPS 0.434).
//
// Only for workers that have a core to themselves (ThreadPlacement::own_core): a waiter
// spins, and a holder must not wait for a core.  Where workers share their ranks' cores (16
// ranks on 16 cores) the same lock made the step 1.4-1.7x slower (a waiter or the holder
// off its core holds up every call behind it), so there the driver orders them as before.
// Even on own cores that happens when the host takes a worker's core away (a KVM guest
// whose workers backed off 11-34 times a run: 8 ranks 1.10 ms per step against 0.85
// without), so it is off unless FUNNEL_SUBMIT_ORDER=1 (ServerOptions::submit_order).
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
