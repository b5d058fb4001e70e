// The main loop's handle on one client connection: its handshake phase, its
// channel mapping and its worker thread.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <thread>

#include "funnel/ipc/channel_layout.hpp"
#include "funnel/ipc/protocol.hpp"
#include "funnel/ipc/segment.hpp"
#include "funnel/ipc/socket.hpp"
#include "loop/hangup_watcher.hpp"
#include "session/worker.hpp"
#include "placement/sm_partitions.hpp"
#include "loop/worker_group.hpp"

namespace funnel::server {

struct ChannelSpec {
  ipc::ChannelGeometry geometry;
  std::filesystem::path run_dir;
  Backend* backend = nullptr;
  ServerTotals* totals = nullptr;
  WorkerTuning tuning;
  ModuleCache* modules = nullptr;
  IpcRegistry* ipc = nullptr;
  Mailbox* mailbox = nullptr;
  DeviceHealth* health = nullptr;
  SubmitOrder* submit_order = nullptr;  // the server's; null unless FUNNEL_SUBMIT_ORDER=1
  CallsInFlight* calls_in_flight = nullptr;  // the server's
  SmPartitions* partitions = nullptr;
  std::span<const ipc::DeviceRecord> devices;  // the server's, read once at its start
  int notify_fd = -1;
  HangupWatcher* hangups = nullptr;  // the server's; it outlives every session
  WorkerPool* workers = nullptr;     // FUNNEL_SERVER_WORKERS; null: a worker thread per client
};

class ClientSession {
 public:
  enum class Phase { AwaitMapped, Running };

  ClientSession(uint32_t id, ipc::UniqueFd fd, const ipc::HelloMsg& hello, pid_t peer_pid);
  ~ClientSession();
  ClientSession(const ClientSession&) = delete;
  ClientSession& operator=(const ClientSession&) = delete;

  // Creates and fills channel.<id>.  Throws std::system_error (full /dev/shm) or
  // std::runtime_error; nothing is left behind on failure.
  void create_channel(const ChannelSpec& spec);
  // The client mapped the channel: unlink it and start serving.  home_device: the GPU it
  // starts on (MappedMsg), whose cores its worker runs on.
  void start_worker(int home_device);
  void request_stop(bool server_shutting_down) noexcept;
  // funnelctl terminate: the worker stops without running what is still in the ring, its
  // waiting calls are answered with DevicesUnavailable, and the channel says Terminated (the
  // client reports it and every later call fails); teardown frees what it holds.
  void terminate() noexcept;
  bool terminated() const noexcept { return terminated_; }
  bool finished() const noexcept { return shared_.finished.load(std::memory_order_acquire); }
  void join() noexcept;

  uint32_t id() const noexcept { return shared_.id; }
  int fd() const noexcept { return fd_.get(); }
  Phase phase() const noexcept { return phase_; }
  pid_t pid() const noexcept { return pid_; }
  int mpi_rank() const noexcept { return rank_; }
  int home_device() const noexcept { return home_device_; }
  // The thread that serves the client (its own, or its group's), for placement; valid while
  // phase() is Running and not joined.
  std::thread::native_handle_type worker_thread() noexcept {
    return group_ != nullptr ? group_->thread() : thread_.native_handle();
  }
  pid_t worker_tid() const noexcept {
    return group_ != nullptr ? group_->tid() : shared_.worker_tid.load(std::memory_order_acquire);
  }
  bool has_worker() const noexcept { return thread_.joinable(); }
  bool pooled() const noexcept { return group_ != nullptr; }  // served by a WorkerGroup
  // Completion::worker_on_client_cpus, for placement (while Running).
  void set_worker_on_client_cpus(bool on) noexcept {
    if (channel_) view_.completion().worker_on_client_cpus.store(on ? 1 : 0, std::memory_order_relaxed);
  }
  // SessionShared::own_core, for placement.
  void set_worker_owns_core(bool on) noexcept { shared_.own_core.store(on, std::memory_order_relaxed); }
  const StreamPlacement& stream_placement() const noexcept { return shared_.placement; }
  // The client's device-memory limit on `device` (0: none).
  uint64_t device_mem_limit(int device) const noexcept { return shared_.device_mem_limit[static_cast<size_t>(device)]; }
  std::chrono::steady_clock::time_point attached_at() const noexcept { return attached_at_; }
  // How long create_channel took, and of that the driver's pinning of its staging area (for
  // the attach's log line: a slow attach is a slow first CUDA call).
  std::chrono::steady_clock::duration channel_time() const noexcept { return channel_time_; }
  std::chrono::steady_clock::duration pin_time() const noexcept { return pin_time_; }
  const std::string& command() const noexcept { return command_; }
  const std::string& channel_file() const noexcept { return channel_file_; }
  uint64_t segment_size() const noexcept { return channel_.size(); }
  bool detached() const noexcept { return shared_.detached.load(); }
  const ClientCounters& counters() const noexcept { return shared_.counters; }
  // CPU and run-queue time of the thread that serves the client (none when pooled) and of
  // the client's threads: final once measured (cpu_times.hpp), else read now while it runs.
  std::optional<CpuTimes> worker_cpu() const noexcept;
  std::optional<CpuTimes> client_cpu() const noexcept;
  // The fault generation of `device` whose resources this session no longer holds
  // (DeviceHealth); a session without a running worker holds nothing on any device.
  uint64_t released_fault(int device) const noexcept {
    if (phase_ != Phase::Running || finished()) return UINT64_MAX;
    return shared_.released_fault[static_cast<size_t>(device)].load(std::memory_order_acquire);
  }
  int32_t sticky_error() const noexcept {
    return channel_ ? view_.completion().sticky_error.load(std::memory_order_relaxed) : 0;
  }

 private:
  SessionShared shared_;
  ipc::UniqueFd fd_;
  pid_t pid_;
  int rank_;
  int home_device_ = 0;
  bool terminated_ = false;
  std::chrono::steady_clock::time_point attached_at_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration channel_time_{};
  std::chrono::steady_clock::duration pin_time_{};
  std::string command_;
  std::string channel_file_;
  std::filesystem::path channel_path_;
  ipc::MappedFile channel_;
  ipc::ChannelView view_;
  bool registered_ = false;
  HangupWatcher* hangups_ = nullptr;
  WorkerPool* pool_ = nullptr;
  WorkerGroup* group_ = nullptr;  // the thread that serves this client, when pooled
  // Start of the driver-registered part of the channel: event states, then staging.
  void* registered_base() const noexcept { return view_.base() + view_.header().event_states_offset; }
  Phase phase_ = Phase::AwaitMapped;
  std::unique_ptr<Worker> worker_;
  std::thread thread_;
};

}  // namespace funnel::server
