// The server's state, shared by the files that make up the main loop
// (server.cpp: epoll loop and shutdown; listener.cpp: run directory, accept and
// handshake; control.cpp: control verbs).  Only the main-loop thread touches it.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "session/ipc_registry.hpp"
#include "session/mailbox.hpp"
#include "session/client_session.hpp"
#include "loop/device_health.hpp"
#include "funnel/ipc/socket.hpp"
#include "funnel/server/server.hpp"
#include "control/job_report.hpp"
#include "session/module_cache.hpp"
#include "session/worker.hpp"
#include "placement/thread_placement.hpp"

namespace funnel::server {

using Clock = std::chrono::steady_clock;

// A connection that has not said who it is yet, or a control connection.
struct Connection {
  enum class Phase { AwaitHello, AwaitRequest };
  ipc::UniqueFd fd;
  ipc::PeerCredentials peer{};
  Phase phase = Phase::AwaitHello;
  // A connection that has not attached (or asked its question) within
  // ServerOptions::hello_timeout of this is closed.
  std::chrono::steady_clock::time_point accepted_at;
};

// Descriptors a new client must leave free (the driver, the job report, control peers); an
// eighth of the limit where that is less.
inline constexpr size_t kDescriptorReserve = 32;
// How long the server stops accepting when it is out of descriptors and has no spare one.
inline constexpr std::chrono::milliseconds kAcceptPause{100};

struct Server::Impl {
  ServerOptions options;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ModuleCache> modules;  // after the backend: its modules go first
  std::unique_ptr<IpcRegistry> ipc;      // after the backend: memory it still holds goes first
  std::unique_ptr<Mailbox> mailbox;      // GPU-local messages between clients; before the clients: its events outlive theirs
  std::unique_ptr<SmPartitions> partitions;  // before the clients: their leases go first
  // Before the clients (it outlives them): releases a gone client's held streams without the
  // main loop, which a driver call can hold up (hangup_watcher.hpp).
  std::unique_ptr<HangupWatcher> hangups = std::make_unique<HangupWatcher>();
  // Before the clients (their sessions hand their workers to its threads); null: a worker
  // thread per client (FUNNEL_SERVER_WORKERS=0).
  std::unique_ptr<WorkerPool> worker_pool;
  // Every device's name, bus id and attributes, read once at start: each client's channel
  // gets a copy, the stats the bus ids (funnelctl plan).
  std::vector<ipc::DeviceRecord> device_records;
  std::unique_ptr<ThreadPlacement> placement;  // from start()
  ipc::UniqueFd listen_fd, epoll_fd, wake_fd, notify_fd, signal_fd;
  // Held open to be given up when the server is out of descriptors, so that it can still
  // accept a waiting peer and tell it why it is refused (accept_connections).
  ipc::UniqueFd spare_fd;
  uint64_t refused_for_descriptors = 0;  // in the current shortage; 0: none
  std::optional<Clock::time_point> accept_paused_until;  // set: the listening socket is unwatched
  ServerTotals totals;
  DeviceHealth health;  // read by every worker
  SubmitOrder submit_order;  // taken by workers on cores of their own
  CallsInFlight calls_in_flight{};  // every session's waited calls on each GPU (GpuReplies::Auto)
  // Per device: the fault generation whose reset failed (not retried: restart the server).
  std::array<uint64_t, ipc::kMaxDevices> reset_failed{};
  // Per device: the fault generation that only a restart recovers (the backend cannot reset
  // in process).  restart_device: the first such device, -1 while none.
  std::array<uint64_t, ipc::kMaxDevices> awaiting_restart{};
  int restart_device = -1;
  std::map<int, Connection> connections;                      // by fd
  std::map<uint32_t, std::unique_ptr<ClientSession>> clients;  // by client id
  std::map<int, uint32_t> client_by_fd;
  uint32_t next_client_id = 1;
  Clock::time_point started_at = Clock::now();
  std::chrono::system_clock::time_point started_wall = std::chrono::system_clock::now();  // the job report's
  // The clients that left, for the job report (only while options.job_report_dir is set).
  ClientLedger departed;
  Clock::time_point idle_since = Clock::now();
  bool listening = false;
  bool stopping = false;
  // A graceful shutdown (funnelctl shutdown): no new clients; the server stops once the
  // attached ones have left, or at the deadline (then as --force does).
  std::optional<Clock::time_point> drain_deadline;
  // funnelctl defaults: applied to clients attaching later that did not set their own.
  struct ClientDefaults {
    uint32_t share_bp = 0;    // FUNNEL_GPU_FRACTION in 1/10000; 0: none
    uint64_t mem_limit = 0;   // bytes on every device; 0: none
    bool below_normal = false;  // FUNNEL_CLIENT_PRIORITY=below-normal
  } defaults;

  // listener.cpp
  void prepare_run_dir();
  // Takes over options.inherited_listen_fd after checking that it listens on this run
  // directory's socket.
  void adopt_listener();
  void accept_connections();
  // Out of descriptors (EMFILE/ENFILE): accepts one waiting connection with the spare
  // descriptor and answers it why it is refused; false when there was none to accept or no
  // spare descriptor.
  bool shed_one_connection(int err);
  std::string descriptor_shortage(int err) const;
  void pause_accepting(int err);
  void resume_accepting();
  // Closes the connections older than options.hello_timeout that never attached.
  void expire_connections();
  // When the run loop must look again: the first connection's timeout or the end of a pause.
  std::optional<Clock::time_point> next_connection_deadline() const;
  static size_t descriptors_in_use();
  void on_connection(int fd);
  void on_hello(Connection& c, const ipc::HelloMsg& hello);
  void attach(Connection& c, const ipc::HelloMsg& hello);
  void on_client_message(ClientSession& s);
  void remove_stale_files();

  // control.cpp
  // Answers one request; never throws (an exception becomes the request's error answer).
  void on_control(Connection& c, const ipc::ControlRequest& req);
  std::string control_answer(const Connection& c, const std::string& verb, const std::string& arg);
  std::string stats_json() const;
  nlohmann::json shutdown_verb(const Connection& c, const std::string& arg);
  nlohmann::json terminate_verb(const Connection& c, const std::string& arg);
  nlohmann::json defaults_verb(const Connection& c, const std::string& arg);
  nlohmann::json defaults_json() const;
  // The hello with the defaults filled in where the client set nothing.
  ipc::HelloMsg with_defaults(const ipc::HelloMsg& hello) const;

  // server.cpp
  // One event of a connection, a client's socket or the listening socket, under the one
  // boundary that keeps a peer's request from stopping the server: an exception is logged
  // and costs only that peer its connection.
  void serve(int fd);
  // Runs fn; logs and returns false when it throws.
  static bool guarded(const char* what, const std::function<void()>& fn) noexcept;
  void watch(int fd);
  void unwatch(int fd);
  void reap_finished();
  // Resets each faulted device that no session holds anything of any more, or, where the
  // backend cannot, stops accepting until every client has left and run() returns
  // RestartToRecover.
  void recover_devices();
  void await_restart(int device, const DeviceHealth::State& s);
  bool restart_due() const noexcept { return restart_device >= 0 && clients.empty() && !stopping; }
  void drop_client(uint32_t id);
  // Keeps the client's final record for the job report (a no-op without one).
  void remember(const ClientSession& s, ClientEnd how);
  // Writes the job report (shutdown_all, once every worker is joined; doc/accounting.md).
  void write_report();
  // Re-plans where the server's threads run and binds them (doc/placement.md).
  void place_threads();
  void shutdown_all();
};

}  // namespace funnel::server
