#include "funnel/affinity/binding.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

namespace funnel::affinity {
namespace {

const std::string kDir = FUNNEL_TOPOLOGY_DIR;

TEST(Binding, ThisProcessIsBoundToSomeCpus) {
  const CpuList mine = process_binding(0);

  EXPECT_FALSE(mine.empty());
  EXPECT_EQ(process_binding(getpid()), mine);
}

TEST(Binding, UnknownProcessIsAnError) { EXPECT_THROW(process_binding(999999999), std::system_error); }

TEST(Binding, UnboundRanksClaimNothing) {
  const Topology topo = Topology::from_xml_file(kDir + "/two_sockets_four_gpus_each.xml");
  const std::vector<CpuList> ranks{parse_cpu_list("0-31"), parse_cpu_list("3"), parse_cpu_list("8-9,24-25")};

  EXPECT_EQ(format_cpu_list(bound_cpus(topo, ranks)), "3,8-9,24-25");
  EXPECT_TRUE(bound_cpus(topo, {parse_cpu_list("0-31")}).empty());
}

}  // namespace
}  // namespace funnel::affinity
