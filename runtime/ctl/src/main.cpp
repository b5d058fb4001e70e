// funnelctl [--run-dir DIR | --job ID | --all] VERB: status, clients, terminate, shutdown,
// defaults, config, plan, stats (doc/funnelctl.md).  Talks to the job's funnel-server over a
// control connection (doc/design/channel.md).
// Exit codes: 0 ok, 1 no server / failed, 2 bad settings or arguments.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "funnel/affinity/binding.hpp"
#include "funnel/affinity/plan.hpp"
#include "funnel/affinity/topology.hpp"
#include "funnel/common/config.hpp"
#include "funnel/common/control_client.hpp"
#include "funnel/common/launcher.hpp"
#include "targets.hpp"

namespace {

using nlohmann::json;

// Exit codes.
constexpr int kFailed = 1, kBadArguments = 2;

// A refusal of funnelctl's own (bad arguments or target): exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

funnel::Settings for_run_dir(const funnel::Settings& s, const std::filesystem::path& dir) {
  funnel::Settings out = s;
  out.run_dir = dir;
  return out;
}

// The server's answer as JSON; its {"error": ...} as an exception naming the run directory.
json ask(const funnel::Settings& s, const std::string& verb, const std::string& arg = {}) {
  const std::string text = funnel::control_request(s, verb, arg);
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw std::runtime_error(fmt::format("funnel-server in {} answered '{}' with malformed JSON", s.run_dir.string(), verb));
  if (j.contains("error"))
    throw std::runtime_error(fmt::format("funnel-server in {}: {}", s.run_dir.string(), j["error"].get<std::string>()));
  return j;
}

std::string size_text(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string duration_text(double seconds) {
  const auto t = static_cast<uint64_t>(seconds);
  if (t >= 86400) return fmt::format("{}d{:02}h", t / 86400, t % 86400 / 3600);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, t % 3600 / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

std::string text_of(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

// GPU busy seconds to the millisecond ("-" from a server that does not measure it).
std::string busy_text(const json& v) { return v.is_number() ? fmt::format("{:.3f}s", v.get<double>()) : "-"; }

// One server's stats, or why it did not answer: the run directories funnelctl found.
struct Answer {
  std::filesystem::path run_dir;
  json stats;         // null: no server answers
  std::string why;    // when stats is null
};

std::vector<Answer> ask_all(const funnel::Settings& s, const std::vector<std::filesystem::path>& dirs) {
  std::vector<Answer> out;
  for (const auto& d : dirs) {
    Answer a{d, nullptr, {}};
    try {
      a.stats = ask(for_run_dir(s, d), "stats");
    } catch (const std::exception& e) {
      a.why = e.what();
    }
    out.push_back(std::move(a));
  }
  return out;
}

std::string gpus_text(const json& stats) {
  std::string out;
  for (const auto& d : stats.value("devices", json::array()))
    out += fmt::format("{}{} {} {}", out.empty() ? "" : ", ", d.value("device", -1), d.value("pci_bus_id", "?"),
                       d.value("state", "?"));
  return out.empty() ? "-" : out;
}

// "p50/p99" of a client's call_pickup_us (microseconds), "-" before its first waited call.
std::string pickup_text(const json& pickup) {
  const json p50 = pickup.value("p50", json(nullptr)), p99 = pickup.value("p99", json(nullptr));
  if (!p50.is_number() || !p99.is_number()) return "-";
  return fmt::format("{}/{}", p50.get<uint64_t>(), p99.get<uint64_t>());
}

// status: one row per run directory found.
int print_status(const std::vector<Answer>& answers, bool as_json) {
  bool any = false;
  if (as_json) {
    json list = json::array();
    for (const auto& a : answers) {
      if (a.stats.is_null()) {
        list.push_back({{"run_dir", a.run_dir.string()}, {"state", "stale (no server answers)"}, {"error", a.why}});
        continue;
      }
      any = true;
      json entry = a.stats.at("server");
      entry["gpus"] = a.stats.value("devices", json::array());
      list.push_back(std::move(entry));
    }
    std::puts(list.dump(2).c_str());
    return any ? 0 : kFailed;
  }
  std::printf("%-32s %-8s %-10s %-8s %-10s %-7s %-8s %s\n", "RUN DIR", "PID", "USER", "BACKEND", "STATE", "CLIENTS",
              "UPTIME", "GPUS (index bus-id state)");
  for (const auto& a : answers) {
    if (a.stats.is_null()) {
      std::printf("%-32s %-8s %-10s %-8s %s\n", a.run_dir.c_str(), "-", "-", "-", "stale (no server answers)");
      continue;
    }
    any = true;
    const json& sv = a.stats.at("server");
    std::printf("%-32s %-8d %-10s %-8s %-10s %-7zu %-8s %s\n", a.run_dir.c_str(), sv.value("pid", 0),
                sv.value("user", "?").c_str(), sv.value("backend", "?").c_str(), sv.value("state", "?").c_str(),
                sv.value("clients", size_t{0}), duration_text(sv.value("uptime_s", 0.0)).c_str(),
                gpus_text(a.stats).c_str());
  }
  return any ? 0 : kFailed;
}

// clients: one row per client of each server that answers.
int print_clients(const std::vector<Answer>& answers, bool as_json) {
  bool any = false;
  if (as_json) {
    json list = json::array();
    for (const auto& a : answers) {
      if (a.stats.is_null()) continue;
      any = true;
      for (json c : a.stats.value("clients", json::array())) {
        c["run_dir"] = a.run_dir.string();
        list.push_back(std::move(c));
      }
    }
    std::puts(list.dump(2).c_str());
    return any ? 0 : kFailed;
  }
  for (const auto& a : answers) {
    if (a.stats.is_null()) {
      std::fprintf(stderr, "funnelctl: %s\n", a.why.c_str());
      continue;
    }
    any = true;
    if (answers.size() > 1)
      std::printf("%s (funnel-server %d):\n", a.run_dir.c_str(), a.stats.at("server").value("pid", 0));
    std::printf("%-4s %-8s %-5s %-4s %-5s %-10s %-10s %-9s %-10s %-10s %-6s %-11s %-9s %-10s %s\n", "ID", "PID", "RANK",
                "GPU", "SM", "MEM", "PEAK", "LAUNCHES", "H2D", "D2H", "ERRORS", "PICKUP US", "BUSY", "STATE", "COMMAND");
    for (const auto& c : a.stats.value("clients", json::array())) {
      const int rank = c.value("mpi_rank", -1);
      std::printf("%-4u %-8d %-5s %-4s %-5s %-10s %-10s %-9llu %-10s %-10s %-6llu %-11s %-9s %-10s %s\n", c.value("id", 0u),
                  c.value("pid", 0), rank < 0 ? "-" : std::to_string(rank).c_str(),
                  text_of(c.value("home_device", json(nullptr))).c_str(),
                  fmt::format("{:g}%", c.value("gpu_fraction", 1.0) * 100).c_str(),
                  size_text(c.value("device_memory_bytes", uint64_t{0})).c_str(),
                  size_text(c.value("device_memory_peak_bytes", uint64_t{0})).c_str(),
                  static_cast<unsigned long long>(c.value("launches", uint64_t{0})),
                  size_text(c.value("bytes_h2d", uint64_t{0})).c_str(), size_text(c.value("bytes_d2h", uint64_t{0})).c_str(),
                  static_cast<unsigned long long>(c.value("errors", uint64_t{0})),
                  pickup_text(c.value("call_pickup_us", json::object())).c_str(),
                  busy_text(c.value("gpu_busy_s", json(nullptr))).c_str(), c.value("state", "?").c_str(),
                  c.value("command", "").c_str());
    }
  }
  return any ? 0 : kFailed;
}

// terminate: `who` is a client id, else a client pid (or a pid with by_pid).
int terminate(const funnel::Settings& s, uint64_t who, bool by_pid) {
  const json stats = ask(s, "stats");
  std::string arg;
  for (const auto& c : stats.value("clients", json::array()))
    if (!by_pid && c.value("id", uint64_t{0}) == who) arg = fmt::format("client={}", who);
  if (arg.empty())
    for (const auto& c : stats.value("clients", json::array()))
      if (c.value("pid", uint64_t{0}) == who) arg = fmt::format("pid={}", who);
  if (arg.empty())
    throw std::runtime_error(fmt::format("funnel-server in {}: no client with {} {} (funnelctl clients lists them)",
                                         s.run_dir.string(), by_pid ? "pid" : "id or pid", who));
  const json r = ask(s, "terminate", arg);
  const uint64_t id = r.value("client", uint64_t{0});
  // Its worker drops what is queued and frees what it holds; then the server forgets it.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool gone = false;
  while (!gone && std::chrono::steady_clock::now() < until) {
    gone = true;
    for (const auto& c : ask(s, "stats").value("clients", json::array())) gone = gone && c.value("id", uint64_t{0}) != id;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::printf("client %llu (pid %d) terminated%s\n", static_cast<unsigned long long>(id), r.value("pid", 0),
              gone ? "; its resources are freed" : "; the server is still freeing its resources");
  return 0;
}

// Whether process `pid` still runs.  One that exited but was not reaped yet is a zombie:
// kill(pid, 0) still finds it, but it has stopped.  The server daemonizes, so its parent is
// init or a subreaper, which in some containers reaps late (a second here) or never.
bool running(pid_t pid) {
  if (pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH)) return false;
  const char state = funnel::process_state(pid);
  if (state == '\0') return ::kill(pid, 0) == 0 || errno != ESRCH;  // no /proc: as kill says
  return state != 'Z' && state != 'X';
}

// shutdown: graceful (the server waits for its clients) or --force; then waits for it to go.
int shutdown(const funnel::Settings& s, bool force, unsigned timeout_s, bool wait) {
  const json r = ask(s, "shutdown", force ? "force" : fmt::format("timeout_s={}", timeout_s));
  const int pid = r.value("pid", 0);
  const size_t clients = r.value("clients", size_t{0});
  if (r.value("mode", "") == "graceful")
    std::printf("funnel-server %d (%s): no new clients; waiting up to %u s for %zu client(s) to detach\n", pid,
                s.run_dir.c_str(), timeout_s, clients);
  std::fflush(stdout);
  if (!wait) return 0;
  // Past the deadline the server stops its clients, which takes up to their teardown.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(force ? 0 : timeout_s) +
                     std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < until) {
    if (!funnel::connect_server(s) && !running(pid)) {
      std::printf("funnel-server %d (%s) stopped\n", pid, s.run_dir.c_str());
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::fprintf(stderr, "funnelctl: funnel-server %d in %s is still running\n", pid, s.run_dir.c_str());
  return kFailed;
}

// defaults for clients attaching later; the values are checked as the client's variables are.
int defaults(const funnel::Settings& s, const std::string& fraction, const std::string& mem_limit,
             const std::string& priority, bool as_json) {
  std::vector<std::string> args;
  if (!fraction.empty() || !mem_limit.empty() || !priority.empty()) {
    const auto lookup = [&](const char* var) -> std::optional<std::string> {
      const std::string v = var;
      if (v == "FUNNEL_GPU_FRACTION" && !fraction.empty()) return fraction;
      if (v == "FUNNEL_DEVICE_MEM_LIMIT" && !mem_limit.empty()) return mem_limit;
      if (v == "FUNNEL_CLIENT_PRIORITY" && !priority.empty()) return priority;
      return std::nullopt;
    };
    funnel::Settings d;
    try {
      d = funnel::Settings::from(lookup);
    } catch (const funnel::ConfigError& e) {
      throw UsageError(e.what());
    }
    if (!fraction.empty()) args.push_back(fmt::format("fraction_bp={}", d.gpu_share_bp));
    if (!mem_limit.empty()) {
      if (!d.device_mem_limit.empty())
        throw UsageError("--mem-limit: one size for every device (not DEVICE=SIZE)");
      args.push_back(fmt::format("mem_limit={}", d.device_mem_limit_all));
    }
    if (!priority.empty()) args.push_back(std::string("priority=") + (d.below_normal_priority ? "below-normal" : "normal"));
  }
  std::string arg;
  for (const auto& a : args) arg += (arg.empty() ? "" : " ") + a;
  const json r = ask(s, "defaults", arg);
  if (as_json) {
    std::puts(r.dump(2).c_str());
    return 0;
  }
  std::printf("defaults for new clients of funnel-server in %s (those that set their own keep them):\n",
              s.run_dir.c_str());
  std::printf("  fraction   %s\n", r["fraction"].is_null() ? "(the whole GPU)"
                                                             : fmt::format("{:g}", r["fraction"].get<double>()).c_str());
  std::printf("  mem-limit  %s\n",
              r["mem_limit_bytes"].is_null() ? "(none)" : size_text(r["mem_limit_bytes"].get<uint64_t>()).c_str());
  std::printf("  priority   %s\n", r.value("priority", "normal").c_str());
  return 0;
}


void print_table(const std::string& text) {
  const auto j = json::parse(text, nullptr, false);
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
void print_config(const funnel::Settings& s, bool as_json) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : funnel::setting_table()) {
    std::string source = "default";
    for (const auto& [var, src] : s.sources)
      if (var == row.variable) source = src;
    rows.push_back({{"variable", row.variable}, {"value", funnel::value_text(s, row.variable)}, {"source", source}});
  }
  if (as_json) {
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
  CLI::App app{"funnelctl: inspect and control the job's funnel-server (doc/funnelctl.md)"};
  std::string run_dir;
  funnel::ctl::Selection sel;
  bool json_out = false;
  auto* run_dir_opt = app.add_option("--run-dir", run_dir, "the server's run directory (FUNNEL_RUN_DIR)");
  auto* job_opt = app.add_option("--job", sel.job, "every server of this (Slurm) job id on this node (root: every user's)")
                      ->excludes(run_dir_opt);
  app.add_flag("--all", sel.all, "every server of yours on this node (root: everyone's)")
      ->excludes(run_dir_opt)
      ->excludes(job_opt);
  auto* status = app.add_subcommand("status", "the servers found: pid, user, backend, state, GPUs, clients, uptime");
  status->add_flag("--json", json_out, "as JSON");
  auto* clients = app.add_subcommand("clients", "per client: pid, rank, GPU, SM share, memory, launches, copies");
  clients->add_flag("--json", json_out, "as JSON");
  auto* stats = app.add_subcommand("stats", "everything the server counts, as it reports it");
  stats->add_flag("--json", json_out, "print the server's JSON as is");
  uint64_t who = 0;
  bool by_pid = false;
  auto* term = app.add_subcommand("terminate", "stop one client: its work is dropped, its calls fail, the others run on");
  term->add_option("client", who, "the client's id (funnelctl clients), else its pid")->required();
  term->add_flag("--pid", by_pid, "the number is a pid");
  bool force = false, no_wait = false;
  unsigned timeout_s = 60;
  auto* shutdown_cmd = app.add_subcommand("shutdown", "stop the server: take no new clients, wait for the attached ones");
  auto* force_opt = shutdown_cmd->add_flag("--force", force, "now: attached clients' calls fail (as SIGTERM)");
  shutdown_cmd->add_option("--timeout", timeout_s, "seconds to wait for the clients, then as --force (default 60)")
      ->check(CLI::Range(0u, 86400u))
      ->excludes(force_opt);
  shutdown_cmd->add_flag("--no-wait", no_wait, "return once the server has the request");
  std::string fraction, mem_limit, priority;
  auto* defaults_cmd = app.add_subcommand("defaults", "defaults for clients attaching later (without options: show them)");
  defaults_cmd->add_option("--fraction", fraction, "FUNNEL_GPU_FRACTION of clients that set none (0.25, 25%)");
  defaults_cmd->add_option("--mem-limit", mem_limit, "FUNNEL_DEVICE_MEM_LIMIT of clients that set none (8G)");
  defaults_cmd->add_option("--priority", priority, "FUNNEL_CLIENT_PRIORITY of clients that set none")
      ->check(CLI::IsMember({"normal", "below-normal"}));
  defaults_cmd->add_flag("--json", json_out, "as JSON");
  auto* config = app.add_subcommand("config", "every FUNNEL_* setting in effect here and where it came from");
  config->add_flag("--json", json_out, "as JSON");
  std::string xml;
  unsigned workers = 1;
  auto* plan = app.add_subcommand("plan", "where the server's threads run: its GPUs' cores, away from its clients' bindings");
  plan->add_flag("--json", json_out, "the server's plan as JSON");
  auto* plan_xml = plan->add_option("--xml", xml, "what if: plan on this hwloc XML topology (lstopo --of xml) instead")
                       ->check(CLI::ExistingFile);
  plan->add_option("--workers", workers, "with --xml: worker threads per GPU that want a core each")
      ->check(CLI::Range(1u, 1024u))
      ->needs(plan_xml);
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kBadArguments;
  }
  if (!run_dir.empty()) ::setenv("FUNNEL_RUN_DIR", run_dir.c_str(), 1);
  funnel::Settings s;
  try {
    s = funnel::Settings::from_environment();
  } catch (const funnel::ConfigError& e) {
    std::fprintf(stderr, "funnelctl: %s\n", e.what());
    return kBadArguments;
  }
  try {
    if (*config) {
      print_config(s, json_out);
      return 0;
    }
    const auto dirs = funnel::ctl::find_run_dirs(s, sel, ::geteuid());
    if (dirs.empty()) {
      std::fprintf(stderr, "funnelctl: no run directory %s\n", funnel::ctl::search_pattern(sel, ::geteuid()).c_str());
      return kFailed;
    }
    if (*status) return print_status(ask_all(s, dirs), json_out);
    if (*clients) return print_clients(ask_all(s, dirs), json_out);
    // The others act on one server.
    if (dirs.size() > 1) {
      std::string list;
      for (const auto& d : dirs) list += "\n  " + d.string();
      throw UsageError(fmt::format("{} run directories found; name one with --run-dir:{}", dirs.size(), list));
    }
    const funnel::Settings one = for_run_dir(s, dirs.front());
    if (*stats) {
      const std::string text = funnel::control_request(one, "stats");
      if (json_out) std::puts(text.c_str());
      else print_table(text);
    } else if (*plan && !xml.empty()) {
      print_plan_on(funnel::control_request(one, "stats"), xml, workers);
    } else if (*plan) {
      if (json_out) std::puts(funnel::control_request(one, "plan").c_str());
      else std::fputs(funnel::server_plan_text(one).c_str(), stdout);
    } else if (*term) {
      return terminate(one, who, by_pid);
    } else if (*shutdown_cmd) {
      return shutdown(one, force, timeout_s, !no_wait);
    } else if (*defaults_cmd) {
      return defaults(one, fraction, mem_limit, priority, json_out);
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "funnelctl: %s\n", e.what());
    return kBadArguments;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "funnelctl: %s\n", e.what());
    return kFailed;
  }
  return 0;
}
