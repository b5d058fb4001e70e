// The server-wide health of each device (doc/design/faults.md).  A worker that sees a
// sticky status on device d reports it here; every worker notices through one relaxed
// load of epoch() per loop iteration, and reads the details only when it changed; the
// main loop resets the device once every session released what it held there, or, where
// the backend cannot, restarts the server once every client has left.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>

#include "funnel/ipc/channel_layout.hpp"
#include "funnel/ipc/status.hpp"

namespace funnel::server {

class DeviceHealth {
 public:
  struct State {
    ipc::Status fault = ipc::Status::Success;  // Success: healthy
    uint64_t generation = 0;                   // faults so far: names the current one
    uint32_t first_observer = 0;               // client id of the current fault's first report
  };

  // Bumped (last, with release) by every fault and every recovery.
  uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_relaxed); }
  uint64_t epoch_acquire() const noexcept { return epoch_.load(std::memory_order_acquire); }
  State state(int device) const noexcept;
  bool faulted(int device) const noexcept { return state(device).fault != ipc::Status::Success; }

  // Device `device` is poisoned with `status` (sticky).  True when this report started
  // the fault (the caller observed it first); false when the device is already faulted.
  bool report(int device, ipc::Status status, uint32_t client) noexcept;
  // The main loop reset the device in process: healthy again.
  void recovered(int device) noexcept;
  uint64_t recoveries(int device) const noexcept;

 private:
  struct Entry {
    std::atomic<int32_t> fault{0};
    std::atomic<uint64_t> generation{0};
    std::atomic<uint32_t> first_observer{0};
    std::atomic<uint64_t> recoveries{0};
  };
  static bool valid(int device) noexcept { return device >= 0 && static_cast<uint32_t>(device) < ipc::kMaxDevices; }
  std::array<Entry, ipc::kMaxDevices> devices_;
  std::atomic<uint64_t> epoch_{0};
};

}  // namespace funnel::server
