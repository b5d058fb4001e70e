// The cuda backend's state of each device and what its streams, events, modules and
// partitions share with it (Shared): the driver, the devices' primary contexts, the event
// pool, and the binding of a device's context to the calling thread.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "backend/cuda/driver.hpp"
#include "funnel/server/backend.hpp"

namespace funnel::server::cuda {

struct Device {
  int ordinal = 0;  // CUDA ordinal (as this process's driver numbers devices)
  CUdevice handle = 0;
  // The retained primary context.  reset_device replaces it (and bumps the generation)
  // while other threads bind other devices, so both are atomic.
  std::atomic<CUcontext> context{nullptr};
  std::atomic<uint64_t> generation{0};
  // CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: registered host memory
  // has the same address on the GPU (write_value needs it; without it, clients ask).
  bool host_pointer_is_device_pointer = false;
  // The device's SMs split into groups at the hardware's granularity (sm_groups), made
  // once on first use: partitions are green contexts over some of these groups, and a
  // descriptor may only combine resources of one split.
  std::once_flag split_once;
  Status split_status = Status::Success;
  SmGroups layout;
  std::vector<CUdevResource> groups;

  Device() = default;
  Device(const Device& o)
      : ordinal(o.ordinal),
        handle(o.handle),
        context(o.context.load()),
        generation(o.generation.load()),
        host_pointer_is_device_pointer(o.host_pointer_is_device_pointer) {}
  Device& operator=(const Device&) = delete;
};

// on_any_device's warning that a device's context answered a sticky status.
void log_context_faulted(size_t device, Status st);

// What streams and events need after the backend is gone: they share ownership of it, so
// that destruction order does not matter.
struct Shared {
  Driver drv;
  std::vector<Device> devices;
  uint64_t id = 0;  // unique per backend instance, for the per-thread current-context cache

  // Untimed events of finished completions, per device, for reuse: every synchronous
  // copy, staged chunk and stream synchronisation that has to wait records one, and
  // cuEventCreate + cuEventDestroy cost as much as the rest of such a round trip.
  // Re-recording a CUevent is allowed once nothing queries its old record.
  static constexpr size_t kPoolLimit = 256;
  mutable std::mutex pool_mu;
  mutable std::vector<std::vector<CUevent>> pool;

  // Calls that need some current context but no particular device (host registration,
  // library loads) hold this shared (on_any_device); reset_device holds it exclusively
  // so that none of them runs in a context being destroyed.  Per-device calls need no
  // lock: the server resets a device only once no session uses it.
  mutable std::shared_mutex reset_mu;
  // Per device: its context answered a sticky status to a call for no particular device.
  // Such calls skip it from then on; reset_device clears it.
  mutable std::array<std::atomic<bool>, ipc::kMaxDevices> context_faulted{};

  // The one-thread kernel of store_word (kAnswerPtx), loaded once with the backend; null
  // when the driver refused it (store_word then answers NotSupported).
  CUlibrary answer_library = nullptr;
  CUkernel answer_kernel = nullptr;

  ~Shared();

  // Makes the device's primary context current in this thread (cached per thread).  The
  // cache key includes the device's generation: after a reset_device every thread binds
  // the new context at its next call, even where the driver handed back the same handle.
  Status bind(int device) const noexcept {
    struct Current {
      uint64_t backend = 0;
      CUcontext context = nullptr;
      uint64_t generation = 0;
    };
    thread_local Current current;
    if (device < 0 || static_cast<size_t>(device) >= devices.size()) return Status::InvalidDevice;
    const Device& dev = devices[static_cast<size_t>(device)];
    // Generation first: a context stored before the generation bump is never cached under
    // the new generation with the old handle.
    const uint64_t generation = dev.generation.load(std::memory_order_acquire);
    const CUcontext ctx = dev.context.load(std::memory_order_acquire);
    if (current.backend == id && current.context == ctx && current.generation == generation) return Status::Success;
    const Status s = FUNNEL_CU(drv, cuCtxSetCurrent, ctx);
    if (ok(s)) current = Current{id, ctx, generation};
    return s;
  }

  // Runs `call` (a call for no particular device) in the context of the first device
  // whose context has not faulted; the caller holds reset_mu shared.  After a GPU fault
  // every call in that device's context answers the fault until the process ends (the
  // server restarts to recover, doc/design/faults.md), and clients of the other devices
  // must still register host memory and load modules meanwhile.
  template <class Call>
  Status on_any_device(Call&& call) const {
    Status st = Status::Success;
    bool tried = false;
    for (size_t i = 0; i < devices.size(); ++i) {
      if (context_faulted[i].load(std::memory_order_acquire)) continue;
      tried = true;
      st = bind(static_cast<int>(i));
      if (ok(st)) st = call();
      if (!ipc::is_sticky(st)) return st;
      if (!context_faulted[i].exchange(true, std::memory_order_acq_rel)) log_context_faulted(i, st);
    }
    if (tried) return st;
    st = bind(0);  // every device faulted: device 0 answers the fault
    return ok(st) ? call() : st;
  }
};

// Loads store_word's one-thread kernel into shared.answer_library/answer_kernel; leaves
// answer_kernel null (store_word then answers NotSupported) when the driver refuses it.
void load_answer_kernel(Shared& shared);

}  // namespace funnel::server::cuda
