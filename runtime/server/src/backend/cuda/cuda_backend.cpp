// The CUDA backend: the driver API (opened with dlopen, see driver.hpp), the primary
// context of each GPU, non-blocking streams.  doc/design/cuda-backend.md explains it.
// This file: the devices (describe, priority range, limits, reset) and make_cuda_backend;
// cuda_backend.hpp says where the rest is.

// As in driver.cpp: GCC 12/13's false -Warray-bounds in fmt 9 (spdlog), before the includes.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/driver.hpp"
#include "funnel/server/backend.hpp"

namespace funnel::server {
namespace cuda {
namespace {

std::atomic<uint64_t> g_next_backend_id{1};

bool to_culimit(Limit limit, CUlimit& out) noexcept {
  switch (limit) {
    case Limit::StackSize: out = CU_LIMIT_STACK_SIZE; return true;
    case Limit::PrintfFifoSize: out = CU_LIMIT_PRINTF_FIFO_SIZE; return true;
    case Limit::MallocHeapSize: out = CU_LIMIT_MALLOC_HEAP_SIZE; return true;
    case Limit::DevRuntimeSyncDepth: out = CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH; return true;
    case Limit::DevRuntimePendingLaunchCount: out = CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT; return true;
    case Limit::MaxL2FetchGranularity: out = CU_LIMIT_MAX_L2_FETCH_GRANULARITY; return true;
    case Limit::PersistingL2CacheSize: out = CU_LIMIT_PERSISTING_L2_CACHE_SIZE; return true;
  }
  return false;
}

}  // namespace

void CudaBackend::describe(int device, ipc::DeviceRecord& out) {
  if (device < 0 || device >= device_count()) fail("describe: no device " + std::to_string(device));
  const Driver& d = s_->drv;
  const Device& dev = s_->devices[static_cast<size_t>(device)];
  out = ipc::DeviceRecord{};
  auto must = [&](Status st, const char* what) {
    if (!ok(st)) fail(std::string("cuda: cannot read the ") + what + " of device " + std::to_string(dev.ordinal));
  };
  must(FUNNEL_CU(d, cuDeviceGetName, out.name, static_cast<int>(sizeof(out.name)), dev.handle), "name");
  out.name[sizeof(out.name) - 1] = '\0';
  CUuuid uuid{};
  must(FUNNEL_CU(d, cuDeviceGetUuid, &uuid, dev.handle), "UUID");
  static_assert(sizeof(uuid.bytes) == sizeof(out.uuid));
  std::memcpy(out.uuid, uuid.bytes, sizeof(out.uuid));
  must(FUNNEL_CU(d, cuDeviceGetPCIBusId, out.pci_bus_id, static_cast<int>(sizeof(out.pci_bus_id)), dev.handle),
       "PCI bus id");
  out.pci_bus_id[sizeof(out.pci_bus_id) - 1] = '\0';
  size_t total = 0;
  must(FUNNEL_CU(d, cuDeviceTotalMem, &total, dev.handle), "total memory");
  out.total_memory = total;
  out.ordinal = dev.ordinal;
  // Attributes the driver does not know (numbers retired or newer than it) stay 0.
  for (int a = 1; a < static_cast<int>(CU_DEVICE_ATTRIBUTE_MAX); ++a) {
    int v = 0;
    if (ok(FUNNEL_CU_QUIET(d, cuDeviceGetAttribute, &v, static_cast<CUdevice_attribute>(a), dev.handle))) {
      out.attributes[a] = v;
    }
  }
}

void CudaBackend::priority_range(int device, int& least, int& greatest) {
  least = 0;
  greatest = 0;
  if (!ok(s_->bind(device))) return;
  int l = 0, g = 0;
  if (ok(FUNNEL_CU(s_->drv, cuCtxGetStreamPriorityRange, &l, &g))) {
    least = l;
    greatest = g;
  }
}

Status CudaBackend::set_limit(int device, Limit limit, uint64_t value) {
  CUlimit l{};
  if (!to_culimit(limit, l)) return Status::UnsupportedLimit;
  if (Status st = s_->bind(device); !ok(st)) return st;
  // Quiet: a limit or value the GPU does not take is the client's answer, not the server's error.
  return FUNNEL_CU_QUIET(s_->drv, cuCtxSetLimit, l, value);
}

Status CudaBackend::get_limit(int device, Limit limit, uint64_t& value) {
  CUlimit l{};
  if (!to_culimit(limit, l)) return Status::UnsupportedLimit;
  if (Status st = s_->bind(device); !ok(st)) return st;
  size_t v = 0;
  const Status st = FUNNEL_CU_QUIET(s_->drv, cuCtxGetLimit, &v, l);
  if (ok(st)) value = v;
  return st;
}

Status CudaBackend::set_profiling(int device, bool on) {
  if (Status st = s_->bind(device); !ok(st)) return st;
  return on ? FUNNEL_CU(s_->drv, cuProfilerStart) : FUNNEL_CU(s_->drv, cuProfilerStop);
}

// A fresh context after a sticky fault (doc/design/faults.md).  Nothing calls it while
// resets_in_process() is false; it is kept for a driver that can recover in process
// (a reset of a device that did not fault worked on the H100, but host registrations
// made in its context were lost).  The pooled events belong to the context being
// destroyed; cuDevicePrimaryCtxReset destroys every allocation, stream, event and
// module instance in it but leaves our retain in place, so the context is released and
// retained again: the retain makes a fresh, active primary context.  CUlibrary objects
// are context-independent (the driver loads them into contexts created later), so the
// module cache survives; verified on the GPU by tests/gpu/backend_smoke.cpp.
Status CudaBackend::reset_device(int device) {
  if (device < 0 || device >= device_count()) return Status::InvalidDevice;
  std::unique_lock reset(s_->reset_mu);
  Device& dev = s_->devices[static_cast<size_t>(device)];
  {
    std::lock_guard lk(s_->pool_mu);
    auto& free = s_->pool[static_cast<size_t>(device)];
    if (ok(s_->bind(device)))
      for (CUevent e : free) FUNNEL_CU_QUIET(s_->drv, cuEventDestroy, e);  // a poisoned context may refuse
    free.clear();
  }
  // Nothing may stay current on a context being destroyed in this thread.
  FUNNEL_CU(s_->drv, cuCtxSetCurrent, nullptr);
  Status st = FUNNEL_CU(s_->drv, cuDevicePrimaryCtxReset, dev.handle);
  if (ok(st)) st = FUNNEL_CU(s_->drv, cuDevicePrimaryCtxRelease, dev.handle);
  if (ok(st)) {
    // Released: from here on the handle is ours only if the retain succeeds (~Shared
    // releases a non-null one).
    CUcontext ctx = nullptr;
    st = FUNNEL_CU(s_->drv, cuDevicePrimaryCtxRetain, &ctx, dev.handle);
    dev.context.store(ok(st) ? ctx : nullptr, std::memory_order_release);
  }
  dev.generation.fetch_add(1, std::memory_order_acq_rel);
  if (!ok(st)) return st;
  // The fresh context works: something small that needs it.
  if (Status b = s_->bind(device); !ok(b)) return b;
  size_t free_bytes = 0, total = 0;
  st = FUNNEL_CU(s_->drv, cuMemGetInfo, &free_bytes, &total);
  if (ok(st)) s_->context_faulted[static_cast<size_t>(device)].store(false, std::memory_order_release);
  return st;
}

namespace {

// make_cuda_backend, in the namespace of what it builds.
std::unique_ptr<Backend> make_backend(const std::vector<int>& devices) {
  auto shared = std::make_shared<Shared>();
  shared->drv = load_driver();
  shared->id = g_next_backend_id.fetch_add(1);
  const Driver& d = shared->drv;

  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string visible_note =
      visible != nullptr ? std::string(" (CUDA_VISIBLE_DEVICES=\"") + visible + "\")" : std::string();
  if (const CUresult r = d.cuInit(0); r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_NO_DEVICE) {
      fail("no CUDA device found" + visible_note +
           ": check nvidia-smi and CUDA_VISIBLE_DEVICES, run on a GPU node, or use --backend sim");
    }
    fail(std::string("the CUDA driver failed to initialise: cuInit: ") + error_name(d, r) + " (" +
         error_string(d, r) + "): check nvidia-smi and the driver installation, or use --backend sim");
  }
  int count = 0;
  if (!ok(FUNNEL_CU(d, cuDeviceGetCount, &count)) || count <= 0) {
    fail("no CUDA device found" + visible_note + ": run on a GPU node or use --backend sim");
  }

