// Commands that move and order data: copies through staging and pinned memory,
// memsets, streams, events, and the legacy default stream's ordering.
#include <sys/mman.h>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "../ipc/one_cpu.hpp"
#include "fixture.hpp"
#include "funnel/server/sim_backend.hpp"
#include "test_client.hpp"

namespace funnel::test {
namespace {

TEST_F(ServerTest, CopyRoundTripThroughStagingWithMemset) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok()) << c.attach_reply().message;
  const uint64_t n = 300 * 1024 + 17;  // several staging chunks, not a multiple of one
  const uint64_t dev = c.alloc(n);
  ASSERT_NE(dev, 0u);
  EXPECT_EQ(dev % 256, 0u);
  std::vector<uint8_t> in(n), out(n, 0);
  for (uint64_t i = 0; i < n; ++i) in[i] = static_cast<uint8_t>(i * 7 + 3);
  c.h2d(dev, in.data(), n);
  ipc::MemsetCmd m{dev + 1000, 0, 500, 1, 0x1ab, 0};
  m.pitch = 500;
  c.post(Opcode::Memset, m);
  c.d2h(out.data(), dev, n);
  for (uint64_t i = 1000; i < 1500; ++i) in[i] = 0xab;
  EXPECT_EQ(in, out);
  EXPECT_EQ(c.take_deferred(), 0);
  // 32- and 16-bit elements (cuMemsetD32, cuMemsetD2D16): the value's low bits, little-endian.
  c.post(Opcode::Memset, ipc::MemsetCmd{dev + 2000, 16, 16, 1, 0x11223344, 4});
  c.post(Opcode::Memset, ipc::MemsetCmd{dev + 2048, 8, 4, 3, 0xfff5566, 2});
  c.d2h(out.data(), dev, n);
  for (uint64_t i = 0; i < 16; ++i) in[2000 + i] = static_cast<uint8_t>(0x44 - (i % 4) * 0x11);
  for (uint64_t r = 0; r < 3; ++r) {
    in[2048 + r * 8] = in[2048 + r * 8 + 2] = 0x66;
    in[2048 + r * 8 + 1] = in[2048 + r * 8 + 3] = 0x55;
  }
  EXPECT_EQ(in, out);
  EXPECT_EQ(c.take_deferred(), 0);

  // A 2-D device-to-device copy with pitches.
  const uint64_t dev2 = c.alloc(4096);
  ipc::CopyCmd cp{};
  cp.dst = {ipc::MemSpace::Device, 0, 0, dev2};
  cp.src = {ipc::MemSpace::Device, 0, 0, dev};
  cp.width = 16;
  cp.height = 4;
  cp.dst_pitch = 32;
  cp.src_pitch = 100;
  ASSERT_EQ(c.call(Opcode::Copy, cp).status, Status::Success);  // synchronous copy: replies when done
  std::vector<uint8_t> back(4096);
  c.d2h(back.data(), dev2, 4096);
  for (uint64_t r = 0; r < 4; ++r)
    for (uint64_t x = 0; x < 16; ++x) ASSERT_EQ(back[r * 32 + x], in[r * 100 + x]) << r << "," << x;

  auto info = c.call(Opcode::MemGetInfo);
  ASSERT_EQ(info.status, Status::Success);
  EXPECT_EQ(info.value[1], uint64_t{1} << 30);
  EXPECT_LT(info.value[0], info.value[1]);
  EXPECT_EQ(c.free(dev), Status::Success);
  EXPECT_EQ(c.free(dev2), Status::Success);
  EXPECT_EQ(c.free(dev2), Status::InvalidDevicePointer);
  info = c.call(Opcode::MemGetInfo);
  EXPECT_EQ(info.value[0], info.value[1]);
}

