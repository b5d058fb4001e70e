// Control connections: one request, one JSON answer (funnelctl is the front end).
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "funnel/ipc/protocol.hpp"
#include "server_impl.hpp"

namespace funnel::server {
namespace {

uint64_t load(const std::atomic<uint64_t>& a) noexcept { return a.load(std::memory_order_relaxed); }

std::string bus_id(const ipc::DeviceRecord& r) { return {r.pci_bus_id, strnlen(r.pci_bus_id, sizeof r.pci_bus_id)}; }

}  // namespace

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
    list.push_back({{"id", id},
                    {"pid", s->pid()},
                    {"command", s->command()},
                    {"mpi_rank", s->mpi_rank()},
                    {"device_memory_bytes", load(c.device_memory_bytes)},
                    {"allocations", load(c.allocations)},
                    {"streams", load(c.streams)},
                    {"events", load(c.events)},
                    {"pinned_bytes", load(c.pinned_bytes)},
                    {"pinned_allocations", load(c.pinned_allocations)},
                    {"commands", load(c.commands)},
                    {"bytes_h2d", load(c.bytes_h2d)},
                    {"bytes_d2h", load(c.bytes_d2h)},
                    {"launches", load(c.launches)},
                    {"errors", load(c.errors)},
                    {"sticky_error", s->sticky_error()}});
    mem += load(c.device_memory_bytes);
    allocs += load(c.allocations);
    streams += load(c.streams);
    events += load(c.events);
    pinned += load(c.pinned_bytes);
    pinned_allocs += load(c.pinned_allocations);
  }
  const auto cache = modules->stats();
  const double uptime = std::chrono::duration<double>(Clock::now() - started_at).count();
  json j = {{"server",
             {{"pid", ::getpid()},
              {"backend", backend->name()},
              {"run_dir", options.run_dir.string()},
              {"devices", devices},
              {"uptime_s", uptime},
              {"clients", clients.size()}}},
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
              {"bad_commands", load(totals.bad_commands)}}}};
  return j.dump();
}

void Server::Impl::on_control(Connection& c, const ipc::ControlRequest& req) {
  const std::string verb = req.verb;
  std::string text;
  if (verb == "stats" || verb == "status" || verb == "clients") {
    text = stats_json();
  } else if (verb == "plan") {
    // Also when FUNNEL_SERVER_AFFINITY=off: what the server would do, marked as not applied.
    placement->replan(true);
    text = placement->to_json().dump();
  } else if (verb == "shutdown") {
    spdlog::info("shutdown requested by pid {} (control connection)", c.peer.pid);
    text = nlohmann::json{{"ok", true}, {"pid", ::getpid()}}.dump();
    stopping = true;
  } else {
    text = nlohmann::json{{"error", "unknown verb '" + verb + "': use stats, plan or shutdown"}}.dump();
  }
  if (text.size() > ipc::kMaxControlReply)
    text = nlohmann::json{{"error", "the answer is larger than kMaxControlReply"}}.dump();
  // One message must fit the socket buffer: a large stats answer would not by default.
  const int buf = static_cast<int>(ipc::kMaxControlReply + 4096);
  ::setsockopt(c.fd.get(), SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  if (!ipc::send_message(c.fd.get(), text.data(), text.size()))
    spdlog::warn("cannot answer the control connection of pid {}: {}", c.peer.pid, std::strerror(errno));
}

}  // namespace funnel::server
