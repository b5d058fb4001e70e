// The worker loop: copy each record out of the ring, validate it, execute it, and
// poll the work other commands wait for.  The worker never blocks on GPU work, so a
// long kernel of one stream never stops it from reading the ring.
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>

#include <spdlog/spdlog.h>

#include "funnel/ipc/futex.hpp"
#include "session/session.hpp"
#include "loop/worker_group.hpp"

namespace funnel::server {
namespace {

using Clock = std::chrono::steady_clock;
// Spinning on an empty ring for ServerOptions::idle_spin (50 us by default) catches the
// next command of a chatty client without a futex round trip; after it, sleep on the
// doorbell.
constexpr auto kSleep = std::chrono::milliseconds(20);
// While GPU work is pending, keep spinning (polling completions) until nothing has
// progressed for ServerOptions::pending_spin (2 ms by default): a synchronous copy or a
// staging pipeline completes every few tens of microseconds, and a sleep there costs its
// whole length in latency (a 200 us poll interval halved pinned-copy bandwidth at 16 MiB
// on the H100).  Past that, the work is long (a long kernel or copy), and polling every
// kPendingSleep costs it little.
constexpr auto kPendingSleep = std::chrono::microseconds(50);
constexpr auto kPauseSpin = std::chrono::microseconds(20);
// A sched_yield of the spin that returns this late let another thread run: on a node whose
// cores are all busy (16 ranks busy-waiting in MPI on 16 cores), each poll takes the core
// from a rank for a slice and the worker waits its turn like any thread, so the spin costs
// the ranks and does not even answer sooner.  Such a worker backs off (ServerOptions::
// spin_backoff): measured on the H100 with the stencil at 16 ranks, the workers' run-queue
// time fell from 2-3x their CPU time to a third of it (doc/performance.md).  A yield with no
// one else runnable returns in about a microsecond; one to a thread that busy-waits without
// yielding (an MPI rank) returns after that thread's time slice, 0.75 ms or more.  In
// between lie yields to threads that poll politely: a client's wait pauses up to 20 us before
// it yields back (ipc::spin_until), and a client woken by this worker tends to be placed on
// its core.  20 us here made membench's pageable copies, whose worker polls the staging
// copies, back off on an idle node and run 7-14x slower; so the bar is well above that.
constexpr auto kWantedCore = std::chrono::microseconds(200);
// A worker on its client's own core (doc/placement.md, "Workers with their ranks"), or one
// backing off because its core is wanted (spin_backoff), that goes to sleep within
// kNapWindow of its last command naps for at most kQuietNap, and the client does not wake
// it for a kernel launch (ipc::kConsumerNapping): a woken worker takes a rank's core at
// once, so each launch cost the rank two context switches and the worker's driver call
// (measured on the H100, stencil at 16 bound ranks: 6 launches took 26-47 us of the rank's
// time, MPS 18-25 us; napping, 3.3-4.2 us).  The launches then go out together at the
// client's next other record, or at the latest when the nap ends.
constexpr auto kQuietNap = std::chrono::microseconds(200);
constexpr auto kNapWindow = std::chrono::milliseconds(20);
// A GPU-answered entry (Pending::stream) whose reply word is not there yet asks the driver
// whether its stream faulted (or drained for a client that moved on) only once it is this old:
// a fault of such a wait is seen up to this late, and waits shorter than it cost no driver call.
constexpr auto kWordStreamCheck = std::chrono::milliseconds(1);
// The longest an idle worker sleeps while one of its streams has an open busy span
// (doc/accounting.md: the bound on how late such a span closes).
constexpr auto kBusySweep = std::chrono::milliseconds(1);

template <class T>
T payload_as(const std::byte* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The bytes that follow the fixed payload of KernelGet, Launch and SymbolGet (read from
// the copied record, whose fixed payload the caller checked is there); nullopt past the
// protocol's limit.
std::optional<uint64_t> trailing_bytes(ipc::Opcode op, const std::byte* payload) noexcept {
  switch (op) {
    case ipc::Opcode::KernelGet: {
      const auto n = payload_as<ipc::KernelGetCmd>(payload).name_bytes;
      return n <= ipc::kMaxNameBytes ? std::optional<uint64_t>(n) : std::nullopt;
    }
    case ipc::Opcode::SymbolGet: {
      const auto n = payload_as<ipc::SymbolGetCmd>(payload).name_bytes;
      return n <= ipc::kMaxNameBytes ? std::optional<uint64_t>(n) : std::nullopt;
    }
    case ipc::Opcode::Launch: {
      const auto n = payload_as<ipc::LaunchCmd>(payload).param_bytes;
      return n <= ipc::kMaxParamBytes ? std::optional<uint64_t>(n) : std::nullopt;
    }
    default:
      return 0;
  }
}

}  // namespace

Worker::Worker(SessionShared& shared, const ipc::ChannelView& view)
    : shared_(shared), backend_(*shared.backend), view_(view), reader_(view), counters_(shared.counters),
      streams_(*shared.backend, shared.placement, shared.counters.gpu_busy_ns), record_(ipc::kMaxRecordSize) {}

Worker::~Worker() = default;

void Worker::run(WorkerGroup* group) noexcept {
  shared_.worker_tid.store(::gettid(), std::memory_order_release);
  try {
    if (group != nullptr)
      group->serve(*this);  // on the group's thread; back here once stopped
    else
      serve();
    after_stop();
    if (group == nullptr) counters_.worker_cpu.store(own_cpu_times());
  } catch (const std::exception& e) {
    spdlog::error("client {}: worker failed: {}", shared_.id, e.what());
    view_.completion().sticky_error.store(static_cast<int32_t>(Status::Unknown), std::memory_order_release);
    ::shutdown(shared_.client_fd, SHUT_RDWR);
  }
  teardown();
  if (shared_.registered != nullptr) {
    backend_.host_unregister(shared_.registered);
    shared_.registered = nullptr;
  }
  shared_.finished.store(true, std::memory_order_release);
  const uint64_t one = 1;
  // The main loop reaps finished sessions when its eventfd fires; a lost wake-up would
  // only delay the reaping until the next event, so the result needs no handling.
  [[maybe_unused]] const ssize_t n = ::write(shared_.notify_fd, &one, sizeof one);
}

void Worker::serve() {
  idle_since_ = Clock::now();
  for (;;) {
    // One record a turn: the stop flag, the health epoch and the pending work are looked
    // at between any two commands.
    const Turn t = turn(1);
    if (t == Turn::Stopped) return;
    if (t == Turn::Busy) continue;
    const auto idle = Clock::now() - idle_since_;
    if (idle < spin_window()) {
      if (poll_pause(idle)) back_off();
      continue;
    }
    auto timeout = before_sleep();
    const bool nap = quiet_nap();
    if (nap) timeout = std::min<std::chrono::nanoseconds>(timeout, kQuietNap);
    reader_.sleep(timeout, nap);
  }
}

bool Worker::quiet_nap() const noexcept {
  const auto now = Clock::now();
  if (now - idle_since_ >= kNapWindow) return false;
  // Its core is its client's (placement), or another thread wanted the core it polled on
  // (back_off(): unbound ranks, or ranks bound to a whole socket, on every core): either
  // way a woken worker takes a core from a rank.  worker_on_client_cpus is written by the
  // server only; a client that changes it only changes how soon its own launches are read.
  return view_.completion().worker_on_client_cpus.load(std::memory_order_relaxed) != 0 || now < no_spin_until_;
}

Worker::Turn Worker::turn(unsigned max_records) {
  if (shared_.stop.load(std::memory_order_acquire)) return Turn::Stopped;
  // One relaxed load per turn: a device fault or recovery anywhere changes it.
  const DeviceHealth& health = *shared_.health;
  if (health.epoch() != seen_epoch_) on_health_change();
  bool busy = pending_due() && poll_pending();
  // Held-back launches (batch_) do not count: while some are held, the turn reads on until
  // the ring is empty or a record that is not one of them flushes them (a batch is full
  // after at most FUNNEL_LAUNCH_BATCH records).
  for (unsigned i = 0; i < max_records || !batch_.empty(); ++i) {
    uint32_t size = 0;
    const char* why = nullptr;
    const auto next = reader_.next(record_.data(), size, &why);
    if (next == ipc::RingReader::Next::Empty) break;
    if (next == ipc::RingReader::Next::Corrupt) {
      flush_launches();
      drop_for_protocol_error(why);
      return Turn::Stopped;
    }
    // Again after the record: a command sent after a recovery the client saw must
    // see it too (the ring read orders this load after the client's write).
    if (health.epoch() != seen_epoch_) {
      flush_launches();
      on_health_change();
    }
    ipc::CommandHeader h;
    std::memcpy(&h, record_.data(), sizeof h);
    // A call its client waits for: how long it lay in the ring, and how long this thread
    // took to issue it (doc/accounting.md).
    const bool waited = h.reply_slot != ipc::kNoReply;
    Clock::time_point picked_up{};
    if (waited) {
      bump(counters_.pickup[pickup_bucket(static_cast<uint16_t>(ipc::monotonic_us16() - h.posted_us))], 1);
      picked_up = Clock::now();
    }
    {
      // A waited copy (or a waited call behind held-back launches) of a worker on a core of
      // its own goes to the driver in its turn (submit_order.hpp).
      const bool in_order = waited && shared_.submit_order != nullptr &&
                            shared_.own_core.load(std::memory_order_relaxed) &&
                            (h.opcode == ipc::Opcode::Copy || !batch_.empty());
      const SubmitOrder::Turn t = in_order ? shared_.submit_order->take(h.device) : SubmitOrder::Turn();
      execute(h, record_.data() + sizeof h);
    }
    if (waited) {
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - picked_up).count();
      bump(counters_.submit[time_bucket(static_cast<uint64_t>(us))], 1);
    }
    bump(counters_.commands, 1);
    busy = true;
    if (shared_.stop.load(std::memory_order_acquire)) break;  // a Detach: the next turn stops
  }
  flush_launches();  // the ring has no more of them now: they go
  if (busy) idle_since_ = Clock::now();
  return busy ? Turn::Busy : Turn::Idle;
}

std::chrono::nanoseconds Worker::spin_window() const noexcept {
  if (no_spin_until_ != Clock::time_point{} && Clock::now() < no_spin_until_) return {};
  // Work the GPU answers itself (gpu_reply) needs this thread only to wake a client that
  // went to sleep: it is polled every kPendingSleep, not spun on.
  const bool urgent = !pending_.empty() && urgent_pending_ != 0;
  // A worker alone on a core that no rank is bound to takes nothing from anyone by polling:
  // it polls as long idle as with work pending, so that its client's next call after an MPI
  // exchange (a few hundred microseconds) finds it awake rather than waking it (16-32 us on
  // the H100 machine).
  const bool own_core = shared_.own_core.load(std::memory_order_relaxed);
  return urgent || own_core ? std::chrono::nanoseconds(shared_.pending_spin)
                            : std::chrono::nanoseconds(shared_.idle_spin);
}

bool Worker::poll_pause(std::chrono::nanoseconds idle) noexcept {
  // Past the first microseconds, poll with sched_yield: when the node's cores are all
  // busy (16 ranks on 16 cores, each with a worker here), a pause loop would hold a
  // core for the whole pending spin that the ranks need.
  if (idle < kPauseSpin) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    return false;
  }
  const auto before = Clock::now();
  ipc::yield_now();
  return Clock::now() - before > kWantedCore;
}

void Worker::back_off() noexcept {
  if (shared_.spin_backoff.count() == 0) return;
  no_spin_until_ = Clock::now() + shared_.spin_backoff;
  bump(counters_.spin_backoffs, 1);
}

std::chrono::nanoseconds Worker::before_sleep() {
  // Idle: a stream with an open busy span that has drained ends its span now.  While some
  // stay open, sleep at most kBusySweep, so a span ends at most that late.
  // At most one sweep per kBusySweep: the queries take driver locks that the other
  // workers' launches want (16 clients of small kernels: measured 0.92x without the limit).
  if (streams_.open_spans() != 0 && Clock::now() - last_sweep_ >= kBusySweep) {
    streams_.sweep_busy(-1, false);
    last_sweep_ = Clock::now();
  }
  auto nap = pending_.empty() ? std::chrono::nanoseconds(kSleep) : std::chrono::nanoseconds(kPendingSleep);
  if (streams_.open_spans() != 0) nap = std::min<std::chrono::nanoseconds>(nap, kBusySweep);
  return nap;
}

void Worker::after_stop() {
  // Stopped by a hang-up: a Detach still in the ring tells a clean exit from a death.
  for (;;) {
    uint32_t size = 0;
    const char* why = nullptr;
    if (reader_.next(record_.data(), size, &why) != ipc::RingReader::Next::Record) break;
    ipc::CommandHeader h;
    std::memcpy(&h, record_.data(), sizeof h);
    if (h.opcode == ipc::Opcode::Detach && size >= sizeof h + sizeof(ipc::DetachCmd))
      take_detach(payload_as<ipc::DetachCmd>(record_.data() + sizeof h));
  }
}

void Worker::take_detach(const ipc::DetachCmd& d) {
  // The client's own report of its threads' CPU times (it may be gone by now); a value out
  // of range is dropped, not trusted.
  if (d.run_ns < ipc::kMaxCpuTimeNs && d.wait_ns < ipc::kMaxCpuTimeNs)
    counters_.client_cpu.store(CpuTimes{d.run_ns, d.wait_ns});
  else if (d.run_ns != ipc::kNoCpuTime || d.wait_ns != ipc::kNoCpuTime)
    spdlog::warn("client {}: Detach reports CPU times out of range ({} ns, {} ns); not kept", shared_.id, d.run_ns,
                 d.wait_ns);
  shared_.detached.store(true);
}

void Worker::drop_for_protocol_error(const char* why) {
  spdlog::error("client {}: broke the ring protocol ({}); dropping it", shared_.id, why);
  view_.completion().sticky_error.store(static_cast<int32_t>(Status::IllegalState), std::memory_order_release);
  add(shared_.totals->bad_commands, 1);
  add(counters_.errors, 1);
  shared_.stop.store(true);
  // The hang-up tells the client; the main loop sees it too and reaps this session.
  ::shutdown(shared_.client_fd, SHUT_RDWR);
}

void Worker::execute(const ipc::CommandHeader& h, const std::byte* payload) {
  // Only a one-way launch may join the held-back ones (Worker::launch decides); anything else
  // runs after them.  (A refused command reports through failed(), which flushes too.)
  if (!batch_.empty() && (h.opcode != ipc::Opcode::Launch || h.reply_slot != ipc::kNoReply)) flush_launches();
  const auto op = static_cast<uint16_t>(h.opcode);
  if (h.reply_slot != ipc::kNoReply && h.reply_slot >= view_.header().reply_slots) {
    spdlog::warn("client {}: command {} seq {} names reply slot {} of {}", shared_.id, op, h.seq, h.reply_slot,
                 view_.header().reply_slots);
    ipc::CommandHeader one_way = h;
    one_way.reply_slot = ipc::kNoReply;
    add(shared_.totals->bad_commands, 1);
    fail(one_way, Status::InvalidValue);
    return;
  }
  if (h.reply_slot != ipc::kNoReply && !pending_.empty()) settle_reused(view_.reply_word(h.reply_slot));
  // A client caught by a device fault gets its sticky error for everything but Detach;
  // a sticky status from the backend is a fault of the device the command ran on.
  const auto run = [&] {
    if (poisoned_ != Status::Success && h.opcode != ipc::Opcode::Detach) return refuse_poisoned(h, payload);
    const Status r = dispatch(h, payload);
    if (ipc::is_sticky(r)) observe(command_device(h, payload), r);
    return r;
  };
  // FUNNEL_LOG_LEVEL=trace: every command, to follow a client's calls in the log.
  spdlog::trace("client {}: command {} seq {} slot {} device {} stream {}", shared_.id, op, h.seq,
                static_cast<int64_t>(h.reply_slot == ipc::kNoReply ? -1 : h.reply_slot), h.device, h.stream);
  Status st;
  const int64_t want = ipc::payload_size(h.opcode);
  if (want < 0) {
    st = Status::NotSupported;
  } else if (!ipc::has_trailing_bytes(h.opcode)) {
    st = h.size == ipc::record_size_for(static_cast<uint64_t>(want)) ? run() : Status::InvalidValue;
  } else if (h.size < ipc::record_size_for(static_cast<uint64_t>(want))) {
    st = Status::InvalidValue;
  } else {
    const auto trailing = trailing_bytes(h.opcode, payload);
    st = trailing && h.size == ipc::record_size_for(static_cast<uint64_t>(want) + *trailing) ? run()
                                                                                               : Status::InvalidValue;
  }
  if (st != Status::Success) failed(h, st);
}

void Worker::failed(const ipc::CommandHeader& h, Status st) {
  flush_launches();  // errors reach the client in command order
  if (st == Status::NotSupported || st == Status::InvalidValue || st == Status::InvalidResourceHandle ||
      st == Status::InvalidDevice)
    add(shared_.totals->bad_commands, 1);
  spdlog::debug("client {}: command {} seq {} failed: status {}", shared_.id, static_cast<uint16_t>(h.opcode), h.seq,
                static_cast<int>(st));
  fail(h, st);
}

Status Worker::dispatch(const ipc::CommandHeader& h, const std::byte* p) {
  using ipc::Opcode;
  switch (h.opcode) {
    case Opcode::Pad: return Status::Success;
    case Opcode::MemAlloc: return mem_alloc(h, payload_as<ipc::MemAllocCmd>(p), false);
    case Opcode::MemAllocAsync: return mem_alloc(h, payload_as<ipc::MemAllocCmd>(p), true);
    case Opcode::MemFree: return mem_free(h, payload_as<ipc::AddressCmd>(p), false);
    case Opcode::MemFreeAsync: return mem_free(h, payload_as<ipc::AddressCmd>(p), true);
    case Opcode::MemGetInfo: return mem_get_info(h);
    case Opcode::PinnedAlloc: return pinned_alloc(h, payload_as<ipc::PinnedAllocCmd>(p));
    case Opcode::PinnedFree: return pinned_free(h, payload_as<ipc::PinnedFreeCmd>(p));
    case Opcode::Copy: return copy(h, payload_as<ipc::CopyCmd>(p));
    case Opcode::Memset: return memset(h, payload_as<ipc::MemsetCmd>(p));
    case Opcode::StreamCreate: return stream_create(h, payload_as<ipc::StreamCreateCmd>(p));
    case Opcode::StreamDestroy: return stream_destroy(h);
    case Opcode::StreamSynchronize: return stream_synchronize(h);
    case Opcode::StreamQuery: return stream_query(h);
    case Opcode::StreamWaitEvent: return stream_wait_event(h, payload_as<ipc::EventCmd>(p));
    case Opcode::EventCreate: return event_create(h, payload_as<ipc::EventCreateCmd>(p));
    case Opcode::EventDestroy: return event_destroy(h, payload_as<ipc::EventCmd>(p));
    case Opcode::EventRecord: return event_record(h, payload_as<ipc::EventRecordCmd>(p));
    case Opcode::EventSynchronize: return event_synchronize(h, payload_as<ipc::EventCmd>(p));
    case Opcode::EventQuery: return event_query(h, payload_as<ipc::EventCmd>(p));
    case Opcode::EventElapsedTime: return event_elapsed(h, payload_as<ipc::EventPairCmd>(p));
    case Opcode::DeviceSynchronize: return device_synchronize(h);
    case Opcode::DeviceReset: return device_reset(h);
    case Opcode::SetLimit: return limit(h, payload_as<ipc::LimitCmd>(p), true);
    case Opcode::GetLimit: return limit(h, payload_as<ipc::LimitCmd>(p), false);
    case Opcode::ModuleQuery: return module_query(h, payload_as<ipc::ModuleCmd>(p));
    case Opcode::ModuleData: return module_data(h, payload_as<ipc::ModuleDataCmd>(p));
    case Opcode::ModuleLoad: return module_load(h, payload_as<ipc::ModuleCmd>(p));
    case Opcode::ModuleUnload: return module_unload(h, payload_as<ipc::ModuleCmd>(p));
    case Opcode::KernelGet: return kernel_get(h, payload_as<ipc::KernelGetCmd>(p), p + sizeof(ipc::KernelGetCmd));
    case Opcode::KernelParams: return kernel_params(h, payload_as<ipc::KernelParamsCmd>(p));
    case Opcode::Launch: return launch(h, payload_as<ipc::LaunchCmd>(p), p + sizeof(ipc::LaunchCmd));
    case Opcode::SymbolGet: return symbol_get(h, payload_as<ipc::SymbolGetCmd>(p), p + sizeof(ipc::SymbolGetCmd));
    case Opcode::FuncGetAttributes: return func_get_attributes(h, payload_as<ipc::KernelCmd>(p));
    case Opcode::FuncSetAttribute: return func_set_attribute(h, payload_as<ipc::FuncSetAttributeCmd>(p));
    case Opcode::Occupancy: return occupancy(h, payload_as<ipc::OccupancyCmd>(p));
    case Opcode::HostFunc: return host_func(h, payload_as<ipc::HostFuncCmd>(p));
    case Opcode::OccupancyDynamicSmem: return occupancy_dynamic_smem(h, payload_as<ipc::OccupancyCmd>(p));
    case Opcode::MaxActiveClusters: return max_active_clusters(h, payload_as<ipc::LaunchCmd>(p));
    case Opcode::Fence: answer(h); return Status::Success;
    case Opcode::Detach:
      take_detach(payload_as<ipc::DetachCmd>(p));
      shared_.stop.store(true);
      answer(h);
      return Status::Success;
  }
  return Status::NotSupported;
}

void Worker::fail(const ipc::CommandHeader& h, Status st) {
  add(counters_.errors, 1);
  uint64_t none = 0;
  counters_.first_error.compare_exchange_strong(
      none, uint64_t{static_cast<uint16_t>(h.opcode)} << 32 | static_cast<uint32_t>(st), std::memory_order_relaxed);
  auto& c = view_.completion();
  if (ipc::is_sticky(st)) c.sticky_error.store(static_cast<int32_t>(st), std::memory_order_release);
  if (h.reply_slot != ipc::kNoReply) {
    reply(h.reply_slot, h.seq, st);
    return;
  }
  if (!ipc::is_sticky(st)) {
    int32_t expected = 0;
    c.deferred_error.compare_exchange_strong(expected, static_cast<int32_t>(st), std::memory_order_acq_rel);
  }
}

void Worker::reply(uint32_t slot, uint64_t seq, Status st, const std::array<uint64_t, 5>& values) {
  auto& r = view_.reply(slot);
  r.status = static_cast<int32_t>(st);
  for (size_t i = 0; i < values.size(); ++i) r.value[i] = values[i];
  r.seq.store(seq, std::memory_order_seq_cst);
  wake_sleeping_client();
}

void Worker::wake_sleeping_client() {
  auto& c = view_.completion();
  // Only a client thread that went to sleep needs the epoch bumped and a futex wake (a
  // system call, a third of an empty cudaStreamSynchronize's round trip on the H100
  // machine); a spinning one watches r.seq (or its reply word).  Dekker pairing (seq_cst):
  // we store r.seq (or saw the GPU's word), then load client_waiting; the client increments
  // client_waiting, then checks r.seq and the word before it sleeps on the epoch.  One of us
  // sees the other.
  if (c.client_waiting.load(std::memory_order_seq_cst) != 0) {
    c.reply_epoch.fetch_add(1, std::memory_order_seq_cst);
    ipc::futex_wake_all(c.reply_epoch);
  }
}

void Worker::wake_staging_sleepers(std::atomic<uint32_t>& word) {
  // A client thread asleep on a staging state counts itself in client_waiting too (the same
  // Dekker pairing as above: the state was stored, or seen stored by the GPU, before this load),
  // so a chunk nobody sleeps for costs no system call.
  if (view_.completion().client_waiting.load(std::memory_order_seq_cst) != 0) ipc::futex_wake_all(word);
}

void Worker::answer(const ipc::CommandHeader& h, const std::array<uint64_t, 5>& values) {
  if (h.reply_slot != ipc::kNoReply) reply(h.reply_slot, h.seq, Status::Success, values);
}

void Worker::add_pending(Pending&& p) {
  if (p.urgent()) ++urgent_pending_;
  pending_.push_back(std::move(p));
}

Pending Worker::take_pending(size_t i) {
  Pending p = std::move(pending_[i]);
  if (i + 1 != pending_.size()) pending_[i] = std::move(pending_.back());
  pending_.pop_back();
  return p;
}

bool Worker::word_landed(const Pending& p) noexcept {
  return p.word != nullptr && (p.word->load(std::memory_order_acquire) == p.word_value) != p.done_when_changed;
}

bool Worker::pending_due() noexcept {
  return !pending_.empty() && poll_throttle_.due(true, urgent_pending_ != 0, Clock::now());
}

bool Worker::word_entry_done(const Pending& p, Clock::time_point now, Status& status) {
  if (word_landed(p)) return true;
  // Not (yet) there: the work is still running, the client already took the slot again (it
  // cleared the word; its next call on the slot settles the entry), or the stream faulted.
  // Only an entry this old asks the driver, so the waits that end within it cost none.
  if (now - p.since < kWordStreamCheck) return false;
  const Status q = backend_.query(*p.stream);
  if (q == Status::NotReady) return false;
  status = q;
  return true;
}

void Worker::settle_reused(const std::atomic<uint32_t>& word) {
  // A client takes a slot again only after it saw the answer there (or the server gone):
  // the GPU got past the word, so the entry is done; its client needs no wake-up.
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (pending_[i].stream == nullptr || pending_[i].word != &word) continue;
    Pending p = take_pending(i);
    if (p.done) p.done(p.forced);
    return;  // one call per slot at a time
  }
}

