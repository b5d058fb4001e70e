// A client's session: what the server holds for one attached process, and the
// worker thread that reads its ring.  Everything in Worker is touched only by the
// worker thread; the main loop reads only the atomics (counters, flags).
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
// GPU now (Worker::count_in_flight, from when_complete and gpu_marks_slot).
using CallsInFlight = std::array<std::atomic<uint32_t>, ipc::kMaxDevices>;

// Counts one waited call in a CallsInFlight entry for as long as it lives.
class InFlight {
 public:
  InFlight() = default;
  explicit InFlight(std::atomic<uint32_t>& count) noexcept : count_(&count) {
    count.fetch_add(1, std::memory_order_relaxed);
  }
  InFlight(InFlight&& o) noexcept : count_(std::exchange(o.count_, nullptr)) {}
  InFlight& operator=(InFlight&& o) noexcept {
    if (this != &o) {
      release();
      count_ = std::exchange(o.count_, nullptr);
    }
    return *this;
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() { release(); }

 private:
  void release() noexcept {
    if (count_ != nullptr) count_->fetch_sub(1, std::memory_order_relaxed);
    count_ = nullptr;
  }
  std::atomic<uint32_t>* count_ = nullptr;
};

class ModuleCache;
class WorkerGroup;

// Relaxed counters: the stats verb reads them without stopping anyone.
struct ClientCounters {
  std::atomic<uint64_t> device_memory_bytes{0}, allocations{0}, streams{0}, events{0}, pinned_bytes{0},
      pinned_allocations{0}, commands{0}, bytes_h2d{0}, bytes_d2h{0}, errors{0}, launches{0};
  std::atomic<uint64_t> device_memory_peak{0};  // the most device_memory_bytes ever held (funnelctl clients)
  std::atomic<uint64_t> gpu_busy_ns{0};  // GPU time of the client's work (doc/accounting.md says how it is measured)
  std::array<std::atomic<uint64_t>, kPickupBuckets> pickup{};  // waited calls by pick-up delay
  std::array<std::atomic<uint64_t>, kPickupBuckets> submit{};  // and by the worker's time on them
  std::atomic<uint64_t> spin_backoffs{0};  // Worker::back_off: its polling found the core wanted
  // The first command that failed (Worker::fail): opcode << 32 | status; 0: none.  The
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

struct SessionShared {
  uint32_t id = 0;
  pid_t pid = 0;
  int mpi_rank = -1;
  std::string command;
  std::filesystem::path run_dir;
  Backend* backend = nullptr;
  ServerTotals* totals = nullptr;
  std::chrono::microseconds pending_spin = kDefaultPendingSpin;  // ServerOptions::pending_spin
  std::chrono::microseconds idle_spin = kDefaultIdleSpin;        // ServerOptions::idle_spin
  std::chrono::milliseconds spin_backoff = kDefaultSpinBackoff;  // ServerOptions::spin_backoff
  GpuReplies gpu_replies = GpuReplies::Auto;                      // ServerOptions::gpu_replies
  uint32_t launch_batch = kDefaultLaunchBatch;                    // ServerOptions::launch_batch
  ModuleCache* modules = nullptr;  // the server's, shared by every session
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

// Work whose completion someone waits for: a reply, a staging slot, a deferred free.
struct Pending {
  std::vector<std::shared_ptr<BackendEvent>> events;
  uint32_t slot = ipc::kNoReply;
  uint64_t seq = 0;
  std::array<uint64_t, 5> values{};
  bool answered = false;
  // The GPU answers the client itself (ChannelHeader::reply_words_offset): on success the
  // worker answers through the slot as well once it saw the work done (a late store to the
  // word could hide the answer: Worker::finish); on failure it replies as usual.
  bool gpu_reply = false;
  // A GPU-answered call watches no event (one driver call fewer per waited copy): it is done
  // once its reply word holds seq's low half, once the client sent a later call on the slot
  // (it takes a slot again only after it saw the answer), or once `stream` reports idle or a
  // fault, asked only after kWordStreamCheck (worker.cpp; doc/design/channel.md).
  std::shared_ptr<BackendStream> stream;
  std::chrono::steady_clock::time_point since{};
  // Where the GPU stores the answer, and the value that means done: the reply slot's word and
  // seq's low half; or a staging slot's state (Worker::gpu_marks_slot), done once it is no
  // longer `word_value` (InFlight: Ready, or already Free again when the client was quick; Free
  // after a host-to-device chunk, which a quick client may have set InFlight again already: the
  // copy it sends through the slot next settles the entry, settle_reused).
  std::atomic<uint32_t>* word = nullptr;
  uint32_t word_value = 0;
  bool done_when_changed = false;
  InFlight in_flight;  // GpuReplies::Auto: a call the GPU could answer, counted on its device
  // GpuReplies::Auto with another such call on the GPU: `events` holds one recorded before the
  // word's store (a kernel's, Backend::store_word); whichever is seen first answers (the
  // worker replies if the event is).
  bool race = false;
  // The worker must see it complete before its client can go on (Worker::urgent_pending_).
  bool urgent() const noexcept { return !gpu_reply || race; }
  // A device fault took some of the events: the entry completes with this status.
  Status forced = Status::Success;
  // Runs once every event completed (with the first error among them); returns the reply status.
  std::function<Status(Status)> done;
  // Then, on success, fills the reply's values (cudaEventElapsedTime waiting for its events).
  std::function<Status(std::array<uint64_t, 5>&)> fill;
};

struct DeviceAllocation {
  int device;
  uint64_t size;
};

struct EventEntry {
  std::shared_ptr<BackendEvent> event;
  int device;
  bool timing;
  bool recorded = false;
  // The state word the last record stores before the event itself (nullptr: none): once the
  // client saw it, the event counts as complete to the client though the driver may take a
  // few microseconds more to record it (Worker::event_elapsed waits for that).
  const std::atomic<uint32_t>* word = nullptr;
  uint32_t generation = 0;
  bool seen_complete() const {
    return word != nullptr && ipc::generation_reached(word->load(std::memory_order_acquire), generation);
  }
};

struct PinnedEntry {
  ipc::MappedFile file;
  std::filesystem::path path;
  uint64_t size;
};

// A fat binary on its way in (ModuleQuery missed, ModuleData pieces, then ModuleLoad).
struct ModuleUpload {
  ipc::ModuleCmd cmd;
  std::vector<std::byte> bytes;
};

struct KernelEntry {
  std::string name;  // mangled, for the fault log
  uint64_t module_id;
  std::shared_ptr<BackendModule> module;  // declared first: outlives the kernel
  std::unique_ptr<BackendKernel> kernel;
  std::vector<ParamLayout> params;
  uint32_t param_bytes;
};

// A __device__/__constant__ variable this client asked for: copies may use it.
struct SymbolRange {
  uint64_t size;
  uint64_t module_id;
};

// A host function's stream wait: the stream stays held until done_slot holds generation.
struct HostFuncWait {
  uint32_t done_slot;
  uint32_t generation;
};

// Consecutive launches of a client on one stream that the worker holds back while the next
// record is already in the ring, then hands to Backend::launch_batch at once
// (FUNNEL_LAUNCH_BATCH; doc/design/overview.md, "Launch batches").  It never outlives a
// turn, and any other command flushes it first, so the driver sees the same calls in the
// same order, fewer of them.
struct LaunchBatch {
  struct Item {
    ipc::CommandHeader header;  // for a launch's own error, should the batch fail
    KernelEntry* kernel;
    LaunchDesc desc;
    uint32_t offset;  // of its parameter buffer in params
    uint32_t size;
  };
  StreamEntry* stream = nullptr;
  std::vector<Item> items;
  std::vector<std::byte> params;      // the items' parameter buffers, back to back
  std::vector<BatchedLaunch> launches;  // handed to the backend (kept for its capacity)
  bool empty() const noexcept { return items.empty(); }
};

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