// MemAllocCmd::address (a client whose own memory lay at the server's first address): the
// allocation is placed exactly there, usable and freed like any other; a range the server's
// address space already uses is AlreadyMapped (the client picks another); a misaligned or
// out-of-range address, or one on a stream-ordered allocation, is refused.
TEST_F(ServerTest, PlacedAllocations) {
  start_server();
  constexpr uint64_t MiB = uint64_t{1} << 20;
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  // A free 2 MiB aligned range of this process (the server runs in it too): the bottom of a
  // 64 MiB hole the kernel chose and we let go.  Its mmaps fill a hole from the top, so a
  // thread mapping something meanwhile does not reach the bottom 4 MiB (with a 6 MiB hole, CI
  // saw it happen; a fixed address far away is no choice: ThreadSanitizer's shadow is there).
  void* probe = ::mmap(nullptr, 64 * MiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  const uint64_t at = (reinterpret_cast<uint64_t>(probe) + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
  ::munmap(probe, 64 * MiB);
  auto r = c.call(Opcode::MemAlloc, ipc::MemAllocCmd{3 * MiB, at});
  ASSERT_EQ(r.status, Status::Success);
  EXPECT_EQ(r.value[0], at);
  std::vector<uint8_t> out(3 * MiB), in(3 * MiB);
  std::iota(out.begin(), out.end(), uint8_t{1});
  c.h2d(at, out.data(), out.size());
  c.d2h(in.data(), at, in.size());
  EXPECT_EQ(in, out);
  // Taken now (by that allocation): refused without harm.
  EXPECT_EQ(c.call(Opcode::MemAlloc, ipc::MemAllocCmd{64, at}).status, Status::AlreadyMapped);
  EXPECT_EQ(c.call(Opcode::MemAlloc, ipc::MemAllocCmd{64, at + 4096}).status, Status::InvalidValue);
  EXPECT_EQ(c.call(Opcode::MemAlloc, ipc::MemAllocCmd{64, uint64_t{1} << 47}).status, Status::InvalidValue);
  ASSERT_EQ(c.call(Opcode::StreamCreate, ipc::StreamCreateCmd{7, 0, 0}).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::MemAllocAsync, ipc::MemAllocCmd{64, at + 4 * MiB}, 7).status, Status::InvalidValue);
  EXPECT_EQ(c.free(at), Status::Success);
  // Freed: the range is the process's again.
  void* again = ::mmap(reinterpret_cast<void*>(at), 4 * MiB, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  EXPECT_EQ(again, reinterpret_cast<void*>(at)) << "the placed range was not unmapped at free";
  if (again != MAP_FAILED) ::munmap(again, 4 * MiB);
}

// The virtual memory commands (cuMemAddressReserve, cuMemMap, ...): a reserved range, memory
// mapped over parts of it (copies across two mappings), what is refused, and everything given back
// when the client leaves without unmapping.
TEST_F(ServerTest, VirtualMemoryReserveMapUnmap) {
  start_server();
  constexpr uint64_t MiB = uint64_t{1} << 20, G = 2 * MiB;
  {
    TestClient c(run_dir_);
    ASSERT_TRUE(c.ok());
    auto r = c.call(Opcode::AddressReserve, ipc::AddressReserveCmd{4 * G, 0});
    ASSERT_EQ(r.status, Status::Success);
    const uint64_t base = r.value[0];
    EXPECT_EQ(base % G, 0u);
    EXPECT_EQ(c.call(Opcode::AddressReserve, ipc::AddressReserveCmd{G + 1, 0}).status, Status::InvalidValue);
    EXPECT_EQ(c.call(Opcode::AddressReserve, ipc::AddressReserveCmd{G, 3 * G}).status, Status::InvalidValue);
    // At most 4 TiB per client (the sim: 1 TiB a range).
    EXPECT_EQ(c.call(Opcode::AddressReserve, ipc::AddressReserveCmd{uint64_t{5} << 40, 0}).status,
              Status::MemoryAllocation);
    std::vector<uint8_t> out(2 * MiB), in(2 * MiB);
    std::iota(out.begin(), out.end(), uint8_t{5});
    ASSERT_EQ(c.call(Opcode::MemMap, ipc::AddressRangeCmd{base, G}).status, Status::Success);
    ASSERT_EQ(c.call(Opcode::MemMap, ipc::AddressRangeCmd{base + G, G}).status, Status::Success);
    EXPECT_EQ(c.call(Opcode::MemMap, ipc::AddressRangeCmd{base + G, G}).status, Status::AlreadyMapped);
    EXPECT_EQ(c.call(Opcode::MemMap, ipc::AddressRangeCmd{base + 3 * G, 2 * G}).status, Status::InvalidValue);
    EXPECT_EQ(c.call(Opcode::MemMap, ipc::AddressRangeCmd{base + 4096, G}).status, Status::InvalidValue);
    // A copy across the two mappings.
    c.h2d(base + G - MiB, out.data(), out.size());
    c.d2h(in.data(), base + G - MiB, in.size());
    EXPECT_EQ(in, out);
    EXPECT_EQ(c.take_deferred(), 0);
    // A mapping is not an allocation, and a reservation with mappings cannot go.
    EXPECT_EQ(c.free(base), Status::InvalidDevicePointer);
    EXPECT_EQ(c.call(Opcode::AddressFree, ipc::AddressRangeCmd{base, 4 * G}).status, Status::InvalidValue);
    EXPECT_EQ(c.call(Opcode::MemUnmap, ipc::AddressRangeCmd{base, G / 2}).status, Status::NotSupported);
    EXPECT_EQ(c.call(Opcode::MemUnmap, ipc::AddressRangeCmd{base, G}).status, Status::Success);
    EXPECT_EQ(c.call(Opcode::MemUnmap, ipc::AddressRangeCmd{base, G}).status, Status::InvalidValue);
    const auto j = nlohmann::json::parse(control(run_dir_, "stats"));
    EXPECT_EQ(j["clients"][0]["device_memory_bytes"], G);
    // The client leaves with base + G mapped and the range reserved.
  }
  for (int i = 0; i < 200; ++i) {
    const auto j = nlohmann::json::parse(control(run_dir_, "stats"));
    if (j["clients"].empty()) {
      EXPECT_EQ(j["totals"]["device_memory_bytes"], 0);
      EXPECT_EQ(j["totals"]["allocations"], 0);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL() << "the client never left";
}

// Stream memory waits (cuStreamWaitValue32/64): a wait holds its stream until the word meets it,
// met by a write on another stream; a wait no value meets is refused; and the waits of a client
// that leaves with them pending are met by the server, in order (two waits on one word for 1 and
// then 2), so that its teardown ends and the server stays free for others.
TEST_F(ServerTest, StreamWaitsHoldTheirStreamAndAreMetWhenTheClientGoes) {
  start_server();
  using ipc::StreamMemOp;
  auto op = [](uint64_t address, uint64_t value, StreamMemOp o, uint32_t flags) {
    return ipc::StreamMemOpCmd{address, value, static_cast<uint32_t>(o), flags};
  };
  {
    TestClient c(run_dir_);
    ASSERT_TRUE(c.ok());
    const uint64_t a = c.alloc(4096);
    std::vector<uint8_t> zero(64, 0);
    c.h2d(a, zero.data(), zero.size());
    c.create_stream(5, ipc::kStreamNonBlocking);
    c.create_stream(6, ipc::kStreamNonBlocking);
    ASSERT_EQ(c.call(Opcode::StreamMemOp, op(a, 3, StreamMemOp::Wait32, ipc::kWaitValueGeq), 5).status,
              Status::Success);
    ASSERT_EQ(c.call(Opcode::StreamMemOp, op(a + 8, 7, StreamMemOp::Write64, 0), 5).status, Status::Success);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_EQ(c.on_stream(Opcode::StreamQuery, 5).status, Status::NotReady) << "the wait did not hold its stream";
    ASSERT_EQ(c.call(Opcode::StreamMemOp, op(a, 4, StreamMemOp::Write32, 0), 6).status, Status::Success);
    ASSERT_EQ(c.on_stream(Opcode::StreamSynchronize, 5).status, Status::Success);
    uint64_t word = 0;
    c.d2h(&word, a + 8, 8);
    EXPECT_EQ(word, 7u) << "the write behind the wait";
    // Never met: refused, nothing queued.
    EXPECT_EQ(c.call(Opcode::StreamMemOp, op(a, 0, StreamMemOp::Wait32, ipc::kWaitValueAnd), 5).status,
              Status::InvalidValue);
    EXPECT_EQ(c.call(Opcode::StreamMemOp, op(a, 0xffffffffu, StreamMemOp::Wait32, ipc::kWaitValueNor), 5).status,
              Status::InvalidValue);
    EXPECT_EQ(c.call(Opcode::StreamMemOp, op(a, ~uint64_t{0}, StreamMemOp::Wait64, ipc::kWaitValueNor), 5).status,
              Status::InvalidValue);
    EXPECT_EQ(c.call(Opcode::StreamMemOp, op(a, 1, StreamMemOp::Wait32, 0x4), 5).status, Status::InvalidValue);
    EXPECT_EQ(c.on_stream(Opcode::StreamQuery, 5).status, Status::Success);
    // Left pending: EQ 1 then EQ 2 on one word (stream 5), NOR 0xff on a 64-bit word holding
    // every other bit (stream 6), AND on the legacy stream.
    const uint64_t others = ~uint64_t{0xff};
    c.h2d(a + 24, &others, 8);
    ASSERT_EQ(c.sync_device(), Status::Success);
    ASSERT_EQ(c.call(Opcode::StreamMemOp, op(a + 16, 1, StreamMemOp::Wait32, ipc::kWaitValueEq), 5).status,
              Status::Success);
    ASSERT_EQ(c.call(Opcode::StreamMemOp, op(a + 16, 2, StreamMemOp::Wait32, ipc::kWaitValueEq), 5).status,
              Status::Success);
    ASSERT_EQ(c.call(Opcode::StreamMemOp, op(a + 24, 0xff, StreamMemOp::Wait64,
                                             ipc::kWaitValueNor | ipc::kWaitValueFlush), 6).status,
              Status::Success);
    ASSERT_EQ(c.call(Opcode::StreamMemOp, op(a + 32, 0x10, StreamMemOp::Wait32, ipc::kWaitValueAnd), 0).status,
              Status::Success);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(c.on_stream(Opcode::StreamQuery, 5).status, Status::NotReady);
    EXPECT_EQ(c.on_stream(Opcode::StreamQuery, 6).status, Status::NotReady);
  }  // the client goes (its socket closes) with four waits pending
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const auto j = nlohmann::json::parse(control(run_dir_, "stats"));
    if (j["clients"].empty()) break;
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "the client's teardown hangs";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // The server serves the next client.
  TestClient d(run_dir_);
  ASSERT_TRUE(d.ok());
  const uint64_t b = d.alloc(4096);
  EXPECT_EQ(d.free(b), Status::Success);
  EXPECT_EQ(d.sync_device(), Status::Success);
}

// The limits beyond stack, printf FIFO and heap (the context's, shared by its clients), and the
// profiler: a device's profiling is on while any client's range is open (the union of the
// ranges), switched off when the last one stops or leaves.
TEST_F(ServerTest, LimitsAndProfiledRanges) {
  start_server();
  TestClient a(run_dir_);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.call(Opcode::GetLimit, ipc::LimitCmd{6, 0, 0}).value[0], 0u) << "no persisting L2 by default";
  EXPECT_EQ(a.call(Opcode::SetLimit, ipc::LimitCmd{6, 0, 4u << 20}).status, Status::Success);
  EXPECT_EQ(a.call(Opcode::GetLimit, ipc::LimitCmd{6, 0, 0}).value[0], 4u << 20);
  EXPECT_EQ(a.call(Opcode::SetLimit, ipc::LimitCmd{6, 0, uint64_t{1} << 40}).status, Status::InvalidValue);
  EXPECT_EQ(a.call(Opcode::SetLimit, ipc::LimitCmd{5, 0, 32}).status, Status::Success);
  EXPECT_EQ(a.call(Opcode::SetLimit, ipc::LimitCmd{5, 0, 256}).status, Status::InvalidValue);
  EXPECT_EQ(a.call(Opcode::GetLimit, ipc::LimitCmd{5, 0, 0}).value[0], 32u);
  EXPECT_EQ(a.call(Opcode::GetLimit, ipc::LimitCmd{4, 0, 0}).value[0], 2048u);
  EXPECT_EQ(a.call(Opcode::GetLimit, ipc::LimitCmd{7, 0, 0}).status, Status::UnsupportedLimit);
  EXPECT_EQ(a.call(Opcode::GetLimit, ipc::LimitCmd{3, 0, 0}).status, Status::UnsupportedLimit);  // as the H100

  const auto base = server::sim_call_counts(*backend_);
  auto counts = [&] {
    const auto n = server::sim_call_counts(*backend_);
    return std::pair{n.profiling_on - base.profiling_on, n.profiling_off - base.profiling_off};
  };
  using Counts = std::pair<uint64_t, uint64_t>;
  EXPECT_EQ(a.call(Opcode::Profiler, ipc::ProfilerCmd{1, 0}).status, Status::Success);
  EXPECT_EQ(a.call(Opcode::Profiler, ipc::ProfilerCmd{1, 0}).status, Status::Success);  // a second start
  EXPECT_EQ(counts(), (Counts{1, 0}));
  EXPECT_EQ(a.call(Opcode::Profiler, ipc::ProfilerCmd{2, 0}).status, Status::InvalidValue);
  {
    TestClient b(run_dir_);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b.call(Opcode::Profiler, ipc::ProfilerCmd{0, 0}).status, Status::Success);  // stop without a start
    EXPECT_EQ(b.call(Opcode::Profiler, ipc::ProfilerCmd{1, 0}).status, Status::Success);
    EXPECT_EQ(a.call(Opcode::Profiler, ipc::ProfilerCmd{0, 0}).status, Status::Success);
    EXPECT_EQ(counts(), (Counts{1, 0})) << "b's range is still open";
    EXPECT_EQ(b.call(Opcode::Profiler, ipc::ProfilerCmd{1, 0}, 0, 1).status, Status::Success);  // device 1
    EXPECT_EQ(counts(), (Counts{2, 0}));
  }  // b leaves with both its ranges open
  for (int i = 0; i < 200 && counts() != Counts{2, 2}; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(counts(), (Counts{2, 2})) << "the ranges a client left open were not closed";
}

// Stream access-policy windows (cudaStreamSetAttribute): of the client's own device memory only,
// properties and hit ratios CUDA has; the persisting-lines reset.
TEST_F(ServerTest, StreamAccessPolicyWindowsCoverTheClientsMemoryOnly) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  const uint64_t a = c.alloc(1 << 20);
  c.create_stream(3);
  auto window = [&](uint64_t base, uint64_t bytes, float ratio, uint32_t hit, uint32_t miss, uint64_t stream = 3) {
    return c.call(Opcode::StreamAttribute, ipc::StreamAttributeCmd{base, bytes, ratio, hit, miss, 0}, stream).status;
  };
  EXPECT_EQ(window(a, 1 << 20, 0.5f, 2, 1), Status::Success);
  EXPECT_EQ(window(a, 0, 0.f, 0, 0), Status::Success) << "no window";
  EXPECT_EQ(window(a, 0, 0.f, 0, 0, 0), Status::Success) << "the legacy stream";
  EXPECT_EQ(window(a + 4096, 1 << 20, 0.5f, 2, 1), Status::InvalidValue) << "past the allocation";
  EXPECT_EQ(window(0x1000, 4096, 0.5f, 2, 1), Status::InvalidValue) << "memory of no allocation";
  EXPECT_EQ(window(a, 4096, 1.5f, 2, 1), Status::InvalidValue) << "a hit ratio above 1";
  EXPECT_EQ(window(a, 4096, 0.5f, 3, 1), Status::InvalidValue) << "no such property";
  EXPECT_EQ(window(a, 4096, 0.5f, 2, 1, 77), Status::InvalidResourceHandle) << "no such stream";
  EXPECT_EQ(c.call(Opcode::ResetPersistingL2).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::ResetPersistingL2, nullptr, 0, 0, 9).status, Status::InvalidDevice);
}

// FUNNEL_DEVICE_MEM_LIMIT as the hello carries it: per device, counted over cudaMalloc
// and cudaMallocAsync, given back by frees and a device reset, shown by MemGetInfo.
TEST_F(ServerTest, DeviceMemoryLimitPerClient) {
  start_server();
  constexpr uint64_t MiB = uint64_t{1} << 20;
  TestClient c(run_dir_, "limited", {8 * MiB, 0});  // device 0: 8 MiB; device 1: no limit
  ASSERT_TRUE(c.ok()) << c.attach_reply().message;
  auto info = c.call(Opcode::MemGetInfo);
  ASSERT_EQ(info.status, Status::Success);
  EXPECT_EQ(info.value[1], 8 * MiB) << "total is the limit";
  EXPECT_EQ(info.value[0], 8 * MiB);

  const uint64_t a = c.alloc(5 * MiB);
  EXPECT_EQ(c.call(Opcode::MemAlloc, ipc::MemAllocCmd{4 * MiB}).status, Status::MemoryAllocation);
  info = c.call(Opcode::MemGetInfo);
  EXPECT_EQ(info.value[0], 3 * MiB);
  EXPECT_EQ(info.value[1], 8 * MiB);
  const uint64_t b = c.alloc(3 * MiB);  // exactly up to the limit
  EXPECT_EQ(c.call(Opcode::MemAlloc, ipc::MemAllocCmd{1}).status, Status::MemoryAllocation);
  EXPECT_EQ(c.call(Opcode::MemGetInfo).value[0], 0u);

  // Stream-ordered allocations count on the stream's device.
  ASSERT_EQ(c.call(Opcode::StreamCreate, ipc::StreamCreateCmd{7, 0, 0}).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::MemAllocAsync, ipc::MemAllocCmd{MiB}, 7).status, Status::MemoryAllocation);
  EXPECT_EQ(c.free(b), Status::Success);
  auto r = c.call(Opcode::MemAllocAsync, ipc::MemAllocCmd{2 * MiB}, 7);
  ASSERT_EQ(r.status, Status::Success);
  EXPECT_EQ(c.call(Opcode::MemAllocAsync, ipc::MemAllocCmd{2 * MiB}, 7).status, Status::MemoryAllocation);
  EXPECT_EQ(c.call(Opcode::MemFreeAsync, ipc::AddressCmd{r.value[0]}, 7).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::MemGetInfo).value[0], 3 * MiB);

  // Device 1 has no limit: the GPU's own numbers.
  EXPECT_EQ(c.call(Opcode::MemAlloc, ipc::MemAllocCmd{64 * MiB}, 0, 1).status, Status::Success);
  info = c.call(Opcode::MemGetInfo, nullptr, 0, 0, 1);
  EXPECT_EQ(info.value[1], uint64_t{1} << 30);

  // A device reset gives back everything on device 0.
  ASSERT_EQ(c.call(Opcode::DeviceReset).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::MemGetInfo).value[0], 8 * MiB);
  EXPECT_NE(c.alloc(8 * MiB), 0u);
  (void)a;

  // Another client has its own limit (none here): the first one's use does not count.
  TestClient other(run_dir_);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other.alloc(100 * MiB), 0u);
  EXPECT_EQ(other.call(Opcode::MemGetInfo).value[1], uint64_t{1} << 30);

  // A limit above the GPU: total is the GPU's, free what the GPU has free.
  TestClient big(run_dir_, "big", {uint64_t{4} << 30});
  ASSERT_TRUE(big.ok());
  info = big.call(Opcode::MemGetInfo);
  EXPECT_EQ(info.value[1], uint64_t{1} << 30);
  EXPECT_LT(info.value[0], uint64_t{1} << 30);
}

