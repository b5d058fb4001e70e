// Worker threads that serve several clients each (ServerOptions::worker_threads,
// FUNNEL_SERVER_WORKERS): every client is served, one client's slow GPU work or death does
// not hold up the others of its thread, and a device's clients share its threads.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fixture.hpp"
#include "test_client.hpp"

namespace funnel::test {
namespace {

// Names of this process's threads (the server runs in the test's process).
std::multiset<std::string> thread_names() {
  std::multiset<std::string> names;
  for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream f(t.path() / "comm");
    std::string name;
    if (std::getline(f, name)) names.insert(name);
  }
  return names;
}

// Client `k`'s round trips: copies of its own bytes there and back, fences, a stream
// synchronised; a wrong byte or status fails the test.
void exercise(const std::filesystem::path& run_dir, int k, int rounds) {
  TestClient c(run_dir, "pooled");
  ASSERT_TRUE(c.ok());
  const uint64_t d = c.alloc(64 * 1024);
  c.create_stream(1);
  std::vector<uint8_t> out(64 * 1024), back(out.size());
  for (int r = 0; r < rounds; ++r) {
    std::memset(out.data(), (k * 31 + r) & 0xff, out.size());
    c.h2d(d, out.data(), out.size(), 1);
    ASSERT_EQ(c.on_stream(Opcode::StreamSynchronize, 1).status, Status::Success);
    c.d2h(back.data(), d, back.size());
    ASSERT_EQ(out, back) << "client " << k << " round " << r;
    ASSERT_EQ(c.call(Opcode::Fence).status, Status::Success);
  }
  EXPECT_EQ(c.take_deferred(), 0);
  c.detach();
}

TEST_F(ServerTest, PooledWorkersServeEveryClientOfADevice) {
  auto o = options();
  o.worker_threads = 2;
  start_server(o);
  std::vector<std::thread> clients;
  for (int k = 0; k < 6; ++k) clients.emplace_back([&, k] { exercise(run_dir_, k, 40); });
  for (auto& t : clients) t.join();
  ASSERT_TRUE(eventually([&] { return stats(run_dir_)["totals"]["clients_detached"] == 6; }));
  const auto names = thread_names();
  // Two threads serve device 0's six clients; device 1 had none, so it has no thread.
  EXPECT_GE(names.count("funnel-g0.0"), 1u);
  EXPECT_GE(names.count("funnel-g0.1"), 1u);
  EXPECT_EQ(names.count("funnel-g0.2"), 0u) << "a third thread for a pool of two";
  EXPECT_EQ(names.count("funnel-g1.0"), 0u);
  // The threads stay and serve the next clients.
  exercise(run_dir_, 7, 5);
  EXPECT_TRUE(eventually([&] { return stats(run_dir_)["totals"]["clients_detached"] == 7; }));
}

TEST_F(ServerTest, PooledWorkerAnswersOneClientWhileAnothersWorkRuns) {
  auto o = options();
  o.worker_threads = 1;  // both clients on one thread
  start_server(o);
  TestClient slow(run_dir_, "slow"), quick(run_dir_, "quick");
  ASSERT_TRUE(slow.ok());
  ASSERT_TRUE(quick.ok());
  const uint64_t big = slow.alloc(256 << 20);
  slow.create_stream(1);
  // About a gigabyte of memsets queued on the slow client's stream, then its synchronize.
  for (uint32_t i = 0; i < 4; ++i) slow.post(Opcode::Memset, ipc::MemsetCmd{big, 256 << 20, 256 << 20, 1, i, 0}, 1);
  constexpr uint32_t kSlot = 9;  // not used by this client before
  const uint64_t seq = slow.send(Opcode::StreamSynchronize, nullptr, 0, kSlot, 1);
  // The thread keeps reading the quick client's ring: its fence is answered while the
  // slow client's synchronize still waits.
  ASSERT_EQ(quick.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(slow.wait(kSlot, seq, std::chrono::milliseconds(0)).status, Status::Timeout)
      << "the slow client's memsets were done before the quick client's fence was answered";
  EXPECT_EQ(slow.wait(kSlot, seq, std::chrono::seconds(30)).status, Status::Success);
  slow.detach();
  quick.detach();
}

TEST_F(ServerTest, PooledWorkerGoesOnWhenOneOfItsClientsIsKilled) {
  auto o = options();
  o.worker_threads = 1;
  start_server(o);
  TestClient other(run_dir_, "survivor");
  ASSERT_TRUE(other.ok());
  const uint64_t keep = other.alloc(4096);
  // Killed with its memsets still queued: its teardown waits for them off the group's thread.
  const pid_t child = fork_client(run_dir_, "victim", [](TestClient& c) {
    c.create_stream(4);
    const uint64_t d = c.alloc(64 << 20);
    for (uint32_t i = 0; i < 8; ++i) c.post(Opcode::Memset, ipc::MemsetCmd{d, 64 << 20, 64 << 20, 1, i, 0}, 4);
    return true;
  });
  ASSERT_GT(child, 0);
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(eventually([&] { return stats(run_dir_)["totals"]["clients_died"] == 1; }));
  const auto j = stats(run_dir_);
  EXPECT_EQ(j["totals"]["allocations"], 1);
  EXPECT_EQ(j["totals"]["streams"], 0);
  std::vector<uint8_t> buf(4096, 5), back(4096);
  other.h2d(keep, buf.data(), buf.size());
  other.d2h(back.data(), keep, back.size());
  EXPECT_EQ(buf, back);
  EXPECT_EQ(other.take_deferred(), 0);
  // A client that attaches now is served by the same thread.
  exercise(run_dir_, 1, 5);
}

}  // namespace
}  // namespace funnel::test
