// Control connections: one request, one JSON answer (funnelctl is the front end).
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <ctime>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "funnel/common/text.hpp"
#include "funnel/ipc/protocol.hpp"
#include "loop/server_impl.hpp"

namespace funnel::server {
namespace {

uint64_t load(const std::atomic<uint64_t>& a) noexcept { return a.load(std::memory_order_relaxed); }

std::string bus_id(const ipc::DeviceRecord& r) { return {r.pci_bus_id, strnlen(r.pci_bus_id, sizeof r.pci_bus_id)}; }

std::string user_name(uid_t uid) {
  const passwd* pw = ::getpwuid(uid);
  return pw != nullptr ? pw->pw_name : std::to_string(uid);
}

// A request's arg: "key=value key=value" or "key" (ControlRequest::arg).
using Args = std::map<std::string, std::string>;
Args parse_args(const std::string& arg) {
  Args out;
  size_t i = 0;
  while (i < arg.size()) {
    while (i < arg.size() && arg[i] == ' ') ++i;
    const size_t end = std::min(arg.find(' ', i), arg.size());
    if (end > i) {
      const std::string word = arg.substr(i, end - i);
      const size_t eq = word.find('=');
      if (eq == std::string::npos) out[word] = "";
      else out[word.substr(0, eq)] = word.substr(eq + 1);
    }
    i = end;
  }
  return out;
}

bool to_u64(const std::string& text, uint64_t& v) {
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && p == text.data() + text.size() && !text.empty();
}

nlohmann::json error(const std::string& why) { return {{"error", why}}; }

// Never throws on bad UTF-8 (every string in it should be sanitised already; this is the
// second line of defence).
std::string to_text(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace

nlohmann::json Server::Impl::shutdown_verb(const Connection& c, const std::string& arg) {
  const Args a = parse_args(arg);
  uint64_t timeout_s = 60;
  if (a.contains("timeout_s") && (!to_u64(a.at("timeout_s"), timeout_s) || timeout_s > 7 * 86400))
    return error("shutdown: timeout_s='" + a.at("timeout_s") + "' is not a number of seconds up to a week");
  const bool force = a.contains("force");
  nlohmann::json j = {{"ok", true}, {"pid", ::getpid()}, {"clients", clients.size()}};
  if (force || clients.empty()) {
    spdlog::info("shutdown{} requested by pid {} (control connection){}", force ? " --force" : "", c.peer.pid,
                 clients.empty() ? "" : fmt::format(": stopping {} client(s)", clients.size()));
    stopping = true;
    j["mode"] = "now";
    return j;
  }
  drain_deadline = Clock::now() + std::chrono::seconds(timeout_s);
  spdlog::info(
      "graceful shutdown requested by pid {} (control connection): no new clients; waiting up to {} s for {} "
      "client(s) to detach",
      c.peer.pid, timeout_s, clients.size());
  j["mode"] = "graceful";
  j["timeout_s"] = timeout_s;
  return j;
}

nlohmann::json Server::Impl::terminate_verb(const Connection& c, const std::string& arg) {
  const Args a = parse_args(arg);
  uint64_t want = 0;
  const bool by_pid = a.contains("pid");
  if (!to_u64(by_pid ? a.at("pid") : a.contains("client") ? a.at("client") : "", want))
    return error("terminate: name the client as client=ID or pid=PID");
  ClientSession* s = nullptr;
  for (auto& [id, cs] : clients)
    if ((by_pid ? static_cast<uint64_t>(cs->pid()) : id) == want && !cs->terminated()) s = cs.get();
  if (s == nullptr)
    return error(fmt::format("terminate: no client with {} {} (funnelctl clients lists them)", by_pid ? "pid" : "id",
                             want));
  const uint32_t id = s->id();
  spdlog::warn("client {} terminated by pid {} (funnelctl): pid {} rank {} command '{}'; its work is dropped", id,
               c.peer.pid, s->pid(), s->mpi_rank(), s->command());
  nlohmann::json j = {{"ok", true}, {"client", id}, {"pid", s->pid()}};
  if (s->phase() == ClientSession::Phase::AwaitMapped) {
    // No worker yet: nothing to stop; the hang-up tells the client.
    unwatch(s->fd());
    add(totals.clients_terminated, 1);
    remember(*s, ClientEnd::Terminated);
    drop_client(id);
    return j;
  }
  s->terminate();
  return j;
}

nlohmann::json Server::Impl::defaults_json() const {
  nlohmann::json j = {{"fraction", defaults.share_bp == 0 ? nlohmann::json(nullptr)
                                                          : nlohmann::json(defaults.share_bp / 10000.0)},
                      {"mem_limit_bytes", defaults.mem_limit == 0 ? nlohmann::json(nullptr)
                                                                  : nlohmann::json(defaults.mem_limit)},
                      {"priority", defaults.below_normal ? "below-normal" : "normal"}};
  return j;
}

nlohmann::json Server::Impl::defaults_verb(const Connection& c, const std::string& arg) {
  const Args a = parse_args(arg);
  ClientDefaults d = defaults;
  for (const auto& [key, value] : a) {
    uint64_t v = 0;
    if (key == "fraction_bp") {
      if (!to_u64(value, v) || v > ipc::kGpuShareWhole)
        return error("defaults: fraction_bp='" + value + "' is not 0..10000 (1/10000 of a GPU)");
      d.share_bp = static_cast<uint32_t>(v == ipc::kGpuShareWhole ? 0 : v);
    } else if (key == "mem_limit") {
      if (!to_u64(value, v)) return error("defaults: mem_limit='" + value + "' is not a number of bytes");
      d.mem_limit = v;
    } else if (key == "priority") {
      if (value != "normal" && value != "below-normal")
        return error("defaults: priority='" + value + "' is not normal or below-normal");
      d.below_normal = value == "below-normal";
    } else {
      return error("defaults: unknown setting '" + key + "': use fraction_bp, mem_limit or priority");
    }
  }
  if (!a.empty()) {
    defaults = d;
    spdlog::info("client defaults set by pid {} (funnelctl): {}", c.peer.pid, to_text(defaults_json()));
  }
  return defaults_json();
}

ipc::HelloMsg Server::Impl::with_defaults(const ipc::HelloMsg& hello) const {
  ipc::HelloMsg h = hello;
  if (h.gpu_share_bp == 0) h.gpu_share_bp = defaults.share_bp;
  bool any_limit = false;
  for (uint64_t l : h.device_mem_limit) any_limit = any_limit || l != 0;
  if (!any_limit)
    for (uint64_t& l : h.device_mem_limit) l = defaults.mem_limit;
  // Normal is 0 in the hello: a client that asked for it is not told from one that did not.
  if (h.client_priority == static_cast<uint32_t>(ipc::ClientPriority::Normal) && defaults.below_normal)
    h.client_priority = static_cast<uint32_t>(ipc::ClientPriority::BelowNormal);
  return h;
}

std::string Server::Impl::stats_json() const {
  using nlohmann::json;
  json devices = json::array();
  json health_list = json::array();
  for (int d = 0; d < backend->device_count(); ++d) {
    devices.push_back(d);
    const DeviceHealth::State h = health.state(d);
    const bool faulted = h.fault != Status::Success;
    json entry = {{"device", d},
                  {"pci_bus_id", bus_id(device_records[static_cast<size_t>(d)])},
                  {"state", !faulted ? "ok" : reset_failed[static_cast<size_t>(d)] == h.generation ? "failed" : "faulted"},
                  {"faults", h.generation},
                  {"recoveries", health.recoveries(d)}};
    if (faulted) entry["fault_status"] = static_cast<int>(h.fault);
    if (h.generation != 0) entry["first_observer"] = h.first_observer;
    health_list.push_back(std::move(entry));
  }
  json list = json::array();
  uint64_t mem = 0, allocs = 0, streams = 0, events = 0, pinned = 0, pinned_allocs = 0;
  for (const auto& [id, s] : clients) {
    const auto& c = s->counters();
    const bool running = s->phase() == ClientSession::Phase::Running;
    const auto& sp = s->stream_placement();
    // The fields the job report shows too come from one place (job_report.cpp); these are
    // what only a live client has.
    json entry = to_json(record_of(*s));
    entry.update({{"state", s->terminated() ? "terminated" : running ? "running" : "attaching"},
                  {"gpu_placement", sp.placement == ipc::GpuPlacement::Disjoint ? "disjoint" : "shared"},
                  {"priority", sp.priority_offset == 0 ? "below-normal" : "normal"},
                  {"device_mem_limit_bytes", s->device_mem_limit(running ? s->home_device() : 0)},
                  {"device_memory_bytes", load(c.device_memory_bytes)},
                  {"allocations", load(c.allocations)},
                  {"streams", load(c.streams)},
                  {"events", load(c.events)},
                  {"pinned_bytes", load(c.pinned_bytes)},
                  {"pinned_allocations", load(c.pinned_allocations)},
                  {"sticky_error", s->sticky_error()}});
    list.push_back(std::move(entry));
    mem += load(c.device_memory_bytes);
    allocs += load(c.allocations);
    streams += load(c.streams);
    events += load(c.events);
    pinned += load(c.pinned_bytes);
    pinned_allocs += load(c.pinned_allocations);
  }
  const auto cache = modules->stats();
  const double uptime = std::chrono::duration<double>(Clock::now() - started_at).count();
  json state = "running";
  if (stopping) state = "stopping";
  else if (drain_deadline)
    state = fmt::format("draining ({:.0f} s left)",
                        std::max(0.0, std::chrono::duration<double>(*drain_deadline - Clock::now()).count()));
  else if (restart_device >= 0) state = fmt::format("restart due (device {})", restart_device);
  json j = {{"server",
             {{"pid", ::getpid()},
              {"uid", ::geteuid()},
              {"user", user_name(::geteuid())},
              {"backend", backend->name()},
              {"run_dir", options.run_dir.string()},
              {"state", state},
              {"devices", devices},
              {"uptime_s", uptime},
              {"started_unix", static_cast<int64_t>(std::time(nullptr) - static_cast<int64_t>(uptime))},
              {"clients", clients.size()},
              {"defaults", defaults_json()}}},
            {"clients", list},
            {"devices", health_list},
            {"modules",
             {{"cached", cache.entries},
              {"cached_bytes", cache.bytes},
              {"uploads", cache.uploads},
              {"cache_hits", cache.hits},
              {"loads", cache.loads}}},
            {"totals",
             {{"device_memory_bytes", mem},
              {"allocations", allocs},
              {"streams", streams},
              {"events", events},
              {"pinned_bytes", pinned},
              {"pinned_allocations", pinned_allocs},
              {"clients_attached", load(totals.clients_attached)},
              {"clients_detached", load(totals.clients_detached)},
              {"clients_died", load(totals.clients_died)},
              {"clients_terminated", load(totals.clients_terminated)},
              {"bad_commands", load(totals.bad_commands)}}}};
  return to_text(j);
}

std::string Server::Impl::control_answer(const Connection& c, const std::string& verb, const std::string& arg) {
  if (verb == "stats" || verb == "status" || verb == "clients") return stats_json();
  if (verb == "plan") {
    // Also when FUNNEL_SERVER_AFFINITY=off: what the server would do, marked as not applied.
    placement->replan(true);
    return to_text(placement->to_json());
  }
  if (verb == "shutdown") return to_text(shutdown_verb(c, arg));
  if (verb == "terminate") return to_text(terminate_verb(c, arg));
  if (verb == "defaults") return to_text(defaults_verb(c, arg));
  return to_text(error("unknown verb '" + verb + "': use stats, status, clients, plan, terminate, defaults or shutdown"));
}

void Server::Impl::on_control(Connection& c, const ipc::ControlRequest& req) {
  // The request's bytes are the peer's: they reach the answer and the log only as UTF-8.
  const std::string verb = sanitize_text({req.verb, strnlen(req.verb, sizeof req.verb)});
  const std::string arg = sanitize_text({req.arg, strnlen(req.arg, sizeof req.arg)});
  std::string text;
  try {
    text = control_answer(c, verb, arg);
  } catch (const std::exception& e) {
    // No request may stop the server: whatever went wrong is this request's error.
    spdlog::error("control request '{}' of pid {} failed: {}", verb, c.peer.pid, e.what());
    text = to_text(error(fmt::format("{} failed in the server: {}", verb, e.what())));
  }
  if (text.size() > ipc::kMaxControlReply) text = to_text(error("the answer is larger than kMaxControlReply"));
  // One message must fit the socket buffer: a large stats answer would not by default.
  const int buf = static_cast<int>(ipc::kMaxControlReply + 4096);
  ::setsockopt(c.fd.get(), SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  if (!ipc::send_message(c.fd.get(), text.data(), text.size()))
    spdlog::warn("cannot answer the control connection of pid {}: {}", c.peer.pid, std::strerror(errno));
}

}  // namespace funnel::server