TEST_F(ServerTest, PinnedCopies) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  auto r = c.call(Opcode::PinnedAlloc, ipc::PinnedAllocCmd{10000, 0, 0});
  ASSERT_EQ(r.status, Status::Success);
  const uint64_t id = r.value[0];
  EXPECT_EQ(r.value[1], 12288u);
  const auto path = run_dir_ / ("pinned." + std::to_string(c.attach_reply().client_id) + "." + std::to_string(id));
  auto pinned = ipc::MappedFile::open(path, r.value[1]);
  std::filesystem::remove(path);  // as the client runtime does once it mapped it
  auto* p = static_cast<uint8_t*>(pinned.data());
  for (int i = 0; i < 10000; ++i) p[i] = static_cast<uint8_t>(i);
  const uint64_t dev = c.alloc(10000);
  ipc::CopyCmd cp{};
  cp.dst = {ipc::MemSpace::Device, 0, 0, dev};
  cp.src = {ipc::MemSpace::Pinned, 0, id, 0};
  cp.width = cp.dst_pitch = cp.src_pitch = 10000;
  cp.height = 1;
  ASSERT_EQ(c.call(Opcode::Copy, cp).status, Status::Success);
  cp.dst = {ipc::MemSpace::Pinned, 0, id, 0};
  cp.src = {ipc::MemSpace::Device, 0, 0, dev};
  std::memset(p, 0, 10000);
  ASSERT_EQ(c.call(Opcode::Copy, cp).status, Status::Success);
  int bad = 0;
  for (int i = 0; i < 10000; ++i) bad += p[i] != static_cast<uint8_t>(i);
  EXPECT_EQ(bad, 0);
  cp.src.address = 12288 - 100;  // past the end of the pinned allocation
  cp.src = {ipc::MemSpace::Pinned, 0, id, 12288 - 100};
  cp.dst = {ipc::MemSpace::Device, 0, 0, dev};
  EXPECT_EQ(c.call(Opcode::Copy, cp).status, Status::InvalidValue);
  EXPECT_EQ(c.call(Opcode::PinnedFree, ipc::PinnedFreeCmd{id}).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::PinnedFree, ipc::PinnedFreeCmd{id}).status, Status::InvalidValue);
}

TEST_F(ServerTest, StreamsEventsAndElapsedTime) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  const uint64_t dev = c.alloc(8 << 20);
  c.create_stream(5);
  c.create_event(1);
  c.create_event(2);
  c.create_event(3, ipc::kEventDisableTiming);
  // Never recorded: synchronize and query succeed at once.
  EXPECT_EQ(c.call(Opcode::EventSynchronize, ipc::EventCmd{1, 0, 0}).status, Status::Success);
  c.record(1, 5);
  for (uint32_t i = 0; i < 4; ++i) c.post(Opcode::Memset, ipc::MemsetCmd{dev, 8 << 20, 8 << 20, 1, i, 0}, 5);
  c.record(2, 5);
  c.record(3, 5);
  EXPECT_EQ(c.call(Opcode::EventSynchronize, ipc::EventCmd{2, 0, 0}).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::EventQuery, ipc::EventCmd{2, 0, 0}).status, Status::Success);
  auto r = c.call(Opcode::EventElapsedTime, ipc::EventPairCmd{1, 2});
  ASSERT_EQ(r.status, Status::Success);
  const float ms = std::bit_cast<float>(static_cast<uint32_t>(r.value[0]));
  EXPECT_GE(ms, 0.0f);
  EXPECT_LT(ms, 10000.0f);
  EXPECT_EQ(r.value[0] >> 32, 0u);
  EXPECT_EQ(c.call(Opcode::EventElapsedTime, ipc::EventPairCmd{1, 3}).status, Status::InvalidResourceHandle);
  EXPECT_EQ(c.on_stream(Opcode::StreamSynchronize, 5).status, Status::Success);
  EXPECT_EQ(c.on_stream(Opcode::StreamQuery, 5).status, Status::Success);
  c.post(Opcode::StreamWaitEvent, ipc::EventCmd{2, 0, 0}, 0);
  c.send(Opcode::StreamDestroy, nullptr, 0, ipc::kNoReply, 5);
  c.post(Opcode::EventDestroy, ipc::EventCmd{1, 0, 0});
  EXPECT_EQ(c.call(Opcode::EventQuery, ipc::EventCmd{1, 0, 0}).status, Status::InvalidResourceHandle);
  EXPECT_EQ(c.on_stream(Opcode::StreamQuery, 5).status, Status::InvalidResourceHandle);
  EXPECT_EQ(c.sync_device(), Status::Success);
  EXPECT_EQ(c.take_deferred(), 0);

  auto lim = c.call(Opcode::SetLimit, ipc::LimitCmd{2, 0, 1u << 24});
  EXPECT_EQ(lim.status, Status::Success);
  lim = c.call(Opcode::GetLimit, ipc::LimitCmd{2, 0, 0});
  EXPECT_EQ(lim.value[0], 1u << 24);
  EXPECT_EQ(c.call(Opcode::GetLimit, ipc::LimitCmd{77, 0, 0}).status, Status::UnsupportedLimit);
  EXPECT_EQ(c.call(Opcode::Fence).status, Status::Success);
}