 private:
  // worker.cpp: the loop and the dispatch
  void serve();
  void after_stop();  // the ring read to its end for a Detach
  void take_detach(const ipc::DetachCmd& d);  // the client's CPU times; a clean exit
  void execute(const ipc::CommandHeader& h, const std::byte* payload);
  Status dispatch(const ipc::CommandHeader& h, const std::byte* payload);
  void fail(const ipc::CommandHeader& h, Status st);
  void reply(uint32_t slot, uint64_t seq, Status st, const std::array<uint64_t, 5>& values = {});
  void answer(const ipc::CommandHeader& h, const std::array<uint64_t, 5>& values = {});
  void wake_sleeping_client();
  // Wakes client threads asleep on a staging state the GPU or this thread just changed, if any
  // client thread sleeps at all (Completion::client_waiting).
  void wake_staging_sleepers(std::atomic<uint32_t>& word);
  // Answers every completed pending entry; true if any completed.
  bool poll_pending();
  // What poll_pending does with an entry that completed (with `first`, the first error among
  // its events), before it leaves pending_.
  void finish(Pending& p, Status first);
  // Completes the entries whose word the GPU has stored, without asking the driver (an entry
  // still counted in CallsInFlight would make this client's next call look crowded).
  void reap_landed();
  // Queues a completion to watch (when_complete and the like).
  void add_pending(Pending&& p);
  // Takes entry i out of pending_ (the last entry moves into its place).
  Pending take_pending(size_t i);
  // The GPU stored the answer to `p` in its word (Pending::word).
  static bool word_landed(const Pending& p) noexcept;
  // A GPU-answered entry (Pending::stream): whether it is done, and with what (`status`).
  bool word_entry_done(const Pending& p, std::chrono::steady_clock::time_point now, Status& status);
  // The client reused the reply slot or staging slot of `word` (a call on the slot, a copy
  // through the staging slot): a GPU-answered entry still watching it was seen done.
  void settle_reused(const std::atomic<uint32_t>& word);
  // Whether this turn polls the pending entries (poll_throttle_).
  bool pending_due() noexcept;
  void drop_for_protocol_error(const char* why);
  // The failure of a command: counted, logged and reported to the client (fail).
  void failed(const ipc::CommandHeader& h, Status st);
  // Issues the held-back launches (batch_); a no-op when there are none.
  void flush_launches();

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
  // The stream of a command; DevicesUnavailable for a legacy stream of a blocked device.
  StreamEntry* find_stream(const ipc::CommandHeader& h, Status& st);