  std::vector<int> ordinals = devices;
  if (ordinals.empty()) {
    for (int i = 0; i < count; ++i) ordinals.push_back(i);
  }
  if (ordinals.size() > ipc::kMaxDevices) {
    fail("funnel serves at most " + std::to_string(ipc::kMaxDevices) + " devices per server; " +
         std::to_string(ordinals.size()) + " requested: choose fewer devices");
  }
  for (size_t i = 0; i < ordinals.size(); ++i) {
    const int o = ordinals[i];
    if (o < 0 || o >= count) {
      fail("CUDA device " + std::to_string(o) + " does not exist: this node has " + std::to_string(count) +
           " visible device(s), ordinals 0.." + std::to_string(count - 1) + visible_note +
           ": choose a valid device ordinal");
    }
    for (size_t j = 0; j < i; ++j) {
      if (ordinals[j] == o) fail("CUDA device " + std::to_string(o) + " is listed twice: list each device once");
    }
  }

  for (const int o : ordinals) {
    Device dev;
    dev.ordinal = o;
    if (!ok(FUNNEL_CU(d, cuDeviceGet, &dev.handle, o))) fail("cuDeviceGet failed for CUDA device " + std::to_string(o));
    CUcontext ctx = nullptr;
    if (const CUresult r = d.cuDevicePrimaryCtxRetain(&ctx, dev.handle); r != CUDA_SUCCESS) {
      check(d, "cuDevicePrimaryCtxRetain", r);
      fail("cannot create the CUDA context of device " + std::to_string(o) + ": " + error_name(d, r) + " (" +
           error_string(d, r) +
           "): is the GPU in exclusive-process compute mode and used by another process, or out of memory? "
           "Check nvidia-smi");
    }
    dev.context.store(ctx);
    int same_address = 0;
    if (ok(FUNNEL_CU(d, cuDeviceGetAttribute, &same_address, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
                     dev.handle)))
      dev.host_pointer_is_device_pointer = same_address != 0;
    shared->devices.push_back(dev);  // from here on ~Shared releases it
  }

  shared->pool.resize(shared->devices.size());
  load_answer_kernel(*shared);
  int major = 0, minor = 0;
  for (const Device& dev : shared->devices) {
    char name[256] = {};
    FUNNEL_CU(d, cuDeviceGetName, name, static_cast<int>(sizeof(name)), dev.handle);
    FUNNEL_CU(d, cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev.handle);
    FUNNEL_CU(d, cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev.handle);
    spdlog::info("cuda: device {} = CUDA ordinal {}: {} (sm_{}{})", &dev - shared->devices.data(), dev.ordinal, name,
                 major, minor);
  }
  return std::make_unique<CudaBackend>(std::move(shared));
}

}  // namespace
}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(const std::vector<int>& devices) { return cuda::make_backend(devices); }

}  // namespace funnel::server
