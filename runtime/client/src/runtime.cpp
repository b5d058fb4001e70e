#include "runtime.hpp"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include <fmt/ranges.h>

#include "funnel/common/control_client.hpp"
#include "funnel/common/cpu_times.hpp"
#include "funnel/common/gpu_files.hpp"
#include "funnel/common/launcher.hpp"
#include "funnel/common/run_dir.hpp"
#include "funnel/common/text.hpp"
#include "funnel/ipc/protocol.hpp"
#include "api.hpp"
#include "log.hpp"

namespace funnel::client {
namespace {

std::atomic<Runtime*> g_runtime{nullptr};
std::once_flag g_atfork_once;

void atfork_child() noexcept {
  // The child must not talk through the parent's channel: the server knows the
  // parent's connection only.  Leave the old Runtime behind (its mutexes may be held
  // by threads that do not exist here) and attach afresh on the first call.
  Runtime* old = g_runtime.load();
  if (old != nullptr) old->forget_after_fork();
  g_runtime.store(nullptr);
}

// funnel-run's background server start (launcher.hpp): a program that never attached (`funnel-run
// true`, run to start a job's server) waits at its exit until the start is over.  The settings
// are read when the library loads, only under funnel-run's FUNNEL_RUN_STARTING: at exit the
// tables they are read with may be destroyed already.
struct BackgroundStartWait {
  std::optional<Settings> settings;
  BackgroundStartWait() {
    if (!funnel::started_in_background()) return;
    try {
      settings = Settings::from_environment();
    } catch (...) {  // a bad setting: the program is told at its first call
    }
  }
  ~BackgroundStartWait() {
    if (!settings) return;
    const Runtime* r = g_runtime.load();
    if (r != nullptr && r->attached()) return;
    funnel::wait_for_background_start(*settings);
  }
} g_background_start_wait;

int mpi_rank_from_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    if (const char* s = std::getenv(v)) return std::atoi(s);
  }
  return -1;
}

void command_line(char* out, size_t cap) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), {});
  for (char& c : s)
    if (c == '\0') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  // Cut at a character boundary: a split UTF-8 character would reach the server's reports.
  const std::string_view kept = funnel::utf8_prefix(s, cap - 1);
  std::memcpy(out, kept.data(), kept.size());
  out[kept.size()] = '\0';
}

}  // namespace

Runtime& Runtime::get() noexcept {
  std::call_once(g_atfork_once, [] { pthread_atfork(nullptr, nullptr, &atfork_child); });
  Runtime* r = g_runtime.load(std::memory_order_acquire);
  if (r != nullptr) return *r;
  // Never destroyed: CUDA calls from static destructors and atexit handlers must still
  // find it, and the watcher thread keeps a pointer to it.
  auto* fresh = new Runtime();
  if (g_runtime.compare_exchange_strong(r, fresh)) return *fresh;
  delete fresh;
  return *r;
}

void Runtime::forget_after_fork() noexcept {
  // Close our copy of the socket so that the server still sees the parent's hang-up.
  const int fd = sock_.release();
  if (fd >= 0) ::close(fd);
  dead_.store(true);
}

