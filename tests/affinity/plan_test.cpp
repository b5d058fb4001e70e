#include "funnel/affinity/plan.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace funnel::affinity {
namespace {

const std::string kDir = FUNNEL_TOPOLOGY_DIR;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

bool inside(const CpuList& cpus, const CpuList& set) {
  for (unsigned cpu : cpus)
    if (!contains(set, cpu)) return false;
  return true;
}

void expect_pairwise_disjoint(const Plan& plan) {
  for (std::size_t i = 0; i < plan.gpus.size(); ++i)
    for (std::size_t j = i + 1; j < plan.gpus.size(); ++j)
      EXPECT_FALSE(intersects(plan.gpus[i].worker_cpus, plan.gpus[j].worker_cpus)) << "GPUs " << i << " and " << j;
}

class TwoSockets : public ::testing::Test {
 protected:
  Topology topo = Topology::from_xml_file(kDir + "/two_sockets_four_gpus_each.xml");
};

TEST_F(TwoSockets, EachGpuGetsAFreeCoreOfItsOwnSocket) {
  // Ranks are bound to the first hyperthread of cores 0-1 and 8-9: those whole cores are off limits.
  const PlanRequest request{topo.gpu_bus_ids(), parse_cpu_list("0-1,8-9"), 1};

  const Plan plan = make_plan(topo, request);

  ASSERT_EQ(plan.gpus.size(), 8U);
  const std::vector<std::string> expected{"2,18", "3,19", "4,20", "5,21", "10,26", "11,27", "12,28", "13,29"};
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(format_cpu_list(plan.gpus[i].worker_cpus), expected[i]) << "GPU " << i;
    EXPECT_TRUE(inside(plan.gpus[i].worker_cpus, plan.gpus[i].local_cpus)) << "GPU " << i;
    EXPECT_FALSE(plan.gpus[i].shared_with_ranks);
    EXPECT_FALSE(intersects(plan.gpus[i].worker_cpus, parse_cpu_list("0-1,8-9,16-17,24-25")));
  }
  expect_pairwise_disjoint(plan);
  EXPECT_EQ(format_cpu_list(plan.server_cpus), "6,22");
  EXPECT_TRUE(has(plan.server_reason, "near GPU 0")) << plan.server_reason;
}

TEST_F(TwoSockets, SeveralWorkersPerGpuSplitTheSocketEvenly) {
  const Plan plan = make_plan(topo, {topo.gpu_bus_ids(), {}, 4});

  // 8 free cores per socket, 4 GPUs on each: 2 cores each, none left for the server.
  EXPECT_EQ(format_cpu_list(plan.gpus[0].worker_cpus), "0-1,16-17");
  EXPECT_EQ(format_cpu_list(plan.gpus[7].worker_cpus), "14-15,30-31");
  expect_pairwise_disjoint(plan);
  EXPECT_EQ(plan.server_cpus, plan.gpus[0].worker_cpus);
  EXPECT_TRUE(has(plan.server_reason, "shares GPU 0")) << plan.server_reason;
}

TEST_F(TwoSockets, GpusOfAFullyBoundSocketUseFreeCoresElsewhere) {
  const Plan plan = make_plan(topo, {topo.gpu_bus_ids(), parse_cpu_list("8-15,24-31"), 1});

  for (std::size_t i = 4; i < 8; ++i) {
    EXPECT_TRUE(inside(plan.gpus[i].worker_cpus, parse_cpu_list("0-7,16-23"))) << "GPU " << i;
    EXPECT_FALSE(plan.gpus[i].worker_cpus.empty());
    EXPECT_FALSE(plan.gpus[i].shared_with_ranks);
    EXPECT_TRUE(has(plan.gpus[i].reason, "away from it")) << plan.gpus[i].reason;
  }
  expect_pairwise_disjoint(plan);
}

