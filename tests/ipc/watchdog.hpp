// Every IPC test runs under a watchdog: a test that hangs (a lost wake-up, a
// reader that never sees a record) fails within seconds instead of stalling CI.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace funnel::testing {

// Generous: a sanitizer build on a loaded 2-core machine runs the spinning tests 20x slower
// (ParallelCopy under TSan took over 20 s there); a real hang still fails within a minute.
inline constexpr std::chrono::seconds kWatchdogLimit{60};

// Runs `body` on a thread of its own.  If it has not returned after `limit`, the
// test cannot be unwound (the hung thread cannot be cancelled), so the whole
// process exits with a message naming the test.
inline void run_with_watchdog(const std::function<void()>& body, std::chrono::seconds limit = kWatchdogLimit) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::thread t([&] {
    try {
      body();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(m);
    done = true;
    cv.notify_all();
  });
  {
    std::unique_lock lock(m);
    if (!cv.wait_for(lock, limit, [&] { return done; })) {
      const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
      std::fprintf(stderr, "watchdog: %s.%s hung for %lld s; aborting the test program\n",
                   info != nullptr ? info->test_suite_name() : "?", info != nullptr ? info->name() : "?",
                   static_cast<long long>(limit.count()));
      std::fflush(stderr);
      std::_Exit(3);
    }
  }
  t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace funnel::testing

// TEST() whose body runs under the watchdog.
#define WATCHED_TEST(suite, name)                                                         \
  static void suite##_##name##_watched_body();                                            \
  TEST(suite, name) { ::funnel::testing::run_with_watchdog(&suite##_##name##_watched_body); } \
  static void suite##_##name##_watched_body()