void Runtime::detach_at_exit() noexcept {
  if (!attached_.load(std::memory_order_acquire) || dead_.load()) return;
  warn_if_gpu_opened();
  {
    std::lock_guard notice(dead_mu_);
    dead_reported_ = true;  // the hang-up that follows our own Detach is no news
  }
  // Bounded: a thread that died holding the ring (or a full ring that nobody drains)
  // must not hold up the exit.
  const auto give_up_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  std::unique_lock lk(ring_mu_, std::defer_lock);
  while (!lk.try_lock()) {
    if (std::chrono::steady_clock::now() >= give_up_at) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Our threads' CPU times for the job report: the server cannot read them once we are gone.
  ipc::DetachCmd cpu{ipc::kNoCpuTime, ipc::kNoCpuTime};
  if (const auto t = common::process_cpu_times(::getpid())) cpu = {t->run_ns, t->wait_ns};
  write_record_locked(Opcode::Detach, 0, 0, ipc::kNoReply, &cpu, sizeof cpu, {},
                      [&] { return gone() || std::chrono::steady_clock::now() >= give_up_at; });
  dead_.store(true);  // the server reads nothing after a Detach
}

void Runtime::warn_if_gpu_opened() noexcept {
  try {
    const auto files = common::gpu_device_files();
    if (files.empty()) return;
    log_error(fmt::format(
        "funnel: warning: this process opened the GPU itself ({}): it holds a CUDA context of its own beside the "
        "server's, which the GPU time-slices against every other process. Something in it loaded NVIDIA's "
        "libcuda.so.1: run it with funnel-run and FUNNEL_CLIENT_DRIVER=1 (the default), and check that no "
        "library of it opens libcuda.so.1 by a full path",
        fmt::join(files, ", ")));
  } catch (...) {  // exiting: a warning that cannot be made is not worth a crash
  }
}

bool Runtime::detach_and_wait(std::chrono::milliseconds wait) noexcept {
  if (!attached() || dead_.load()) return true;
  left_.store(true, std::memory_order_release);
  detach_at_exit();
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    if (ipc::peer_hung_up(sock_.get(), std::chrono::milliseconds(50))) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
  }
}

namespace {
// Runs when the client runtime is unloaded at exit, after the program's static
// destructors and atexit handlers (it is a dependency of the program), which may still
// free CUDA memory.
__attribute__((destructor)) void detach_at_unload() {
  if (Runtime* r = g_runtime.load(std::memory_order_acquire)) r->detach_at_exit();
}
}  // namespace

Status Runtime::ensure() noexcept {
  if (attached_.load(std::memory_order_acquire)) return Status::Success;
  std::lock_guard lk(attach_mu_);
  if (attached_.load(std::memory_order_relaxed)) return Status::Success;
  if (attach_error_ != Status::Success) return attach_error_;
  const Status s = attach_locked();
  if (s != Status::Success) attach_error_ = s;
  return s;
}

