// A client's stream memory waits (cuStreamWaitValue32/64, the waits of cuStreamBatchMemOp) that
// may still hold a stream, and their release when the client is gone.
//
// A wait holds a stream of the server's one context per GPU until its word meets the condition;
// while it does, the driver's context-wide calls (cuMemFree, cuMemHostAlloc, cuMemHostRegister,
// cuModuleLoadData, ...: bench/probes/blocked_stream.cu) wait for it too.  A client that dies,
// detaches or faults with a wait still pending must not leave it there: release() meets every
// pending wait, in the order they were queued, by writing its word on a stream of the server's
// own (a write on another stream lets a held stream go: measured on the H100), each write after
// the previous wait was passed (an event recorded right after each wait), so that waits on the
// same word in sequence are met in turn.  Only the client's own memory is written, and only once
// the client cannot see it any more.
#pragma once
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
  // Meets every wait not yet passed, and every later one as it is added.  Any thread (the
  // worker's teardown, a device fault, the hang-up watcher, the main loop).  Never throws.
  void release() noexcept;
  // Waits until the writes release() queued have landed: before any of the client's memory is
  // freed (a wait its own work met may have let its stream drain before the server's write to
  // the word came).  A no-op when nothing was released.  The worker's thread.
  void drain() noexcept;
  // Waits remembered and not yet known to be passed.
  size_t pending() const;

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
  // Writes w's word on the device's release stream, after the waits released before it.
  void meet(Wait& w) noexcept;

  Backend& backend_;
  mutable std::mutex m_;
  std::vector<Wait> waits_;     // in the order they were queued
  size_t prune_at_ = 64;        // prune() when this many are remembered
  bool released_ = false;
  BackendEvent* last_met_ = nullptr;  // the event of the wait met last (release())
  std::vector<std::unique_ptr<BackendStream>> release_streams_;  // by device, made when needed
};

}  // namespace funnel::server