// A stream held back by a long chain of memsets on a non-blocking "gate" stream.
struct Gate {
  explicit Gate(TestClient& client) : c(client) {
    c.create_stream(kGateStream, ipc::kStreamNonBlocking);
    c.create_event(kGateEvent, ipc::kEventDisableTiming);
    buf = c.alloc(kBytes);
  }
  void close() {
    for (uint32_t i = 0; i < kRounds; ++i) c.post(Opcode::Memset, ipc::MemsetCmd{buf, kBytes, kBytes, 1, i, 0}, kGateStream);
    c.record(kGateEvent, kGateStream);
  }
  void hold(uint64_t stream) { c.post(Opcode::StreamWaitEvent, ipc::EventCmd{kGateEvent, 0, 0}, stream); }
  Status gate_state() { return c.call(Opcode::EventQuery, ipc::EventCmd{kGateEvent, 0, 0}).status; }

  static constexpr uint64_t kGateStream = 900, kGateEvent = 900, kBytes = 64 << 20;
  static constexpr uint32_t kRounds = 24;
  TestClient& c;
  uint64_t buf;
};

TEST_F(ServerTest, LegacyStreamWaitsForBlockingStreams) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  Gate gate(c);
  c.create_stream(7);  // blocking
  c.create_event(1, ipc::kEventDisableTiming);
  gate.close();
  gate.hold(7);
  c.post(Opcode::Fence, 0);  // just to interleave something harmless
  c.record(1, 0);            // legacy work after blocking-stream work
  EXPECT_EQ(c.call(Opcode::EventSynchronize, ipc::EventCmd{1, 0, 0}).status, Status::Success);
  EXPECT_EQ(gate.gate_state(), Status::Success) << "legacy work completed before the blocking stream's work";

  // The other direction: blocking-stream work waits for earlier legacy work.
  c.create_event(2, ipc::kEventDisableTiming);
  gate.close();
  gate.hold(0);
  c.record(2, 7);
  EXPECT_EQ(c.call(Opcode::EventSynchronize, ipc::EventCmd{2, 0, 0}).status, Status::Success);
  EXPECT_EQ(gate.gate_state(), Status::Success) << "blocking-stream work completed before earlier legacy work";
  EXPECT_EQ(c.take_deferred(), 0);
}

TEST_F(ServerTest, NonBlockingStreamsAreNotOrderedWithLegacy) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  Gate gate(c);
  c.create_stream(8, ipc::kStreamNonBlocking);
  c.create_event(1, ipc::kEventDisableTiming);
  gate.close();
  gate.hold(8);
  c.record(1, 0);
  EXPECT_EQ(c.call(Opcode::EventSynchronize, ipc::EventCmd{1, 0, 0}).status, Status::Success);
  EXPECT_EQ(c.on_stream(Opcode::StreamQuery, 8).status, Status::NotReady)
      << "the legacy stream waited for a non-blocking stream";
  EXPECT_EQ(c.on_stream(Opcode::StreamSynchronize, 8).status, Status::Success);
  EXPECT_EQ(c.sync_device(), Status::Success);
}

TEST_F(ServerTest, StatsCountPerClient) {
  start_server();
  TestClient a(run_dir_, "app-a");
  TestClient b(run_dir_, "app-b");
  ASSERT_TRUE(a.ok() && b.ok());
  const uint64_t p = a.alloc(1000);
  std::vector<uint8_t> data(1000, 1);
  a.h2d(p, data.data(), data.size());
  a.d2h(data.data(), p, data.size());
  b.create_stream(1);
  ASSERT_EQ(b.call(Opcode::Fence).status, Status::Success);
  const auto j = nlohmann::json::parse(control(run_dir_, "stats"));
  EXPECT_EQ(j["server"]["backend"], "sim");
  EXPECT_EQ(j["server"]["clients"], 2);
  EXPECT_EQ(j["server"]["devices"].size(), 2u);
  ASSERT_EQ(j["clients"].size(), 2u);
  const auto& ca = j["clients"][0];
  EXPECT_EQ(ca["command"], "app-a");
  EXPECT_EQ(ca["mpi_rank"], 3);
  EXPECT_EQ(ca["allocations"], 1);
  EXPECT_EQ(ca["device_memory_bytes"], 1000);
  EXPECT_EQ(ca["bytes_h2d"], 1000);
  EXPECT_EQ(ca["bytes_d2h"], 1000);
  EXPECT_EQ(j["clients"][1]["streams"], 1);
  EXPECT_EQ(j["totals"]["allocations"], 1);
  EXPECT_EQ(j["totals"]["clients_attached"], 2);
  for (const char* k : {"pid", "events", "pinned_bytes", "pinned_allocations", "commands", "errors"})
    EXPECT_TRUE(ca.contains(k)) << k;
  // Read now, while they run: the worker thread's CPU time (none for a pooled thread, which
  // serves others too) and the client's (this process).
  if (std::filesystem::exists("/proc/thread-self/schedstat")) {
    if (options().worker_threads == 0)
      EXPECT_GT(ca["cpu_s"]["worker"].get<double>(), 0.0);
    else
      EXPECT_TRUE(ca["cpu_s"]["worker"].is_null());
    EXPECT_GT(ca["cpu_s"]["client"].get<double>(), 0.0);
    EXPECT_GE(ca["cpu_s"]["client_runqueue"].get<double>(), 0.0);
  }
}

// A waited call's pick-up delay is counted from the record's posted_us: calls whose records
// say they were written 2.5 ms ago land in a bucket ending at 4096 us or later, fresh ones far
// below it; one-way commands are not counted.
TEST_F(ServerTest, StatsCountWaitedCallsByPickupDelay) {
  start_server();
  TestClient a(run_dir_, "app-a");
  ASSERT_TRUE(a.ok());
  for (int i = 0; i < 98; ++i) ASSERT_EQ(a.call(Opcode::Fence).status, Status::Success);
  a.create_stream(1);  // one-way
  a.backdate(2500);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(a.call(Opcode::Fence).status, Status::Success);
  const auto j = nlohmann::json::parse(control(run_dir_, "stats"));
  ASSERT_EQ(j["clients"].size(), 1u);
  const auto& p = j["clients"][0]["call_pickup_us"];
  EXPECT_EQ(p["calls"], 100);
  // At least 2.5 ms each (the clock only goes forward): their bucket ends at 4096 us or later.
  EXPECT_GE(p["p99"].get<int>(), 4096);
  EXPECT_GE(p["max"].get<int>(), 4096);
  EXPECT_LE(p["p50"].get<int>(), 2048) << "fresh calls, taken at once by a spinning worker";
  // The worker's time on the same calls: counted for each waited call (not backdated).
  const auto& s = j["clients"][0]["call_submit_us"];
  EXPECT_EQ(s["calls"], 100);
  EXPECT_LE(s["p50"].get<int>(), 2048) << "a Fence takes the sim backend no time";
}

// A worker whose polling finds its core wanted backs off (FUNNEL_SERVER_SPIN_BACKOFF_MS):
// the server's threads and a thread that never yields share one CPU, so the worker's
// sched_yield past its first 20 us of polling hands that thread the core for a slice.  With
// the back-off at 0 it never backs off.
TEST_F(ServerTest, AWorkerWhoseCoreIsWantedBacksOff) {
  // Threads inherit their creator's affinity: the server's, the client's and the hog's.
  OnOneCpu pinned;
  ASSERT_TRUE(pinned.ok());
  // Stopped and joined however the test leaves (a failed ASSERT too), before the affinity
  // is restored.
  struct Hog {
    std::atomic<bool> stop{false};
    std::thread thread{[this] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    }};
    ~Hog() {
      stop = true;
      thread.join();
    }
  } hog;
  uint64_t backoffs[2] = {0, 0};
  int naps[2] = {0, 0};  // a backing-off worker naps through launches (doc/design/channel.md, "Naps")
  for (const int ms : {100, 0}) {
    auto o = options();
    o.spin_backoff = std::chrono::milliseconds(ms);
    start_server(o);
    {
      TestClient c(run_dir_, "app");
      ASSERT_TRUE(c.ok());
      // Each call leaves the worker idle and polling; the next comes after 5 ms.
      for (int i = 0; i < 20; ++i) {
        ASSERT_EQ(c.call(Opcode::Fence).status, Status::Success);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        naps[ms == 0] += c.view().control().consumer_sleeping.load() == ipc::kConsumerNapping ? 1 : 0;
      }
      const auto j = nlohmann::json::parse(control(run_dir_, "stats"));
      ASSERT_EQ(j["clients"].size(), 1u);
      backoffs[ms == 0] = j["clients"][0]["spin_backoffs"].get<uint64_t>();
    }
    stop_server();
  }
  EXPECT_GE(backoffs[0], 1u) << "the worker kept polling a core another thread wanted";
  EXPECT_EQ(backoffs[1], 0u) << "FUNNEL_SERVER_SPIN_BACKOFF_MS=0 backed off";
  if (options().worker_threads == 0)
    EXPECT_GE(naps[0], 1) << "a worker backing off slept through launches' doorbells unnapped";
  else  // server.pooled: a pooled thread sleeps on several rings at once and does not nap
    EXPECT_EQ(naps[0], 0) << "a pooled worker napped";
  EXPECT_EQ(naps[1], 0) << "a worker that does not back off napped";
}