Status Runtime::attach_locked() noexcept {
  try {
    try {
      settings_ = Settings::from_environment();
    } catch (const ConfigError& e) {
      log_error(fmt::format("funnel: {}; every CUDA call fails with cudaErrorInitializationError", e.what()));
      return Status::InitializationError;
    }
    const Settings& st = *settings_;
    try {
      sock_ = connect_or_start_server(st);
    } catch (const std::exception& e) {
      log_error(fmt::format("funnel: no funnel-server: {}. Every CUDA call fails with cudaErrorDevicesUnavailable",
                         e.what()));
      return Status::DevicesUnavailable;
    }
    auto fail = [&](const std::string& why) {
      log_error(fmt::format("funnel: cannot attach to funnel-server in {} (FUNNEL_RUN_DIR): {}. Every CUDA call fails "
                         "with cudaErrorDevicesUnavailable",
                         st.run_dir.string(), why));
      sock_.reset();
      return Status::DevicesUnavailable;
    };
    ipc::HelloMsg hello{};
    hello.magic = ipc::kSocketMagic;
    hello.version = ipc::kProtocolVersion;
    hello.role = ipc::Role::Client;
    hello.pid = static_cast<int32_t>(::getpid());
    hello.mpi_rank = mpi_rank_from_launcher();
    command_line(hello.command, sizeof hello.command);
    // Under FUNNEL_GPU_MAP / FUNNEL_RANKS_PER_GPU this process's device 0 is whichever GPU
    // it gets, and it can reach no other: its device-0 limit goes to every slot.
    for (uint32_t d = 0; d < ipc::kMaxDevices; ++d)
      hello.device_mem_limit[d] = st.device_mem_limit_for(st.selects_gpu() ? 0 : static_cast<int>(d));
    hello.gpu_share_bp = st.gpu_share_bp;
    hello.gpu_placement = static_cast<uint32_t>(st.gpu_disjoint ? ipc::GpuPlacement::Disjoint : ipc::GpuPlacement::Shared);
    hello.client_priority =
        static_cast<uint32_t>(st.below_normal_priority ? ipc::ClientPriority::BelowNormal : ipc::ClientPriority::Normal);
    if (!ipc::send_message(sock_.get(), &hello, sizeof hello)) return fail(std::strerror(errno));
    ipc::AttachReply rep{};
    const ssize_t n = ipc::recv_message(sock_.get(), &rep, sizeof rep, st.attach_timeout);
    if (n != static_cast<ssize_t>(sizeof rep) || rep.magic != ipc::kSocketMagic)
      return fail(n == 0 ? "the server hung up" : n < 0 ? std::strerror(errno) : "malformed attach reply");
    if (rep.status != 0) {
      rep.message[sizeof rep.message - 1] = '\0';
      log_error(fmt::format("funnel: funnel-server in {} (FUNNEL_RUN_DIR) refused this client: {} (status {})",
                         st.run_dir.string(), rep.message, rep.status));
      sock_.reset();
      return static_cast<Status>(rep.status);
    }
    rep.channel_file[sizeof rep.channel_file - 1] = '\0';
    const std::string file = rep.channel_file;
    if (file.empty() || file.find('/') != std::string::npos) return fail("bad channel file name");
    try {
      channel_ = ipc::MappedFile::open(st.run_dir / file, rep.segment_size);
    } catch (const std::exception& e) {
      return fail(e.what());
    }
    ipc::ChannelHeader h;
    std::memcpy(&h, channel_.data(), sizeof h);
    const char* why = "";
    if (!ipc::validate_header(h, channel_.size(), &why)) return fail(why);
    view_ = ipc::ChannelView(channel_.data(), h);
    device_base_ = 0;
    device_count_ = static_cast<int>(h.device_count);
    one_device_ = false;
    try {
      if (const int g = select_gpu(st, launcher_local_rank(Settings::environment), static_cast<int>(h.device_count));
          g >= 0) {
        device_base_ = g;
        device_count_ = 1;
        one_device_ = true;
      }
      check_device_mem_limit(st, device_count_);
    } catch (const ConfigError& e) {
      log_error(fmt::format("funnel: {}; every CUDA call fails with cudaErrorInitializationError", e.what()));
      sock_.reset();
      return Status::InitializationError;
    }
    ipc::MappedMsg mapped{rep.client_id, device_base_};
    if (!ipc::send_message(sock_.get(), &mapped, sizeof mapped)) return fail(std::strerror(errno));
    writer_ = ipc::RingWriter(view_);
    for (uint32_t i = h.reply_slots; i > 0; --i) free_slots_.push_back(i - 1);
    stage_taken_.assign(h.staging_slots, false);
    start_watcher();
    attached_.store(true, std::memory_order_release);
    // Under an MPI launcher the MPI hooks print it, once per node and with every rank in it.
    if (st.print_plan && mpi_launcher_variable(Settings::environment).empty()) {
      try {
        log_error(fmt::format("funnel: placement plan of funnel-server in {}:\n{}", st.run_dir.string(),
                              server_plan_text(st, 1)));
      } catch (const std::exception& e) {
        log_error(fmt::format("funnel: FUNNEL_PRINT_PLAN: {}", e.what()));
      }
    }
    return Status::Success;
  } catch (const std::exception& e) {
    log_error(fmt::format("funnel: attach failed: {}", e.what()));
    return Status::DevicesUnavailable;
  }
}

namespace {

// Whether `pid` is stopped (SIGSTOP, SIGTSTP, a debugger): state T or t.
bool process_stopped(pid_t pid) noexcept {
  const char state = process_state(pid);
  return state == 'T' || state == 't';
}

}  // namespace

void Runtime::start_watcher() noexcept {
  // Polls the connection: its hang-up is the server's death notice.  Waiters also
  // check the socket themselves between futex slices; this thread makes sure that
  // even a process that never waits learns it (and prints it once).  A server that is
  // stopped (SIGSTOP) keeps its socket open but answers nothing: stopped at three checks in
  // a row (0.4-0.6 s) counts as gone, so that no call waits for it forever.
  const int fd = sock_.get();
  const pid_t server = view_.header().server_pid;
  std::thread([this, fd, server] {
    int stopped = 0;
    for (;;) {
      if (dead_.load()) return;
      if (ipc::peer_hung_up(fd, std::chrono::milliseconds(200)) || view_.completion().server_state.load() != 0) {
        mark_dead();
        return;
      }
      stopped = server > 0 && process_stopped(server) ? stopped + 1 : 0;
      if (stopped >= 3) {
        server_stopped_.store(true);
        mark_dead();
        return;
      }
    }
  }).detach();
}

