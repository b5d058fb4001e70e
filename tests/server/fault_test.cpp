// A GPU fault of one client's kernel (doc/design/faults.md), with the sim backend's
// fault injection (SimOptions::fault_kernel): every client of the faulted device gets
// the sticky error, waiting replies included; clients of the other device never notice;
// the server logs who was on the device.  As the CUDA driver, the sim cannot recreate
// the context in process by default: the server stops accepting, and once every client
// has left run() asks for a restart, which a second Server on the inherited listening
// socket stands in for here (tests/client/fault_restart.sh re-executes the real binary).
// With SimOptions::resets_in_process the server resets the device in process instead.
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "funnel/common/run_dir.hpp"
#include "funnel/ipc/protocol.hpp"
#include "funnel/ipc/socket.hpp"
#include "funnel/server/sim_backend.hpp"
#include "kernel_client.hpp"

namespace funnel::test {
namespace {

// The kernel whose launch faults its device: no parameters, so any client can launch it.
constexpr const char* kFaultKernel = "no_params";

// A client that connects and says hello but has no answer yet: it waits in the server's
// backlog while a restart is due.
class WaitingClient {
 public:
  explicit WaitingClient(const std::filesystem::path& run_dir) {
    int err = 0;
    fd_ = ipc::connect_seqpacket(run_dir / ipc::kSocketName, err);
    ipc::HelloMsg h{};
    h.magic = ipc::kSocketMagic;
    h.version = ipc::kProtocolVersion;
    h.role = ipc::Role::Client;
    h.pid = ::getpid();
    std::strncpy(h.command, "waiting", sizeof h.command - 1);
    sent_ = fd_ && ipc::send_message(fd_.get(), &h, sizeof h);
  }
  bool connected() const noexcept { return sent_; }
  // The attach reply's status; Unknown without one within `timeout`, -1 on a hang-up.
  int32_t reply(std::chrono::milliseconds timeout) {
    ipc::AttachReply r{};
    const ssize_t n = ipc::recv_message(fd_.get(), &r, sizeof r, timeout);
    if (n == 0 || (n < 0 && errno != ETIMEDOUT)) return -1;
    return n == static_cast<ssize_t>(sizeof r) ? r.status : static_cast<int32_t>(Status::Unknown);
  }

