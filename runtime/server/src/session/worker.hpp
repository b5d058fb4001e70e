// A client's worker: the thread that reads the client's ring, checks each record against
// the command table (funnel/ipc/commands.hpp) and runs its handler.  Its parts, each the
// worker thread's alone: Answers (replies and errors in the channel), Completions (work a
// reply waits for), ClientResources (allocations, pinned buffers, events, symbols),
// ClientKernels (modules and kernels).  A waited copy: Worker::turn -> execute -> dispatch ->
// copy (memory.cpp) -> Backend::copy -> Completions::when_complete; later Worker::turn ->
// Completions::poll -> finish -> Answers::reply.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "funnel/ipc/channel_layout.hpp"
#include "funnel/ipc/commands.hpp"
#include "funnel/ipc/futex.hpp"
#include "funnel/ipc/ring.hpp"
#include "funnel/server/backend.hpp"
#include "session/answers.hpp"
#include "session/completions.hpp"
#include "session/graph_state.hpp"
#include "session/kernel_state.hpp"
#include "session/legacy_stream.hpp"
#include "session/resources.hpp"
#include "session/session.hpp"
#include "session/stream_waits.hpp"

namespace funnel::server {

class WorkerGroup;

class Worker {
 public:
  Worker(SessionShared& shared, const ipc::ChannelView& view);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // The thread body: serve until stop, then tear down.  Never throws.  With a group
  // (FUNNEL_SERVER_WORKERS), the group's thread serves and this one waits for the stop.
  void run(WorkerGroup* group = nullptr) noexcept;

  // The loop in pieces, for a thread that serves several clients (WorkerGroup).
  enum class Turn { Busy, Idle, Stopped };
  // Polls the pending work and executes up to max_records commands: Busy if anything was
  // done, Stopped once the stop flag is set (or the ring was corrupt).
  Turn turn(unsigned max_records);
  // When the last work was done, and how long after it to keep polling before a sleep.
  std::chrono::steady_clock::time_point idle_since() const noexcept { return idle_since_; }
  std::chrono::nanoseconds spin_window() const noexcept;
  // One poll of the spin: a pause in its first microseconds, then sched_yield.  True when
  // that yield let another thread run for long (kWantedCore): the core is wanted.
  static bool poll_pause(std::chrono::nanoseconds idle) noexcept;
  // The core is wanted: no spin for ServerOptions::spin_backoff (counted in spin_backoffs).
  void back_off() noexcept;
  // An idle worker's chores before it sleeps (the busy sweep); how long it may sleep.
  std::chrono::nanoseconds before_sleep();
  // Whether its next sleep is a nap that launches do not interrupt (kQuietNap, worker.cpp).
  bool quiet_nap() const noexcept;
  // ipc::RingReader::arm_sleep / end_sleep of this client's ring.
  bool arm_sleep(ipc::FutexWaitItem& bell) noexcept { return reader_.arm_sleep(bell); }
  void end_sleep() noexcept { reader_.end_sleep(); }
  // Lets every stream held by one of this client's host functions go on (stores each wait's
  // generation).  The main thread calls it the moment the client hangs up: the worker may be
  // blocked in a synchronizing driver call behind such a wait, which only this store frees.
  void release_host_funcs() noexcept;
  // Everything that may hold one of the client's streams for ever once it is gone: its host
  // functions and its stream memory waits.  Any thread.
  void release_holds() noexcept {
    release_host_funcs();
    release_graph_hosts();
    waits_.release();
  }

 private:
  // worker.cpp: the loop and the dispatch
  void serve();
  void after_stop();  // the ring read to its end for a Detach
  void take_detach(const ipc::DetachCmd& d);  // the client's CPU times; a clean exit
  void execute(const ipc::CommandHeader& h, const std::byte* payload);
  Status dispatch(const ipc::CommandHeader& h, const std::byte* payload);
  void drop_for_protocol_error(const char* why);
  // The failure of a command: counted, logged and reported to the client (Answers::fail).
  void failed(const ipc::CommandHeader& h, Status st);

