#include "session/client_session.hpp"

#include <unistd.h>

#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "funnel/common/text.hpp"
#include "funnel/ipc/futex.hpp"
#include "session/mailbox.hpp"

namespace funnel::server {

ClientSession::ClientSession(uint32_t id, ipc::UniqueFd fd, const ipc::HelloMsg& hello, pid_t peer_pid)
    : fd_(std::move(fd)), pid_(peer_pid), rank_(hello.mpi_rank) {
  shared_.id = id;
  shared_.client_fd = fd_.get();
  // Whatever bytes the client sent: it reaches JSON (funnelctl), the log and the job report.
  command_ = sanitize_text({hello.command, strnlen(hello.command, sizeof hello.command)});
  shared_.pid = peer_pid;
  shared_.mpi_rank = rank_;
  shared_.command = command_;
  for (size_t d = 0; d < ipc::kMaxDevices; ++d) shared_.device_mem_limit[d] = hello.device_mem_limit[d];
  // The listener validated these (validate_hello).
  shared_.placement.share_bp = hello.gpu_share_bp;
  shared_.placement.placement = static_cast<ipc::GpuPlacement>(hello.gpu_placement);
  shared_.placement.priority_offset =
      static_cast<ipc::ClientPriority>(hello.client_priority) == ipc::ClientPriority::Normal ? -1 : 0;
}

ClientSession::~ClientSession() {
  request_stop(false);
  join();
  // Only a session whose worker never started still holds the registration (else the
  // worker undid it on its own thread: SessionShared::registered).
  if (registered_ && channel_) shared_.backend->host_unregister(registered_base());
  if (phase_ == Phase::AwaitMapped && !channel_path_.empty()) ::unlink(channel_path_.c_str());
}

void ClientSession::create_channel(const ChannelSpec& spec) {
  shared_.run_dir = spec.run_dir;
  shared_.backend = spec.backend;
  shared_.totals = spec.totals;
  shared_.tuning = spec.tuning;
  shared_.modules = spec.modules;
  shared_.ipc = spec.ipc;
  shared_.mailbox = spec.mailbox;
  shared_.health = spec.health;
  shared_.submit_order = spec.submit_order;
  shared_.calls_in_flight = spec.calls_in_flight;
  shared_.notify_fd = spec.notify_fd;
  hangups_ = spec.hangups;
  pool_ = spec.workers;
  ipc::ChannelHeader h{};
  if (!ipc::layout(spec.geometry, h))
    throw std::runtime_error("the channel geometry is out of range (check --staging-slots and --staging-slot-kb)");
  shared_.placement.partitions = spec.partitions;
  // The SM count the client sees, per device: its partition's (as under MPS).  The
  // partition itself is leased at its first stream there (StreamTable::make_stream).
  std::array<uint32_t, ipc::kMaxDevices> sms{};
  if (shared_.placement.share_bp != 0 && spec.partitions != nullptr) {
    for (uint32_t d = 0; d < h.device_count; ++d)
      sms[d] = spec.partitions->sms_for_share(static_cast<int>(d), shared_.placement.share_bp);
  }
  h.client_id = shared_.id;
  h.server_pid = static_cast<int32_t>(::getpid());
  channel_file_ = fmt::format("{}{}", ipc::kChannelFilePrefix, shared_.id);
  const auto path = spec.run_dir / channel_file_;
  channel_ = ipc::MappedFile::create(path, h.segment_size);
  channel_path_ = path;
  std::memcpy(channel_.data(), &h, sizeof h);
  view_ = ipc::ChannelView(channel_.data(), h);
  // The file is fresh (zero-filled), but the atomics are stored explicitly so that
  // their initial values do not depend on how the file was created.
  auto& ctl = view_.control();
  ctl.tail.store(0);
  ctl.head.store(0);
  ctl.doorbell.store(0);
  ctl.consumer_sleeping.store(0);
  ctl.space.store(0);
  ctl.producer_waiting.store(0);
  auto& c = view_.completion();
  c.reply_epoch.store(0);
  c.client_waiting.store(0);
  c.deferred_error.store(0);
  c.sticky_error.store(0);
  c.server_state.store(static_cast<uint32_t>(ipc::ServerState::Running));
  for (uint32_t i = 0; i < h.reply_slots; ++i) {
    view_.reply(i).seq.store(0);
    view_.reply_word(i).store(0);
  }
  for (uint32_t i = 0; i < h.staging_slots; ++i)
    view_.staging_state(i).store(static_cast<uint32_t>(ipc::StagingState::Free));
  for (uint32_t d = 0; d < h.device_count; ++d) {
    ipc::DeviceRecord& rec = view_.devices()[d];
    rec = spec.devices[d];
    if (sms[d] != 0) rec.attributes[ipc::kAttrMultiprocessorCount] = static_cast<int32_t>(sms[d]);
  }
  for (uint32_t i = 0; i < h.event_slots; ++i) view_.event_state(i).store(0);
  // One registration covers the event state words and the staging area after them: the
  // GPU writes the former and DMAs to and from the latter.
  const auto pin_start = std::chrono::steady_clock::now();
  const Status st = spec.backend->host_register(registered_base(), h.segment_size - h.event_states_offset);
  const auto pinned = std::chrono::steady_clock::now();
  pin_time_ = pinned - pin_start;
  if (st != Status::Success) {
    ::unlink(path.c_str());
    throw std::runtime_error(fmt::format(
        "cannot register the event states and staging area with the driver (status {}); the driver pins only "
        "shared memory: put the run directory on a tmpfs (FUNNEL_RUN_DIR=/dev/shm/...; it is {})",
        static_cast<int>(st), spec.run_dir.string()));
  }
  registered_ = true;
  channel_time_ = pinned - attached_at_;
}

void ClientSession::start_worker(int home_device) {
  home_device_ = home_device;
  if (::unlink(channel_path_.c_str()) != 0 && errno != ENOENT)
    spdlog::warn("client {}: cannot remove {}: {}", shared_.id, channel_path_.string(), std::strerror(errno));
  phase_ = Phase::Running;
  if (registered_) {
    shared_.registered = registered_base();
    registered_ = false;
  }
  worker_ = std::make_unique<Worker>(shared_, view_);
  // Before the thread: a hang-up from the first instruction on is seen.
  if (hangups_ != nullptr) hangups_->add(fd(), worker_.get());
  // Pooled, this thread only hands the worker to its group and waits; it tears it down.
  if (pool_ != nullptr) group_ = pool_->assign(home_device);
  thread_ = std::thread([w = worker_.get(), g = group_] { w->run(g); });
  // Named for ps -L, top -H and the placement test: funnel-w<client id>.
  const std::string name = fmt::format("funnel-w{}", shared_.id);
  ::pthread_setname_np(thread_.native_handle(), name.substr(0, 15).c_str());
}

void ClientSession::request_stop(bool server_shutting_down) noexcept {
  if (server_shutting_down) {
    shared_.shutting_down.store(true);
    if (channel_) view_.completion().server_state.store(static_cast<uint32_t>(ipc::ServerState::ShuttingDown));
  }
  shared_.stop.store(true);
  // The client is gone or cut off: its host functions will not run, and a stream held by one
  // may hold up the worker (in a synchronizing driver call) and, through the hardware queue
  // it shares, other clients' work.  Release them now, not at the worker's teardown.
  if (worker_) worker_->release_holds();
  if (channel_) {
    // Wake a worker asleep on the doorbell so it sees the flag now, not after its slice.
    view_.control().doorbell.fetch_add(1);
    ipc::futex_wake_all(view_.control().doorbell);
  }
}

void ClientSession::terminate() noexcept {
  terminated_ = true;
  if (channel_) {
    // Before the stop: a client that sees the session end learns why from the channel.  The
    // state before the sticky error: a client whose call fails on the error finds the reason.
    view_.completion().server_state.store(static_cast<uint32_t>(ipc::ServerState::Terminated));
    view_.completion().sticky_error.store(static_cast<int32_t>(Status::DevicesUnavailable), std::memory_order_release);
  }
  shared_.shutting_down.store(true);  // teardown answers the waiting replies
  request_stop(false);
}

void ClientSession::join() noexcept {
  if (hangups_ != nullptr && worker_) hangups_->remove(fd());
  if (thread_.joinable()) thread_.join();
  worker_.reset();
}

std::optional<CpuTimes> ClientSession::worker_cpu() const noexcept {
  if (pooled()) return std::nullopt;  // the group's thread serves other clients too
  if (auto t = shared_.counters.worker_cpu.load()) return t;
  const pid_t tid = shared_.worker_tid.load(std::memory_order_acquire);
  return phase_ == Phase::Running && tid != 0 && !finished() ? task_cpu_times(tid) : std::nullopt;
}

std::optional<CpuTimes> ClientSession::client_cpu() const noexcept {
  if (auto t = shared_.counters.client_cpu.load()) return t;
  // Only while it is attached: the pid of a client that is gone may name another process.
  return phase_ == Phase::Running && !finished() ? process_cpu_times(pid_) : std::nullopt;
}

// ---- the worker's side of the teardown ---------------------------------------

void Worker::teardown() noexcept {
  try {
    if (shared_.shutting_down.load()) completions_.answer_waiting(Status::DevicesUnavailable);
    // A stream held by a host function or a stream memory wait whose client is gone would
    // never drain.
    release_holds();
    // Before any memory goes: no partner copies into or out of it, or stores into its words, later.
    if (shared_.mailbox != nullptr)
      (void)shared_.mailbox->leave(shared_.id, shared_.mpi_rank, std::chrono::steady_clock::now() + std::chrono::seconds(10));
    if (!waits_.settle(std::chrono::steady_clock::now() + std::chrono::seconds(10)))
      spdlog::error("client {}: stream memory waits still pending 10 s after their words were written; its "
                    "streams may not drain", shared_.id);
    int fault_device = -1;
    Status fault = Status::Success;
    for (StreamEntry* s : streams_.on_device(-1)) {
      const Status st = backend_.synchronize(*s->stream);
      if (ipc::is_sticky(st) && fault_device < 0) {
        fault_device = s->device;
        fault = st;
      }
    }
    // The words the release wrote landed before any memory goes.
    waits_.drain();
    // A fault seen only now still has to reach the other clients of the device.
    if (fault_device >= 0) observe(fault_device, fault);
    // What is still pending waits on work that is queued and now finishing (destroyed
    // streams); give it a bounded time, then run the frees regardless.
    completions_.finish_by(std::chrono::steady_clock::now() + std::chrono::seconds(10));
    graphs_.clear();
    kernels_.clear();
    res_.symbols.clear();
    res_.release_allocations_and_events();
    sub(counters_.streams, streams_.client_streams());
    streams_.clear();
    res_.release_pinned();
    stop_profiling(-1);  // a range the client left open
    {
      const std::lock_guard lock(graph_hosts_->mu);
      graph_hosts_->stopped = true;  // the channel's words go with the session
    }
  } catch (const std::exception& e) {
    spdlog::error("client {}: teardown failed: {}", shared_.id, e.what());
  }
}

}  // namespace funnel::server
