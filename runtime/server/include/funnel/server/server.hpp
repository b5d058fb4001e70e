// The node-local funnel-server: one listening socket, one worker thread per client (or
// ServerOptions::worker_threads per GPU, each serving several clients).
// run() is the epoll loop; request_stop() may be called from any thread (tests,
// the control verb `shutdown`), SIGTERM/SIGINT do the same when handle_signals is set.
// After a GPU fault the backend cannot recover in this process, run() returns
// RestartToRecover and the caller re-executes the server (doc/design/faults.md).
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "funnel/common/config.hpp"
#include "funnel/server/backend.hpp"

namespace funnel::server {

// The defaults of FUNNEL_SERVER_SPIN_US, FUNNEL_SERVER_IDLE_SPIN_US,
// FUNNEL_SERVER_SPIN_BACKOFF_MS and FUNNEL_LAUNCH_BATCH, and the latter's largest value
// (runtime/common's setting_defaults.hpp, which setting_table() uses too).
inline constexpr std::chrono::microseconds kDefaultPendingSpin{setting_default::kServerSpinUs};
inline constexpr std::chrono::microseconds kDefaultIdleSpin{setting_default::kServerIdleSpinUs};
inline constexpr std::chrono::milliseconds kDefaultSpinBackoff{setting_default::kServerSpinBackoffMs};
inline constexpr uint32_t kDefaultLaunchBatch = setting_default::kLaunchBatch;
inline constexpr uint32_t kMaxLaunchBatch = setting_default::kLaunchBatchMax;

struct ServerOptions {
  std::filesystem::path run_dir;
  std::optional<std::chrono::milliseconds> idle_exit;  // absent: run until stopped
  uint32_t max_clients = 256;
  uint32_t staging_slots = 4;
  uint64_t staging_slot_bytes = 2u << 20;
  uint64_t ring_capacity = 1u << 20;
  uint32_t reply_slots = 64;
  // How long a client's worker keeps polling its pending GPU work (with sched_yield past
  // the first 20 us) before it polls every 50 us instead (FUNNEL_SERVER_SPIN_US).
  std::chrono::microseconds pending_spin = kDefaultPendingSpin;
  // How long a worker with nothing pending polls its empty ring (pause, then sched_yield)
  // before it sleeps on the doorbell, which the client's next command then has to wake
  // (FUNNEL_SERVER_IDLE_SPIN_US).
  std::chrono::microseconds idle_spin = kDefaultIdleSpin;
  // How long a worker stops polling (both spins above) once a sched_yield of its polling let
  // another thread run for long: its core is wanted (FUNNEL_SERVER_SPIN_BACKOFF_MS; 0: never).
  std::chrono::milliseconds spin_backoff = kDefaultSpinBackoff;
  // Worker threads per GPU, each serving several clients (FUNNEL_SERVER_WORKERS); 0: one
  // worker thread per client.
  uint32_t worker_threads = 0;
  // Whether the GPU answers synchronous copies and stream synchronisations itself, by a
  // stream memory write into the client's reply word (FUNNEL_GPU_REPLIES).
  GpuReplies gpu_replies = GpuReplies::Auto;
  // Workers on cores of their own take waited copies to the driver in turn
  // (FUNNEL_SUBMIT_ORDER; runtime/server/src/loop/submit_order.hpp); off by default.
  bool submit_order = false;
  // The most consecutive launches on one stream that a worker issues together (one CUDA
  // graph launch) when they are in the ring at once (FUNNEL_LAUNCH_BATCH); 0 or 1: none.
  uint32_t launch_batch = kDefaultLaunchBatch;
  // A connection that sends no hello (or a control peer no request) within this long is
  // closed: idle connections must not hold the server's descriptors.
  std::chrono::milliseconds hello_timeout{10000};
  bool handle_signals = false;  // SIGTERM/SIGINT through a signalfd (the caller blocked them)
  // A listening socket bound to the run directory's socket, inherited from the server that
  // re-executed itself after a GPU fault (funnel-server --listen-fd); start() checks it and
  // takes it over.  -1: bind a new socket.
  int inherited_listen_fd = -1;
  // Pin the server's threads near their GPUs and away from the clients' CPUs, re-planned as
  // clients come and go (doc/placement.md; FUNNEL_SERVER_AFFINITY).  Off by default for a
  // Server inside another program (tests); funnel-server turns it on.
  bool thread_affinity = false;
  // Where ranks are bound to every core: a client's worker shares its rank's CPUs (true,
  // FUNNEL_SERVER_AFFINITY=auto), or every core near its GPU (false, =gpu).
  bool worker_follows_rank = true;
  // Where a stopping server writes its job report (doc/accounting.md; funnel-server: the log
  // directory unless FUNNEL_JOB_REPORT=0).  Empty: no report, and no record of clients kept.
  std::filesystem::path job_report_dir;
};

// Why run() returned.
enum class RunOutcome {
  Stopped,  // request_stop(), a signal, or idle: the run directory's files are removed
  // A device faulted that the backend cannot reset in this process, and every client has
  // left.  The listening socket (listening_socket()) and the run directory's files stay,
  // so that connecting clients wait in the socket's backlog: re-execute the server with
  // the socket inherited, or destroy the Server to remove the files as a stop does.
  RestartToRecover,
};

// A second live server for the same run directory: the caller exits 1.
class AlreadyRunning : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Server {
 public:
  Server(ServerOptions options, std::unique_ptr<Backend> backend);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Prepares the run directory (removing a stale one's files) and listens, or takes over
  // options.inherited_listen_fd.  Throws AlreadyRunning or std::exception with a message
  // that says what to do.
  void start();
  // Serves until stopped or idle (tears every client down and removes the files), or
  // until a restart is due (see RunOutcome).
  RunOutcome run();
  void request_stop() noexcept;

  const std::filesystem::path& run_dir() const noexcept;
  // The listening socket; -1 before start() and after a stop.
  int listening_socket() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace funnel::server
