// A raw client's kernel commands for the server tests (kernels_test.cpp, fault_test.cpp):
// the test fat binary (kernels/launch_kernels.cu), module upload and load, kernel lookup
// and launches, as the client runtime sends them.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "fixture.hpp"
#include "funnel/fatbin/fatbin.hpp"
#include "funnel/ipc/module_digest.hpp"
#include "test_client.hpp"

namespace funnel::test {

struct TestFatbin {
  std::vector<std::byte> bytes;
  ipc::ModuleDigest digest{};
  std::map<std::string, fatbin::KernelInfo> kernels;  // sm_90, as the sim backend picks
};

inline const TestFatbin& test_fatbin() {
  static const TestFatbin f = [] {
    TestFatbin t;
    std::ifstream in(FUNNEL_SERVER_TEST_FATBIN, std::ios::binary);
    const std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    t.bytes.resize(chars.size());
    std::memcpy(t.bytes.data(), chars.data(), chars.size());
    t.digest = ipc::module_digest(t.bytes);
    for (auto& k : fatbin::kernels_of_fatbin(t.bytes).kernels)
      if (k.sm_arch == 90) t.kernels[k.name] = k;
    return t;
  }();
  return f;
}

inline ipc::ModuleCmd module_cmd(uint64_t id, uint32_t flags, const ipc::ModuleDigest& digest, uint64_t size) {
  ipc::ModuleCmd c{};
  c.module_id = id;
  std::memcpy(c.digest, digest.data(), sizeof c.digest);
  c.flags = flags;
  c.size = size;
  return c;
}

// A command followed by trailing bytes (a name or a parameter buffer).
template <class T>
inline std::vector<std::byte> with_trailing(const T& cmd, const void* trailing, size_t n) {
  const auto* head = reinterpret_cast<const std::byte*>(&cmd);
  const auto* tail = static_cast<const std::byte*>(trailing);
  std::vector<std::byte> out(head, head + sizeof cmd);
  if (n != 0) out.insert(out.end(), tail, tail + n);
  return out;
}

// A record with trailing bytes, as a round trip.  (TestClient::call's template would
// take the pointer itself as the payload.)
inline Reply call_record(TestClient& c, Opcode op, const std::vector<std::byte>& rec) {
  const uint32_t slot = 3;
  return c.wait(slot, c.send(op, rec.data(), rec.size(), slot));
}

inline bool wait_slot_free(TestClient& c, uint32_t slot) {
  return eventually([&] {
    return c.view().staging_state(slot).load() == static_cast<uint32_t>(ipc::StagingState::Free);
  });
}

// ModuleData pieces of `chunk` bytes, round robin over the staging slots, as the client
// runtime sends them; returns once the server gave every slot back.
inline void upload(TestClient& c, uint64_t module_id, std::span<const std::byte> bytes, uint64_t chunk = 4096) {
  const uint32_t slots = c.view().header().staging_slots;
  uint32_t slot = 0;
  for (uint64_t off = 0; off < bytes.size(); off += chunk, slot = (slot + 1) % slots) {
    const uint64_t n = std::min<uint64_t>(chunk, bytes.size() - off);
    ASSERT_TRUE(wait_slot_free(c, slot));
    std::memcpy(c.view().staging(slot), bytes.data() + off, n);
    c.view().staging_state(slot).store(static_cast<uint32_t>(ipc::StagingState::InFlight));
    c.post(Opcode::ModuleData, ipc::ModuleDataCmd{module_id, off, n, slot, 0});
  }
  for (uint32_t s = 0; s < slots; ++s) ASSERT_TRUE(wait_slot_free(c, s));
}

// Query, then upload and load on a miss.  value[0] of the result: 1 once loaded.
inline Reply load_module(TestClient& c, uint64_t module_id, uint32_t flags = 0, bool* hit = nullptr) {
  const auto& f = test_fatbin();
  const auto cmd = module_cmd(module_id, flags, f.digest, f.bytes.size());
  Reply r = c.call(Opcode::ModuleQuery, cmd);
  if (hit != nullptr) *hit = r.status == Status::Success && r.value[0] == 1;
  if (r.status != Status::Success || r.value[0] == 1) return r;
  upload(c, module_id, f.bytes);
  return c.call(Opcode::ModuleLoad, cmd);
}

inline Reply kernel_get(TestClient& c, uint64_t kernel_id, uint64_t module_id, const std::string& name) {
  const ipc::KernelGetCmd cmd{kernel_id, module_id, static_cast<uint32_t>(name.size()), 0};
  const auto rec = with_trailing(cmd, name.data(), name.size());
  return call_record(c, Opcode::KernelGet, rec);
}

inline ipc::LaunchCmd launch_cmd(uint64_t kernel_id, std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block,
                          uint32_t shared, uint32_t param_bytes) {
  ipc::LaunchCmd c{};
  c.kernel_id = kernel_id;
  std::copy(grid.begin(), grid.end(), c.grid);
  std::copy(block.begin(), block.end(), c.block);
  c.shared_bytes = shared;
  c.param_bytes = param_bytes;
  return c;
}

// Sends a launch one-way (as cudaLaunchKernel does).
inline void post_launch(TestClient& c, const ipc::LaunchCmd& cmd, const std::vector<uint8_t>& params, uint64_t stream = 0) {
  const auto rec = with_trailing(cmd, params.data(), params.size());
  c.send(Opcode::Launch, rec.data(), rec.size(), ipc::kNoReply, stream);
}

inline Reply call_launch(TestClient& c, const ipc::LaunchCmd& cmd, const void* params, size_t n) {
  return call_record(c, Opcode::Launch, with_trailing(cmd, params, n));
}

}  // namespace funnel::test