 private:
  ipc::UniqueFd fd_;
  bool sent_ = false;
};

class FaultTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    ASSERT_FALSE(test_fatbin().bytes.empty()) << FUNNEL_SERVER_TEST_FATBIN;
    previous_ = spdlog::default_logger();
    log_ = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("fault-test", log_));
  }
  void TearDown() override {
    stop_restarted();
    ServerTest::TearDown();
    if (HasFailure())
      for (const auto& line : log_->last_formatted()) std::fprintf(stderr, "server: %s", line.c_str());
    spdlog::set_default_logger(previous_);
  }

  static server::SimOptions sim(bool resets_in_process) {
    server::SimOptions so;
    so.devices = 2;
    so.memory_bytes = uint64_t{1} << 30;
    so.fault_kernel = kFaultKernel;
    so.resets_in_process = resets_in_process;
    return so;
  }

  // The fixture's server, with run()'s outcome kept.  `before_create_event`: the sim
  // backend's test hook (SimOptions).
  void start(bool resets_in_process = false, std::function<void()> before_create_event = {}) {
    server::SimOptions so = sim(resets_in_process);
    so.before_create_event = std::move(before_create_event);
    server_ = std::make_unique<server::Server>(options(), server::make_sim_backend(so));
    server_->start();
    thread_ = std::thread([this] {
      try {
        outcome_ = server_->run();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "server run failed: " << e.what();
      }
      finished_ = true;
    });
  }

  // What the re-executed funnel-server does, in this process: a new Server (and backend)
  // on the listening socket the first one left open.
  void start_restarted() {
    server::ServerOptions o = options();
    o.inherited_listen_fd = ::dup(server_->listening_socket());
    restarted_ = std::make_unique<server::Server>(std::move(o), server::make_sim_backend(sim(false)));
    restarted_->start();
    restarted_thread_ = std::thread([this] { restarted_->run(); });
  }
  void stop_restarted() {
    if (restarted_) restarted_->request_stop();
    if (restarted_thread_.joinable()) restarted_thread_.join();
    restarted_.reset();
  }

  // The server's log lines so far that contain every one of `words`.
  std::vector<std::string> log_lines(const std::vector<std::string>& words) const {
    std::vector<std::string> out;
    for (const auto& line : log_->last_formatted()) {
      bool all = true;
      for (const auto& w : words) all = all && line.find(w) != std::string::npos;
      if (all) out.push_back(line);
    }
    return out;
  }

  nlohmann::json device_stats(int device) const {
    const auto all = stats(run_dir_);
    for (const auto& d : all["devices"])
      if (d["device"] == device) return d;
    return {};
  }
  bool recovered(int device, uint64_t recoveries = 1) const {
    const auto d = device_stats(device);
    return !d.is_null() && d["state"] == "ok" && d["recoveries"] == recoveries;
  }

  // Launches `kernel` (a zeroed parameter buffer of its size) on the legacy stream of
  // device 0, loading the module first unless the client has it.
  static Status launch(TestClient& c, const std::string& kernel, uint64_t kernel_id, bool load = true) {
    if (Reply r = load ? load_module(c, 1) : Reply{Status::Success}; r.status != Status::Success) return r.status;
    const Reply got = kernel_get(c, kernel_id, 1, kernel);
    if (got.status != Status::Success) return got.status;
    const std::vector<uint8_t> params(got.value[1], 0);
    return call_launch(c, launch_cmd(kernel_id, {1, 1, 1}, {32, 1, 1}, 0, static_cast<uint32_t>(params.size())),
                       params.data(), params.size())
        .status;
  }

  // A round trip of data through device memory on device 0 (legacy stream).
  static bool copy_round_trip(TestClient& c) {
    const uint64_t d = c.alloc(4096);
    std::vector<uint8_t> in(4096), out(4096, 0);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7);
    c.h2d(d, in.data(), in.size());
    c.d2h(out.data(), d, out.size());
    return c.sync_device() == Status::Success && out == in && c.free(d) == Status::Success;
  }

  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> log_;
  std::atomic<server::RunOutcome> outcome_{server::RunOutcome::Stopped};
  std::unique_ptr<server::Server> restarted_;
  std::thread restarted_thread_;
};

