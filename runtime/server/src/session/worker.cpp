// The worker loop: copy each record out of the ring, validate it, execute it, and
// poll the work other commands wait for.  The worker never blocks on GPU work, so a
// long kernel of one stream never stops it from reading the ring.
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <type_traits>

#include <spdlog/spdlog.h>

#include "funnel/ipc/futex.hpp"
#include "session/worker.hpp"
#include "loop/worker_group.hpp"

// Every opcode has a slot in ClientCounters::waited.
#define FUNNEL_OPCODE_HAS_A_SLOT(name, number, ...) \
  static_assert((number) < funnel::server::kOpcodeSlots, #name ": raise kOpcodeSlots (counter_ops.hpp)");
FUNNEL_IPC_COMMANDS(FUNNEL_OPCODE_HAS_A_SLOT)
#undef FUNNEL_OPCODE_HAS_A_SLOT

namespace funnel::server {
namespace {

using Clock = std::chrono::steady_clock;
// Why each of these is what it is, with the measurements: doc/performance.md, "The worker's
// constants".
// Idle past ServerOptions::idle_spin: sleep on the doorbell at most this long.
constexpr auto kSleep = std::chrono::milliseconds(20);
// Work pending past ServerOptions::pending_spin: it is long, polled this often.
constexpr auto kPendingSleep = std::chrono::microseconds(50);
// The spin pauses this long before it polls with sched_yield instead.
constexpr auto kPauseSpin = std::chrono::microseconds(20);
// A sched_yield of the spin that returns this late let another thread run: the core is
// wanted, and the worker backs off (ServerOptions::spin_backoff).
constexpr auto kWantedCore = std::chrono::microseconds(200);
// A worker on its client's own core, or backing off, that goes to sleep within kNapWindow of
// its last command naps for at most kQuietNap, and the client does not wake it for a kernel
// launch (ipc::kConsumerNapping; doc/placement.md, "Workers with their ranks"): the launches
// go out together at the client's next other record, or when the nap ends.
constexpr auto kQuietNap = std::chrono::microseconds(200);
constexpr auto kNapWindow = std::chrono::milliseconds(20);
// A client in a GPU-local exchange (a message half posted within kExchangeWindow) sends its next
// commands once its partners' halves came (the launches after the exchange, the next step's
// posts): its worker polls at least kExchangeSpin idle before it sleeps, so they find it awake.
constexpr auto kExchangeSpin = std::chrono::microseconds(200);
constexpr auto kExchangeWindow = std::chrono::milliseconds(2);
// The longest an idle worker sleeps while one of its streams has an open busy span
// (doc/accounting.md: the bound on how late such a span closes).
constexpr auto kBusySweep = std::chrono::milliseconds(1);

// Calls a command's handler with what its row in the command table says follows the header:
// nothing, the payload, or the payload and a pointer to its trailing bytes.
template <ipc::Opcode op, class Handler>
Status invoke(Worker& w, Handler handler, const ipc::CommandHeader& h, const std::byte* p) {
  using C = ipc::Command<op>;
  if constexpr (std::is_same_v<typename C::Payload, ipc::NoPayload>) {
    return (w.*handler)(h);
  } else {
    const auto c = ipc::payload_as<typename C::Payload>(p);
    if constexpr (C::kTrailing)
      return (w.*handler)(h, c, p + sizeof c);
    else
      return (w.*handler)(h, c);
  }
}

}  // namespace

Worker::Worker(SessionShared& shared, const ipc::ChannelView& view)
    : shared_(shared),
      backend_(*shared.backend),
      view_(view),
      reader_(view),
      counters_(shared.counters),
      streams_(*shared.backend, shared.placement, shared.counters.gpu_busy_ns),
      answers_(view, shared.counters),
      completions_(shared, view, *shared.backend, streams_, answers_, [this](int device, Status st) { observe(device, st); }),
      res_(shared, *shared.backend, view),
      record_(ipc::kMaxRecordSize) {}

Worker::~Worker() {
  // Before the channel goes (the session destroys its worker first): no more answers to graph
  // host nodes through its words.
  const std::lock_guard lock(graph_hosts_->mu);
  graph_hosts_->stopped = true;
}

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
  bool busy = completions_.due() && completions_.poll();
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
      if (const auto op = static_cast<size_t>(h.opcode); op < kOpcodeSlots) bump(counters_.waited[op], 1);
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
  const bool urgent = completions_.urgent();
  // A worker alone on a core that no rank is bound to takes nothing from anyone by polling:
  // it polls as long idle as with work pending, so that its client's next call after an MPI
  // exchange (a few hundred microseconds) finds it awake rather than waking it (16-32 us on
  // the H100 machine).
  const bool own_core = shared_.own_core.load(std::memory_order_relaxed);
  if (urgent || own_core) return shared_.tuning.pending_spin;
  if (last_message_ != Clock::time_point{} && Clock::now() - last_message_ < kExchangeWindow)
    return std::max<std::chrono::nanoseconds>(shared_.tuning.idle_spin, kExchangeSpin);
  return shared_.tuning.idle_spin;
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
  if (shared_.tuning.spin_backoff.count() == 0) return;
  no_spin_until_ = Clock::now() + shared_.tuning.spin_backoff;
  bump(counters_.spin_backoffs, 1);
}

std::chrono::nanoseconds Worker::before_sleep() {
  // Idle: a stream with an open busy span that has drained ends its span now.  While some
  // stay open, sleep at most kBusySweep, so a span ends at most that late.
  // At most one sweep per kBusySweep: the queries take driver locks that the other
  // workers' launches want (doc/performance.md, "The worker's constants").
  if (streams_.open_spans() != 0 && Clock::now() - last_sweep_ >= kBusySweep) {
    streams_.sweep_busy(-1, false);
    last_sweep_ = Clock::now();
  }
  auto nap = completions_.empty() ? std::chrono::nanoseconds(kSleep) : std::chrono::nanoseconds(kPendingSleep);
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
      take_detach(ipc::payload_as<ipc::DetachCmd>(record_.data() + sizeof h));
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
    answers_.fail(one_way, Status::InvalidValue);
    return;
  }
  if (h.reply_slot != ipc::kNoReply && !completions_.empty()) completions_.settle_reused(view_.reply_word(h.reply_slot));
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
  const ipc::Framing framing = ipc::check_framing(h, payload);
  const Status st = framing == ipc::Framing::Ok              ? run()
                    : framing == ipc::Framing::UnknownOpcode ? Status::NotSupported
                                                             : Status::InvalidValue;
  if (st != Status::Success) failed(h, st);
}

