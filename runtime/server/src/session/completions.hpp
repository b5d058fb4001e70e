// A client's pending completions: the work a reply, a staging slot or a deferred free waits
// for, each watched by driver events or by the word the GPU stores when it is done
// (doc/design/channel.md, "GPU-answered calls"), and answered through Answers once done.
// The worker polls them between commands (Worker::turn); nothing here ever waits on the GPU.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "funnel/ipc/channel_layout.hpp"
#include "funnel/server/backend.hpp"
#include "session/answers.hpp"
#include "session/legacy_stream.hpp"
#include "session/poll_throttle.hpp"
#include "session/session.hpp"

namespace funnel::server {

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

// Work whose completion someone waits for: a reply, a staging slot, a deferred free.
struct Pending {
  std::vector<std::shared_ptr<BackendEvent>> events;
  uint32_t slot = ipc::kNoReply;
  uint64_t seq = 0;
  std::array<uint64_t, 5> values{};
  bool answered = false;
  // The GPU answers the client itself (ChannelHeader::reply_words_offset): on success the
  // worker answers through the slot as well once it saw the work done (a late store to the
  // word could hide the answer: Completions::finish); on failure it replies as usual.
  bool gpu_reply = false;
  // A GPU-answered call watches no event (one driver call fewer per waited copy): it is done
  // once its reply word holds seq's low half, once the client sent a later call on the slot
  // (it takes a slot again only after it saw the answer), or once `stream` reports idle or a
  // fault, asked only after kWordStreamCheck (worker.cpp; doc/design/channel.md).
  std::shared_ptr<BackendStream> stream;
  std::chrono::steady_clock::time_point since{};
  // Where the GPU stores the answer, and the value that means done: the reply slot's word and
  // seq's low half; or a staging slot's state (Completions::gpu_marks_slot), done once it is no
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
  // The worker must see it complete before its client can go on (Completions::urgent_).
  bool urgent() const noexcept { return !gpu_reply || race; }
  // A device fault took some of the events: the entry completes with this status.
  Status forced = Status::Success;
  // Runs once every event completed (with the first error among them); returns the reply status.
  std::function<Status(Status)> done;
  // Then, on success, fills the reply's values (cudaEventElapsedTime waiting for its events).
  std::function<Status(std::array<uint64_t, 5>&)> fill;
};

class Completions {
 public:
  // observe: a sticky status seen on a device (Worker::observe, which may release the device's
  // entries here: it is called only where no loop over the entries runs).
  Completions(SessionShared& shared, const ipc::ChannelView& view, Backend& backend, StreamTable& streams,
              Answers& answers, std::function<void(int, Status)> observe);

  bool empty() const noexcept { return pending_.empty(); }
  // Some entry waits for this thread to see it complete (not only for the GPU's answer).
  bool urgent() const noexcept { return !pending_.empty() && urgent_ != 0; }
  // Whether this turn polls the entries (poll_throttle_).
  bool due() noexcept;
  // Answers every completed entry; true if any completed.
  bool poll();
  void add(Pending&& p);

  // Runs `done` (and answers `slot`) once s's work so far completed.  gpu_reply: `done` only
  // keeps the books (nothing the client needs before it goes on), so the stream itself may
  // answer the client (Pending::gpu_reply) where the backend can.
  void when_complete(StreamEntry& s, uint32_t slot, uint64_t seq, std::function<Status(Status)> done,
                     bool gpu_reply = false);
  // Runs `done` (and answers `slot`) once all of this client's work so far on `device` (-1:
  // every device) completed; at once when its streams are idle.
  void when_drained(int device, uint32_t slot, uint64_t seq, std::function<Status(Status)> done);
  // A staged chunk: the GPU stores `state` into staging slot `index` itself where it can (Ready
  // after a device-to-host chunk, so the client copies it out; Free after a host-to-device one,
  // so the client fills the slot again), without waiting for this thread; false where it cannot
  // (GpuReplies::Off, no stream write): when_complete then releases the slot.
  bool gpu_marks_slot(StreamEntry& s, uint32_t index, ipc::StagingState state);
  // The client reused the reply slot or staging slot of `word` (a call on the slot, a copy
  // through the staging slot): a GPU-answered entry still watching it was seen done.
  void settle_reused(const std::atomic<uint32_t>& word);
  // An untimed event on `device` recorded on `stream` now, by which the worker watches the
  // stream's work so far; `out` stays empty where it cannot be made or recorded (the status says why).
  Status record_event(int device, BackendStream& stream, std::unique_ptr<BackendEvent>& out);

  // Device faults (device_fault.cpp): whether an entry involves `device`; every wait on
  // `device` answered with `st` now (a wait that also involves other devices keeps their events
  // and completes with `st` once they are done).
  bool uses_device(int device) const;
  void release_device(int device, Status st);
  // Teardown: every waiting reply answered with `st` (the server stops); then the entries
  // given until `deadline` to complete, and the rest abandoned (their `done` runs with Unknown).
  void answer_waiting(Status st);
  void finish_by(std::chrono::steady_clock::time_point deadline);

 private:
  Pending take(size_t i);  // entry i out of pending_ (the last entry moves into its place)
  // What poll does with an entry that completed (with `first`, the first error among its
  // events), before it leaves pending_.
  void finish(Pending& p, Status first);
  // Completes the entries whose word the GPU has stored, without asking the driver (an entry
  // still counted in CallsInFlight would make this client's next call look crowded).
  void reap_landed();
  static bool word_landed(const Pending& p) noexcept;
  // A GPU-answered entry (Pending::stream): whether it is done, and with what (`status`).
  bool word_entry_done(const Pending& p, std::chrono::steady_clock::time_point now, Status& status);
  // GpuReplies::Auto: counts a call the GPU may answer in `p` (Pending::in_flight); whether
  // another such call was on s's device already.
  bool count_in_flight(const StreamEntry& s, Pending& p);
  // Has the GPU store `value` into `word` once s's work so far is done: by a one-thread kernel
  // when `crowded` (Backend::store_word), else (or where the kernel is not available) by the
  // stream write.  False where neither can.
  bool store_answer(StreamEntry& s, std::atomic<uint32_t>& word, uint32_t value, bool crowded);

  SessionShared& shared_;
  ipc::ChannelView view_;
  Backend& backend_;
  StreamTable& streams_;
  Answers& answers_;
  std::function<void(int, Status)> observe_;
  std::vector<Pending> pending_;
  // Entries a client waits on that only this worker can answer (not gpu_reply), counted by add
  // and poll: while there are none the worker need not spin, and polls the others less often.
  size_t urgent_ = 0;
  // GPU-answered entries are polled every 20 us (measured on the H100: poll_throttle.hpp).
  PollThrottle poll_throttle_{std::chrono::microseconds(20)};
};

}  // namespace funnel::server