  // commands.cpp: one function per opcode
  Status mem_alloc(const ipc::CommandHeader& h, const ipc::MemAllocCmd& c, bool async);
  Status mem_free(const ipc::CommandHeader& h, const ipc::AddressCmd& c, bool async);
  Status mem_get_info(const ipc::CommandHeader& h);
  Status pinned_alloc(const ipc::CommandHeader& h, const ipc::PinnedAllocCmd& c);
  Status pinned_free(const ipc::CommandHeader& h, const ipc::PinnedFreeCmd& c);
  Status copy(const ipc::CommandHeader& h, const ipc::CopyCmd& c);
  Status memset(const ipc::CommandHeader& h, const ipc::MemsetCmd& c);
  Status stream_create(const ipc::CommandHeader& h, const ipc::StreamCreateCmd& c);
  Status stream_destroy(const ipc::CommandHeader& h);
  Status stream_synchronize(const ipc::CommandHeader& h);
  Status stream_query(const ipc::CommandHeader& h);
  Status stream_state(StreamEntry& s);  // the driver's query, or Success once the client saw its last word
  Status stream_wait_event(const ipc::CommandHeader& h, const ipc::EventCmd& c);
  Status event_create(const ipc::CommandHeader& h, const ipc::EventCreateCmd& c);
  Status event_destroy(const ipc::CommandHeader& h, const ipc::EventCmd& c);
  Status event_record(const ipc::CommandHeader& h, const ipc::EventRecordCmd& c);
  Status event_synchronize(const ipc::CommandHeader& h, const ipc::EventCmd& c);
  Status event_query(const ipc::CommandHeader& h, const ipc::EventCmd& c);
  Status event_elapsed(const ipc::CommandHeader& h, const ipc::EventPairCmd& c);
  Status device_synchronize(const ipc::CommandHeader& h);
  Status device_reset(const ipc::CommandHeader& h);
  Status limit(const ipc::CommandHeader& h, const ipc::LimitCmd& c, bool set);

