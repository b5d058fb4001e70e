// The client's process-wide state: one attachment to the job's funnel-server (made
// lazily at the first call that needs it), the command ring, reply slots, staging
// slots, and the client-side tables (allocations, pinned files, streams, events: tables.hpp).
// A forked child gets a fresh Runtime (see fork handling in runtime.cpp).
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "funnel/common/config.hpp"
#include "funnel/common/parallel_copy.hpp"
#include "funnel/ipc/channel_layout.hpp"
#include "funnel/ipc/commands.hpp"
#include "funnel/ipc/ring.hpp"
#include "funnel/ipc/segment.hpp"
#include "funnel/ipc/socket.hpp"
#include "funnel/ipc/status.hpp"
#include "tables.hpp"

namespace funnel::client {

using ipc::Opcode;
using ipc::Status;

struct Reply {
  Status status = Status::Success;
  uint64_t value[5]{};
};

class Runtime {
 public:
  // The current process's runtime (a forked child gets a fresh one).
  static Runtime& get() noexcept;

  // Attaches if not yet attached.  Success, or the error every call must return.
  Status ensure() noexcept;
  // ensure() plus sticky and dead checks: call before any server work.
  Status ready() noexcept;

  const ipc::ChannelView& view() const noexcept { return view_; }
  const Settings* settings() const noexcept { return settings_ ? &*settings_ : nullptr; }
  // The devices this process sees: all of the server's, or under FUNNEL_GPU_MAP /
  // FUNNEL_RANKS_PER_GPU the one it was given, as device 0 (commands carry the server's
  // ordinal: write_record translates).
  int device_count() const noexcept { return device_count_; }
  const ipc::DeviceRecord& device(int i) const noexcept { return view_.devices()[i + device_base_]; }
  // This process's number of the server's device `server_index` (as commands carry it); -1 for a
  // device this process does not use.
  int client_device(int server_index) const noexcept {
    const int i = server_index - device_base_;
    return i >= 0 && i < device_count_ ? i : -1;
  }

  // A command that waits for its reply (and takes the deferred error).  StreamSynchronize
  // and StreamQuery of a stream known idle are answered here (doc/design/channel.md,
  // "Idle streams"): the deferred or sticky error, no round trip.
  // A call (or a host function) that waits longer than this says so on stderr, once, with
  // what it waits for.
  static constexpr std::chrono::seconds kLongWait{30};
  Status call(Opcode op, int device, uint64_t stream, const void* payload, uint32_t n, Reply* reply = nullptr) noexcept;
  // A round trip whose status is the command's own: the deferred error of earlier work
  // stays for the next synchronising call (module, kernel and symbol look-ups).
  // `trailing`: bytes written after the payload (names).
  Status ask(Opcode op, int device, const void* payload, uint32_t n, std::span<const std::byte> trailing,
             Reply* reply) noexcept;
  // cudaEventRecord of `ev` on `stream`.  A record that nothing can tell from none is not
  // written (doc/design/channel.md, "Records on idle streams"): `quiet` (the caller's check:
  // an event without timing, of the stream's device, default flags, not the legacy stream)
  // and, under the ring lock, the event known complete and the stream known idle (for a
  // `blocking` stream, the device's legacy stream too).  Otherwise written and counted.
  Status record_event(EventObj& ev, int device, uint64_t stream, bool blocking, bool quiet, const void* payload,
                      uint32_t n) noexcept;
  // A one-way command, optionally followed by trailing bytes (a launch's parameters).
  Status post(Opcode op, int device, uint64_t stream, const void* payload, uint32_t n,
              std::span<const std::byte> trailing = {}) noexcept;
  // Wakes a napping server for the quiet records this process posted (GPU-local messages'
  // halves: funnel_msg_test of a pending one calls it); nothing when none is pending.
  void nudge() noexcept;
  // Takes the first error of earlier one-way work (a synchronising call's duty).
  Status take_deferred() noexcept;
  // The channel's sticky error (Success if none); a session ended by the server is
  // reported (mark_dead's notice) before it is returned.
  Status sticky() noexcept;

  // Staging slots: process-local ownership (several host threads copy at once).
  int acquire_staging(bool block) noexcept;  // -1 when none (non-blocking) or the server is gone
  void release_staging(int slot) noexcept;
  // A slot taken as acquire_staging(true) does, once the server is done with its previous
  // transfer (state Free); -1 when the server is gone.
  int acquire_free_staging() noexcept;
  // Waits until slot's state word satisfies pred(state); false when the server is gone.
  template <class Pred>
  bool wait_staging(int slot, Pred pred) noexcept {
    auto& w = view_.staging_state(static_cast<uint32_t>(slot));
    return ipc::wait_until(w, [&] { return pred(w.load(std::memory_order_acquire)); }, [&] { return gone(); },
                           wait_options());
  }
  // How a thread waits for the server or the GPU (a reply, a staging state): counted in
  // client_waiting while asleep, so that the server wakes only when somebody sleeps; no pause
  // loop when the worker runs on this client's cores (it would take the worker's time).
  ipc::WaitOptions wait_options() noexcept;

  // Copies into and out of staging slots, split across FUNNEL_COPY_THREADS threads when
  // large.  Made at first use; like the Runtime, never destroyed.
  ParallelCopy& copier() noexcept;

