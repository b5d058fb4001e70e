// Kernel attributes of a shared module (doc/design/kernels.md, "Function attributes and
// occupancy"): the first cudaFuncSetAttribute / cudaFuncSetCacheConfig of a client on a
// kernel of a module it shares gives that client its own instance of the module, so no
// other client ever sees the change.  The sim backend keeps attributes per loaded
// kernel, as the driver does per CUkernel, so a leak would show here.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "fixture.hpp"
#include "kernel_client.hpp"
#include "test_client.hpp"

namespace funnel::test {
namespace {

constexpr uint32_t kMaxDynamicShared = 8;  // cudaFuncAttributeMaxDynamicSharedMemorySize
constexpr uint32_t kCarveout = 9;          // cudaFuncAttributePreferredSharedMemoryCarveout
constexpr uint32_t kOptInShared = 100000;  // over the 48 KiB default, within the opt-in limit

ipc::FuncAttributes attributes(TestClient& c, uint64_t kernel_id) {
  const Reply r = c.call(Opcode::FuncGetAttributes, ipc::KernelCmd{kernel_id});
  EXPECT_EQ(r.status, Status::Success);
  return ipc::unpack_func_attributes(r.value);
}

// The occupancy answers a client gets for a kernel (blocks per multiprocessor, dynamic
// shared memory per block for 2 blocks), as cudaOccupancyMaxPotentialBlockSize asks them.
std::vector<uint64_t> occupancy(TestClient& c, uint64_t kernel_id) {
  std::vector<uint64_t> out;
  for (uint64_t shared : {uint64_t{0}, uint64_t{40000}, uint64_t{kOptInShared}})
    out.push_back(c.call(Opcode::Occupancy, ipc::OccupancyCmd{kernel_id, 128, 0, shared}).value[0]);
  out.push_back(c.call(Opcode::OccupancyDynamicSmem, ipc::OccupancyCmd{kernel_id, 128, 0, 2}).value[0]);
  return out;
}

void set_attribute(TestClient& c, uint64_t kernel_id, uint32_t attribute, int32_t value) {
  c.post(Opcode::FuncSetAttribute, ipc::FuncSetAttributeCmd{kernel_id, attribute, value});
}

// A launch of a kernel whose parameter buffer is `bytes` long, with `shared` bytes of
// dynamic shared memory.
Status launch(TestClient& c, uint64_t kernel_id, uint32_t bytes, uint32_t shared) {
  std::vector<uint8_t> params(bytes);
  return call_launch(c, launch_cmd(kernel_id, {1, 1, 1}, {32, 1, 1}, shared, bytes), params.data(), bytes).status;
}

uint64_t module_loads(const std::filesystem::path& run_dir) { return stats(run_dir)["modules"]["loads"]; }

class KernelAttributeTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    ASSERT_FALSE(test_fatbin().bytes.empty()) << FUNNEL_SERVER_TEST_FATBIN;
    start_server();
  }
  ipc::ModuleCmd unload_cmd(uint64_t module_id) const {
    return module_cmd(module_id, 0, test_fatbin().digest, test_fatbin().bytes.size());
  }
};

