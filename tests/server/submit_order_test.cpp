// SubmitOrder: the per-GPU ticket lock that workers on cores of their own take around a
// waited copy (runtime/server/src/loop/submit_order.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "loop/submit_order.hpp"

namespace funnel::server {
namespace {

// Turns exclude each other: four threads add to a plain counter under them, none is lost
// (the TSan suite sees a race here if they do not).
TEST(SubmitOrder, TurnsExcludeEachOther) {
  SubmitOrder order;
  uint64_t counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        const SubmitOrder::Turn turn = order.take(0);
        ASSERT_TRUE(turn.held());
        counter = counter + 1;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, 8000u);
}

// First come, first served: a thread that asks while another holds the turn gets it when
// that one ends, before a thread that asks after it.
TEST(SubmitOrder, TurnsGoInTheOrderAsked) {
  SubmitOrder order;
  std::vector<int> served;
  std::vector<std::thread> threads;
  {
    const SubmitOrder::Turn first = order.take(1);
    for (int k = 0; k < 3; ++k) {
      // One at a time, so that ticket k+1 is thread k's: the next starts once it has drawn.
      threads.emplace_back([&, k] {
        const SubmitOrder::Turn t = order.take(1);
        served.push_back(k);
      });
      // Ticket 0 is `first`'s: thread k has drawn ticket k+1 once k+2 are drawn.
      while (order.drawn(1) != static_cast<uint32_t>(k + 2)) std::this_thread::yield();
    }
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(served, (std::vector<int>{0, 1, 2}));
}

// Devices have their own turns; a device out of range has none (nothing to wait for).
TEST(SubmitOrder, DevicesAreIndependent) {
  SubmitOrder order;
  const SubmitOrder::Turn zero = order.take(0);
  const SubmitOrder::Turn one = order.take(1);  // would spin forever if device 1 shared 0's
  EXPECT_TRUE(one.held());
  EXPECT_FALSE(order.take(-1).held());
  EXPECT_FALSE(order.take(static_cast<int>(ipc::kMaxDevices)).held());
}

}  // namespace
}  // namespace funnel::server
