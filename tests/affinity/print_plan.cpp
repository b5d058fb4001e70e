// funnel_affinity_print_plan [-i TOPOLOGY.xml] [-r RANK_CPUS] [-w WORKERS_PER_GPU] [BUS_ID...]
// Prints the placement plan for the given GPUs (default: every GPU of the topology), as
// `funnelctl plan` is to print it, until the server wiring exists. A manual check on real nodes.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "funnel/affinity/plan.hpp"

int main(int argc, char** argv) {
  using namespace funnel::affinity;
  try {
    std::string xml;
    PlanRequest request;
    const std::vector<std::string> args(argv + 1, argv + argc);
    for (std::size_t i = 0; i < args.size(); ++i) {
      const bool has_value = i + 1 < args.size();
      if (args[i] == "-i" && has_value) {
        xml = args[++i];
      } else if (args[i] == "-r" && has_value) {
        request.rank_cpus = parse_cpu_list(args[++i]);
      } else if (args[i] == "-w" && has_value) {
        request.workers_per_gpu = static_cast<unsigned>(std::stoul(args[++i]));
      } else if (!args[i].empty() && args[i][0] == '-') {
        std::fprintf(stderr, "usage: %s [-i TOPOLOGY.xml] [-r RANK_CPUS] [-w WORKERS_PER_GPU] [BUS_ID...]\n", argv[0]);
        return 2;
      } else {
        request.gpu_bus_ids.push_back(args[i]);
      }
    }
    const Topology topology = xml.empty() ? Topology::this_machine() : Topology::from_xml_file(xml);
    if (request.gpu_bus_ids.empty()) request.gpu_bus_ids = topology.gpu_bus_ids();
    std::fputs(to_text(make_plan(topology, request)).c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "funnel_affinity_print_plan: %s\n", e.what());
    return 1;
  }
}