  // device_fault.cpp: a sticky fault of a device (doc/design/faults.md)
  // Reports a sticky status seen on `device` to the server's DeviceHealth.
  void observe(int device, Status st);
  // The health epoch moved: poison this client for each newly faulted device it uses,
  // block the ones it does not use until they recover, unblock recovered ones.
  void on_health_change();
  bool uses_device(int device) const;
  // Answers every pending wait involving `device` with `st` and releases every backend
  // object of the device this client holds.
  void release_device(int device, Status st);
  // A poisoned client's command: answered with its sticky error, staging handed back.
  Status refuse_poisoned(const ipc::CommandHeader& h, const std::byte* payload);
  // The device a failed command ran on (its stream's, its event's, else the header's).
  int command_device(const ipc::CommandHeader& h, const std::byte* payload);

  // The handlers of the command table's rows (funnel/ipc/commands.hpp), called by dispatch
  // with the payload their row names.  worker.cpp:
  Status pad(const ipc::CommandHeader& h);
  Status fence(const ipc::CommandHeader& h);
  Status detach(const ipc::CommandHeader& h, const ipc::DetachCmd& c);
  // memory.cpp: allocations, pinned buffers, copies, memset
  Status mem_alloc(const ipc::CommandHeader& h, const ipc::MemAllocCmd& c) { return allocate(h, c, false); }
  Status mem_alloc_async(const ipc::CommandHeader& h, const ipc::MemAllocCmd& c) { return allocate(h, c, true); }
  Status mem_free(const ipc::CommandHeader& h, const ipc::AddressCmd& c) { return free_memory(h, c, false); }
  Status mem_free_async(const ipc::CommandHeader& h, const ipc::AddressCmd& c) { return free_memory(h, c, true); }
  Status mem_get_info(const ipc::CommandHeader& h);
  Status pinned_alloc(const ipc::CommandHeader& h, const ipc::PinnedAllocCmd& c);
  Status pinned_free(const ipc::CommandHeader& h, const ipc::PinnedFreeCmd& c);
  Status copy(const ipc::CommandHeader& h, const ipc::CopyCmd& c);
  Status memset(const ipc::CommandHeader& h, const ipc::MemsetCmd& c);
  Status free_when_drained(const ipc::CommandHeader& h, std::map<uint64_t, DeviceAllocation>::iterator it);
  Status address_reserve(const ipc::CommandHeader& h, const ipc::AddressReserveCmd& c);
  Status address_free(const ipc::CommandHeader& h, const ipc::AddressRangeCmd& c);
  Status mem_map(const ipc::CommandHeader& h, const ipc::AddressRangeCmd& c);
  Status mem_unmap(const ipc::CommandHeader& h, const ipc::AddressRangeCmd& c);
  Status allocate(const ipc::CommandHeader& h, const ipc::MemAllocCmd& c, bool async);
  Status free_memory(const ipc::CommandHeader& h, const ipc::AddressCmd& c, bool async);
  // streams.cpp: streams, events, the device
  Status stream_create(const ipc::CommandHeader& h, const ipc::StreamCreateCmd& c);
  Status stream_destroy(const ipc::CommandHeader& h);
  Status stream_synchronize(const ipc::CommandHeader& h);
  Status stream_query(const ipc::CommandHeader& h);
  Status stream_state(StreamEntry& s);  // the driver's query, or Success once the client saw its last word
  Status stream_wait_event(const ipc::CommandHeader& h, const ipc::EventCmd& c);
  Status stream_mem_op(const ipc::CommandHeader& h, const ipc::StreamMemOpCmd& c);
  Status stream_attribute(const ipc::CommandHeader& h, const ipc::StreamAttributeCmd& c);
  Status event_create(const ipc::CommandHeader& h, const ipc::EventCreateCmd& c);
  Status event_destroy(const ipc::CommandHeader& h, const ipc::EventCmd& c);
  Status event_record(const ipc::CommandHeader& h, const ipc::EventRecordCmd& c);
  Status event_synchronize(const ipc::CommandHeader& h, const ipc::EventCmd& c);
  Status event_query(const ipc::CommandHeader& h, const ipc::EventCmd& c);
  Status event_elapsed(const ipc::CommandHeader& h, const ipc::EventPairCmd& c);
  Status device_synchronize(const ipc::CommandHeader& h);
  Status device_reset(const ipc::CommandHeader& h);
  Status set_limit(const ipc::CommandHeader& h, const ipc::LimitCmd& c) { return limit(h, c, true); }
  Status get_limit(const ipc::CommandHeader& h, const ipc::LimitCmd& c) { return limit(h, c, false); }
  Status limit(const ipc::CommandHeader& h, const ipc::LimitCmd& c, bool set);
  Status profiler(const ipc::CommandHeader& h, const ipc::ProfilerCmd& c);
  Status reset_persisting_l2(const ipc::CommandHeader& h);
  // Stops the profiled ranges this client left open on `device` (-1: every device).
  void stop_profiling(int device) noexcept;
  // kernels.cpp: modules, kernels, launches, symbols, host functions
  Status module_query(const ipc::CommandHeader& h, const ipc::ModuleCmd& c);
  Status module_data(const ipc::CommandHeader& h, const ipc::ModuleDataCmd& c);
  Status module_load(const ipc::CommandHeader& h, const ipc::ModuleCmd& c);
  Status module_unload(const ipc::CommandHeader& h, const ipc::ModuleCmd& c);
  Status module_managed(const ipc::CommandHeader& h, const ipc::ModuleManagedCmd& c, const std::byte* name);
  // A kModuleHasManaged module: its cubin for h.device's GPU, patched and loaded for this client.
  Status load_managed(const ipc::CommandHeader& h, const ModuleUpload& up, std::shared_ptr<BackendModule>& out);
  Status kernel_get(const ipc::CommandHeader& h, const ipc::KernelGetCmd& c, const std::byte* name);
  Status kernel_params(const ipc::CommandHeader& h, const ipc::KernelParamsCmd& c);
  Status launch(const ipc::CommandHeader& h, const ipc::LaunchCmd& c, const std::byte* params);
  Status symbol_get(const ipc::CommandHeader& h, const ipc::SymbolGetCmd& c, const std::byte* name);
  Status func_get_attributes(const ipc::CommandHeader& h, const ipc::KernelCmd& c);
  Status func_set_attribute(const ipc::CommandHeader& h, const ipc::FuncSetAttributeCmd& c);
  Status occupancy(const ipc::CommandHeader& h, const ipc::OccupancyCmd& c);
  Status occupancy_dynamic_smem(const ipc::CommandHeader& h, const ipc::OccupancyCmd& c);
  Status max_active_clusters(const ipc::CommandHeader& h, const ipc::LaunchCmd& c) { return cluster_query(h, c, false); }
  Status max_cluster_size(const ipc::CommandHeader& h, const ipc::LaunchCmd& c) { return cluster_query(h, c, true); }
  Status cluster_query(const ipc::CommandHeader& h, const ipc::LaunchCmd& c, bool size);
  Status tensor_map_encode(const ipc::CommandHeader& h, const ipc::TensorMapCmd& c);
  Status host_func(const ipc::CommandHeader& h, const ipc::HostFuncCmd& c);
  // graphs.cpp: graph builds, executable graphs, their launches
  Status graph_node(const ipc::CommandHeader& h, const ipc::GraphNodeCmd& c, const std::byte* trailing);
  Status graph_instantiate(const ipc::CommandHeader& h, const ipc::GraphBuildCmd& c);
  Status graph_update(const ipc::CommandHeader& h, const ipc::GraphBuildCmd& c);
  Status graph_launch(const ipc::CommandHeader& h, const ipc::GraphExecCmd& c);
  Status graph_upload(const ipc::CommandHeader& h, const ipc::GraphExecCmd& c);
  Status graph_exec_destroy(const ipc::CommandHeader& h, const ipc::GraphExecCmd& c);
  Status graph_tree(const ipc::CommandHeader& h, const ipc::GraphTreeCmd& c);
  // The nodes of build b fit tree t: each in a live part, each live conditional node once, in its part.
  static Status check_tree_build(const GraphTreeEntry& t, const GraphNodes& b);
  // One node of a build, checked, into `b`.
  Status add_graph_node(GraphNodes& b, const ipc::CommandHeader& h, const ipc::GraphNodeCmd& c,
                        const std::byte* trailing);
  // A finished build taken out of builds (InvalidValue when it is not there whole).
  Status take_build(const ipc::GraphBuildCmd& c, GraphNodes& out);
  // The launch checks a kernel node and a launch share.
  static Status check_launch(const ipc::LaunchCmd& c, const KernelEntry& k);
  // ipc.cpp: IPC memory handles between clients of this server
  Status ipc_export(const ipc::CommandHeader& h, const ipc::AddressCmd& c);
  Status ipc_open(const ipc::CommandHeader& h, const ipc::IpcOpenCmd& c);
  Status ipc_close(const ipc::CommandHeader& h, const ipc::AddressCmd& c);
  Status ipc_export_event(const ipc::CommandHeader& h, const ipc::EventCmd& c);
  Status ipc_open_event(const ipc::CommandHeader& h, const ipc::IpcOpenEventCmd& c);
  Status msg_post(const ipc::CommandHeader& h, const ipc::MsgPostCmd& c);
  Status msg_world(const ipc::CommandHeader& h, const ipc::MsgWorldCmd& c);
  Status msg_probe(const ipc::CommandHeader& h, const ipc::MsgProbeCmd& c);
  // arrays.cpp: arrays, mipmapped arrays, texture and surface objects
  Status array_create(const ipc::CommandHeader& h, const ipc::ArrayCreateCmd& c);
  Status array_destroy(const ipc::CommandHeader& h, const ipc::ArrayCmd& c);
  Status array_level(const ipc::CommandHeader& h, const ipc::ArrayLevelCmd& c);
  Status tex_create(const ipc::CommandHeader& h, const ipc::TexCreateCmd& c);
  Status tex_destroy(const ipc::CommandHeader& h, const ipc::TexCmd& c);
  // Answers h with the module now held for module_id.
  Status add_module(const ipc::CommandHeader& h, uint64_t module_id, std::shared_ptr<BackendModule> m);
  // The kernel `kernel_id` for a command on h.device (InvalidDevice, InvalidResourceHandle).
  Status kernel_on_device(const ipc::CommandHeader& h, uint64_t kernel_id, KernelEntry*& out);
  // Issues the held-back launches (batch_); a no-op when there are none.
  void flush_launches();