// EventRecord with a state slot: the stream itself stores the generation into the
// channel's event state word once it reaches the record (the client's no-round-trip
// completion check), not before the work ahead of it; a slot out of range is refused.
TEST_F(ServerTest, EventRecordStoresItsGenerationWhenTheStreamGetsThere) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  const uint32_t slots = c.view().header().event_slots;
  ASSERT_GT(slots, 1u);
  Gate gate(c);
  c.create_stream(6);
  c.create_event(40, ipc::kEventDisableTiming);
  auto& word = c.view().event_state(slots - 1);
  EXPECT_EQ(word.load(), 0u);
  gate.close();
  gate.hold(6);
  c.post(Opcode::EventRecord, ipc::EventRecordCmd{40, 0, slots - 1, 7, 0}, 6);
  EXPECT_EQ(c.call(Opcode::Fence).status, Status::Success);  // the record was processed
  EXPECT_EQ(gate.gate_state(), Status::NotReady) << "the gate opened too early for this test";
  EXPECT_EQ(word.load(), 0u) << "stored before the stream reached the record";
  EXPECT_EQ(c.on_stream(Opcode::StreamSynchronize, 6).status, Status::Success);
  EXPECT_EQ(word.load(), 7u);
  // Re-recorded on an idle stream: the next generation lands too.
  c.post(Opcode::EventRecord, ipc::EventRecordCmd{40, 0, slots - 1, 8, 0}, 6);
  EXPECT_EQ(c.on_stream(Opcode::StreamSynchronize, 6).status, Status::Success);
  EXPECT_EQ(word.load(), 8u);
  // Out of range: refused with InvalidValue at the next synchronising call; nothing stored.
  c.post(Opcode::EventRecord, ipc::EventRecordCmd{40, 0, slots, 9, 0}, 6);
  EXPECT_EQ(c.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(c.take_deferred(), static_cast<int32_t>(Status::InvalidValue));
  EXPECT_EQ(word.load(), 8u);
}

// The state word is stored before the event is recorded: an event the server reports
// complete has nothing queued behind it (its word landed, the stream is idle), and an
// elapsed time the client asks for once it saw both words waits for the events instead of
// failing with NotReady, while one asked for before that is NotReady, as natively.
TEST_F(ServerTest, EventWordLandsBeforeTheEventAndElapsedTimeWaitsForSeenEvents) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  const uint32_t slots = c.view().header().event_slots;
  ASSERT_GT(slots, 3u);
  Gate gate(c);
  c.create_stream(7);
  c.create_event(50);
  c.create_event(51);
  auto& w50 = c.view().event_state(slots - 2);
  auto& w51 = c.view().event_state(slots - 3);
  gate.close();
  gate.hold(7);
  c.post(Opcode::EventRecord, ipc::EventRecordCmd{50, 0, slots - 2, 3, 0}, 7);
  c.post(Opcode::EventRecord, ipc::EventRecordCmd{51, 0, slots - 3, 4, 0}, 7);
  // Not seen by the client yet: NotReady at once, as natively.
  EXPECT_EQ(c.call(Opcode::EventElapsedTime, ipc::EventPairCmd{50, 51}).status, Status::NotReady);
  ASSERT_EQ(gate.gate_state(), Status::NotReady) << "the gate opened too early for this test";
  // As if the GPU's stores had landed ahead of the records: the elapsed time now waits.
  w50.store(3);
  w51.store(4);
  const ipc::EventPairCmd pair{50, 51};
  const uint32_t slot = 0;
  const uint64_t seq = c.send(Opcode::EventElapsedTime, &pair, sizeof pair, slot);
  const Reply r = c.wait(slot, seq);
  ASSERT_EQ(r.status, Status::Success);
  EXPECT_EQ(gate.gate_state(), Status::Success) << "answered before the events were recorded";
  const float ms = std::bit_cast<float>(static_cast<uint32_t>(r.value[0]));
  EXPECT_GE(ms, 0.0f);
  EXPECT_LT(ms, 10000.0f);
  // Re-recorded behind the gate: once EventSynchronize says complete, the word is there and
  // the stream idle (the word went first).
  w51.store(0);
  gate.close();
  gate.hold(7);
  c.post(Opcode::EventRecord, ipc::EventRecordCmd{51, 0, slots - 3, 5, 0}, 7);
  ASSERT_EQ(c.call(Opcode::EventSynchronize, ipc::EventCmd{51, 0, 0}).status, Status::Success);
  EXPECT_EQ(w51.load(), 5u) << "the event completed before its word was stored";
  EXPECT_EQ(c.on_stream(Opcode::StreamQuery, 7).status, Status::Success);
}

// FUNNEL_GPU_REPLIES (doc/design/channel.md, "Answered by the GPU"): a synchronous copy
// between device memory and device memory is answered by the stream itself (the sim
// backend's stream thread stores the seq's low half in the slot's reply word; the worker then
// answers through the slot's seq as well, since a store to the word can become visible late,
// over a later answer: "Every GPU answer is also written to the slot"), also with auto when it
// is the only such call; with gpu_replies off only the worker answers; a copy that fails is
// answered by the worker either way.
TEST_F(ServerTest, SynchronousCopiesAreAnsweredByTheGpuUnlessTurnedOff) {
  for (const GpuReplies mode : {GpuReplies::Always, GpuReplies::Auto, GpuReplies::Off}) {
    SCOPED_TRACE(std::string("gpu_replies ") + gpu_replies_name(mode));
    const bool gpu = mode != GpuReplies::Off;
    TestClient c = start_with_gpu_replies(mode);
    ASSERT_TRUE(c.ok());
    const uint64_t a = c.alloc(4096), b = c.alloc(4096);
    ipc::CopyCmd cp = device_copy(a, b, 4096);
    const uint32_t slot = 10;  // the client's own calls above used the first slots
    const uint64_t seq = c.send(Opcode::Copy, &cp, sizeof cp, slot, 0, 0);
    ASSERT_EQ(c.wait(slot, seq).status, Status::Success);
    const auto& v = c.view();
    if (gpu) {
      EXPECT_EQ(v.reply_word(slot).load(), static_cast<uint32_t>(seq)) << "the GPU did not answer";
      EXPECT_TRUE(eventually([&] { return v.reply(slot).seq.load() == seq; })) << "not answered in the slot too";
    } else {
      EXPECT_EQ(v.reply_word(slot).load(), 0u);
      EXPECT_EQ(v.reply(slot).seq.load(), seq);
    }
    cp.src.address = b + 4000;  // past the end of the allocation
    const uint32_t bad_slot = 11;
    const uint64_t bad_seq = c.send(Opcode::Copy, &cp, sizeof cp, bad_slot, 0, 0);
    EXPECT_EQ(c.wait(bad_slot, bad_seq).status, Status::InvalidValue);
    EXPECT_EQ(v.reply(bad_slot).seq.load(), bad_seq);
    // The slot again, after that error and after an answer with values (MemGetInfo's free and
    // total bytes): a GPU-answered copy there reads Success and no values (the worker stores
    // the slot's fields before the GPU's answer only where they differ).
    cp = device_copy(a, b, 4096);
    const uint64_t again = c.send(Opcode::Copy, &cp, sizeof cp, bad_slot, 0, 0);
    const Reply after_error = c.wait(bad_slot, again);
    EXPECT_EQ(after_error.status, Status::Success) << "the error of the slot's last call was read again";
    const uint64_t info = c.send(Opcode::MemGetInfo, nullptr, 0, bad_slot, 0, 0);
    const Reply valued = c.wait(bad_slot, info);
    ASSERT_EQ(valued.status, Status::Success);
    ASSERT_NE(valued.value[0], 0u);
    const uint64_t last = c.send(Opcode::Copy, &cp, sizeof cp, bad_slot, 0, 0);
    const Reply after_values = c.wait(bad_slot, last);
    EXPECT_EQ(after_values.status, Status::Success);
    for (const uint64_t x : after_values.value) {
      EXPECT_EQ(x, 0u) << "the last answer's values were read again";
    }
    if (gpu) {
      EXPECT_EQ(v.reply_word(bad_slot).load(), static_cast<uint32_t>(last));
    }
    c.detach();
    stop_server();
  }
}

// A GPU-answered call whose reply word shows another value once its stream is done (a late
// stream write of an earlier call on the slot, answered by its event, landed over this one's):
// the worker, finding the stream idle, answers through the slot; it only woke the client,
// which then waited for its value forever (a hostfunc run of the soak hung so).
TEST_F(ServerTest, AGpuAnsweredCallWhoseWordWasOverwrittenIsAnsweredThroughItsSlot) {
  std::atomic<bool> overwrite{false};
  stream_write_value_ = [&](uint32_t v) { return overwrite.load() ? v + 1000 : v; };
  TestClient c = start_with_gpu_replies(GpuReplies::Always);
  ASSERT_TRUE(c.ok());
  const uint64_t a = c.alloc(4096), b = c.alloc(4096);
  c.create_stream(5);
  ipc::CopyCmd cp = device_copy(a, b, 4096);
  overwrite = true;
  const uint32_t slot = c.next_slot();
  const uint64_t seq = c.send(Opcode::Copy, &cp, sizeof cp, slot, 5, 0);
  const Reply r = c.wait(slot, seq, std::chrono::seconds(5));
  EXPECT_EQ(r.status, Status::Success) << "not answered (Timeout is " << static_cast<int>(Status::Timeout) << ")";
  EXPECT_EQ(c.view().reply(slot).seq.load(), seq) << "answered through the slot";
  EXPECT_EQ(c.view().reply_word(slot).load(), static_cast<uint32_t>(seq) + 1000) << "the word shows the other value";
  overwrite = false;
  const uint32_t next = c.next_slot();
  EXPECT_EQ(c.wait(next, c.send(Opcode::Copy, &cp, sizeof cp, next, 5, 0)).status, Status::Success);
}

