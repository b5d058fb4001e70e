// Attach, detach, death, shutdown, idle exit, stale run directories, full /dev/shm.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "funnel/common/run_dir.hpp"
#include "fixture.hpp"
#include "funnel/server/sim_backend.hpp"
#include "test_client.hpp"

namespace funnel::test {
namespace {

size_t files_named(const std::filesystem::path& dir, const std::string& prefix) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) ++n;
  return n;
}

TEST_F(ServerTest, DetachFreesAndCounts) {
  start_server();
  {
    TestClient c(run_dir_);
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE(eventually([&] { return files_named(run_dir_, "channel.") == 0; }))
        << "the channel file is unlinked once mapped";
    c.alloc(1000);
    c.create_stream(1);
    c.create_event(1);
    ASSERT_EQ(c.call(Opcode::Fence).status, Status::Success);
    c.detach();
  }
  ASSERT_TRUE(eventually([&] { return stats(run_dir_)["totals"]["clients_detached"] == 1; }));
  const auto j = stats(run_dir_);
  EXPECT_EQ(j["totals"]["clients_died"], 0);
  EXPECT_EQ(j["totals"]["allocations"], 0);
  EXPECT_EQ(j["server"]["clients"], 0);
}

// A client reports its own threads' CPU times in its Detach (it may have exited before its
// worker reads the record, and then /proc has nothing of it): the job report keeps them; a
// value out of range, or none, is null.
TEST_F(ServerTest, DetachCarriesTheClientsCpuTimes) {
  auto o = options();
  o.job_report_dir = dir_ / "report";
  std::filesystem::create_directories(o.job_report_dir);
  start_server(o);
  const ipc::DetachCmd sent[] = {{1500000000, 250000000},
                                 {ipc::kMaxCpuTimeNs, 5},
                                 {ipc::kNoCpuTime, ipc::kNoCpuTime}};
  for (const auto& cpu : sent) {
    TestClient c(run_dir_);
    ASSERT_TRUE(c.ok());
    c.detach(cpu);
  }
  ASSERT_TRUE(eventually([&] { return stats(run_dir_)["totals"]["clients_detached"] == 3; }));
  stop_server();
  std::vector<std::filesystem::path> json;
  for (const auto& e : std::filesystem::directory_iterator(dir_ / "report"))
    if (e.path().extension() == ".json") json.push_back(e.path());
  ASSERT_EQ(json.size(), 1u);
  const auto report = nlohmann::json::parse(std::ifstream(json[0]));
  const auto& clients = report["clients"];
  ASSERT_EQ(clients.size(), 3u);
  for (const auto& c : clients) EXPECT_EQ(c["ended"], "detached");
  EXPECT_DOUBLE_EQ(clients[0]["cpu_s"]["client"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(clients[0]["cpu_s"]["client_runqueue"].get<double>(), 0.25);
  EXPECT_TRUE(clients[1]["cpu_s"]["client"].is_null()) << "out of range: not kept";
  EXPECT_TRUE(clients[2]["cpu_s"]["client"].is_null()) << "not measured";
}

TEST_F(ServerTest, KilledClientIsCleanedUpAndOthersUnharmed) {
  start_server();
  TestClient other(run_dir_, "survivor");
  ASSERT_TRUE(other.ok());
  const uint64_t keep = other.alloc(4096);
  const pid_t child = fork_client(run_dir_, "victim", [](TestClient& c) {
    for (int i = 0; i < 3; ++i) c.alloc(1 << 20);
    if (c.call(Opcode::PinnedAlloc, ipc::PinnedAllocCmd{100000, 0, 0}).status != Status::Success) return false;
    c.create_stream(4);
    const uint64_t d = c.alloc(64 << 20);
    for (uint32_t i = 0; i < 8; ++i) c.post(Opcode::Memset, ipc::MemsetCmd{d, 64 << 20, 64 << 20, 1, i, 0}, 4);
    return true;
  });
  ASSERT_GT(child, 0);
  auto j = stats(run_dir_);
  EXPECT_EQ(j["totals"]["allocations"], 5);
  EXPECT_EQ(j["totals"]["pinned_allocations"], 1);
  EXPECT_EQ(files_named(run_dir_, "pinned."), 1u);
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(eventually([&] { return stats(run_dir_)["totals"]["clients_died"] == 1; }));
  j = stats(run_dir_);
  EXPECT_EQ(j["totals"]["allocations"], 1);
  EXPECT_EQ(j["totals"]["device_memory_bytes"], 4096);
  EXPECT_EQ(j["totals"]["pinned_allocations"], 0);
  EXPECT_EQ(j["totals"]["pinned_bytes"], 0);
  EXPECT_EQ(j["totals"]["streams"], 0);
  EXPECT_EQ(j["server"]["clients"], 1);
  EXPECT_EQ(files_named(run_dir_, "pinned."), 0u);
  std::vector<uint8_t> buf(4096, 9), back(4096);
  other.h2d(keep, buf.data(), buf.size());
  other.d2h(back.data(), keep, back.size());
  EXPECT_EQ(buf, back);
  EXPECT_EQ(other.take_deferred(), 0);
}

TEST_F(ServerTest, ForeignUidIsNotPermitted) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as another uid";
  start_server();
  // Let uid 65534 reach the socket; the server must still refuse it.
  ::chmod(dir_.c_str(), 0755);
  ::chmod(run_dir_.c_str(), 0755);
  ::chmod((run_dir_ / ipc::kSocketName).c_str(), 0777);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(10);
    try {
      TestClient c(run_dir_, "intruder");
      ::_exit(c.attach_reply().status == static_cast<int32_t>(Status::NotPermitted) && !c.ok() ? 0 : 11);
    } catch (...) {
      ::_exit(12);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::chmod(run_dir_.c_str(), 0700);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  TestClient mine(run_dir_);
  EXPECT_TRUE(mine.ok());
}

// A client of protocol 3 sends the shorter hello of before FUNNEL_DEVICE_MEM_LIMIT: it is
// told which versions differ rather than hung up on.
TEST_F(ServerTest, AHelloOfAnOtherVersionAndSizeIsAnsweredWithWhy) {
  start_server();
  int err = 0;
  auto fd = ipc::connect_seqpacket(run_dir_ / ipc::kSocketName, err);
  ASSERT_TRUE(fd) << std::strerror(err);
  ipc::HelloMsg h{};
  h.magic = ipc::kSocketMagic;
  h.version = 3;
  h.role = ipc::Role::Client;
  h.pid = ::getpid();
  ASSERT_TRUE(ipc::send_message(fd.get(), &h, offsetof(ipc::HelloMsg, device_mem_limit)));
  ipc::AttachReply rep{};
  ASSERT_EQ(ipc::recv_message(fd.get(), &rep, sizeof rep, std::chrono::seconds(10)), static_cast<ssize_t>(sizeof rep));
  EXPECT_EQ(rep.status, static_cast<int32_t>(Status::InitializationError));
  rep.message[sizeof rep.message - 1] = '\0';
  EXPECT_NE(std::string(rep.message).find("protocol 3"), std::string::npos) << rep.message;
}

TEST_F(ServerTest, MaxClients) {
  auto o = options();
  o.max_clients = 1;
  start_server(o);
  TestClient a(run_dir_);
  ASSERT_TRUE(a.ok());
  TestClient b(run_dir_);
  EXPECT_FALSE(b.ok());
  EXPECT_EQ(b.attach_reply().status, static_cast<int32_t>(Status::MpsMaxClientsReached));
}

TEST_F(ServerTest, StopAnswersWaitersAndRemovesFiles) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  c.create_stream(3);
  const uint64_t d = c.alloc(64 << 20);
  for (uint32_t i = 0; i < 40; ++i) c.post(Opcode::Memset, ipc::MemsetCmd{d, 64 << 20, 64 << 20, 1, i, 0}, 3);
  const uint64_t seq = c.send(Opcode::StreamSynchronize, nullptr, 0, 9, 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  server_->request_stop();
  const Reply r = c.wait(9, seq);
  EXPECT_TRUE(r.status == Status::DevicesUnavailable || r.hung_up || r.status == Status::Success)
      << static_cast<int>(r.status);
  EXPECT_TRUE(eventually([&] { return c.server_hung_up(); }));
  EXPECT_EQ(c.view().completion().server_state.load(), static_cast<uint32_t>(ipc::ServerState::ShuttingDown));
  thread_.join();
  EXPECT_FALSE(std::filesystem::exists(run_dir_)) << "the run directory is removed when empty";
}

TEST_F(ServerTest, ShutdownVerb) {
  start_server();
  const auto s = control(run_dir_, "shutdown");
  EXPECT_NE(s.find("\"ok\":true"), std::string::npos) << s;
  EXPECT_TRUE(eventually([&] { return finished_.load(); }));
}

TEST_F(ServerTest, IdleExitWithoutClients) {
  auto o = options();
  o.idle_exit = std::chrono::milliseconds(150);
  const auto t0 = std::chrono::steady_clock::now();
  start_server(o);
  ASSERT_TRUE(eventually([&] { return finished_.load(); }, std::chrono::seconds(5)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(140));
  EXPECT_FALSE(std::filesystem::exists(run_dir_ / ipc::kSocketName));
}

TEST_F(ServerTest, IdleExitAfterLastClientLeft) {
  auto o = options();
  o.idle_exit = std::chrono::milliseconds(200);
  start_server(o);
  {
    TestClient c(run_dir_);
    ASSERT_TRUE(c.ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    EXPECT_FALSE(finished_.load()) << "exited while a client was attached";
    c.detach();
  }
  EXPECT_TRUE(eventually([&] { return finished_.load(); }, std::chrono::seconds(5)));
}

TEST_F(ServerTest, StaleRunDirIsCleanedAndLiveServerDetected) {
  std::filesystem::create_directory(run_dir_);
  ::chmod(run_dir_.c_str(), 0700);
  std::ofstream(run_dir_ / kRunDirMarker) << "created";  // funnel made it
  {
    // A socket file nobody listens on: what a killed server leaves behind.
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string p = (run_dir_ / ipc::kSocketName).string();
    std::memcpy(a.sun_path, p.c_str(), p.size() + 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ::close(fd);
    std::ofstream(run_dir_ / "channel.3") << "x";
    std::ofstream(run_dir_ / "pinned.3.1") << "x";
  }
  // The name a socket is bound to before it is linked as server.sock (ipc::listening_name):
  // one of a process that is gone is removed, one of a live process (starting a server) not.
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  const auto of_gone = run_dir_ / fmt::format(".s{}", gone), of_live = run_dir_ / fmt::format(".s{}", ::getppid());
  std::ofstream(of_gone) << "x";
  std::ofstream(of_live) << "x";
  start_server();
  EXPECT_FALSE(std::filesystem::exists(run_dir_ / "channel.3"));
  EXPECT_FALSE(std::filesystem::exists(run_dir_ / "pinned.3.1"));
  EXPECT_FALSE(std::filesystem::exists(of_gone));
  EXPECT_TRUE(std::filesystem::exists(of_live));
  std::filesystem::remove(of_live);
  TestClient c(run_dir_);
  EXPECT_TRUE(c.ok());

  server::SimOptions so;
  server::Server second(options(), server::make_sim_backend(so));
  try {
    second.start();
    ADD_FAILURE() << "a second server started on a served run directory";
  } catch (const server::AlreadyRunning& e) {
    EXPECT_NE(std::string(e.what()).find("already serves"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(::getpid())), std::string::npos) << e.what();
  }
  EXPECT_TRUE(c.call(Opcode::Fence).status == Status::Success);
}

TEST_F(ServerTest, FullFileSystemFailsTheAttachWithAMessage) {
  const auto mnt = dir_ / "tiny";
  std::filesystem::create_directory(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=256k,mode=0700") != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here: " << std::strerror(errno);
  struct Unmount {
    std::filesystem::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  run_dir_ = mnt / "run";
  start_server();  // 4 x 64 KiB of staging + a 64 KiB ring do not fit in 256 KiB
  TestClient c(run_dir_);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.attach_reply().status, static_cast<int32_t>(Status::MemoryAllocation));
  EXPECT_NE(std::string(c.attach_reply().message).find("full"), std::string::npos) << c.attach_reply().message;
  EXPECT_EQ(files_named(run_dir_, "channel."), 0u);
  stop_server();
}

}  // namespace
}  // namespace funnel::test