TEST_F(TwoSockets, JobBindingEveryCoreSharesTheGpuLocalCores) {
  const Plan plan = make_plan(topo, {topo.gpu_bus_ids(), parse_cpu_list("0-31"), 1});

  for (const GpuPlacement& gpu : plan.gpus) {
    EXPECT_EQ(gpu.worker_cpus, gpu.local_cpus) << gpu.bus_id;
    EXPECT_TRUE(gpu.shared_with_ranks);
    EXPECT_TRUE(has(gpu.reason, "every core")) << gpu.reason;
    EXPECT_TRUE(has(gpu.reason, "shares")) << gpu.reason;
  }
  EXPECT_EQ(format_cpu_list(plan.gpus[5].worker_cpus), "8-15,24-31");
  EXPECT_EQ(plan.server_cpus, plan.gpus[0].worker_cpus);
  EXPECT_TRUE(has(to_text(plan), "SHARED WITH RANKS")) << to_text(plan);
}

TEST_F(TwoSockets, UnknownBusIdIsNotPinnedAndSaysWhy) {
  const Plan plan = make_plan(topo, {{"0000:77:00.0", "0000:19:00.0"}, {}, 1});

  ASSERT_EQ(plan.gpus.size(), 2U);
  EXPECT_TRUE(plan.gpus[0].worker_cpus.empty());
  EXPECT_TRUE(has(plan.gpus[0].reason, "no PCI device 0000:77:00.0")) << plan.gpus[0].reason;
  EXPECT_EQ(format_cpu_list(plan.gpus[1].worker_cpus), "0,16");
  EXPECT_TRUE(has(plan.server_reason, "near GPU 1")) << plan.server_reason;
}

TEST_F(TwoSockets, TextNamesEveryGpuAndTheServer) {
  const Plan plan = make_plan(topo, {topo.gpu_bus_ids(), parse_cpu_list("0-1"), 1});

  const std::string text = to_text(plan);

  EXPECT_TRUE(has(text, "GPU 0 0000:19:00.0: Package P#0, NUMANode P#0 (CPUs 0-7,16-23); workers on CPUs 2,18;")) << text;
  EXPECT_TRUE(has(text, "GPU 7 0000:db:00.0: Package P#1")) << text;
  EXPECT_TRUE(has(text, "server: CPUs 6,22;")) << text;
}

class EightGpusOneSocket : public ::testing::Test {
 protected:
  Topology topo = Topology::from_xml_file(kDir + "/one_socket_eight_gpus.xml");
};

TEST_F(EightGpusOneSocket, GpusGetDisjointCoresNoRankUses) {
  const CpuList ranks = parse_cpu_list("0-15,32-47");

  const Plan plan = make_plan(topo, {topo.gpu_bus_ids(), ranks, 2});

  ASSERT_EQ(plan.gpus.size(), 8U);
  for (const GpuPlacement& gpu : plan.gpus) {
    EXPECT_EQ(gpu.worker_cpus.size(), 4U) << gpu.bus_id;  // 2 whole cores, 2 PUs each
    EXPECT_FALSE(intersects(gpu.worker_cpus, ranks)) << gpu.bus_id;
  }
  expect_pairwise_disjoint(plan);
  EXPECT_EQ(format_cpu_list(plan.gpus[0].worker_cpus), "16-17,48-49");
  EXPECT_EQ(format_cpu_list(plan.gpus[7].worker_cpus), "30-31,62-63");
}

TEST_F(EightGpusOneSocket, ServerGetsItsOwnCoreWhenOneIsLeft) {
  const Plan plan = make_plan(topo, {topo.gpu_bus_ids(), parse_cpu_list("0-15"), 1});

  expect_pairwise_disjoint(plan);
  for (const GpuPlacement& gpu : plan.gpus) EXPECT_FALSE(intersects(plan.server_cpus, gpu.worker_cpus));
  EXPECT_EQ(format_cpu_list(plan.server_cpus), "24,56");
}

