// One client's streams, and the emulation of CUDA's legacy default stream among
// them (doc/design/channel.md, "Streams and events").  Backend streams never
// synchronise implicitly, so the ordering is made of backend events:
//   - before work on the legacy stream, it waits for each blocking stream that had
//     work since the legacy stream last waited for it;
//   - before work on a blocking stream, it waits for the legacy stream's work so far.
// Events are recorded only when someone has to wait, not after every command.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "funnel/ipc/protocol.hpp"
#include "funnel/server/backend.hpp"

namespace funnel::server {

struct StreamEntry {
  std::shared_ptr<BackendStream> stream;
  int device = 0;
  bool legacy = false;
  bool blocking = true;
  std::shared_ptr<BackendEvent> mark;  // re-recorded when another stream must wait for this one
  bool dirty = false;          // blocking: work the legacy stream has not waited for yet
  uint64_t legacy_seen = 0;    // blocking: the legacy generation it has waited for
  uint64_t generation = 0;     // legacy: bumped by every work item
  uint64_t marked_generation = 0;  // legacy: generation captured by `mark`
  std::vector<std::shared_ptr<BackendEvent>> orphans;  // legacy: last work of destroyed blocking streams
  uint64_t waits = 0;  // legacy: waits before_work queued on it for blocking streams
  // legacy: the event that GPU-local message halves posted here wait on (messages.cpp), and the
  // generation and waits it was recorded at: halves posted with no work between share it.
  std::shared_ptr<BackendEvent> msg_mark;
  uint64_t msg_mark_generation = 0, msg_mark_waits = 0;
  int64_t busy_since_ns = 0;  // GPU busy accounting: start of the open span (steady clock; 0: none)
  int64_t last_work_ns = 0;   // when work was last queued on it (steady clock)
  // Set when the last work queued stores done_value in *done_word (an event's state word, a
  // GPU reply word): once the word holds it, the stream's work is all done, while the driver
  // may still call the stream busy for some microseconds (Worker::stream_state).
  const std::atomic<uint32_t>* done_word = nullptr;
  uint32_t done_value = 0;
};

class SmPartitions;

// Where one client's streams go: its share of each GPU's SMs (FUNNEL_GPU_FRACTION; 0: the
// whole GPU) and the partition leased for it on a device's first stream (a client that
// uses one GPU of several holds SMs on that one only), and the shift of every stream
// priority it asks for (FUNNEL_CLIENT_PRIORITY: -1, one level up, for normal clients; 0
// for below-normal ones).
struct StreamPlacement {
  SmPartitions* partitions = nullptr;
  uint32_t share_bp = 0;
  ipc::GpuPlacement placement = ipc::GpuPlacement::Shared;
  std::array<std::shared_ptr<BackendPartition>, ipc::kMaxDevices> partition;
  int priority_offset = 0;
  // A client's stream or launch priority shifted by priority_offset, without overflow: the
  // value is clamped to a range far wider than any device's first (the backend clamps it to
  // the device's range as CUDA does).
  int shifted(int priority) const noexcept { return std::clamp(priority, -1024, 1024) + priority_offset; }
};

class StreamTable {
 public:
  // busy_ns: the client's GPU busy counter (ClientCounters::gpu_busy_ns); the table's owner is its only writer.
  StreamTable(Backend& b, StreamPlacement& p, std::atomic<uint64_t>& busy_ns)
      : backend_(b), placement_(p), busy_ns_(busy_ns) {}

  Status create(uint64_t id, int device, uint32_t flags, int priority);
  // Removes a client stream; its pending work still completes.  The caller keeps
  // the returned stream alive until that work is done.
  Status destroy(uint64_t id, std::shared_ptr<BackendStream>& out);
  // id 0 is the legacy stream of `device` (created on first use).
  StreamEntry* find(uint64_t id, int device, Status& st);

  Status before_work(StreamEntry& s);
  // Also opens the stream's busy span if it has none.
  void after_work(StreamEntry& s) noexcept;
  // Whether work was queued on `s` (after_work) less than `d` ago.
  static bool queued_within(const StreamEntry& s, std::chrono::nanoseconds d) noexcept;

  // GPU busy time (doc/accounting.md): a stream's span opens when work goes onto it while it
  // has none open, and closes when the stream is seen idle; a closed span adds to busy_ns.
  void close_busy(StreamEntry& s) noexcept;
  // Closes the open spans of `device`'s streams (-1: all): every one when the caller knows
  // they drained, else those the backend reports idle (one query per open span).
  void sweep_busy(int device, bool drained) noexcept;
  size_t open_spans() const noexcept { return open_spans_; }

  // Every stream of `device` (-1: all), the legacy ones included.
  std::vector<StreamEntry*> on_device(int device);
  bool has_device(int device) const noexcept;
  // Drops the client streams of `device` (DeviceReset); returns them for deferred destruction.
  std::vector<std::shared_ptr<BackendStream>> drop_device(int device);
  // Destroys every stream of `device`, the legacy one included, with their marks (a
  // device fault: the work is lost anyway).  Returns how many client streams went.
  size_t release_device(int device);
  size_t client_streams() const noexcept { return streams_.size(); }
  void clear() noexcept;

 private:
  Status ensure_mark(StreamEntry& s);
  StreamEntry* legacy(int device, Status& st);

  Status make_stream(int device, int priority, std::unique_ptr<BackendStream>& out);

  Backend& backend_;
  StreamPlacement& placement_;
  std::map<uint64_t, StreamEntry> streams_;
  std::map<int, StreamEntry> legacy_;
  std::atomic<uint64_t>& busy_ns_;
  size_t open_spans_ = 0;
};

}  // namespace funnel::server
