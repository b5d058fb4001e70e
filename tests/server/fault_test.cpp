// A GPU fault of one client's kernel (doc/design/faults.md), with the sim backend's
// fault injection (SimOptions::fault_kernel): every client of the faulted device gets
// the sticky error, waiting replies included; clients of the other device never notice;
// the server logs who was on the device, resets it, and new clients work there again.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "kernel_client.hpp"

namespace funnel::test {
namespace {

// The kernel whose launch faults its device: no parameters, so any client can launch it.
constexpr const char* kFaultKernel = "no_params";

class FaultTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    ASSERT_FALSE(test_fatbin().bytes.empty()) << FUNNEL_SERVER_TEST_FATBIN;
    previous_ = spdlog::default_logger();
    log_ = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("fault-test", log_));
    fault_kernel_ = kFaultKernel;
    start_server();
  }
  void TearDown() override {
    ServerTest::TearDown();
    if (HasFailure())
      for (const auto& line : log_->last_formatted()) std::fprintf(stderr, "server: %s", line.c_str());
    spdlog::set_default_logger(previous_);
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
};

TEST_F(FaultTest, FaultPoisonsEveryClientOfTheDeviceOnlyAndTheDeviceRecovers) {
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

  // C, on device 1, sees nothing.
  std::vector<uint8_t> in(4096, 0x5a), out(4096, 0);
  c.h2d(c_alloc.value[0], in.data(), in.size(), 7);
  c.d2h(out.data(), c_alloc.value[0], out.size(), 7);
  EXPECT_EQ(c.call(Opcode::StreamSynchronize, nullptr, 0, 7, 1).status, Status::Success);
  EXPECT_EQ(out, in);
  EXPECT_EQ(c.sticky(), 0);
  EXPECT_EQ(c.take_deferred(), 0);

  // The log names A, its kernel and what it had queued; one client observed it first.
  const std::string a_id = "client " + std::to_string(a.attach_reply().client_id) + " ";
  EXPECT_EQ(log_lines({"device 0", a_id, "faulty-app", std::string("'") + kFaultKernel + "'", "1 launch(es)"}).size(),
            1u);
  EXPECT_EQ(log_lines({"device 0", "observed first by client"}).size(), 1u);
  EXPECT_EQ(log_lines({"client " + std::to_string(b.attach_reply().client_id) + " ", "bystander"}).empty(), false);
  EXPECT_TRUE(log_lines({"other-gpu"}).size() <= 1u);  // its attach line only

  // The device recovers while A and B stay attached (poisoned: they released everything).
  ASSERT_TRUE(eventually([&] { return recovered(0); }));
  EXPECT_EQ(device_stats(0)["faults"], 1);
  EXPECT_EQ(device_stats(1)["faults"], 0);
  EXPECT_EQ(device_stats(1)["state"], "ok");
  EXPECT_EQ(log_lines({"device 0 recovered"}).size(), 1u);
  EXPECT_EQ(a.sync_device(), Status::IllegalAddress);  // still poisoned, as CUDA's sticky errors are

  // A new client on device 0 launches and copies.
  TestClient d(run_dir_, "newcomer");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(launch(d, "mixed", 21), Status::Success);
  EXPECT_TRUE(copy_round_trip(d));
  EXPECT_EQ(d.sticky(), 0);
  const auto all = stats(run_dir_);
  for (const auto& j : all["clients"])
    if (j["id"] == a.attach_reply().client_id) {
      EXPECT_EQ(j["sticky_error"], 700);
    }

  a.detach();
  b.detach();
  EXPECT_TRUE(copy_round_trip(d));
  EXPECT_TRUE(copy_round_trip(c));  // C, never caught, may use device 0 now too
}

TEST_F(FaultTest, RecoversAfterThePoisonedClientsDetachAndIdleClientsWaitForIt) {
  TestClient a(run_dir_, "faulty-app"), idle(run_dir_, "idle");
  ASSERT_TRUE(a.ok() && idle.ok());
  ASSERT_EQ(launch(a, kFaultKernel, 11), Status::Success);
  ASSERT_EQ(a.sync_device(), Status::IllegalAddress);
  a.detach();

  // `idle` held nothing on device 0: it is not caught, and works once the device is back.
  ASSERT_TRUE(eventually([&] { return recovered(0); }));
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
}

}  // namespace
}  // namespace funnel::test
