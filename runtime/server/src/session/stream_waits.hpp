// A client's stream memory waits (cuStreamWaitValue32/64, the waits of cuStreamBatchMemOp) that
// may still hold a stream, and their release when the client is gone.
//
// A wait holds a stream of the server's one context per GPU until its word meets the condition;
// while it does, the driver's context-wide calls (cuMemFree, cuMemHostAlloc, cuMemHostRegister,
// cuModuleLoadData, ...: bench/probes/blocked_stream.cu) wait for it too.  A client that dies,
// detaches or faults with a wait still pending must not leave it there: release() meets the
// pending waits by writing their words on a stream of the server's own (a write on another
// stream lets a held stream go: measured on the H100), in rounds: each round writes the value
// that meets the oldest pending wait of each word (an event recorded right after each wait says
// when it passed), so that waits on one word for 1 and then 2 are met in turn, and a word that
// the client's own queued work overwrote is written again.  settle() repeats the rounds until
// nothing is pending (the teardown, before it synchronises the client's streams).  Only the
// client's own memory is written, once the client cannot see it any more, and drain() sees the
// writes landed before any of that memory is freed.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "funnel/ipc/commands.hpp"
#include "funnel/ipc/status.hpp"
#include "funnel/server/backend.hpp"

namespace funnel::server {

class StreamWaits {
 public:
  explicit StreamWaits(Backend& backend) : backend_(backend) {}
  ~StreamWaits();
  StreamWaits(const StreamWaits&) = delete;
  StreamWaits& operator=(const StreamWaits&) = delete;

  // A word that meets the wait (what release() writes).
  static uint64_t meeting_value(uint32_t condition, uint64_t value) noexcept;

  // Queues a wait on `stream` through `enqueue` (the backend's stream_mem_op) and remembers it,
  // with an event recorded after it.  LaunchOutOfResources, and nothing queued, while kMaxPending
  // waits are not yet passed.  Once the client is released, the wait is met at once.  The
  // worker's thread.
  Status add(BackendStream& stream, uint64_t address, bool wide, uint32_t condition, uint64_t value,
             const std::function<Status()>& enqueue);
  // Marks the client gone and runs a first round (and one for every wait added later).  Any
  // thread (the worker's teardown, a device fault, the hang-up watcher, the main loop).
  void release() noexcept;
  // Rounds until no wait is pending, or `deadline` (false then).  After release(); the worker's
  // thread.
  bool settle(std::chrono::steady_clock::time_point deadline) noexcept;
  // Waits until the writes release() queued have landed: before any of the client's memory is
  // freed (a wait its own work met may have let its stream drain before the server's write to
  // the word came).  A no-op when nothing was released.  The worker's thread.
  void drain() noexcept;

  static constexpr size_t kMaxPending = 4096;

 private:
  struct Wait {
    int device;
    uint64_t address;
    bool wide;
    uint64_t meet;  // the value release() writes
    std::unique_ptr<BackendEvent> passed;  // recorded after the wait
  };
  // Drops the waits already passed.  Caller holds m_.
  void prune();
  // One round (prune, then the oldest pending wait of each word met); the waits still pending.
  // Caller holds m_.
  size_t meet_round();
  // Writes w's word on the device's release stream.  Caller holds m_.
  void meet(Wait& w) noexcept;
  static constexpr auto kRound = std::chrono::microseconds(200);

  Backend& backend_;
  std::mutex m_;
  std::vector<Wait> waits_;     // in the order they were queued
  size_t prune_at_ = 64;        // prune() when this many are remembered
  bool released_ = false;
  std::vector<std::unique_ptr<BackendStream>> release_streams_;  // by device, made when needed
};

}  // namespace funnel::server