// A GPU-answered call costs the worker no event (doc/design/channel.md, "Answered by the
// GPU"): it watches the reply word, and asks the stream only about a wait older than a
// millisecond (held here by a host function), which still ends with the right answer once
// the stream goes on.  With gpu_replies off, each synchronous copy records an event.
TEST_F(ServerTest, GpuAnsweredCallsWatchTheirReplyWordNotAnEvent) {
  for (const GpuReplies mode : {GpuReplies::Always, GpuReplies::Off}) {
    SCOPED_TRACE(std::string("gpu_replies ") + gpu_replies_name(mode));
    const bool gpu = mode != GpuReplies::Off;
    TestClient c = start_with_gpu_replies(mode);
    ASSERT_TRUE(c.ok());
    const uint64_t a = c.alloc(4096), b = c.alloc(4096);
    c.create_stream(5);
    std::vector<uint8_t> in(4096);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 13 + 1);
    c.h2d(b, in.data(), in.size(), 5);
    ipc::CopyCmd cp = device_copy(a, b, 4096);
    const server::SimCallCounts before = server::sim_call_counts(*backend_);
    constexpr int kCopies = 64;
    for (int i = 0; i < kCopies; ++i) {
      const uint32_t slot = c.next_slot();
      ASSERT_EQ(c.wait(slot, c.send(Opcode::Copy, &cp, sizeof cp, slot, 5, 0)).status, Status::Success);
    }
    const server::SimCallCounts after = server::sim_call_counts(*backend_);
    if (gpu) {
      EXPECT_EQ(after.events_created, before.events_created);
      EXPECT_EQ(after.event_queries, before.event_queries);
    } else {
      EXPECT_GE(after.events_created - before.events_created, uint64_t{kCopies});
    }

    // A long wait: the stream is held by a host function until the client lets it go.
    auto& reached = c.view().event_state(10);
    auto& done = c.view().event_state(11);
    std::vector<uint8_t> zero(4096, 0);
    c.h2d(a, zero.data(), zero.size(), 5);
    c.post(Opcode::HostFunc, ipc::HostFuncCmd{10, 11, 4, 0}, 5);
    const uint32_t slot = c.next_slot();
    const uint64_t seq = c.send(Opcode::Copy, &cp, sizeof cp, slot, 5, 0);
    ASSERT_TRUE(eventually([&] { return reached.load() == 4; }));
    const uint64_t queries = server::sim_call_counts(*backend_).stream_queries;
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_FALSE(ipc::reply_arrived(c.view().reply(slot), c.view().reply_word(slot), seq)) << "answered while held";
    if (gpu) {
      EXPECT_GT(server::sim_call_counts(*backend_).stream_queries, queries) << "an old wait asks its stream";
    }
    done.store(4);
    ASSERT_EQ(c.wait(slot, seq).status, Status::Success);
    std::vector<uint8_t> out(4096, 0);
    c.d2h(out.data(), a, out.size(), 5);
    EXPECT_EQ(out, in);
    c.detach();
    stop_server();
  }
}

// A client thread already asleep on a staging state, as one that waited past its spin: counted
// in client_waiting, and with a sleep far longer than the test allows, so only the server's
// wake-up (Answers::wake_staging_sleepers) ends it in time.
class StagingSleeper {
 public:
  StagingSleeper(TestClient& c, uint32_t slot, ipc::StagingState want)
      : word_(c.view().staging_state(slot)),
        want_(static_cast<uint32_t>(want)),
        waiting_(c.view().completion().client_waiting),
        thread_([this] {
          ipc::wait_until(
              word_, [&] { return word_.load() == want_; }, [&] { return quit_.load(); },
              {.spin = std::chrono::nanoseconds(0), .slice = std::chrono::seconds(30), .sleepers = &waiting_});
          woke_.store(true);
        }) {}
  ~StagingSleeper() {
    if (!woke_.load()) {  // not woken in time: end its sleep (the test failed already)
      quit_.store(true);
      ipc::futex_wake_all(word_);
    }
    thread_.join();
  }
  bool asleep() { return eventually([&] { return waiting_.load() == 1; }); }
  bool woken() { return eventually([&] { return woke_.load(); }, std::chrono::seconds(10)); }

 private:
  std::atomic<uint32_t>& word_;
  uint32_t want_;
  std::atomic<uint32_t>& waiting_;
  std::atomic<bool> quit_{false}, woke_{false};
  std::thread thread_;
};

// A staged device-to-host chunk (pageable cudaMemcpy) is marked Ready in its staging slot by
// the stream itself (protocol 11: the staging states lie inside the driver registration), so
// the client copies it out without the worker: no event, one stream write per chunk; a chunk
// held on the GPU stays InFlight until the stream goes on.  With gpu_replies off the worker
// marks it, after an event.
TEST_F(ServerTest, StagedDeviceToHostChunksAreMarkedReadyByTheGpuUnlessTurnedOff) {
  for (const GpuReplies mode : {GpuReplies::Auto, GpuReplies::Off}) {
    SCOPED_TRACE(std::string("gpu_replies ") + gpu_replies_name(mode));
    const bool gpu = mode != GpuReplies::Off;
    TestClient c = start_with_gpu_replies(mode);
    ASSERT_TRUE(c.ok());
    const uint64_t a = c.alloc(8192);
    std::vector<uint8_t> in(8192);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7 + 3);
    c.h2d(a, in.data(), in.size());
    ASSERT_EQ(c.sync_device(), Status::Success);
    const server::SimCallCounts before = server::sim_call_counts(*backend_);
    std::vector<uint8_t> out(in.size(), 0);
    c.d2h(out.data(), a, out.size());
    EXPECT_EQ(out, in);
    const server::SimCallCounts after = server::sim_call_counts(*backend_);
    EXPECT_EQ(after.stream_writes - before.stream_writes, gpu ? 1u : 0u);
    EXPECT_EQ(after.events_created - before.events_created, gpu ? 0u : 1u);

    // Held behind a host function on the legacy stream: not Ready before the stream goes on.
    auto& reached = c.view().event_state(10);
    auto& done = c.view().event_state(11);
    c.post(Opcode::HostFunc, ipc::HostFuncCmd{10, 11, 5, 0});
    auto& state = c.view().staging_state(0);
    state.store(static_cast<uint32_t>(ipc::StagingState::InFlight));
    ipc::CopyCmd cp{};
    cp.dst = {ipc::MemSpace::Staging, 0, 0, 0};
    cp.src = {ipc::MemSpace::Device, 0, 0, a + 4096};
    cp.width = cp.dst_pitch = cp.src_pitch = 4096;
    cp.height = 1;
    c.post(Opcode::Copy, cp);
    ASSERT_TRUE(eventually([&] { return reached.load() == 5; }));
    ASSERT_EQ(c.call(Opcode::MemGetInfo).status, Status::Success);  // the copy is queued
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(state.load(), static_cast<uint32_t>(ipc::StagingState::InFlight)) << "Ready before the copy ran";
    {
      StagingSleeper sleeper(c, 0, ipc::StagingState::Ready);
      ASSERT_TRUE(sleeper.asleep());
      done.store(5);
      EXPECT_TRUE(sleeper.woken()) << "a client asleep on the slot was not woken";
    }
    ASSERT_TRUE(c.wait_staging(0, ipc::StagingState::Ready));
    EXPECT_EQ(std::memcmp(c.view().staging(0), in.data() + 4096, 4096), 0);
    state.store(static_cast<uint32_t>(ipc::StagingState::Free));
    EXPECT_EQ(c.sync_device(), Status::Success);

    // Chunk after chunk through one slot: each copy into the slot settles the entry of the
    // chunk before (the client saw it Ready, then marked the slot InFlight again), so that
    // entry is no longer counted as a call on the GPU, and the next chunk does not look crowded
    // (a kernel store, where the stream write alone answers sooner).  Without the settling the
    // entries also lived until their stream, busy with the next chunk on a GPU, reported idle.
    const uint64_t kernels = server::sim_call_counts(*backend_).kernel_stores;
    for (int i = 0; i < 50; ++i) {
      c.d2h(out.data(), a, 4096);
      ASSERT_EQ(std::memcmp(out.data(), in.data(), 4096), 0);
    }
    EXPECT_EQ(server::sim_call_counts(*backend_).kernel_stores, kernels) << "chunks alone looked crowded";

    // Chunks through two slots in turn (as the client runtime's round robin does): the entry of
    // the chunk before, seen by the client but not yet polled, does not make the next chunk
    // look crowded: it is done once its word is no longer InFlight.
    for (uint32_t i = 0; i < 50; ++i) {
      const uint32_t slot = i % 2;
      auto& w = c.view().staging_state(slot);
      w.store(static_cast<uint32_t>(ipc::StagingState::InFlight));
      ipc::CopyCmd chunk = cp;
      chunk.dst.index = slot;
      chunk.src.address = a + 4096 * slot;
      c.post(Opcode::Copy, chunk);
      ASSERT_TRUE(c.wait_staging(slot, ipc::StagingState::Ready));
      ASSERT_EQ(std::memcmp(c.view().staging(slot), in.data() + 4096 * slot, 4096), 0);
      w.store(static_cast<uint32_t>(ipc::StagingState::Free));
    }
    EXPECT_EQ(server::sim_call_counts(*backend_).kernel_stores, kernels) << "chunks alone looked crowded";
    c.detach();
    stop_server();
  }
}

