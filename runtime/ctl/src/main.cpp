// funnelctl [--run-dir DIR] stats [--json] | shutdown | config [--json] | plan [--json] [--xml FILE [--workers N]]
// Talks to the job's funnel-server over a control connection (doc/design/channel.md).
// Exit codes: 0 ok, 1 no server / failed, 2 bad settings or arguments.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "funnel/affinity/binding.hpp"
#include "funnel/affinity/plan.hpp"
#include "funnel/affinity/topology.hpp"
#include "funnel/common/config.hpp"
#include "funnel/common/control_client.hpp"

namespace {

using funnel::control_request;

void print_table(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    std::puts(text.c_str());
    return;
  }
  for (const auto& [k, v] : j.items()) {
    if (v.is_array()) {
      std::printf("%s: %zu\n", k.c_str(), v.size());
      for (const auto& item : v) std::printf("  %s\n", item.dump().c_str());
    } else {
      std::printf("%s: %s\n", k.c_str(), v.dump().c_str());
    }
  }
}

// The effective settings of this environment, from the one table in runtime/common.
void print_config(const funnel::Settings& s, bool json) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : funnel::setting_table()) {
    std::string source = "default";
    for (const auto& [var, src] : s.sources)
      if (var == row.variable) source = src;
    rows.push_back({{"variable", row.variable}, {"value", funnel::value_text(s, row.variable)}, {"source", source}});
  }
  if (json) {
    std::puts(rows.dump(2).c_str());
    return;
  }
  std::printf("%-26s %-12s %s\n", "VARIABLE", "SOURCE", "VALUE");
  for (const auto& r : rows)
    std::printf("%-26s %-12s %s\n", r["variable"].get<std::string>().c_str(), r["source"].get<std::string>().c_str(),
                r["value"].get<std::string>().c_str());
}

// What-if: the placement plan (doc/placement.md) for the running server's GPUs and its
// clients' bindings on an hwloc XML topology (`lstopo --of xml`) of another machine.
void print_plan_on(const std::string& stats_text, const std::string& xml, unsigned workers) {
  namespace aff = funnel::affinity;
  const auto j = nlohmann::json::parse(stats_text);
  aff::PlanRequest req;
  req.workers_per_gpu = workers;
  for (const auto& d : j.at("devices")) req.gpu_bus_ids.push_back(d.value("pci_bus_id", ""));
  const aff::Topology topo = aff::Topology::from_xml_file(xml);
  std::vector<aff::CpuList> bindings;
  for (const auto& c : j.at("clients")) {
    try {
      bindings.push_back(aff::process_binding(c.at("pid").get<pid_t>()));
    } catch (const std::exception&) {
      // a client that just exited: it binds nothing any more
    }
  }
  req.rank_cpus = aff::bound_cpus(topo, bindings);
  std::fputs(aff::to_text(aff::make_plan(topo, req)).c_str(), stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"funnelctl: inspect or stop the job's funnel-server"};
  std::string run_dir;
  bool json = false;
  app.add_option("--run-dir", run_dir, "the job's run directory (FUNNEL_RUN_DIR)");
  auto* stats = app.add_subcommand("stats", "server and per-client accounting");
  stats->add_flag("--json", json, "print the server's JSON as is");
  auto* shutdown = app.add_subcommand("shutdown", "stop the server (as SIGTERM)");
  auto* config = app.add_subcommand("config", "every FUNNEL_* setting in effect here and where it came from");
  config->add_flag("--json", json, "as JSON");
  std::string xml;
  unsigned workers = 1;
  auto* plan = app.add_subcommand("plan", "where the server's threads run: its GPUs' cores, away from its clients' bindings");
  plan->add_flag("--json", json, "the server's plan as JSON");
  auto* plan_xml = plan->add_option("--xml", xml, "what if: plan on this hwloc XML topology (lstopo --of xml) instead")
                       ->check(CLI::ExistingFile);
  plan->add_option("--workers", workers, "with --xml: worker threads per GPU that want a core each")
      ->check(CLI::Range(1u, 1024u))
      ->needs(plan_xml);
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!run_dir.empty()) ::setenv("FUNNEL_RUN_DIR", run_dir.c_str(), 1);
  funnel::Settings s;
  try {
    s = funnel::Settings::from_environment();
  } catch (const funnel::ConfigError& e) {
    std::fprintf(stderr, "funnelctl: %s\n", e.what());
    return 2;
  }
  try {
    if (*config) {
      print_config(s, json);
    } else if (*stats) {
      const std::string text = control_request(s, "stats");
      if (json) std::puts(text.c_str());
      else print_table(text);
    } else if (*plan && !xml.empty()) {
      print_plan_on(control_request(s, "stats"), xml, workers);
    } else if (*plan) {
      if (json) std::puts(control_request(s, "plan").c_str());
      else std::fputs(funnel::server_plan_text(s).c_str(), stdout);
    } else if (*shutdown) {
      std::puts(control_request(s, "shutdown").c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "funnelctl: %s\n", e.what());
    return 1;
  }
  return 0;
}