TEST_F(KernelAttributeTest, AttributesSetByOneClientStayWithThatClient) {
  TestClient a(run_dir_, "a"), b(run_dir_, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(load_module(a, 1).status, Status::Success);
  ASSERT_EQ(load_module(b, 7).status, Status::Success);
  const Reply mixed = kernel_get(a, 1, 1, "mixed");
  ASSERT_EQ(mixed.status, Status::Success);
  const auto bytes = static_cast<uint32_t>(mixed.value[1]);
  ASSERT_EQ(kernel_get(a, 2, 1, "no_params").status, Status::Success);
  ASSERT_EQ(kernel_get(b, 4, 7, "mixed").status, Status::Success);
  const ipc::FuncAttributes defaults = attributes(b, 4);
  const std::vector<uint64_t> default_occupancy = occupancy(b, 4);
  ASSERT_LT(defaults.max_dynamic_shared_size_bytes, kOptInShared);
  ASSERT_EQ(attributes(a, 1), defaults);
  ASSERT_EQ(module_loads(run_dir_), 1u) << "shared so far";

  // Act: a opts in to more dynamic shared memory and prefers a carveout.
  set_attribute(a, 1, kMaxDynamicShared, kOptInShared);
  set_attribute(a, 1, kCarveout, 50);
  ASSERT_EQ(a.call(Opcode::Fence).status, Status::Success);
  ASSERT_EQ(a.take_deferred(), 0);

  // a sees its values; b, which shares nothing with a any more, the defaults.
  const ipc::FuncAttributes mine = attributes(a, 1);
  EXPECT_EQ(mine.max_dynamic_shared_size_bytes, kOptInShared);
  EXPECT_EQ(mine.preferred_shmem_carveout, 50u);
  EXPECT_EQ(attributes(b, 4), defaults);
  EXPECT_EQ(occupancy(b, 4), default_occupancy);
  // As natively: only the client that opted in may launch with that much.
  EXPECT_EQ(launch(a, 1, bytes, kOptInShared), Status::Success);
  EXPECT_EQ(launch(b, 4, bytes, kOptInShared), Status::InvalidValue);
  EXPECT_EQ(launch(b, 4, bytes, 1024), Status::Success);

  // a's own instance was loaded once from the cached bytes; nothing was uploaded again.
  auto modules = stats(run_dir_)["modules"];
  EXPECT_EQ(modules["cached"], 1);
  EXPECT_EQ(modules["uploads"], 1);
  EXPECT_EQ(modules["cache_hits"], 1);
  EXPECT_EQ(modules["loads"], 2);
  // a's other kernels moved with the module (no second copy), kernels it looks up later
  // come from its instance, and the layouts are the same.
  set_attribute(a, 2, kCarveout, 25);
  const Reply big = kernel_get(a, 3, 1, "big_param");
  ASSERT_EQ(big.status, Status::Success);
  const Reply theirs = kernel_get(b, 5, 7, "big_param");
  EXPECT_EQ(std::vector<uint64_t>(big.value, big.value + 5), std::vector<uint64_t>(theirs.value, theirs.value + 5));
  EXPECT_EQ(attributes(a, 2).preferred_shmem_carveout, 25u);
  EXPECT_EQ(module_loads(run_dir_), 2u);

  // b's own setting gives b its own instance in turn; a keeps its value.
  set_attribute(b, 4, kMaxDynamicShared, 60000);
  EXPECT_EQ(attributes(b, 4).max_dynamic_shared_size_bytes, 60000u);
  EXPECT_EQ(attributes(a, 1).max_dynamic_shared_size_bytes, kOptInShared);
  EXPECT_EQ(module_loads(run_dir_), 3u);
  EXPECT_EQ(a.sync_device(), Status::Success);
  EXPECT_EQ(a.take_deferred(), 0);
  EXPECT_EQ(b.take_deferred(), 0);

  // a leaves: a new client shares the untouched module.
  a.detach();
  ASSERT_TRUE(eventually([&] { return stats(run_dir_)["server"]["clients"] == 1; }));
  TestClient c(run_dir_, "c");
  ASSERT_TRUE(c.ok());
  bool hit = false;
  ASSERT_EQ(load_module(c, 1, 0, &hit).status, Status::Success);
  EXPECT_TRUE(hit);
  ASSERT_EQ(kernel_get(c, 1, 1, "mixed").status, Status::Success);
  EXPECT_EQ(attributes(c, 1), defaults);
  EXPECT_EQ(occupancy(c, 1), default_occupancy);
  EXPECT_EQ(launch(c, 1, bytes, kOptInShared), Status::InvalidValue);
  modules = stats(run_dir_)["modules"];
  EXPECT_EQ(modules["loads"], 3) << "c got the shared module";
  EXPECT_EQ(modules["cache_hits"], 2);
}

TEST_F(KernelAttributeTest, OwnInstanceGoesWithItsModuleId) {
  TestClient a(run_dir_, "a");
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(load_module(a, 1).status, Status::Success);
  ASSERT_EQ(load_module(a, 2).status, Status::Success) << "the same bytes under a second id share too";
  ASSERT_EQ(kernel_get(a, 1, 1, "mixed").status, Status::Success);
  ASSERT_EQ(kernel_get(a, 2, 2, "mixed").status, Status::Success);
  const ipc::FuncAttributes defaults = attributes(a, 1);

  // Setting the value the kernel already has (carveout -1, packed as 127) still copies:
  // the server does not compare.
  ASSERT_EQ(defaults.preferred_shmem_carveout, 127u);
  set_attribute(a, 1, kCarveout, -1);
  ASSERT_EQ(a.call(Opcode::Fence).status, Status::Success);
  ASSERT_EQ(a.take_deferred(), 0);
  EXPECT_EQ(module_loads(run_dir_), 2u);
  set_attribute(a, 1, kMaxDynamicShared, kOptInShared);
  EXPECT_EQ(attributes(a, 1).max_dynamic_shared_size_bytes, kOptInShared);
  EXPECT_EQ(attributes(a, 2), defaults) << "module ids are separate modules, as natively";

  // Unloaded: the id loads the shared module again, with its defaults.
  a.post(Opcode::ModuleUnload, unload_cmd(1));
  EXPECT_EQ(a.call(Opcode::FuncGetAttributes, ipc::KernelCmd{1}).status, Status::InvalidResourceHandle);
  ASSERT_EQ(load_module(a, 1).status, Status::Success);
  ASSERT_EQ(kernel_get(a, 1, 1, "mixed").status, Status::Success);
  EXPECT_EQ(attributes(a, 1), defaults);
  EXPECT_EQ(module_loads(run_dir_), 2u);

  // A module with variables is the client's own from the start: no copy.
  ASSERT_EQ(load_module(a, 3, ipc::kModuleHasVariables).status, Status::Success);
  ASSERT_EQ(kernel_get(a, 3, 3, "mixed").status, Status::Success);
  EXPECT_EQ(module_loads(run_dir_), 3u);
  set_attribute(a, 3, kMaxDynamicShared, kOptInShared);
  a.post(Opcode::FuncSetAttribute, ipc::FuncSetAttributeCmd{3, ipc::kFuncCacheConfig, 1});
  EXPECT_EQ(attributes(a, 3).max_dynamic_shared_size_bytes, kOptInShared);
  EXPECT_EQ(module_loads(run_dir_), 3u);
  // A cache configuration is an attribute too.
  a.post(Opcode::FuncSetAttribute, ipc::FuncSetAttributeCmd{2, ipc::kFuncCacheConfig, 1});
  EXPECT_EQ(a.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(module_loads(run_dir_), 4u);
  EXPECT_EQ(a.take_deferred(), 0);
}

}  // namespace
}  // namespace funnel::test
