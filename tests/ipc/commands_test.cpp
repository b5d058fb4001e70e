// Command helpers shared by client and server: the command table's framing rule, the module
// digest and the packings of parameters and function attributes into reply values.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "funnel/ipc/commands.hpp"
#include "funnel/ipc/module_digest.hpp"
#include "watchdog.hpp"

namespace funnel::ipc {
namespace {

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

WATCHED_TEST(ModuleDigest, DependsOnEveryByteAndIsStable) {
  const std::string a(100000, 'x');
  std::string b = a;
  b[77777] = 'y';
  EXPECT_EQ(module_digest(bytes_of(a)), module_digest(bytes_of(a)));
  EXPECT_NE(module_digest(bytes_of(a)), module_digest(bytes_of(b)));
  EXPECT_NE(module_digest(bytes_of(a)), module_digest(bytes_of(a.substr(1))));
  // The first 16 bytes of SHA-256 (Python: hashlib.sha256(b"funnel")): a fixed value for fixed
  // input, so a change of library or algorithm (which would split the server's cache) is noticed.
  const ModuleDigest d = module_digest(bytes_of("funnel"));
  std::string hex;
  for (uint8_t x : d) hex += "0123456789abcdef"[x >> 4], hex += "0123456789abcdef"[x & 15];
  EXPECT_EQ(hex, "ca71d31b6fa5edba5b626e346191817a");
}

WATCHED_TEST(KernelCommands, ParamPackingRoundTrips) {
  for (uint32_t off : {0u, 4u, 8u, 32760u})
    for (uint32_t size : {1u, 4u, 8u, 256u, 32764u}) {
      const uint64_t p = pack_param(off, size);
      EXPECT_EQ(param_offset(p), off);
      EXPECT_EQ(param_size(p), size);
    }
}

WATCHED_TEST(KernelCommands, FuncAttributesRoundTrip) {
  FuncAttributes a;
  a.shared_size_bytes = 48 * 1024;
  a.const_size_bytes = 65536;
  a.local_size_bytes = 1 << 20;
  a.max_threads_per_block = 1024;
  a.num_regs = 255;
  a.ptx_version = 90;
  a.binary_version = 90;
  a.max_dynamic_shared_size_bytes = 227 * 1024;
  a.preferred_shmem_carveout = 100;
  a.cache_mode_ca = 1;
  a.required_cluster[0] = 16;
  a.required_cluster[1] = 2;
  a.required_cluster[2] = 1;
  a.cluster_dim_must_be_set = 1;
  a.non_portable_cluster_size_allowed = 1;
  a.cluster_scheduling_policy_preference = 2;
  uint64_t v[5];
  pack_func_attributes(a, v);
  EXPECT_EQ(unpack_func_attributes(v), a);
  FuncAttributes zero;
  pack_func_attributes(zero, v);
  EXPECT_EQ(unpack_func_attributes(v), zero);
}

WATCHED_TEST(KernelCommands, PayloadSizesKnownForEveryKernelOpcode) {
  for (uint16_t op = 60; op <= 76; ++op) EXPECT_GT(payload_size(static_cast<Opcode>(op)), 0) << op;
  EXPECT_EQ(payload_size(static_cast<Opcode>(77)), -1);
  EXPECT_LE(record_size_for(sizeof(LaunchCmd) + kMaxParamBytes), kMaxRecordSize);
  EXPECT_LE(record_size_for(sizeof(KernelGetCmd) + kMaxNameBytes), kMaxRecordSize);
}

// The framing rule the server applies to every record, as the command table derives it.
WATCHED_TEST(CommandTable, FramingFollowsEachRow) {
  std::vector<std::byte> rec(kMaxRecordSize);
  const auto framing = [&](Opcode op, uint64_t payload_bytes, auto payload) {
    CommandHeader h{};
    h.opcode = op;
    h.size = record_size_for(payload_bytes);
    std::memcpy(rec.data() + sizeof h, &payload, sizeof payload);
    return check_framing(h, rec.data() + sizeof h);
  };
  EXPECT_EQ(framing(Opcode::MemAlloc, sizeof(MemAllocCmd), MemAllocCmd{64, 0}), Framing::Ok);
  EXPECT_EQ(framing(Opcode::MemAlloc, sizeof(MemAllocCmd) + kRecordAlign, MemAllocCmd{64, 0}), Framing::BadSize);
  EXPECT_EQ(framing(Opcode::Fence, 0, 0), Framing::Ok);
  EXPECT_EQ(framing(Opcode::Fence, kRecordAlign, 0), Framing::BadSize);
  EXPECT_EQ(framing(static_cast<Opcode>(77), 0, 0), Framing::UnknownOpcode);
  LaunchCmd launch{};
  launch.param_bytes = 100;
  EXPECT_EQ(framing(Opcode::Launch, sizeof launch + 100, launch), Framing::Ok);
  // Its parameters missing (the record is padded to kRecordAlign: 100 bytes are more than that).
  EXPECT_EQ(framing(Opcode::Launch, sizeof launch, launch), Framing::BadSize);
  launch.param_bytes = kMaxParamBytes + 1;
  EXPECT_EQ(framing(Opcode::Launch, sizeof launch + kMaxParamBytes + 1, launch), Framing::BadSize);
  KernelGetCmd get{};
  get.name_bytes = kMaxNameBytes;
  EXPECT_EQ(framing(Opcode::KernelGet, sizeof get + kMaxNameBytes, get), Framing::Ok);
  // MaxActiveClusters takes a LaunchCmd whose parameters do not follow.
  launch.param_bytes = 0;
  EXPECT_EQ(framing(Opcode::MaxActiveClusters, sizeof launch, launch), Framing::Ok);
}

WATCHED_TEST(CommandTable, NamesAndColumns) {
  EXPECT_STREQ(command_name(Opcode::EventElapsedTime), "EventElapsedTime");
  EXPECT_EQ(command_name(static_cast<Opcode>(99)), nullptr);
  EXPECT_TRUE(queues_on_stream(Opcode::Launch));
  EXPECT_FALSE(queues_on_stream(Opcode::StreamSynchronize));
  EXPECT_TRUE(has_trailing_bytes(Opcode::SymbolGet));
  EXPECT_FALSE(has_trailing_bytes(Opcode::MaxActiveClusters));
  EXPECT_EQ(payload_size(Opcode::Detach), static_cast<int64_t>(sizeof(DetachCmd)));
  EXPECT_EQ(payload_size(Opcode::MemGetInfo), 0);
}

}  // namespace
}  // namespace funnel::ipc
