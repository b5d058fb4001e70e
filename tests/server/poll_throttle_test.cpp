// PollThrottle: when a worker's turn polls its pending completions.
#include <gtest/gtest.h>

#include <chrono>

#include "session/poll_throttle.hpp"

namespace funnel::server {
namespace {

using std::chrono::microseconds;
using Clock = PollThrottle::Clock;

TEST(PollThrottle, NothingPendingIsNeverPolled) {
  PollThrottle t(microseconds(20));
  const auto t0 = Clock::now();
  EXPECT_FALSE(t.due(false, false, t0));
  EXPECT_FALSE(t.due(false, true, t0 + microseconds(100)));
}

TEST(PollThrottle, WorkOnlyTheWorkerAnswersIsPolledEveryTurn) {
  PollThrottle t(microseconds(20));
  const auto t0 = Clock::now();
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(t.due(true, true, t0 + microseconds(i))) << i;
}

TEST(PollThrottle, WorkTheGpuAnswersIsPolledAtMostOncePerInterval) {
  PollThrottle t(microseconds(20));
  const auto t0 = Clock::now();
  EXPECT_TRUE(t.due(true, false, t0));  // the first time: at once
  int polls = 0;
  for (int us = 1; us < 100; ++us) polls += t.due(true, false, t0 + microseconds(us)) ? 1 : 0;
  EXPECT_EQ(polls, 4);  // at 20, 40, 60, 80 us
  EXPECT_FALSE(t.due(true, false, t0 + microseconds(99)));
  EXPECT_TRUE(t.due(true, false, t0 + microseconds(100)));
}

TEST(PollThrottle, AnUrgentPollRestartsTheInterval) {
  PollThrottle t(microseconds(20));
  const auto t0 = Clock::now();
  EXPECT_TRUE(t.due(true, true, t0 + microseconds(15)));
  EXPECT_FALSE(t.due(true, false, t0 + microseconds(30)));  // 15 us after the urgent poll
  EXPECT_TRUE(t.due(true, false, t0 + microseconds(35)));
}

}  // namespace
}  // namespace funnel::server