bool Worker::poll_pending() {
  // Completions are independent of each other (each names its own reply slot), so
  // any completed entry is answered without waiting for older ones.
  bool progressed = false;
  int fault_device = -1;  // reported after the loop: releasing a device edits pending_
  Status fault = Status::Success;
  urgent_pending_ = 0;
  Clock::time_point now{};
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    Status first = p.forced;
    bool ready = true;
    bool word_seen = false;
    if (p.stream != nullptr) {
      if (now == Clock::time_point{}) now = Clock::now();
      Status s = Status::Success;
      ready = word_entry_done(p, now, s);
      word_seen = ready && s == Status::Success;
      if (ipc::is_sticky(s) && fault_device < 0) {
        fault_device = p.stream->device();
        fault = s;
      }
      if (s != Status::Success && first == Status::Success) first = s;
      if (p.race && !ready) ready = true;  // then it is up to the event
    }
    for (auto& e : p.events) {
      if (word_seen) break;  // the GPU answered: its event completed before
      const Status s = backend_.query(*e);
      if (s == Status::NotReady) {
        ready = false;
        break;
      }
      if (ipc::is_sticky(s) && fault_device < 0) {
        fault_device = e->device();
        fault = s;
      }
      if (s != Status::Success && first == Status::Success) first = s;
    }
    if (!ready) {
      if (p.urgent()) ++urgent_pending_;
      ++i;
      continue;
    }
    finish(p, first);
    take_pending(i);
    progressed = true;
  }
  if (fault_device >= 0) observe(fault_device, fault);
  return progressed;
}

