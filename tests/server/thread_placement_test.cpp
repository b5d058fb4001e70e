// ThreadPlacement::own_core: a worker alone on a core of its GPU's worker CPUs where the ranks
// are bound and leave free cores (doc/placement.md, "Applying it"), on an hwloc XML topology
// (2 packages x 8 cores x 2 hyperthreads, GPU 0000:19:00.0 among the 4 of package 0, which has cores 0-7; core c has
// PUs c and c + 16).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "placement/thread_placement.hpp"
#include "funnel/affinity/cpu_list.hpp"

namespace funnel::server {
namespace {

namespace aff = funnel::affinity;

class ThreadPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("HWLOC_XMLFILE", FUNNEL_TOPOLOGY_DIR "/two_sockets_four_gpus_each.xml", 1);
    ::setenv("HWLOC_THISSYSTEM", "0", 1);
  }
  void TearDown() override {
    ::unsetenv("HWLOC_XMLFILE");
    ::unsetenv("HWLOC_THISSYSTEM");
  }
  static ThreadPlacement::Client bound_to(const std::string& cpus, int device = 0) {
    ThreadPlacement::Client c;
    c.device = device;
    c.binding = aff::parse_cpu_list(cpus);
    return c;
  }
  static std::string text(const aff::CpuList& l) { return aff::format_cpu_list(l); }
};

TEST_F(ThreadPlacementTest, BoundRanksLeaveEachWorkerACoreOfItsOwn) {
  ThreadPlacement p({"0000:19:00.0"}, true);
  for (uint32_t id = 1; id <= 4; ++id) p.add_client(id, bound_to(std::to_string(id - 1)));  // cores 0-3
  p.replan();
  const std::string set = text(p.worker_cpus(0));
  ASSERT_FALSE(set.empty());
  std::string seen;
  for (uint32_t id = 1; id <= 4; ++id) {
    const aff::CpuList own = p.own_core(0, id);
    ASSERT_EQ(own.size(), 2u) << "client " << id << ": one core, both hyperthreads; the set is " << set;
    EXPECT_EQ(own[1], own[0] + 16) << text(own);
    EXPECT_GE(own[0], 4u) << "not a rank's core: " << text(own);
    EXPECT_EQ(text(p.worker_cpus(0, id)), text(own));
    EXPECT_EQ(seen.find("," + std::to_string(own[0]) + ","), std::string::npos) << "two workers on " << text(own);
    seen += "," + std::to_string(own[0]) + ",";
  }
}

TEST_F(ThreadPlacementTest, AnUnboundRankLeavesTheWorkersTheWholeSet) {
  ThreadPlacement p({"0000:19:00.0"}, true);
  p.add_client(1, bound_to("0"));
  p.add_client(2, ThreadPlacement::Client{});  // binding unknown: not bound
  p.add_client(3, bound_to("0-31"));           // every CPU: not bound either
  p.replan();
  for (uint32_t id = 1; id <= 3; ++id) {
    EXPECT_TRUE(p.own_core(0, id).empty()) << id;
    EXPECT_EQ(text(p.worker_cpus(0, id)), text(p.worker_cpus(0))) << id;
  }
}

TEST_F(ThreadPlacementTest, RanksOnEveryCoreLeaveNoOwnCore) {
  ThreadPlacement p({"0000:19:00.0"}, true);
  for (uint32_t id = 1; id <= 16; ++id) p.add_client(id, bound_to(std::to_string(id - 1) + "," + std::to_string(id + 15)));
  p.replan();
  EXPECT_TRUE(p.own_core(0, 1).empty());
  EXPECT_TRUE(p.follows_rank(0, 1));  // shares its rank's core instead (rule 3)
  EXPECT_EQ(text(p.worker_cpus(0, 1)), "0,16");
}

TEST_F(ThreadPlacementTest, PooledWorkersKeepTheSet) {
  ThreadPlacement p({"0000:19:00.0"}, true);
  p.cap_workers(1);
  p.add_client(1, bound_to("0"));
  p.add_client(2, bound_to("1"));
  p.replan();
  EXPECT_TRUE(p.own_core(0, 1).empty());
}

}  // namespace
}  // namespace funnel::server