void Worker::failed(const ipc::CommandHeader& h, Status st) {
  flush_launches();  // errors reach the client in command order
  if (st == Status::NotSupported || st == Status::InvalidValue || st == Status::InvalidResourceHandle ||
      st == Status::InvalidDevice)
    add(shared_.totals->bad_commands, 1);
  spdlog::debug("client {}: command {} seq {} failed: status {}", shared_.id, static_cast<uint16_t>(h.opcode), h.seq,
                static_cast<int>(st));
  answers_.fail(h, st);
}

Status Worker::dispatch(const ipc::CommandHeader& h, const std::byte* p) {
  // Expanded from the command table (funnel/ipc/commands.hpp): each opcode's handler, called
  // with its payload type (a handler that takes another does not compile).
  switch (h.opcode) {
#define FUNNEL_DISPATCH(name, number, payload, trailing, queues, handler) \
  case ipc::Opcode::name:                                                  \
    return invoke<ipc::Opcode::name>(*this, &Worker::handler, h, p);
    FUNNEL_IPC_COMMANDS(FUNNEL_DISPATCH)
#undef FUNNEL_DISPATCH
  }
  return Status::NotSupported;
}

Status Worker::pad(const ipc::CommandHeader&) { return Status::Success; }

Status Worker::fence(const ipc::CommandHeader& h) {
  answers_.answer(h);
  return Status::Success;
}

Status Worker::detach(const ipc::CommandHeader& h, const ipc::DetachCmd& c) {
  take_detach(c);
  shared_.stop.store(true);
  answers_.answer(h);
  return Status::Success;
}

// ---- checks shared by the handlers ---------------------------------------------

Status Worker::check_device(int device) const {
  if (device < 0 || static_cast<uint32_t>(device) >= view_.header().device_count) return Status::InvalidDevice;
  return blocked_[static_cast<size_t>(device)] ? Status::DevicesUnavailable : Status::Success;
}

StreamEntry* Worker::find_stream(const ipc::CommandHeader& h, Status& st) {
  // A client stream exists only where the client was not blocked; the legacy stream is
  // created on first use, so it is checked here.
  if (h.stream == 0 && h.device >= 0 && static_cast<uint32_t>(h.device) < ipc::kMaxDevices &&
      blocked_[static_cast<size_t>(h.device)]) {
    st = Status::DevicesUnavailable;
    return nullptr;
  }
  return streams_.find(h.stream, h.device, st);
}

}  // namespace funnel::server
