// Bad commands are rejected with the contract's errors, and never hurt another client.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fixture.hpp"
#include "test_client.hpp"

namespace funnel::test {
namespace {

// A well-behaved client's round trip, run between the bad commands of another.
void healthy_round_trip(TestClient& c) {
  const uint64_t n = 100000;
  std::vector<uint8_t> in(n), out(n);
  for (uint64_t i = 0; i < n; ++i) in[i] = static_cast<uint8_t>(i ^ 0x5a);
  const uint64_t d = c.alloc(n);
  c.h2d(d, in.data(), n);
  c.d2h(out.data(), d, n);
  EXPECT_EQ(in, out);
  EXPECT_EQ(c.free(d), Status::Success);
  EXPECT_EQ(c.take_deferred(), 0);
  EXPECT_EQ(c.sticky(), 0);
}

// Rings the doorbell of a client whose ring was just corrupted by hand; the server must
// drop it within 5 s: hang up and set the sticky IllegalState.
void expect_dropped_for_protocol_error(TestClient& bad) {
  auto& ctl = bad.view().control();
  ctl.doorbell.fetch_add(1);
  ipc::futex_wake_all(ctl.doorbell);
  for (int i = 0; i < 500 && !bad.server_hung_up(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(bad.server_hung_up());
  EXPECT_EQ(bad.sticky(), static_cast<int32_t>(Status::IllegalState));
}

// Each test with a worker thread per client (0) and with both clients on one pooled worker
// thread (1, FUNNEL_SERVER_WORKERS): a dropped client must not take its thread's other
// client with it.
class ServerErrors : public ServerTest, public ::testing::WithParamInterface<uint32_t> {
 protected:
  void start() {
    auto o = options();
    o.worker_threads = GetParam();
    start_server(o);
  }
};
INSTANTIATE_TEST_SUITE_P(Workers, ServerErrors, ::testing::Values(0u, 1u),
                         [](const ::testing::TestParamInfo<uint32_t>& p) { return p.param == 0 ? std::string("PerClient") : "Pooled"; });

TEST_P(ServerErrors, BadCommandsAreRejectedAndOthersKeepWorking) {
  start();
  TestClient bad(run_dir_, "bad");
  TestClient good(run_dir_, "good");
  ASSERT_TRUE(bad.ok() && good.ok());
  const uint64_t mine = bad.alloc(4096);
  const uint64_t theirs = good.alloc(4096);

  // Unknown opcode, one-way: deferred.
  bad.send(static_cast<Opcode>(99), nullptr, 0);
  EXPECT_EQ(bad.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(bad.take_deferred(), static_cast<int32_t>(Status::NotSupported));
  // A reserved kernel opcode (77..79); a kernel command without its payload.
  EXPECT_EQ(bad.call(static_cast<Opcode>(77)).status, Status::NotSupported);
  EXPECT_EQ(bad.call(Opcode::ModuleQuery).status, Status::InvalidValue);
  healthy_round_trip(good);

  // Wrong payload size (a record one block larger than MemAlloc's).
  const uint32_t slot = 7;
  ipc::MemAllocCmd ma{64};
  uint64_t seq = bad.send(Opcode::MemAlloc, &ma, sizeof ma, slot, 0, 0, 128);
  EXPECT_EQ(bad.wait(slot, seq).status, Status::InvalidValue);

  // A memset past the end of the client's allocation, and one into another client's memory.
  bad.post(Opcode::Memset, ipc::MemsetCmd{mine + 4000, 200, 200, 1, 0, 0});
  EXPECT_EQ(bad.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(bad.take_deferred(), static_cast<int32_t>(Status::InvalidValue));
  bad.post(Opcode::Memset, ipc::MemsetCmd{theirs, 16, 16, 1, 0xee, 0});
  EXPECT_EQ(bad.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(bad.take_deferred(), static_cast<int32_t>(Status::InvalidValue));
  // Overflowing 2-D extents.
  bad.post(Opcode::Memset, ipc::MemsetCmd{mine, ~uint64_t{0} / 2, 16, 4, 0, 0});
  EXPECT_EQ(bad.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(bad.take_deferred(), static_cast<int32_t>(Status::InvalidValue));
  // Element sizes other than 1, 2 and 4; a width, an address or a pitch not a multiple of one.
  for (const ipc::MemsetCmd& m : {ipc::MemsetCmd{mine, 16, 16, 1, 0, 3}, ipc::MemsetCmd{mine, 16, 16, 1, 0, 8},
                                  ipc::MemsetCmd{mine, 18, 18, 1, 0, 4}, ipc::MemsetCmd{mine + 2, 16, 16, 1, 0, 4},
                                  ipc::MemsetCmd{mine, 18, 16, 2, 0, 4}}) {
    bad.post(Opcode::Memset, m);
    EXPECT_EQ(bad.call(Opcode::Fence).status, Status::Success);
    EXPECT_EQ(bad.take_deferred(), static_cast<int32_t>(Status::InvalidValue)) << m.element << " " << m.width;
  }
  // First error wins until taken.
  bad.post(Opcode::Memset, ipc::MemsetCmd{mine, 16, 16, 1, 0, 0}, 77);  // unknown stream
  bad.post(Opcode::EventRecord, ipc::EventRecordCmd{1234, 0, ipc::kNoEventSlot, 0, 0});              // unknown event
  EXPECT_EQ(bad.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(bad.take_deferred(), static_cast<int32_t>(Status::InvalidResourceHandle));
  // Bad device index.
  EXPECT_EQ(bad.call(Opcode::MemGetInfo, nullptr, 0, 0, 9).status, Status::InvalidDevice);
  // Bad staging slot: the copy fails, deferred.
  ipc::CopyCmd cp{};
  cp.dst = {ipc::MemSpace::Device, 0, 0, mine};
  cp.src = {ipc::MemSpace::Staging, 42, 0, 0};
  cp.width = cp.dst_pitch = cp.src_pitch = 16;
  cp.height = 1;
  bad.post(Opcode::Copy, cp);
  // A range past a valid staging slot's end: the slot is handed back (Free) all the same.
  cp.src = {ipc::MemSpace::Staging, 1, 0, bad.view().header().staging_slot_size - 8};
  bad.view().staging_state(1).store(static_cast<uint32_t>(ipc::StagingState::InFlight));
  bad.post(Opcode::Copy, cp);
  EXPECT_EQ(bad.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(bad.take_deferred(), static_cast<int32_t>(Status::InvalidValue));
  EXPECT_EQ(bad.view().staging_state(1).load(), static_cast<uint32_t>(ipc::StagingState::Free));
  // A reply slot out of range: no reply can be written, so the error is deferred.
  bad.send(Opcode::Fence, nullptr, 0, 5000);
  EXPECT_EQ(bad.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(bad.take_deferred(), static_cast<int32_t>(Status::InvalidValue));
  EXPECT_EQ(bad.sticky(), 0);

  // The other client's memory was never touched.
  std::vector<uint8_t> buf(16, 1);
  good.h2d(theirs, buf.data(), 16);
  good.d2h(buf.data(), theirs, 16);
  EXPECT_EQ(buf, std::vector<uint8_t>(16, 1));
  healthy_round_trip(good);

  // Garbage in the ring's tail breaks the protocol: sticky IllegalState and a hang-up.
  auto& ctl = bad.view().control();
  ctl.tail.store(ctl.tail.load() + 7);
  expect_dropped_for_protocol_error(bad);
  healthy_round_trip(good);

  nlohmann::json j;
  for (int i = 0; i < 200; ++i) {
    j = nlohmann::json::parse(control(run_dir_, "stats"));
    if (j["server"]["clients"] == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(j["server"]["clients"], 1);
  EXPECT_GE(j["totals"]["bad_commands"].get<int>(), 8);
  EXPECT_EQ(j["totals"]["clients_died"], 1);
  EXPECT_EQ(j["totals"]["allocations"], 1);  // good's `theirs`
}

TEST_P(ServerErrors, RecordSizeBeyondTheRingIsAProtocolError) {
  start();
  TestClient bad(run_dir_);
  TestClient good(run_dir_);
  ASSERT_TRUE(bad.ok() && good.ok());
  // A header that claims more bytes than were published.
  bad.send(Opcode::Fence, nullptr, 0, ipc::kNoReply, 0, 0, 64);
  auto& ctl = bad.view().control();
  ipc::CommandHeader h{};
  h.size = 4096;
  h.opcode = Opcode::Fence;
  std::memcpy(bad.view().ring() + (ctl.tail.load() & (bad.view().header().ring_capacity - 1)), &h, sizeof h);
  ctl.tail.store(ctl.tail.load() + 64);
  expect_dropped_for_protocol_error(bad);
  healthy_round_trip(good);
}

}  // namespace
}  // namespace funnel::test