void Runtime::mark_dead() noexcept {
  // The notice first, the flag after it (a second caller waits for the first's notice):
  // a call failed because of dead_ may be the program's last (the funnelctl terminate test
  // lost the notice when the watcher thread set dead_ and the failed call exited first).
  std::lock_guard notice(dead_mu_);
  if (!std::exchange(dead_reported_, true)) {
    std::string dir = settings_ ? settings_->run_dir.string() : std::string("?");
    if (view_.completion().server_state.load() == static_cast<uint32_t>(ipc::ServerState::Terminated))
      log_error(fmt::format("funnel: this process was terminated by funnelctl terminate (funnel-server of run directory "
                            "{}): its outstanding GPU work was dropped; CUDA calls now fail with "
                            "cudaErrorDevicesUnavailable",
                            dir));
    else if (server_stopped_.load())
      log_error(fmt::format("funnel: the funnel-server of run directory {} (pid {}) is stopped (SIGSTOP?) and answers "
                            "nothing; CUDA calls now fail with cudaErrorDevicesUnavailable (kill -CONT it for the "
                            "next process)",
                            dir, view_.header().server_pid));
    else {
      log_error(fmt::format("funnel: the funnel-server of run directory {} (FUNNEL_RUN_DIR) is gone; CUDA calls now fail with "
                    "cudaErrorDevicesUnavailable",
                    dir));
      // A killed server left its files (channels, pinned buffers: /dev/shm memory): the
      // first client to notice removes them, unless a server is being started there again.
      if (settings_) reclaim_dead_run_dir(settings_->run_dir, view_.header().server_pid);
    }
  }
  dead_.store(true);
  // Wake this process's sleepers so that they notice at once.
  auto& c = view_.completion();
  c.reply_epoch.fetch_add(1);
  ipc::futex_wake_all(c.reply_epoch);
  ipc::futex_wake_all(view_.control().space);
  for (uint32_t i = 0; i < view_.header().staging_slots; ++i) ipc::futex_wake_all(view_.staging_state(i));
  slot_cv_.notify_all();
  stage_cv_.notify_all();
}

bool Runtime::gone() noexcept {
  if (dead_.load(std::memory_order_relaxed)) return true;
  if (ipc::peer_hung_up(sock_.get()) || view_.completion().server_state.load() != 0) {
    mark_dead();
    return true;
  }
  return false;
}

Status Runtime::ready() noexcept {
  if (Status s = ensure(); s != Status::Success) return s;
  if (dead_.load(std::memory_order_relaxed)) return Status::DevicesUnavailable;
  return sticky();
}

Status Runtime::sticky() noexcept {
  const int32_t e = view_.completion().sticky_error.load(std::memory_order_acquire);
  // The server ended this session (funnelctl terminate): the notice says so before the
  // failed call, which may be the program's last, returns (the watcher may not have run yet).
  if (e == static_cast<int32_t>(Status::DevicesUnavailable)) gone();
  return static_cast<Status>(e);
}

uint64_t Runtime::write_record(Opcode op, int device, uint64_t stream, uint32_t reply_slot, const void* payload,
                               uint32_t n, std::span<const std::byte> trailing) noexcept {
  std::lock_guard lk(ring_mu_);
  return write_record_locked(op, device, stream, reply_slot, payload, n, trailing, [&] { return gone(); });
}

