// A client's session: what its worker and the server's main loop share (SessionShared:
// settings, the server's shared parts, counters and flags).  The worker is session/worker.hpp;
// the main loop's handle on the session is session/client_session.hpp.  Everything else of a
// session is the worker thread's alone; the main loop reads only the atomics here.
#pragma once
#include <sys/types.h>

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "funnel/ipc/channel_layout.hpp"
#include "funnel/ipc/commands.hpp"
#include "funnel/ipc/protocol.hpp"
#include "funnel/ipc/ring.hpp"
#include "funnel/ipc/segment.hpp"
#include "funnel/ipc/socket.hpp"
#include "funnel/server/backend.hpp"
#include "funnel/server/server.hpp"
#include "session/counter_ops.hpp"
#include "session/cpu_times.hpp"
#include "loop/device_health.hpp"
#include "session/legacy_stream.hpp"
#include "session/poll_throttle.hpp"
#include "loop/submit_order.hpp"

namespace funnel::server {

// Per device, the waited calls (and staged device-to-host chunks) of every client that are on the
// GPU now (Completions::count_in_flight, from when_complete and gpu_marks_slot).
using CallsInFlight = std::array<std::atomic<uint32_t>, ipc::kMaxDevices>;

class ModuleCache;
class IpcRegistry;
class Mailbox;
class WorkerGroup;

// Relaxed counters: the stats verb reads them without stopping anyone.
struct ClientCounters {
  std::atomic<uint64_t> device_memory_bytes{0}, allocations{0}, streams{0}, events{0}, pinned_bytes{0},
      pinned_allocations{0}, commands{0}, bytes_h2d{0}, bytes_d2h{0}, errors{0}, launches{0};
  // GPU-local messages copied on this client's stream (it posted the second half), and their bytes.
  std::atomic<uint64_t> local_messages{0}, local_bytes{0};
  std::atomic<uint64_t> device_memory_peak{0};  // the most device_memory_bytes ever held (funnelctl clients)
  std::atomic<uint64_t> gpu_busy_ns{0};  // GPU time of the client's work (doc/accounting.md says how it is measured)
  std::array<std::atomic<uint64_t>, kPickupBuckets> pickup{};  // waited calls by pick-up delay
  std::array<std::atomic<uint64_t>, kPickupBuckets> submit{};  // and by the worker's time on them
  std::array<std::atomic<uint64_t>, kOpcodeSlots> waited{};     // and by opcode
  std::atomic<uint64_t> spin_backoffs{0};  // Worker::back_off: its polling found the core wanted
  // The first command that failed (Answers::fail): opcode << 32 | status; 0: none.  The
  // detach line of the log names it, so that a client's errors can be told apart afterwards.
  std::atomic<uint64_t> first_error{0};
  // CPU and run-queue time, final: of the worker's own thread when it stopped (none for a
  // pooled worker, whose thread serves others too), of the client's threads as its Detach reports them.
  CpuTimesCell worker_cpu, client_cpu;
};

struct ServerTotals {
  std::atomic<uint64_t> clients_attached{0}, clients_detached{0}, clients_died{0}, clients_terminated{0},
      bad_commands{0};
};

// How workers poll and answer: ServerOptions's fields of the same names, the same for every
// session of a server.
struct WorkerTuning {
  std::chrono::microseconds pending_spin = kDefaultPendingSpin;
  std::chrono::microseconds idle_spin = kDefaultIdleSpin;
  std::chrono::milliseconds spin_backoff = kDefaultSpinBackoff;
  GpuReplies gpu_replies = GpuReplies::Auto;
  uint32_t launch_batch = kDefaultLaunchBatch;
};

struct SessionShared {
  uint32_t id = 0;
  pid_t pid = 0;
  int mpi_rank = -1;
  std::string command;
  std::filesystem::path run_dir;
  Backend* backend = nullptr;
  ServerTotals* totals = nullptr;
  WorkerTuning tuning;
  ModuleCache* modules = nullptr;  // the server's, shared by every session
  IpcRegistry* ipc = nullptr;      // the server's IPC exports
  Mailbox* mailbox = nullptr;      // the server's GPU-local messages
  DeviceHealth* health = nullptr;  // the server's
  SubmitOrder* submit_order = nullptr;  // the server's; null unless FUNNEL_SUBMIT_ORDER=1
  CallsInFlight* calls_in_flight = nullptr;  // the server's (GpuReplies::Auto)
  // Per device: the fault generation (DeviceHealth::State::generation) whose resources
  // this session has released; the main loop resets a device once every session has.
  std::array<std::atomic<uint64_t>, ipc::kMaxDevices> released_fault{};
  ClientCounters counters;
  std::atomic<bool> stop{false};
  std::atomic<bool> shutting_down{false};  // the server stops: answer waiting replies with DevicesUnavailable
  std::atomic<bool> detached{false};
  // Placement gave this client's worker a core of its own that no rank is bound to
  // (ThreadPlacement::own_core): idle, it polls for pending_spin rather than idle_spin.
  std::atomic<bool> own_core{false};
  std::atomic<bool> finished{false};
  // The channel's driver registration, handed to the worker when it starts: undoing it is
  // its last step, on its own thread, because cuMemHostUnregister may wait for the GPU, and
  // the main loop must never wait on the GPU (a gone client's held streams are released only
  // when the main loop sees its hang-up).
  void* registered = nullptr;
  // The client's FUNNEL_DEVICE_MEM_LIMIT by device (from its hello); 0: no limit.
  std::array<uint64_t, ipc::kMaxDevices> device_mem_limit{};
  // Its FUNNEL_GPU_FRACTION, placement and FUNNEL_CLIENT_PRIORITY (from its hello), and
  // the partitions its streams run in (leases: sm_partitions.hpp).
  StreamPlacement placement;
  std::atomic<pid_t> worker_tid{0};  // the worker thread's, once it runs (placement)
  int client_fd = -1;   // hung up by the worker when the client breaks the ring protocol
  int notify_fd = -1;   // eventfd of the main loop: a worker finished
};

}  // namespace funnel::server
