// SmPartitions (runtime/server/src/placement/sm_partitions.hpp) over the sim backend, which splits
// its 132 SMs as the driver splits an H100's: 15 groups of 8 SMs, 12 left over.
#include "placement/sm_partitions.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "funnel/server/backend.hpp"
#include "funnel/server/sim_backend.hpp"

namespace funnel::server {
namespace {

using ipc::GpuPlacement;

class SmPartitionsTest : public ::testing::Test {
 protected:
  static SimOptions two_devices() {
    SimOptions o;
    o.devices = 2;
    return o;
  }
  std::unique_ptr<Backend> backend_ = make_sim_backend(two_devices());
  SmPartitions parts_{*backend_};
};

std::vector<int> uses(std::initializer_list<int> v) { return v; }

TEST(SmPartitionShare, RoundsDownToWholeGroupsAsMpsRoundsItsPercentage) {
  const SmGroups h100{132, 8, 15};
  EXPECT_EQ(groups_for_share(h100, 2500), 4u);   // 33 SMs -> 32
  EXPECT_EQ(groups_for_share(h100, 1250), 2u);   // 16.5 -> 16
  EXPECT_EQ(groups_for_share(h100, 600), 1u);    // 7.9 -> at least one group
  EXPECT_EQ(groups_for_share(h100, 1), 1u);
  EXPECT_EQ(groups_for_share(h100, 9999), 15u);  // 131.9 -> 16, clamped to the 15 groups
  EXPECT_EQ(groups_for_share(SmGroups{}, 5000), 0u);
}

TEST_F(SmPartitionsTest, WholeDeviceSharesNeedNoPartition) {
  EXPECT_EQ(parts_.acquire(0, 0, GpuPlacement::Shared), nullptr);
  EXPECT_EQ(parts_.acquire(0, 10000, GpuPlacement::Disjoint), nullptr);
  EXPECT_EQ(parts_.sms_for_share(0, 0), 0u);
  EXPECT_EQ(parts_.sms_for_share(0, 2500), 32u);
  EXPECT_EQ(parts_.sms_for_share(0, 9999), 120u);
}

TEST_F(SmPartitionsTest, SharedClientsSpreadOverTheGroupsThenOverlapEvenly) {
  std::vector<std::shared_ptr<BackendPartition>> held;
  for (int i = 0; i < 5; ++i) {
    held.push_back(parts_.acquire(0, 2000, GpuPlacement::Shared));  // 26.4 SMs -> 3 groups
    ASSERT_NE(held.back(), nullptr);
    EXPECT_EQ(held.back()->sm_count(), 24u);
    EXPECT_EQ(held.back()->device(), 0);
  }
  // Five fifths cover the 15 groups once each, no two overlapping.
  EXPECT_EQ(parts_.group_use(0), std::vector<int>(15, 1));
  // The sixth overlaps the first window and shares its partition (same groups).
  held.push_back(parts_.acquire(0, 2000, GpuPlacement::Shared));
  EXPECT_EQ(held[5].get(), held[0].get()) << "clients on the same groups share one partition";
  EXPECT_EQ(parts_.group_use(0), uses({2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  // Device 1 is accounted separately.
  EXPECT_EQ(parts_.group_use(1), std::vector<int>(15, 0));
  // Dropping a lease gives its groups back, and the least used window is taken next.
  held[1].reset();
  EXPECT_EQ(parts_.group_use(0), uses({2, 2, 2, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  auto again = parts_.acquire(0, 2000, GpuPlacement::Shared);
  EXPECT_EQ(parts_.group_use(0), uses({2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
}

TEST_F(SmPartitionsTest, DisjointClientsHoldTheirGroupsAndTheLastOneIsRefused) {
  std::vector<std::shared_ptr<BackendPartition>> held;
  for (int i = 0; i < 5; ++i) {
    held.push_back(parts_.acquire(0, 2000, GpuPlacement::Disjoint));
    ASSERT_NE(held.back(), nullptr);
  }
  EXPECT_EQ(parts_.group_use(0), std::vector<int>(15, -1));
  try {
    parts_.acquire(0, 1000, GpuPlacement::Disjoint);
    FAIL() << "a sixth disjoint client found free groups";
  } catch (const PartitionUnavailable& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("FUNNEL_GPU_PLACEMENT=disjoint"), std::string::npos) << m;
    EXPECT_NE(m.find("0 are free"), std::string::npos) << m;
    EXPECT_NE(m.find("FUNNEL_GPU_PLACEMENT=shared"), std::string::npos) << m;
  }
  // A shared client still runs (on held groups: nothing else is left).
  auto shared = parts_.acquire(0, 1250, GpuPlacement::Shared);
  ASSERT_NE(shared, nullptr);
  EXPECT_EQ(shared->sm_count(), 16u);
  // Once one disjoint client leaves, its three groups can be held again.
  held[2].reset();
  auto next = parts_.acquire(0, 2000, GpuPlacement::Disjoint);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(parts_.group_use(0), std::vector<int>(15, -1));
}

TEST_F(SmPartitionsTest, SharedClientsAvoidGroupsThatDisjointClientsHold) {
  auto reserved = parts_.acquire(0, 5000, GpuPlacement::Disjoint);  // 66 SMs -> 8 groups
  ASSERT_NE(reserved, nullptr);
  EXPECT_EQ(reserved->sm_count(), 64u);
  std::vector<std::shared_ptr<BackendPartition>> shared;
  for (int i = 0; i < 3; ++i) shared.push_back(parts_.acquire(0, 1250, GpuPlacement::Shared));
  const auto u = parts_.group_use(0);
  int on_held = 0, on_free = 0;
  for (int g : u) {
    if (g == -1) ++on_held;
    else on_free += g;
  }
  EXPECT_EQ(on_held, 8);
  EXPECT_EQ(on_free, 6) << "three shared clients of 2 groups each, all on the 7 free groups";
  for (int g : u) EXPECT_TRUE(g == -1 || g == 0 || g == 1);
}

TEST_F(SmPartitionsTest, LeasesOutliveTheManager) {
  std::shared_ptr<BackendPartition> p;
  {
    SmPartitions short_lived(*backend_);
    p = short_lived.acquire(1, 5000, GpuPlacement::Disjoint);
  }
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->device(), 1);
  p.reset();  // gives its groups back to a manager that is gone: nothing happens
}

}  // namespace
}  // namespace funnel::server