template <class GiveUp>
uint64_t Runtime::write_record_locked(Opcode op, int device, uint64_t stream, uint32_t reply_slot,
                                      const void* payload, uint32_t n, std::span<const std::byte> trailing,
                                      GiveUp give_up) noexcept {
  const uint32_t size = ipc::record_size_for(uint64_t{n} + trailing.size());
  std::byte* at = writer_.reserve(size, give_up);
  if (at == nullptr) return 0;
  ipc::CommandHeader h{};
  h.size = size;
  h.opcode = op;
  h.seq = ++next_seq_;
  // Only the calls the client waits for are timed (a launch needs no clock read).
  h.posted_us = reply_slot != ipc::kNoReply ? ipc::monotonic_us16() : 0;
  h.reply_slot = reply_slot;
  // This process's ordinal -> the server's (FUNNEL_GPU_MAP / FUNNEL_RANKS_PER_GPU); one
  // past the devices it sees stays invalid at the server too.
  h.device = device < 0 || !one_device_ ? device : device < device_count_ ? device + device_base_ : INT32_MAX;
  h.stream = stream;
  std::memcpy(at, &h, sizeof h);
  if (n != 0) std::memcpy(at + sizeof h, payload, n);
  if (!trailing.empty()) std::memcpy(at + sizeof h + n, trailing.data(), trailing.size());
  // A message's half is quiet too: its poster waits by polling a word, and nudge()s then.
  writer_.publish(op == Opcode::Launch || op == Opcode::MsgPost);
  if (op == Opcode::MsgPost) quiet_posted_.store(true, std::memory_order_release);
  // Work for the stream (or a change of it): it may be busy now.  Synchronize and query
  // only look.
  if (stream != 0 && op != Opcode::StreamSynchronize && op != Opcode::StreamQuery)
    stream_posts_[stream % kStreamBuckets].fetch_add(1, std::memory_order_release);
  else if (stream == 0 && ipc::queues_on_stream(op))
    if (auto* posts = legacy_posts(device)) posts->fetch_add(1, std::memory_order_release);
  return h.seq;
}

void Runtime::nudge() noexcept {
  if (!quiet_posted_.load(std::memory_order_acquire)) return;
  std::lock_guard lk(ring_mu_);
  if (quiet_posted_.exchange(false, std::memory_order_acq_rel)) writer_.wake();
}

std::atomic<uint64_t>* Runtime::legacy_posts(int device) noexcept {
  if (device < 0 || device >= static_cast<int>(ipc::kMaxDevices)) return nullptr;
  return &legacy_posts_[static_cast<size_t>(device)];
}

bool Runtime::legacy_idle(int device) noexcept {
  const auto* posts = legacy_posts(device);
  return posts != nullptr && legacy_idle_at_[static_cast<size_t>(device)].load(std::memory_order_acquire) ==
                                 posts->load(std::memory_order_acquire);
}

Status Runtime::record_event(EventObj& ev, int device, uint64_t stream, bool blocking, bool quiet,
                             const void* payload, uint32_t n) noexcept {
  if (Status s = ready(); s != Status::Success) return s;
  std::lock_guard lk(ring_mu_);
  // Under the ring lock: no other thread's work for the stream (or record of the event) can
  // come between these checks and the decision.
  if (quiet && ev.known_complete() && known_idle(stream) && (!blocking || legacy_idle(device)))
    return Status::Success;
  if (write_record_locked(Opcode::EventRecord, device, stream, ipc::kNoReply, payload, n, {},
                          [&] { return gone(); }) == 0)
    return Status::DevicesUnavailable;
  ev.written.fetch_add(1, std::memory_order_release);
  return Status::Success;
}

void Runtime::mark_idle(uint64_t stream, uint64_t posts) noexcept {
  if (stream == 0) return;
  std::lock_guard lk(idle_mu_);
  idle_marks_[stream % kStreamBuckets] = IdleMark{stream, posts};
}

bool Runtime::known_idle(uint64_t stream) noexcept {
  if (stream == 0) return false;
  const size_t b = stream % kStreamBuckets;
  std::lock_guard lk(idle_mu_);
  const IdleMark& m = idle_marks_[b];
  return m.stream == stream && m.posts == stream_posts_[b].load(std::memory_order_acquire);
}

