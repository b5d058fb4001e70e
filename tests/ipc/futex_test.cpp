// futex_wait / futex_wake_all on a word in a MAP_SHARED mapping, across fork():
// the words live in segments shared by two processes, so they must not be private futexes.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <new>
#include <thread>

#include "funnel/ipc/futex.hpp"
#include "one_cpu.hpp"
#include "watchdog.hpp"

namespace funnel::ipc {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct SharedWords {
  std::atomic<uint32_t> word{0};
  std::atomic<uint32_t> child_ready{0};
};

class SharedPage {
 public:
  SharedPage() {
    mem_ = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(mem_, MAP_FAILED);
    words_ = new (mem_) SharedWords();
  }
  ~SharedPage() { ::munmap(mem_, 4096); }
  SharedWords& operator*() const { return *words_; }
  SharedWords* operator->() const { return words_; }

 private:
  void* mem_ = nullptr;
  SharedWords* words_ = nullptr;
};

// Waits for `pid` at most `limit`; SIGKILLs it and fails if it does not exit.
int wait_child(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "child " << pid << " did not exit";
      return -1;
    }
    std::this_thread::sleep_for(5ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

WATCHED_TEST(Futex, WakeReachesASleeperInAnotherProcess) {
  SharedPage page;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: announce, then sleep on the word for up to 10 s.  Exit 0 only if it was
    // woken well before that with the new value in place.
    const auto t0 = Clock::now();
    page->child_ready.store(1);
    while (page->word.load() == 0) {
      futex_wait(page->word, 0, 10s);
      if (Clock::now() - t0 > 8s) ::_exit(2);
    }
    ::_exit(page->word.load() == 7 ? 0 : 3);
  }
  while (page->child_ready.load() == 0) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(100ms);  // let the child go to sleep
  page->word.store(7);
  futex_wake_all(page->word);
  EXPECT_EQ(wait_child(pid, 15s), 0);
}

WATCHED_TEST(Futex, ChildWakesParent) {
  SharedPage page;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::usleep(100000);
    page->word.store(1);
    futex_wake_all(page->word);
    ::_exit(0);
  }
  const auto t0 = Clock::now();
  while (page->word.load() == 0) futex_wait(page->word, 0, 10s);
  EXPECT_LT(Clock::now() - t0, 5s);
  EXPECT_EQ(wait_child(pid, 10s), 0);
}

WATCHED_TEST(Futex, WaitTimesOut) {
  std::atomic<uint32_t> word{5};
  const auto t0 = Clock::now();
  EXPECT_FALSE(futex_wait(word, 5, 30ms));
  EXPECT_GE(Clock::now() - t0, 25ms);
}

WATCHED_TEST(Futex, WaitReturnsAtOnceWhenTheWordAlreadyChanged) {
  std::atomic<uint32_t> word{5};
  const auto t0 = Clock::now();
  EXPECT_TRUE(futex_wait(word, 4, 10s));
  EXPECT_LT(Clock::now() - t0, 1s);
}

// The server's worker groups sleep on several clients' doorbells at once.
WATCHED_TEST(Futex, WaitAnyWakesOnAWordChangedInAnotherProcess) {
  if (!futex_wait_any_native()) GTEST_SKIP() << "futex_waitv is not available here (Linux < 5.16 or seccomp)";
  SharedPage page;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::this_thread::sleep_for(50ms);
    page->child_ready.store(1);
    futex_wake_all(page->child_ready);
    ::_exit(0);
  }
  const FutexWaitItem items[] = {{&page->word, 0}, {&page->child_ready, 0}};
  const auto t0 = Clock::now();
  while (page->child_ready.load() == 0 && Clock::now() - t0 < 10s) futex_wait_any(items, 2, 10s);
  EXPECT_EQ(page->child_ready.load(), 1u);
  EXPECT_LT(Clock::now() - t0, 5s) << "the wake of the second word did not end the wait";
  EXPECT_EQ(wait_child(pid, 10s), 0);
}

WATCHED_TEST(Futex, WaitAnyTimesOutOrReturnsAtOnce) {
  if (!futex_wait_any_native()) GTEST_SKIP() << "futex_waitv is not available here (Linux < 5.16 or seccomp)";
  std::atomic<uint32_t> a{1}, b{2};
  auto t0 = Clock::now();
  const FutexWaitItem same[] = {{&a, 1}, {&b, 2}};
  futex_wait_any(same, 2, 30ms);
  EXPECT_GE(Clock::now() - t0, 25ms);
  t0 = Clock::now();
  const FutexWaitItem changed[] = {{&a, 1}, {&b, 3}};  // b is 2, not 3: no sleep at all
  futex_wait_any(changed, 2, 10s);
  EXPECT_LT(Clock::now() - t0, 1s);
}

WATCHED_TEST(Futex, WaitUntilSeesThePredicateOrGivesUp) {
  std::atomic<uint32_t> word{0};
  std::atomic<bool> flag{false};
  std::thread t([&] {
    std::this_thread::sleep_for(30ms);
    flag = true;
    word.fetch_add(1);
    futex_wake_all(word);
  });
  EXPECT_TRUE(wait_until(word, [&] { return flag.load(); }, [] { return false; }));
  t.join();

  int polls = 0;
  EXPECT_FALSE(wait_until(word, [] { return false; }, [&] { return ++polls == 3; }, {.spin = 10us, .slice = 5ms}));
  EXPECT_EQ(polls, 3);
}

// pause = 0 (the answering thread shares this core: Completion::worker_on_client_cpus):
// no pause loop, the poll yields from the start, so a thread on the same CPU gets to answer;
// a predicate that never holds still gives up after `spin`.
WATCHED_TEST(Futex, SpinUntilWithoutPauseYieldsToTheAnswerer) {
  bool seen = false;
  {
    test::OnOneCpu pinned;
    ASSERT_TRUE(pinned.ok());
    std::atomic<bool> flag{false};
    std::thread t([&] { flag = true; });  // inherits the one CPU
    seen = spin_until([&] { return flag.load(); }, 5s, 0ns);
    t.join();
  }
  EXPECT_TRUE(seen);
  const auto t0 = Clock::now();
  EXPECT_FALSE(spin_until([] { return false; }, 2ms, 0ns));
  EXPECT_GE(Clock::now() - t0, 2ms);
}

}  // namespace
}  // namespace funnel::ipc