TEST_F(FaultTest, FaultPoisonsTheDevicesClientsOnlyAndTheServerRestartsOnceEveryClientLeft) {
  start();
  TestClient a(run_dir_, "faulty-app"), b(run_dir_, "bystander"), c(run_dir_, "other-gpu");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  // B: memory on device 0, and a synchronize that waits (its stream is held by a host
  // function the client never runs).
  const uint64_t b_mem = b.alloc(4096);
  ASSERT_NE(b_mem, 0u);
  b.post(Opcode::HostFunc, ipc::HostFuncCmd{0, 1, 1, 0});
  const uint32_t b_slot = 5;
  const uint64_t b_seq = b.send(Opcode::StreamSynchronize, nullptr, 0, b_slot);
  // C: a stream and memory on device 1.
  ASSERT_EQ(c.call(Opcode::StreamCreate, ipc::StreamCreateCmd{7, 0, 0}, 0, 1).status, Status::Success);
  const Reply c_alloc = c.call(Opcode::MemAlloc, ipc::MemAllocCmd{4096}, 0, 1);
  ASSERT_EQ(c_alloc.status, Status::Success);
  auto c_round_trip = [&] {
    std::vector<uint8_t> in(4096, 0x5a), out(4096, 0);
    c.h2d(c_alloc.value[0], in.data(), in.size(), 7);
    c.d2h(out.data(), c_alloc.value[0], out.size(), 7);
    return c.call(Opcode::StreamSynchronize, nullptr, 0, 7, 1).status == Status::Success && out == in;
  };

  // Act: A's kernel faults device 0.
  ASSERT_EQ(launch(a, kFaultKernel, 11), Status::Success);  // one-way in CUDA: the launch itself succeeds
  const Status a_sync = a.sync_device();

  // A and B get the fault at their next synchronising call, B's waiting one included.
  EXPECT_EQ(a_sync, Status::IllegalAddress);
  const Reply b_waiting = b.wait(b_slot, b_seq, std::chrono::seconds(5));
  EXPECT_FALSE(b_waiting.hung_up);
  EXPECT_EQ(b_waiting.status, Status::IllegalAddress);
  EXPECT_TRUE(eventually([&] { return a.sticky() == 700 && b.sticky() == 700; }));
  // Sticky: later calls too, whatever they are.
  EXPECT_EQ(a.sync_device(), Status::IllegalAddress);
  EXPECT_EQ(b.call(Opcode::MemGetInfo).status, Status::IllegalAddress);
  EXPECT_EQ(b.free(b_mem), Status::IllegalAddress);

  // C, on device 1, sees nothing: copies, and calls for no particular device (pinned
  // memory, a kernel lookup), which must not use the faulted device.
  EXPECT_TRUE(c_round_trip());
  EXPECT_EQ(c.call(Opcode::PinnedAlloc, ipc::PinnedAllocCmd{8192, 0, 0}, 0, 1).status, Status::Success);
  EXPECT_EQ(load_module(c, 1).status, Status::Success);
  EXPECT_EQ(kernel_get(c, 5, 1, "mixed").status, Status::Success);
  EXPECT_EQ(c.sticky(), 0);
  EXPECT_EQ(c.take_deferred(), 0);
  // Device 0 stays refused to C in this server: it did not hold anything there.
  EXPECT_EQ(c.call(Opcode::MemAlloc, ipc::MemAllocCmd{4096}, 0, 0).status, Status::DevicesUnavailable);

  // The log names A, its kernel and what it had queued; one client observed it first.
  const std::string a_id = "client " + std::to_string(a.attach_reply().client_id) + " ";
  EXPECT_EQ(log_lines({"device 0", a_id, "faulty-app", std::string("'") + kFaultKernel + "'", "1 launch(es)"}).size(),
            1u);
  EXPECT_EQ(log_lines({"device 0", "observed first by client"}).size(), 1u);
  EXPECT_EQ(log_lines({"client " + std::to_string(b.attach_reply().client_id) + " ", "bystander"}).empty(), false);
  // The restart is due: no reset in process, and a new client waits in the backlog.
  ASSERT_TRUE(eventually([&] { return !log_lines({"device 0", "re-executes itself", "other-gpu"}).empty(); }));
  EXPECT_TRUE(log_lines({"resetting"}).empty());
  WaitingClient waiting(run_dir_);
  ASSERT_TRUE(waiting.connected());
  EXPECT_EQ(waiting.reply(std::chrono::milliseconds(300)), static_cast<int32_t>(Status::Unknown));

  // Poisoned clients leaving is not enough: C still works, until it leaves too.
  a.detach();
  b.detach();
  ASSERT_TRUE(eventually([&] { return !log_lines({"waits for 1 more client(s)"}).empty(); }));
  EXPECT_FALSE(finished_);
  EXPECT_TRUE(c_round_trip());
  c.detach();
  ASSERT_TRUE(eventually([&] { return finished_.load(); }));
  EXPECT_EQ(outcome_.load(), server::RunOutcome::RestartToRecover);
  EXPECT_EQ(log_lines({"restarting to recover device 0"}).size(), 1u);
  // The socket and its file stay, so no client starts a second server meanwhile.
  EXPECT_GE(server_->listening_socket(), 0);
  struct stat st {};
  EXPECT_EQ(::lstat((run_dir_ / ipc::kSocketName).c_str(), &st), 0);

  // The restarted server accepts the client that waited, and device 0 works again.
  start_restarted();
  EXPECT_EQ(waiting.reply(std::chrono::seconds(5)), 0);
  EXPECT_EQ(log_lines({"restarted after a GPU fault"}).size(), 1u);
  TestClient d(run_dir_, "newcomer");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(launch(d, "mixed", 21), Status::Success);
  EXPECT_TRUE(copy_round_trip(d));
  EXPECT_EQ(d.sticky(), 0);
}