int Runtime::acquire_reply_slot() noexcept {
  std::unique_lock lk(slot_mu_);
  while (free_slots_.empty()) {
    if (dead_.load()) return -1;
    slot_cv_.wait_for(lk, std::chrono::milliseconds(20));
  }
  const uint32_t s = free_slots_.back();
  free_slots_.pop_back();
  // Whatever the GPU last wrote there belonged to an earlier call (wait_reply).
  view_.reply_word(s).store(0, std::memory_order_relaxed);
  return static_cast<int>(s);
}

void Runtime::release_reply_slot(uint32_t s) noexcept {
  {
    std::lock_guard lk(slot_mu_);
    free_slots_.push_back(s);
  }
  slot_cv_.notify_one();
}

ipc::WaitOptions Runtime::wait_options() noexcept {
  auto& c = view_.completion();
  ipc::WaitOptions o{.sleepers = &c.client_waiting};
  if (c.worker_on_client_cpus.load(std::memory_order_relaxed) != 0) o.pause = {};
  // The current device's scheduling policy (cudaSetDeviceFlags): blocking sync sleeps at once,
  // yield yields from the start; spin and auto wait the default way (spin, then sleep).
  switch (context_flags(current_device()).load(std::memory_order_relaxed) & 0x7u) {
    case 0x4u: o.spin = {}; break;     // cudaDeviceScheduleBlockingSync
    case 0x2u: o.pause = {}; break;    // cudaDeviceScheduleYield
    default: break;
  }
  return o;
}

Status Runtime::wait_reply(uint32_t slot, uint64_t seq, Reply* reply, Opcode op) noexcept {
  auto& rs = view_.reply(slot);
  auto& c = view_.completion();
  // Answered by the worker (rs.seq) or by the GPU itself (the reply word).
  auto& word = view_.reply_word(slot);
  auto done = [&] { return ipc::reply_arrived(rs, word, seq); };
  // A call may wait as long as its GPU work runs; one that waits this long is said, once, with
  // what it waits for (a hang's first clue: the slot and the word as this process sees them).
  const auto since = std::chrono::steady_clock::now();
  bool said = false;
  auto give_up = [&] {
    if (!said && std::chrono::steady_clock::now() - since > kLongWait) {
      said = true;
      log_error(fmt::format("funnel: a call (opcode {}) has waited {} s for funnel-server and waits on: reply slot {}, "
                            "seq {}; the slot shows seq {}, its word {} (pid {})",
                            static_cast<int>(op), kLongWait.count(), slot, seq, rs.seq.load(), word.load(),
                            ::getpid()));
    }
    return gone();
  };
  const bool ok = ipc::wait_until(c.reply_epoch, done, give_up, wait_options());
  if (!ok) return Status::DevicesUnavailable;  // the slot stays taken: a late reply may still land in it
  Reply r;
  r.status = static_cast<Status>(rs.status);
  std::memcpy(r.value, rs.value, sizeof r.value);
  release_reply_slot(slot);
  if (reply != nullptr) *reply = r;
  // A server that stops (or terminates this client) answers the calls waiting then with
  // DevicesUnavailable: say why now, before the program acts on the error (the watcher thread
  // may see the stop only after the program has exited on it).
  if (r.status == Status::DevicesUnavailable) gone();
  return r.status;
}

Status Runtime::take_deferred() noexcept {
  auto& c = view_.completion();
  if (Status s = sticky(); s != Status::Success) return s;
  // A load first: an exchange would take the cache line from the server every call.
  if (c.deferred_error.load(std::memory_order_acquire) == 0) return Status::Success;
  return static_cast<Status>(c.deferred_error.exchange(0));
}

