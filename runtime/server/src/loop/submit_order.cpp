#include "loop/submit_order.hpp"

#include "funnel/ipc/futex.hpp"

namespace funnel::server {

SubmitOrder::Turn SubmitOrder::take(int device) noexcept {
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return Turn();
  Tickets& t = devices_[static_cast<size_t>(device)];
  const uint32_t mine = t.next.fetch_add(1, std::memory_order_relaxed);
  const auto my_turn = [&] { return t.serving.load(std::memory_order_acquire) == mine; };
  // Pause for kPause, then yield between looks, for as long as it takes (a turn ends with
  // its holder's call; a holder never waits for anything but the driver).
  while (!ipc::spin_until(my_turn, std::chrono::seconds(1), kPause)) {
  }
  return Turn(&t.serving);
}

}  // namespace funnel::server