// A device synchronize whose stream faults the device between the worker's query of it (still
// busy) and the event it records to watch it: the record fails with the fault, and the
// synchronize answers that fault (it answered Success, seen once in CI with the pooled
// worker).  The hook lets the stream go on inside that event's creation and waits for the
// fault; a slower fault only makes the event's wait answer it instead.
TEST_F(FaultTest, ASynchronizeWhoseStreamFaultsWhileItIsBeingWatchedGetsTheFault) {
  std::atomic<bool> armed{false};
  std::atomic<std::atomic<uint32_t>*> release{nullptr};
  start(false, [&] {
    if (!armed.exchange(false)) return;
    release.load()->store(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  });
  TestClient a(run_dir_, "faulty-app");
  ASSERT_TRUE(a.ok());
  auto& reached = a.view().event_state(10);
  release = &a.view().event_state(11);
  a.post(Opcode::HostFunc, ipc::HostFuncCmd{10, 11, 1, 0});  // holds the legacy stream
  ASSERT_EQ(launch(a, kFaultKernel, 11), Status::Success);    // behind it
  ASSERT_TRUE(eventually([&] { return reached.load() == 1; }));
  armed = true;
  EXPECT_EQ(a.sync_device(), Status::IllegalAddress);
  EXPECT_FALSE(armed.load()) << "the synchronize recorded no event";
  EXPECT_TRUE(eventually([&] { return a.sticky() == 700; }));
}

// A synchronous copy answered by the GPU (its stream stores the reply word) whose stream
// faults before it gets there: the word never lands, so the worker, which watches the word
// and not an event, learns of the fault by asking the stream (Completions::word_entry_done).
TEST_F(FaultTest, AGpuAnsweredWaitBehindAFaultGetsTheFault) {
  start();
  TestClient a(run_dir_, "faulty-app");
  ASSERT_TRUE(a.ok());
  const uint64_t x = a.alloc(4096), y = a.alloc(4096);
  ASSERT_TRUE(x != 0 && y != 0);
  // The legacy stream is held by a host function, so the copy is queued before the fault.
  auto& reached = a.view().event_state(10);
  auto& done = a.view().event_state(11);
  a.post(Opcode::HostFunc, ipc::HostFuncCmd{10, 11, 3, 0});
  ASSERT_EQ(launch(a, kFaultKernel, 11), Status::Success);
  ipc::CopyCmd cp = device_copy(x, y, 4096);
  const uint32_t slot = a.next_slot();
  const uint64_t seq = a.send(Opcode::Copy, &cp, sizeof cp, slot, 0, 0);
  // A call after it: once it is answered, the worker has queued the copy and its word.
  ASSERT_EQ(a.call(Opcode::MemGetInfo).status, Status::Success);
  ASSERT_TRUE(eventually([&] { return reached.load() == 3; }));
  done.store(3);

  const Reply r = a.wait(slot, seq, std::chrono::seconds(5));
  EXPECT_FALSE(r.hung_up);
  EXPECT_EQ(r.status, Status::IllegalAddress);
  EXPECT_NE(a.view().reply_word(slot).load(), static_cast<uint32_t>(seq)) << "the stream answered past its fault";
  EXPECT_TRUE(eventually([&] { return a.sticky() == 700; }));
  a.detach();
}

// Staged chunks whose state the GPU was to store (Ready after a device-to-host one, Free after a
// host-to-device one), queued behind a fault: the stores never land, and the worker gives the
// slots back all the same (as after any failed copy), with the fault as the client's error.
TEST_F(FaultTest, AStagedChunkBehindAFaultComesBack) {
  start();
  TestClient a(run_dir_, "faulty-app");
  ASSERT_TRUE(a.ok());
  const uint64_t x = a.alloc(4096);
  ASSERT_NE(x, 0u);
  auto& reached = a.view().event_state(10);
  auto& done = a.view().event_state(11);
  a.post(Opcode::HostFunc, ipc::HostFuncCmd{10, 11, 3, 0});
  ASSERT_EQ(launch(a, kFaultKernel, 11), Status::Success);
  a.view().staging_state(0).store(static_cast<uint32_t>(ipc::StagingState::InFlight));
  ipc::CopyCmd cp{};
  cp.dst = {ipc::MemSpace::Staging, 0, 0, 0};
  cp.src = {ipc::MemSpace::Device, 0, 0, x};
  cp.width = cp.dst_pitch = cp.src_pitch = 4096;
  cp.height = 1;
  a.post(Opcode::Copy, cp);
  // And one the other way, which the GPU would have marked Free.
  a.view().staging_state(1).store(static_cast<uint32_t>(ipc::StagingState::InFlight));
  std::swap(cp.dst, cp.src);
  cp.src.index = 1;
  a.post(Opcode::Copy, cp);
  ASSERT_EQ(a.call(Opcode::MemGetInfo).status, Status::Success);  // the copies and their stores are queued
  ASSERT_TRUE(eventually([&] { return reached.load() == 3; }));
  done.store(3);
  EXPECT_TRUE(a.wait_staging(0, ipc::StagingState::Ready)) << "the device-to-host slot never came back";
  EXPECT_TRUE(a.wait_staging(1, ipc::StagingState::Free)) << "the host-to-device slot never came back";
  EXPECT_TRUE(eventually([&] { return a.sticky() == 700; }));
  a.detach();
}

TEST_F(FaultTest, WithoutARestartTheRunDirectoryIsRemovedAsAtAStop) {
  // What funnel-server does when it cannot re-execute itself: it destroys the Server.
  start();
  {
    TestClient a(run_dir_, "faulty-app");
    ASSERT_TRUE(a.ok());
    ASSERT_EQ(launch(a, kFaultKernel, 11), Status::Success);
    ASSERT_EQ(a.sync_device(), Status::IllegalAddress);
    a.detach();
  }
  ASSERT_TRUE(eventually([&] { return finished_.load(); }));
  EXPECT_EQ(outcome_.load(), server::RunOutcome::RestartToRecover);
  WaitingClient waiting(run_dir_);
  ASSERT_TRUE(waiting.connected());
  stop_server();
  EXPECT_EQ(waiting.reply(std::chrono::seconds(5)), -1);  // hung up: it fails at once
  EXPECT_FALSE(std::filesystem::exists(run_dir_));
}

TEST_F(FaultTest, TheRestartedServerChecksTheSocketItInherits) {
  auto refused = [&](int fd) -> std::string {
    server::ServerOptions o = options();
    o.inherited_listen_fd = fd;
    server::Server s(std::move(o), server::make_sim_backend(sim(false)));
    try {
      s.start();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  std::filesystem::create_directories(dir_ / "elsewhere");
  ipc::UniqueFd other = ipc::listen_seqpacket(dir_ / "elsewhere" / "sock");
  EXPECT_NE(refused(other.release()).find("bound to"), std::string::npos);
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair), 0);
  ::close(pair[1]);
  EXPECT_NE(refused(pair[0]).find("not listening"), std::string::npos);
  EXPECT_NE(refused(::dup(STDERR_FILENO)).find("--listen-fd"), std::string::npos);
  // The run directory's own socket is taken over, and a client attaches.
  ensure_run_dir(run_dir_);
  ipc::UniqueFd own = ipc::listen_seqpacket(run_dir_ / ipc::kSocketName);
  server::ServerOptions o = options();
  o.inherited_listen_fd = own.release();
  server_ = std::make_unique<server::Server>(std::move(o), server::make_sim_backend(sim(false)));
  server_->start();
  thread_ = std::thread([this] { server_->run(); });
  TestClient c(run_dir_, "first-after-restart");
  EXPECT_TRUE(c.ok());
}

// A GPU-local message half parked on the faulted device: its memory went with the fault, so it is
// answered kMsgFailed when the device is reset, not left waiting for a send that would copy into
// freed memory.
TEST_F(FaultTest, AGpuLocalReceiveParkedOnTheFaultedDeviceFails) {
  start(/*resets_in_process=*/true);
  TestClient a(run_dir_, "faulty-app"), b(run_dir_, "receiver");
  ASSERT_TRUE(a.ok() && b.ok());
  const Reply pinned = b.call(Opcode::PinnedAlloc, ipc::PinnedAllocCmd{4096, 0, 0});
  ASSERT_EQ(pinned.status, Status::Success);
  const auto path =
      run_dir_ / ("pinned." + std::to_string(b.attach_reply().client_id) + "." + std::to_string(pinned.value[0]));
  ipc::MappedFile page = ipc::MappedFile::open(path, pinned.value[1]);  // as the client maps it
  auto* word = static_cast<ipc::MsgWord*>(page.data());
  word->ticket.store(1);
  word->state.store(ipc::kMsgPending);
  const uint64_t y = b.alloc(4096);
  ipc::MsgPostCmd recv{};
  recv.world = 1;
  recv.comm = 2;
  recv.source = 0;
  recv.dest = 1;
  recv.role = ipc::kMsgRecv;
  recv.address = y;
  recv.bytes = 4096;
  recv.word_pinned = pinned.value[0];
  b.post(Opcode::MsgPost, recv);
  ASSERT_EQ(b.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(word->state.load(), ipc::kMsgPending) << "parked";
  ASSERT_EQ(launch(a, kFaultKernel, 11), Status::Success);
  ASSERT_EQ(a.sync_device(), Status::IllegalAddress);
  a.detach();
  EXPECT_EQ(b.sync_device(), Status::IllegalAddress) << "b held memory on the device";
  ASSERT_TRUE(eventually([&] { return recovered(0); }));
  EXPECT_EQ(word->state.load(), ipc::kMsgFailed);
}

TEST_F(FaultTest, RecoversInProcessWhereTheBackendCanAndIdleClientsWaitForIt) {
  start(/*resets_in_process=*/true);
  TestClient a(run_dir_, "faulty-app"), idle(run_dir_, "idle");
  ASSERT_TRUE(a.ok() && idle.ok());
  ASSERT_EQ(launch(a, kFaultKernel, 11), Status::Success);
  ASSERT_EQ(a.sync_device(), Status::IllegalAddress);
  a.detach();

  // `idle` held nothing on device 0: it is not caught, and works once the device is back.
  ASSERT_TRUE(eventually([&] { return recovered(0); }));
  EXPECT_EQ(log_lines({"device 0 recovered"}).size(), 1u);
  EXPECT_EQ(idle.sticky(), 0);
  EXPECT_TRUE(copy_round_trip(idle));
  TestClient d(run_dir_, "newcomer");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(launch(d, "big_param", 21), Status::Success);
  EXPECT_TRUE(copy_round_trip(d));

  // A second fault is counted and recovered too; this time `idle` holds a stream on the
  // device (its legacy stream, since the copies) and is caught.
  ASSERT_EQ(launch(d, kFaultKernel, 22, false), Status::Success);
  EXPECT_EQ(d.sync_device(), Status::IllegalAddress);
  EXPECT_TRUE(eventually([&] { return recovered(0, 2); }));
  EXPECT_EQ(device_stats(0)["faults"], 2);
  EXPECT_EQ(idle.sync_device(), Status::IllegalAddress);
  TestClient e(run_dir_, "third");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(copy_round_trip(e));
  EXPECT_FALSE(finished_);
}

}  // namespace
}  // namespace funnel::test