Status Runtime::call(Opcode op, int device, uint64_t stream, const void* payload, uint32_t n, Reply* reply) noexcept {
  if (Status s = ready(); s != Status::Success) return s;
  const bool looks = op == Opcode::StreamSynchronize || op == Opcode::StreamQuery;
  if (looks && known_idle(stream)) return take_deferred();
  // The count before our record: what was written before it, the server's answer covers.
  const uint64_t posts = looks ? stream_posts_[stream % kStreamBuckets].load(std::memory_order_acquire) : 0;
  // A synchronize of the device or of its legacy stream: what was queued there before it is done.
  const bool drains_legacy = op == Opcode::DeviceSynchronize || (op == Opcode::StreamSynchronize && stream == 0);
  const auto* legacy = drains_legacy ? legacy_posts(device) : nullptr;
  const uint64_t legacy_before = legacy != nullptr ? legacy->load(std::memory_order_acquire) : 0;
  const int slot = acquire_reply_slot();
  if (slot < 0) return Status::DevicesUnavailable;
  const uint64_t seq = write_record(op, device, stream, static_cast<uint32_t>(slot), payload, n);
  if (seq == 0) return Status::DevicesUnavailable;
  Status s = wait_reply(static_cast<uint32_t>(slot), seq, reply, op);
  if (s == Status::DevicesUnavailable && dead_.load()) return s;
  if (looks && s == Status::Success) mark_idle(stream, posts);
  // A late store of an older count only makes the legacy stream look busy.
  if (legacy != nullptr && s == Status::Success)
    legacy_idle_at_[static_cast<size_t>(device)].store(legacy_before, std::memory_order_release);
  // A synchronising call reports the first error of earlier asynchronous work.
  const Status deferred = take_deferred();
  if (deferred != Status::Success && (s == Status::Success || s == Status::NotReady)) return deferred;
  return s;
}

Status Runtime::ask(Opcode op, int device, const void* payload, uint32_t n, std::span<const std::byte> trailing,
                    Reply* reply) noexcept {
  if (Status s = ready(); s != Status::Success) return s;
  const int slot = acquire_reply_slot();
  if (slot < 0) return Status::DevicesUnavailable;
  const uint64_t seq = write_record(op, device, 0, static_cast<uint32_t>(slot), payload, n, trailing);
  if (seq == 0) return Status::DevicesUnavailable;
  return wait_reply(static_cast<uint32_t>(slot), seq, reply, op);
}

Status Runtime::post(Opcode op, int device, uint64_t stream, const void* payload, uint32_t n,
                     std::span<const std::byte> trailing) noexcept {
  if (Status s = ready(); s != Status::Success) return s;
  return write_record(op, device, stream, ipc::kNoReply, payload, n, trailing) != 0 ? Status::Success
                                                                                    : Status::DevicesUnavailable;
}

int Runtime::acquire_staging(bool block) noexcept {
  std::unique_lock lk(stage_mu_);
  for (;;) {
    // Round robin, not lowest-free: a thread that posts a chunk releases its slot at
    // once while the server's DMA from it is still in flight; taking the same slot
    // again would wait for that DMA and serialise the pipeline (measured: 3 GB/s
    // pageable H2D on the H100 instead of overlapping memcpy with DMA).
    const size_t n = stage_taken_.size();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (stage_cursor_ + k) % n;
      if (!stage_taken_[i]) {
        stage_taken_[i] = true;
        stage_cursor_ = (i + 1) % n;
        return static_cast<int>(i);
      }
    }
    if (!block || dead_.load()) return -1;
    stage_cv_.wait_for(lk, std::chrono::milliseconds(20));
  }
}

int Runtime::acquire_free_staging() noexcept {
  const int slot = acquire_staging(true);
  if (slot < 0) return -1;
  constexpr auto kFree = static_cast<uint32_t>(ipc::StagingState::Free);
  if (!wait_staging(slot, [](uint32_t v) { return v == kFree; })) {
    release_staging(slot);
    return -1;
  }
  return slot;
}

ParallelCopy& Runtime::copier() noexcept {
  std::call_once(copier_once_, [this] {
    const unsigned want = settings_ ? settings_->copy_threads : 1;
    try {
      copier_ = std::make_unique<ParallelCopy>(want);
    } catch (const std::exception& e) {
      log_error(fmt::format("funnel: cannot start {} copy threads ({}); pageable copies use one thread", want,
                            e.what()));
      copier_ = std::make_unique<ParallelCopy>(1);
    }
  });
  return *copier_;
}

void Runtime::release_staging(int slot) noexcept {
  {
    std::lock_guard lk(stage_mu_);
    stage_taken_[static_cast<size_t>(slot)] = false;
  }
  stage_cv_.notify_one();
}

}  // namespace funnel::client