// A staged host-to-device chunk (pageable cudaMemcpy from the host) is marked Free again by the
// stream itself, as a device-to-host one is marked Ready: no event, one stream write per chunk,
// and the worker need not see the copy done before the client fills the slot again.  A held
// chunk stays InFlight until the stream goes on; a client asleep on it is woken.  Chunks posted
// back to back (the client returns once a chunk is staged) are not calls anybody waits for, so
// they never look crowded to each other.  With gpu_replies off the worker frees the slot, after
// an event.
TEST_F(ServerTest, StagedHostToDeviceChunksAreMarkedFreeByTheGpuUnlessTurnedOff) {
  for (const GpuReplies mode : {GpuReplies::Auto, GpuReplies::Off}) {
    SCOPED_TRACE(std::string("gpu_replies ") + gpu_replies_name(mode));
    const bool gpu = mode != GpuReplies::Off;
    TestClient c = start_with_gpu_replies(mode);
    ASSERT_TRUE(c.ok());
    const uint32_t slots = c.view().header().staging_slots;
    const uint64_t a = c.alloc(4096 * 64);
    std::vector<uint8_t> in(4096 * 64);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 13 + 1);
    ASSERT_EQ(c.sync_device(), Status::Success);
    const server::SimCallCounts before = server::sim_call_counts(*backend_);
    c.h2d(a, in.data(), 4096);
    const server::SimCallCounts after = server::sim_call_counts(*backend_);
    EXPECT_EQ(after.stream_writes - before.stream_writes, gpu ? 1u : 0u);
    EXPECT_EQ(after.events_created - before.events_created, gpu ? 0u : 1u);

    auto chunk = [&](uint32_t slot, uint64_t offset) {
      auto& w = c.view().staging_state(slot);
      std::memcpy(c.view().staging(slot), in.data() + offset, 4096);
      w.store(static_cast<uint32_t>(ipc::StagingState::InFlight));
      ipc::CopyCmd cp{};
      cp.dst = {ipc::MemSpace::Device, 0, 0, a + offset};
      cp.src = {ipc::MemSpace::Staging, slot, 0, 0};
      cp.width = cp.dst_pitch = cp.src_pitch = 4096;
      cp.height = 1;
      c.post(Opcode::Copy, cp);
    };
    auto device_matches = [&](uint64_t offset, uint64_t n) {
      std::vector<uint8_t> out(n, 0);
      c.d2h(out.data(), a + offset, n);
      return std::memcmp(out.data(), in.data() + offset, n) == 0;
    };

    // Held behind a host function on the legacy stream: not Free before the stream goes on.
    auto& reached = c.view().event_state(10);
    auto& done = c.view().event_state(11);
    c.post(Opcode::HostFunc, ipc::HostFuncCmd{10, 11, 6, 0});
    chunk(1, 4096);
    ASSERT_TRUE(eventually([&] { return reached.load() == 6; }));
    ASSERT_EQ(c.call(Opcode::MemGetInfo).status, Status::Success);  // the copy is queued
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(c.view().staging_state(1).load(), static_cast<uint32_t>(ipc::StagingState::InFlight))
        << "Free before the copy ran";
    {
      StagingSleeper sleeper(c, 1, ipc::StagingState::Free);
      ASSERT_TRUE(sleeper.asleep());
      done.store(6);
      EXPECT_TRUE(sleeper.woken()) << "a client asleep on the slot was not woken";
    }
    EXPECT_TRUE(device_matches(4096, 4096));

    // Back to back through the slots in turn, each filled again once Free.
    const uint64_t kernels = server::sim_call_counts(*backend_).kernel_stores;
    for (uint32_t i = 0; i < 64; ++i) {
      ASSERT_TRUE(c.wait_staging(i % slots, ipc::StagingState::Free));
      chunk(i % slots, 4096 * i);
    }
    for (uint32_t i = 0; i < slots; ++i) ASSERT_TRUE(c.wait_staging(i, ipc::StagingState::Free));
    EXPECT_TRUE(device_matches(0, in.size()));
    EXPECT_EQ(server::sim_call_counts(*backend_).kernel_stores, kernels) << "chunks alone looked crowded";
    c.detach();
    stop_server();
  }
}

// A synchronous device-to-device copy of `busy` on its stream 5, held on the GPU behind a
// host function until release(): meanwhile the device has a waited call in flight.
struct HeldCopy {
  explicit HeldCopy(TestClient& client) : busy(client) {
    const uint64_t x = busy.alloc(4096), y = busy.alloc(4096);
    busy.create_stream(5);
    busy.post(Opcode::HostFunc, ipc::HostFuncCmd{10, 11, 2, 0}, 5);
    const ipc::CopyCmd held = device_copy(x, y, 4096);
    slot = busy.next_slot();
    seq = busy.send(Opcode::Copy, &held, sizeof held, slot, 5, 0);
  }
  // The stream reached the host function, and the worker has queued the copy behind it.
  bool queued() {
    return eventually([&] { return busy.view().event_state(10).load() == 2; }) &&
           busy.call(Opcode::MemGetInfo).status == Status::Success;
  }
  Status release() {
    busy.view().event_state(11).store(2);
    return busy.wait(slot, seq).status;
  }
  TestClient& busy;
  uint32_t slot = 0;
  uint64_t seq = 0;
};

// Two clients of one server: `busy` with a copy held on the GPU (HeldCopy), and `c` with 4096
// bytes of `fill` in device memory at `b`, which `cp` copies to `a` (synchronously).
struct Crowded {
  Crowded(const std::filesystem::path& run_dir, uint8_t fill)
      : busy(run_dir), c(run_dir), held(busy), a(c.alloc(4096)), b(c.alloc(4096)), in(4096, fill) {
    c.h2d(b, in.data(), in.size());
    cp = device_copy(a, b, 4096);
  }
  bool ready() { return busy.ok() && c.ok() && held.queued(); }
  // c's copy from b to a is right.
  bool copied() {
    std::vector<uint8_t> out(in.size(), 0);
    c.d2h(out.data(), a, out.size());
    return out == in;
  }
  TestClient busy, c;
  HeldCopy held;
  uint64_t a, b;
  std::vector<uint8_t> in;
  ipc::CopyCmd cp{};
};

