// Pins the calling thread to one CPU it may use (the first) for the scope, and restores its
// affinity however the scope is left.  Threads created meanwhile inherit the one CPU: tests
// that need two threads to share a core (a worker and a thread that wants its core).
#pragma once
#include <sched.h>

#include <gtest/gtest.h>

namespace funnel::test {

class OnOneCpu {
 public:
  OnOneCpu() {
    ok_ = ::sched_getaffinity(0, sizeof was_, &was_) == 0;
    int cpu = 0;
    while (ok_ && cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &was_)) ++cpu;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    ok_ = ok_ && ::sched_setaffinity(0, sizeof one, &one) == 0;
  }
  ~OnOneCpu() { ::sched_setaffinity(0, sizeof was_, &was_); }
  OnOneCpu(const OnOneCpu&) = delete;
  OnOneCpu& operator=(const OnOneCpu&) = delete;
  bool ok() const noexcept { return ok_; }

 private:
  cpu_set_t was_{};
  bool ok_ = false;
};

}  // namespace funnel::test
