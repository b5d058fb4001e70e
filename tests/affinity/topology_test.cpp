#include "funnel/affinity/topology.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace funnel::affinity {
namespace {

const std::string kDir = FUNNEL_TOPOLOGY_DIR;

TEST(Topology, TwoSocketsHasEightGpusAndSixteenCores) {
  const Topology topo = Topology::from_xml_file(kDir + "/two_sockets_four_gpus_each.xml");

  EXPECT_EQ(topo.cores().size(), 16U);
  EXPECT_EQ(topo.cores().front(), (CpuList{0, 16}));
  EXPECT_EQ(topo.gpu_bus_ids(), (std::vector<std::string>{"0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0", "0000:5d:00.0",
                                                          "0000:9b:00.0", "0000:bb:00.0", "0000:cb:00.0", "0000:db:00.0"}));
}

TEST(Topology, GpuLocalityIsItsPackage) {
  const Topology topo = Topology::from_xml_file(kDir + "/two_sockets_four_gpus_each.xml");

  const auto gpu = topo.locate_gpu("0000:9b:00.0");

  ASSERT_TRUE(gpu.has_value());
  EXPECT_EQ(format_cpu_list(gpu->cpus), "8-15,24-31");
  EXPECT_NE(gpu->where.find("Package P#1"), std::string::npos) << gpu->where;
  EXPECT_NE(gpu->where.find("NUMANode P#1"), std::string::npos) << gpu->where;
  // The short form without a domain names the same device.
  ASSERT_TRUE(topo.locate_gpu("19:00.0").has_value());
  EXPECT_EQ(format_cpu_list(topo.locate_gpu("19:00.0")->cpus), "0-7,16-23");
  // nvidia-smi writes the domain with eight digits.
  ASSERT_TRUE(topo.locate_gpu("00000000:9B:00.0").has_value());
}

TEST(Topology, UnknownOrMalformedBusIdIsNotFound) {
  const Topology topo = Topology::from_xml_file(kDir + "/two_sockets_four_gpus_each.xml");

  EXPECT_FALSE(topo.locate_gpu("0000:77:00.0").has_value());
  EXPECT_FALSE(topo.locate_gpu("not a bus id").has_value());
}

TEST(Topology, NodeWithoutGpusListsNone) {
  const Topology topo = Topology::from_xml_file(kDir + "/no_gpus.xml");

  EXPECT_TRUE(topo.gpu_bus_ids().empty());
  EXPECT_EQ(topo.cores().size(), 4U);
}

TEST(Topology, LoadsFromXmlText) {
  std::ifstream in(kDir + "/one_socket_eight_gpus.xml");
  std::stringstream text;
  text << in.rdbuf();

  const Topology topo = Topology::from_xml(text.str());

  EXPECT_EQ(topo.gpu_bus_ids().size(), 8U);
  EXPECT_EQ(topo.cores().size(), 32U);
}

TEST(Topology, BadXmlIsAnError) {
  EXPECT_THROW(Topology::from_xml("<topology>not hwloc</"), TopologyError);
  EXPECT_THROW(Topology::from_xml_file(kDir + "/does_not_exist.xml"), TopologyError);
}

TEST(Topology, ThisMachineLoads) {
  const Topology topo = Topology::this_machine();

  EXPECT_FALSE(topo.cores().empty());
}

}  // namespace
}  // namespace funnel::affinity