// GpuReplies::Auto: the GPU's stream write waits for every copy in flight on the GPU, so a
// synchronous copy made while another client's is still on the GPU has its word stored by a
// one-thread kernel (store_word) and records an event before it; the worker answers once that
// event completes unless the word came first (either answer is right; the sim backend stores
// at once).  A copy made while the device is quiet is answered by the stream write alone.
// Where the kernel cannot be used (kernel_stores_ false: a reply kernel that did not load),
// the crowded copy's word comes from the stream write, with the event all the same.
TEST_F(ServerTest, AutoAnswersACrowdedCallWithAKernelStoreAndAnEvent) {
  for (const bool kernels : {true, false}) {
    SCOPED_TRACE(kernels ? "with kernel stores" : "without kernel stores");
    kernel_stores_ = kernels;
    start_server(GpuReplies::Auto);
    Crowded s(run_dir_, 0x6b);
    ASSERT_TRUE(s.ready());
    TestClient& c = s.c;
    const ipc::CopyCmd& cp = s.cp;
    // What the copy made the worker ask of the backend, and its status.
    struct Asked {
      Status status;
      uint64_t events, writes, kernels;
    };
    auto copy = [&] {
      const server::SimCallCounts before = server::sim_call_counts(*backend_);
      const uint32_t slot = c.next_slot();
      const Status st = c.wait(slot, c.send(Opcode::Copy, &cp, sizeof cp, slot, 0, 0)).status;
      const server::SimCallCounts after = server::sim_call_counts(*backend_);
      return Asked{st, after.events_created - before.events_created, after.stream_writes - before.stream_writes,
                   after.kernel_stores - before.kernel_stores};
    };
    const Asked crowded = copy();
    EXPECT_EQ(crowded.status, Status::Success);
    EXPECT_EQ(crowded.events, 1u) << "no event while another client's copy was on the GPU";
    EXPECT_EQ(crowded.kernels, kernels ? 1u : 0u);
    EXPECT_EQ(crowded.writes, kernels ? 0u : 1u);
    EXPECT_TRUE(s.copied());

    // The held copy goes on and is answered (by the GPU's stream write: it was alone).
    ASSERT_EQ(s.held.release(), Status::Success);
    EXPECT_EQ(s.busy.view().reply_word(s.held.slot).load(), static_cast<uint32_t>(s.held.seq));
    // The device is quiet again once the worker has seen that copy done: no event, no kernel.
    Asked quiet{};
    for (int i = 0; i < 200; ++i) {
      quiet = copy();
      ASSERT_EQ(quiet.status, Status::Success);
      if (quiet.events == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(quiet.events, 0u) << "still an event per copy with no other call on the GPU";
    EXPECT_EQ(quiet.kernels, 0u);
    EXPECT_EQ(quiet.writes, 1u);
    s.busy.detach();
    c.detach();
    stop_server();
  }
}

// The race itself: with the word's store held back (as a GPU's stream write is behind other
// streams' copies; here the sim backend delays every store by 1 s), the crowded copy is answered
// by the worker through the slot's seq once its event completes, before its reply word lands;
// the word lands later all the same, and the client's next call on the slot is unaffected.
TEST_F(ServerTest, AutoAnswersACrowdedCopyByTheWorkerWhenItsWordIsLate) {
  stream_write_delay_ = std::chrono::seconds(1);
  start_server(GpuReplies::Auto);
  Crowded s(run_dir_, 0x3c);
  ASSERT_TRUE(s.ready());
  TestClient& c = s.c;
  const ipc::CopyCmd& cp = s.cp;
  const uint32_t slot = 3;
  const uint64_t seq = c.send(Opcode::Copy, &cp, sizeof cp, slot, 0, 0);
  ASSERT_EQ(c.wait(slot, seq).status, Status::Success);
  EXPECT_EQ(c.view().reply(slot).seq.load(), seq) << "not answered by the worker";
  EXPECT_NE(c.view().reply_word(slot).load(), static_cast<uint32_t>(seq)) << "the delayed word came first";
  EXPECT_TRUE(eventually([&] { return c.view().reply_word(slot).load() == static_cast<uint32_t>(seq); }))
      << "the stream's own answer never landed";
  // The slot again, for a call the worker answers.
  EXPECT_EQ(c.wait(slot, c.send(Opcode::MemGetInfo, nullptr, 0, slot)).status, Status::Success);
  EXPECT_TRUE(s.copied());

  EXPECT_EQ(s.held.release(), Status::Success);
  s.busy.detach();
  c.detach();
}

// A store of the sim backend held back until the test lets it go (SimOptions::before_store),
// shared with the stream's thread, which may run it after the test body: let go at the end of
// the body whatever happened (OpenAtExit).
struct HeldStore {
  std::mutex m;
  std::condition_variable cv;
  uint32_t value = 0;  // the store to hold back (0: none)
  bool let_go = false;
  void hold(uint32_t v) {
    std::lock_guard lk(m);
    value = v;
  }
  void open() {
    {
      std::lock_guard lk(m);
      let_go = true;
    }
    cv.notify_all();
  }
  // For SimOptions::before_store.
  static std::function<void(uint32_t)> hook(const std::shared_ptr<HeldStore>& g) {
    return [g](uint32_t v) {
      std::unique_lock lk(g->m);
      if (g->value != 0 && v == g->value) g->cv.wait(lk, [&] { return g->let_go; });
    };
  }
  struct OpenAtExit {
    std::shared_ptr<HeldStore> g;
    ~OpenAtExit() { g->open(); }
  };
};

// The late store of a raced call (answered by its event) can land after the client took the
// slot again for a call answered by its own stream write, and after the worker saw that word:
// over the later call's answer, before the client (asleep) read it.  Seen on the H100 in the
// soak: a client waiting forever (1 run in about 4000), its worker idle.  Every GPU-answered
// call is therefore answered through the slot as well.
TEST_F(ServerTest, ALateStoreOfAnEarlierCallCannotHideALaterAnswer) {
  auto gate = std::make_shared<HeldStore>();
  before_store_ = HeldStore::hook(gate);
  const HeldStore::OpenAtExit open_at_exit{gate};
  start_server(GpuReplies::Auto);
  Crowded s(run_dir_, 0x5a);
  ASSERT_TRUE(s.ready());
  TestClient& c = s.c;
  const uint32_t slot = 3;
  // Seqs are per client: c's must not be one the busy client's stores carry too.
  for (int i = 0; i < 100; ++i) ASSERT_EQ(c.call(Opcode::Fence).status, Status::Success);
  // Crowded (the held copy is on the GPU): a kernel store, raced by an event; the store waits.
  const uint64_t first = c.seq() + 1;
  gate->hold(static_cast<uint32_t>(first));
  ASSERT_EQ(c.send(Opcode::Copy, &s.cp, sizeof s.cp, slot, 0, 0), first);
  ASSERT_EQ(c.wait(slot, first).status, Status::Success);
  ASSERT_EQ(c.view().reply(slot).seq.load(), first) << "the worker did not answer by the event";
  // The device quiet again: the next call is answered by its stream's write alone.
  ASSERT_EQ(s.held.release(), Status::Success);
  c.create_stream(7, ipc::kStreamNonBlocking);  // not behind the legacy stream, which waits on the store
  c.view().reply_word(slot).store(0);  // the client takes the slot again
  const uint64_t second = c.send(Opcode::Copy, &s.cp, sizeof s.cp, slot, 7, 0);
  // The client sleeps; meanwhile its word lands, the worker sees it, then the late store lands.
  EXPECT_TRUE(eventually([&] { return c.view().reply_word(slot).load() == static_cast<uint32_t>(second); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  gate->open();
  EXPECT_TRUE(eventually([&] { return c.view().reply_word(slot).load() == static_cast<uint32_t>(first); }))
      << "the late store never landed";
  EXPECT_EQ(c.wait(slot, second, std::chrono::seconds(3)).status, Status::Success) << "the answer was lost";
  EXPECT_TRUE(s.copied());
  s.busy.detach();
  c.detach();
}

// A GPU's store to host memory can become visible after its stream reports idle: the worker
// then answers the call through the slot (done by the stream's state, the word not there), and
// the store that lands afterwards must not hide the next call's answer on the slot either.
TEST_F(ServerTest, AStoreSeenAfterItsStreamWentIdleCannotHideALaterAnswer) {
  auto gate = std::make_shared<HeldStore>();
  before_store_ = HeldStore::hook(gate);
  store_after_idle_ = [gate](uint32_t v) {
    std::lock_guard lk(gate->m);
    return v == gate->value;
  };
  const HeldStore::OpenAtExit open_at_exit{gate};
  TestClient c = start_with_gpu_replies(GpuReplies::Always);
  ASSERT_TRUE(c.ok());
  const uint64_t a = c.alloc(4096), b = c.alloc(4096);
  const ipc::CopyCmd cp = device_copy(a, b, 4096);
  const uint32_t slot = 3;
  const uint64_t first = c.seq() + 1;
  gate->hold(static_cast<uint32_t>(first));
  ASSERT_EQ(c.send(Opcode::Copy, &cp, sizeof cp, slot, 0, 0), first);
  ASSERT_EQ(c.wait(slot, first).status, Status::Success);
  ASSERT_EQ(c.view().reply(slot).seq.load(), first) << "not answered by the worker (the store is held)";
  c.create_stream(7, ipc::kStreamNonBlocking);
  c.view().reply_word(slot).store(0);  // the client takes the slot again
  const uint64_t second = c.send(Opcode::Copy, &cp, sizeof cp, slot, 7, 0);
  EXPECT_TRUE(eventually([&] { return c.view().reply_word(slot).load() == static_cast<uint32_t>(second); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the worker saw it
  gate->open();
  EXPECT_TRUE(eventually([&] { return c.view().reply_word(slot).load() == static_cast<uint32_t>(first); }))
      << "the held store never landed";
  EXPECT_EQ(c.wait(slot, second, std::chrono::seconds(3)).status, Status::Success) << "the answer was lost";
  c.detach();
}

// cuTensorMapEncodeTiled's command: the map in four parts of 40 bytes (the sim packs the
// arguments as they came); a part, rank or reserved word out of range, and what the backend
// refuses (a misaligned address), fail that call only.
TEST_F(ServerTest, TensorMapsAreEncodedInParts) {
  start_server();
  TestClient a(run_dir_);
  ASSERT_TRUE(a.ok());
  const uint64_t g = a.alloc(1 << 20);
  ipc::TensorMapCmd c{};
  c.data_type = 7;
  c.rank = 2;
  c.swizzle = 3;
  c.global_address = g;
  c.global_dim[0] = 128;
  c.global_dim[1] = 8;
  c.global_strides[0] = 512;
  c.box_dim[0] = 64;
  c.box_dim[1] = 8;
  c.element_strides[0] = c.element_strides[1] = 1;
  std::array<std::byte, ipc::kTensorMapBytes> map{};
  for (uint32_t part = 0; part < ipc::kTensorMapParts; ++part) {
    c.part = part;
    const auto r = a.call(Opcode::TensorMapEncode, c);
    ASSERT_EQ(r.status, Status::Success) << "part " << part;
    const ipc::TensorMapPart where = ipc::tensor_map_part(part);
    std::memcpy(map.data() + where.first, r.value, where.bytes);
  }
  uint64_t address = 0, dim1 = 0, stride0 = 0;
  uint32_t box0 = 0;
  std::memcpy(&address, map.data(), 8);
  std::memcpy(&dim1, map.data() + 16, 8);
  std::memcpy(&stride0, map.data() + 48, 8);
  std::memcpy(&box0, map.data() + 80, 4);
  EXPECT_EQ(address, g);
  EXPECT_EQ(dim1, 8u);
  EXPECT_EQ(stride0, 512u);
  EXPECT_EQ(box0, 64u);
  EXPECT_EQ(std::to_integer<int>(map[120]), 7) << "data type";
  EXPECT_EQ(std::to_integer<int>(map[121]), 2) << "rank";
  EXPECT_EQ(std::to_integer<int>(map[123]), 3) << "swizzle";
  c.part = ipc::kTensorMapParts;
  EXPECT_EQ(a.call(Opcode::TensorMapEncode, c).status, Status::InvalidValue);
  c.part = 0;
  c.rank = ipc::kTensorMapMaxRank + 1;
  EXPECT_EQ(a.call(Opcode::TensorMapEncode, c).status, Status::InvalidValue);
  c.rank = 2;
  c.reserved = 1;
  EXPECT_EQ(a.call(Opcode::TensorMapEncode, c).status, Status::InvalidValue);
  c.reserved = 0;
  c.global_address = g + 4;
  EXPECT_EQ(a.call(Opcode::TensorMapEncode, c).status, Status::InvalidValue);
  c.global_address = g;
  EXPECT_EQ(a.call(Opcode::TensorMapEncode, c).status, Status::Success) << "the client goes on";
  EXPECT_EQ(a.free(g), Status::Success);
}

}  // namespace
}  // namespace funnel::test