  // kernels.cpp: modules, kernels, launches, symbols, host functions
  Status module_query(const ipc::CommandHeader& h, const ipc::ModuleCmd& c);
  Status module_data(const ipc::CommandHeader& h, const ipc::ModuleDataCmd& c);
  Status module_load(const ipc::CommandHeader& h, const ipc::ModuleCmd& c);
  Status module_unload(const ipc::CommandHeader& h, const ipc::ModuleCmd& c);
  Status kernel_get(const ipc::CommandHeader& h, const ipc::KernelGetCmd& c, const std::byte* name);
  Status kernel_params(const ipc::CommandHeader& h, const ipc::KernelParamsCmd& c);
  Status launch(const ipc::CommandHeader& h, const ipc::LaunchCmd& c, const std::byte* params);
  Status symbol_get(const ipc::CommandHeader& h, const ipc::SymbolGetCmd& c, const std::byte* name);
  Status func_get_attributes(const ipc::CommandHeader& h, const ipc::KernelCmd& c);
  Status func_set_attribute(const ipc::CommandHeader& h, const ipc::FuncSetAttributeCmd& c);
  Status occupancy(const ipc::CommandHeader& h, const ipc::OccupancyCmd& c);
  Status occupancy_dynamic_smem(const ipc::CommandHeader& h, const ipc::OccupancyCmd& c);
  Status max_active_clusters(const ipc::CommandHeader& h, const ipc::LaunchCmd& c);
  Status host_func(const ipc::CommandHeader& h, const ipc::HostFuncCmd& c);
  // Answers h with the module now held for module_id.
  Status add_module(const ipc::CommandHeader& h, uint64_t module_id, std::shared_ptr<BackendModule> m);
  KernelEntry* find_kernel(uint64_t id);
  // The kernel `kernel_id` for a command on h.device (InvalidDevice, InvalidResourceHandle).
  Status kernel_on_device(const ipc::CommandHeader& h, uint64_t kernel_id, KernelEntry*& out);
  // Stores every outstanding host function's done word (teardown): no stream stays held.

  // Helpers shared by the commands.
  Status check_device(int device) const;
  // Whether [address, address+extent) lies in one allocation or one symbol of this client.
  bool device_range_ok(uint64_t address, uint64_t extent) const;
  Status resolve_location(const ipc::Location& l, uint64_t pitch, uint64_t width, uint64_t height,
                          CopyEndpoint& out, bool& is_device) const;
  EventEntry* find_event(uint64_t id);
  // An untimed event on `device` recorded on `stream` now, by which the worker watches the
  // stream's work so far; `out` stays empty where it cannot be made or recorded (the status says why).
  Status record_event(int device, BackendStream& stream, std::unique_ptr<BackendEvent>& out);
  // Runs `done` (and answers h's reply slot) once all of this client's work so far on
  // `device` (-1: every device) completed; at once when its streams are idle.
  void when_drained(int device, uint32_t slot, uint64_t seq, std::function<Status(Status)> done);
  // gpu_reply: `done` only keeps the books (nothing the client needs before it goes on), so
  // the stream itself may answer the client (Pending::gpu_reply) where the backend can.
  void when_complete(StreamEntry& s, uint32_t slot, uint64_t seq, std::function<Status(Status)> done,
                     bool gpu_reply = false);
  // GpuReplies::Auto: counts a call the GPU may answer in `p` (Pending::in_flight); whether
  // another such call was on s's device already.
  bool count_in_flight(const StreamEntry& s, Pending& p);
  // Has the GPU store `value` into `word` once s's work so far is done: by a one-thread kernel
  // when `crowded` (Backend::store_word), else (or where the kernel is not available) by the
  // stream write.  False where neither can.
  bool store_answer(StreamEntry& s, std::atomic<uint32_t>& word, uint32_t value, bool crowded);
  // A staged chunk: the GPU stores `state` into staging slot `index` itself where it can (Ready
  // after a device-to-host chunk, so the client copies it out; Free after a host-to-device one,
  // so the client fills the slot again), without waiting for this thread; false where it cannot
  // (GpuReplies::Off, no stream write): when_complete then releases the slot.
  bool gpu_marks_slot(StreamEntry& s, uint32_t index, ipc::StagingState state);
  void release_staging(const ipc::CopyCmd& c);
  void free_allocation(uint64_t address, const DeviceAllocation& a);
  // Every change of allocations_ goes through these: they keep device_used_ (what counts
  // against the client's device-memory limit) equal to the sum of its allocations.
  void remember_allocation(uint64_t address, const DeviceAllocation& a);
  std::map<uint64_t, DeviceAllocation>::iterator forget_allocation(std::map<uint64_t, DeviceAllocation>::iterator it);
  // Whether `size` more bytes on `device` stay within the client's limit there.
  bool within_mem_limit(int device, uint64_t size) const noexcept;
  void free_pinned(PinnedEntry& p);