void Worker::finish(Pending& p, Status first) {
  Status st = p.done ? p.done(first) : first;
  if (st == Status::Success && p.fill) st = p.fill(p.values);
  if (p.gpu_reply && st == Status::Success) {
    // A staging state's entry (no reply slot) woke its own sleepers in `done`.  A call the
    // GPU answers (or its raced event did first) is answered through the slot as well: a
    // store to a reply word can become visible late (a raced call's kernel store after its
    // event; a store after its stream reported idle, seen on the H100 a dozen calls later),
    // over a later call's answer in the word, and a client asleep then would never see its
    // own.  The slot's seq stays.
    if (p.slot != ipc::kNoReply) reply(p.slot, p.seq, st, p.values);
  } else if (p.gpu_reply && word_landed(p)) {
    // The GPU answered before a later fault made the event report it: the client may have
    // reused the slot since, so it gets the fault at its next call instead.
    ipc::CommandHeader h{};
    h.reply_slot = ipc::kNoReply;
    fail(h, st);
  } else if (!p.answered && p.slot != ipc::kNoReply) {
    reply(p.slot, p.seq, st, p.values);
  } else if (st != Status::Success && p.slot == ipc::kNoReply) {
    ipc::CommandHeader h{};
    h.reply_slot = ipc::kNoReply;
    fail(h, st);
  }
}

void Worker::reap_landed() {
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    if (p.stream == nullptr || p.forced != Status::Success || !word_landed(p)) {
      ++i;
      continue;
    }
    if (p.urgent() && urgent_pending_ > 0) --urgent_pending_;
    finish(p, Status::Success);
    take_pending(i);
  }
}

}  // namespace funnel::server