  // Checks shared by the handlers.
  Status check_device(int device) const;
  // The stream of a command; DevicesUnavailable for a legacy stream of a blocked device.
  StreamEntry* find_stream(const ipc::CommandHeader& h, Status& st);

  // client_session.cpp
  void teardown() noexcept;

  SessionShared& shared_;
  Backend& backend_;
  ipc::ChannelView view_;
  ipc::RingReader reader_;
  ClientCounters& counters_;
  StreamTable streams_;
  Answers answers_;          // replies, errors, wake-ups
  Completions completions_;  // work a reply waits for
  ClientResources res_;      // allocations, pinned buffers, events, symbols
  ClientKernels kernels_;    // modules and kernels
  ClientGraphs graphs_;      // graph builds and executable graphs
  std::shared_ptr<GraphHostWords> graph_hosts_ = std::make_shared<GraphHostWords>();
  // Starts the thread that answers a gone client's graph host nodes (GraphHostWords); any thread.
  void release_graph_hosts() noexcept;
  std::mutex host_funcs_mutex_;  // the worker, and at a hang-up the watcher and the main thread
  std::vector<HostFuncWait> host_funcs_;
  bool host_funcs_released_ = false;  // the client is gone: every wait is released as it comes
  StreamWaits waits_{backend_};       // cuStreamWaitValue*: released as the host functions are
  std::chrono::steady_clock::time_point idle_since_{};  // the last work done (turn)
  std::chrono::steady_clock::time_point no_spin_until_{};  // back_off()
  std::chrono::steady_clock::time_point last_message_{};   // the last GPU-local message half (spin_window)
  std::chrono::steady_clock::time_point last_sweep_{};  // the last GPU busy sweep (worker.cpp)
  bool stream_limit_logged_ = false;  // the backend's stream limit was reported once
  std::vector<std::byte> record_;
  // Device faults (device_fault.cpp).
  uint64_t seen_epoch_ = 0;
  Status poisoned_ = Status::Success;               // the sticky error every command now gets
  std::array<bool, ipc::kMaxDevices> poisoned_on_{};  // devices whose fault caught this client
  std::array<bool, ipc::kMaxDevices> blocked_{};      // faulted, not used by this client: DevicesUnavailable
  std::array<bool, ipc::kMaxDevices> profiling_{};    // this client's profiled range is open (cudaProfilerStart)
  std::string last_kernel_;                         // name of the last kernel launched
  uint64_t launches_since_sync_ = 0;                // launches since the last completed synchronize
  LaunchBatch batch_;                                // launches held back within a turn
  bool flushing_ = false;                            // in flush_launches
};

}  // namespace funnel::server