  // client_session.cpp
  void teardown() noexcept;

  SessionShared& shared_;
  Backend& backend_;
  ipc::ChannelView view_;
  ipc::RingReader reader_;
  ClientCounters& counters_;
  StreamTable streams_;
  std::map<uint64_t, DeviceAllocation> allocations_;  // by base address
  std::array<uint64_t, ipc::kMaxDevices> device_used_{};  // bytes of allocations_ by device
  std::unordered_map<uint64_t, EventEntry> events_;
  std::unordered_map<uint64_t, PinnedEntry> pinned_;
  std::unordered_map<uint64_t, std::shared_ptr<BackendModule>> modules_;  // by client module id
  std::unordered_map<uint64_t, ModuleUpload> uploads_;
  std::unordered_map<uint64_t, KernelEntry> kernels_;  // by client kernel id
  std::map<uint64_t, SymbolRange> symbols_;             // by device address
  std::mutex host_funcs_mutex_;  // the worker, and at a hang-up the watcher and the main thread
  std::vector<HostFuncWait> host_funcs_;
  bool host_funcs_released_ = false;  // the client is gone: every wait is released as it comes
  std::chrono::steady_clock::time_point idle_since_{};  // the last work done (turn)
  std::chrono::steady_clock::time_point no_spin_until_{};  // back_off()
  std::chrono::steady_clock::time_point last_sweep_{};  // the last GPU busy sweep (worker.cpp)
  uint64_t next_pinned_id_ = 1;
  bool stream_limit_logged_ = false;  // the backend's stream limit was reported once
  std::vector<Pending> pending_;
  // Pending entries a client waits on that only this worker can answer (not gpu_reply),
  // counted by add_pending and poll_pending: while there are none the worker need not spin,
  // and polls the others less often (poll_throttle_).
  size_t urgent_pending_ = 0;
  // GPU-answered entries are polled every 20 us (measured on the H100: poll_throttle.hpp).
  PollThrottle poll_throttle_{std::chrono::microseconds(20)};
  std::vector<std::byte> record_;
  // Device faults (device_fault.cpp).
  uint64_t seen_epoch_ = 0;
  Status poisoned_ = Status::Success;               // the sticky error every command now gets
  std::array<bool, ipc::kMaxDevices> poisoned_on_{};  // devices whose fault caught this client
  std::array<bool, ipc::kMaxDevices> blocked_{};      // faulted, not used by this client: DevicesUnavailable
  std::string last_kernel_;                         // name of the last kernel launched
  uint64_t launches_since_sync_ = 0;                // launches since the last completed synchronize
  LaunchBatch batch_;                                // launches held back within a turn
  bool flushing_ = false;                            // in flush_launches
};

}  // namespace funnel::server