TEST_F(EightGpusOneSocket, FewerFreeCoresThanGpusAreShared) {
  const Plan plan = make_plan(topo, {topo.gpu_bus_ids(), parse_cpu_list("0-28"), 1});

  EXPECT_EQ(format_cpu_list(plan.gpus[0].worker_cpus), "29,61");
  EXPECT_EQ(format_cpu_list(plan.gpus[3].worker_cpus), "29,61");
  EXPECT_EQ(format_cpu_list(plan.gpus[2].worker_cpus), "31,63");
  for (const GpuPlacement& gpu : plan.gpus) {
    EXPECT_FALSE(gpu.shared_with_ranks);
    EXPECT_TRUE(has(gpu.reason, "only 3 free cores near 8 GPUs")) << gpu.reason;
  }
}

TEST(NoGpus, NothingIsPinnedAndTheReasonSaysWhy) {
  const Topology topo = Topology::from_xml_file(kDir + "/no_gpus.xml");

  const Plan plan = make_plan(topo, {topo.gpu_bus_ids(), {}, 1});

  EXPECT_TRUE(plan.gpus.empty());
  EXPECT_TRUE(plan.server_cpus.empty());
  EXPECT_TRUE(has(plan.server_reason, "no GPUs")) << plan.server_reason;
  EXPECT_TRUE(has(to_text(plan), "server: not pinned")) << to_text(plan);
}

TEST(ThisMachine, MadeUpBusIdIsReportedNotFound) {
  const Topology topo = Topology::this_machine();

  const Plan plan = make_plan(topo, {{"0000:ee:1f.7"}, {}, 1});

  ASSERT_EQ(plan.gpus.size(), 1U);
  EXPECT_TRUE(plan.gpus[0].worker_cpus.empty());
  EXPECT_TRUE(has(plan.gpus[0].reason, "no PCI device 0000:ee:1f.7")) << plan.gpus[0].reason;
  EXPECT_TRUE(plan.server_cpus.empty());
  EXPECT_TRUE(has(plan.server_reason, "none of the GPUs was found")) << plan.server_reason;
}

// The job's cgroup allows socket 0 only (hwloc drops the other CPUs): GPUs of socket 1 have no
// allowed CPU near them and still get a placement among the allowed ones.
TEST(RestrictedCgroup, GpusWithoutAllowedCpusNearThemStayOnAllowedCpus) {
  std::ifstream in(kDir + "/two_sockets_four_gpus_each.xml");
  std::stringstream text;
  text << in.rdbuf();
  std::string xml = text.str();
  const std::string all = "allowed_cpuset=\"0xffffffff\"";
  xml.replace(xml.find(all), all.size(), "allowed_cpuset=\"0x00ff00ff\"");
  const Topology topo = Topology::from_xml(xml);

  for (const CpuList& ranks : {CpuList{}, parse_cpu_list("0-7,16-23")}) {
    const Plan plan = make_plan(topo, {topo.gpu_bus_ids(), ranks, 1});

    for (const GpuPlacement& gpu : plan.gpus) {
      EXPECT_FALSE(gpu.worker_cpus.empty()) << gpu.bus_id << ": " << gpu.reason;
      EXPECT_TRUE(inside(gpu.worker_cpus, parse_cpu_list("0-7,16-23"))) << gpu.bus_id;
    }
    EXPECT_FALSE(plan.server_cpus.empty()) << to_text(plan);
  }
  const Plan all_bound = make_plan(topo, {topo.gpu_bus_ids(), parse_cpu_list("0-7,16-23"), 1});
  EXPECT_TRUE(has(all_bound.gpus[4].reason, "no CPU near the GPU")) << all_bound.gpus[4].reason;
  EXPECT_TRUE(has(to_text(all_bound), "(CPUs none of the job's)")) << to_text(all_bound);
}

}  // namespace
}  // namespace funnel::affinity
