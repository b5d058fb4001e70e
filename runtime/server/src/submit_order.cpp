#include "submit_order.hpp"

#include "funnel/ipc/futex.hpp"

namespace funnel::server {

SubmitOrder::Turn SubmitOrder::take(int device) noexcept {
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return Turn();
  Tickets& t = devices_[static_cast<size_t>(device)];
  const uint32_t mine = t.next.fetch_add(1, std::memory_order_relaxed);
  for (unsigned spins = 0; t.serving.load(std::memory_order_acquire) != mine; ++spins) {
    if (spins < kPauseSpins) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    } else {
      ipc::yield_now();
    }
  }
  return Turn(&t.serving);
}

}  // namespace funnel::server