  bool gone() noexcept;  // the server hung up or shuts down (prints once)
  void mark_dead() noexcept;

  // The client-side tables (tables.hpp), behind their own lock.
  ClientTables tables;
  std::atomic<uint64_t> next_stream_id{1};
  std::atomic<uint64_t> next_event_id{1};
  std::atomic<uint64_t> next_pinned_hint{0};

  void forget_after_fork() noexcept;  // the child: drop the parent's connection
  // At process exit (the library's destructor, after the program's own static
  // destructors): tell the server this client leaves on purpose, so that its log says
  // "detached", not "died".  Never waits for the server; later calls fail at once.
  void detach_at_exit() noexcept;
  // At the exit: a warning on stderr if this process has the GPU's device files open or mapped.
  void warn_if_gpu_opened() noexcept;
  // detach_at_exit(), then waits (at most `wait`) for the server to hang up: by then it
  // has freed this client's resources and logged the detach (funnel_detach()).  False
  // when the server did not hang up in time.
  bool detach_and_wait(std::chrono::milliseconds wait) noexcept;
  // Whether detach_and_wait ran (funnel_detach: this process left the server on purpose).
  bool left() const noexcept { return left_.load(std::memory_order_acquire); }
  bool attached() const noexcept { return attached_.load(std::memory_order_acquire); }

 private:
  Status attach_locked() noexcept;
  Status wait_reply(uint32_t slot, uint64_t seq, Reply* reply, Opcode op) noexcept;
  uint64_t write_record(Opcode op, int device, uint64_t stream, uint32_t reply_slot, const void* payload,
                        uint32_t n, std::span<const std::byte> trailing = {}) noexcept;
  // write_record's body: the caller holds ring_mu_; 0 once give_up() fired.
  template <class GiveUp>
  uint64_t write_record_locked(Opcode op, int device, uint64_t stream, uint32_t reply_slot, const void* payload,
                               uint32_t n, std::span<const std::byte> trailing, GiveUp give_up) noexcept;
  int acquire_reply_slot() noexcept;
  void release_reply_slot(uint32_t s) noexcept;
  void start_watcher() noexcept;

  std::mutex attach_mu_;
  std::atomic<bool> attached_{false};
  std::atomic<bool> left_{false};
  Status attach_error_ = Status::Success;  // set once attaching failed for good
  std::optional<Settings> settings_;
  ipc::UniqueFd sock_;
  ipc::MappedFile channel_;
  ipc::ChannelView view_;
  int device_base_ = 0;   // the server's ordinal of this process's device 0
  int device_count_ = 0;
  bool one_device_ = false;  // FUNNEL_GPU_MAP / FUNNEL_RANKS_PER_GPU chose device_base_
  std::atomic<bool> dead_{false};
  // The death notice is printed once, before dead_ is set: a thread that sees dead_ fails
  // its call, and the program may exit right after, so the notice must be out by then.
  std::mutex dead_mu_;
  bool dead_reported_ = false;  // under dead_mu_
  std::atomic<bool> server_stopped_{false};  // the watcher found the server stopped (SIGSTOP)

  std::mutex ring_mu_;
  std::atomic<bool> quiet_posted_{false};  // a MsgPost since the last nudge()
  // Idle streams: a stream that a synchronize or query found idle, and that no record was
  // written for since, is idle still.  Records are counted per bucket of stream ids (bumped
  // under ring_mu_, after the record is published: a record for one stream makes every
  // stream of its bucket look busy, never a wrong "idle"); per bucket, the last stream found
  // idle and the count it was found at.  Stream 0 (the legacy stream) is always asked: its
  // implicit synchronization with the other streams is the server's.
  bool known_idle(uint64_t stream) noexcept;
  void mark_idle(uint64_t stream, uint64_t posts) noexcept;
  // The legacy stream of each device: records that queue work on it (ipc::queues_on_stream),
  // and that count when a DeviceSynchronize or StreamSynchronize of it last answered Success.
  // Equal: nothing is pending there, so a blocking stream's next work waits for nothing.
  bool legacy_idle(int device) noexcept;
  std::atomic<uint64_t>* legacy_posts(int device) noexcept;  // nullptr for a device out of range
  std::array<std::atomic<uint64_t>, ipc::kMaxDevices> legacy_posts_{};
  std::array<std::atomic<uint64_t>, ipc::kMaxDevices> legacy_idle_at_{};
  static constexpr size_t kStreamBuckets = 256;
  struct IdleMark {
    uint64_t stream = 0;
    uint64_t posts = 0;
  };
  std::array<std::atomic<uint64_t>, kStreamBuckets> stream_posts_{};
  std::mutex idle_mu_;
  std::array<IdleMark, kStreamBuckets> idle_marks_{};
  ipc::RingWriter writer_;
  uint64_t next_seq_ = 0;

  std::mutex slot_mu_;
  std::condition_variable slot_cv_;
  std::vector<uint32_t> free_slots_;

  std::mutex stage_mu_;
  std::condition_variable stage_cv_;
  std::vector<bool> stage_taken_;
  size_t stage_cursor_ = 0;  // where the next search for a slot starts (round robin)

  std::once_flag copier_once_;
  std::unique_ptr<ParallelCopy> copier_;
};

}  // namespace funnel::client
