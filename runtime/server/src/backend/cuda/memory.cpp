// The cuda backend's memory: device allocations (plain, placed, stream-ordered), host
// registration, copies and memsets.
#include <cstdint>
#include <mutex>
#include <shared_mutex>

#include "backend/cuda/cuda_backend.hpp"

namespace funnel::server::cuda {

Status CudaBackend::mem_get_info(int device, uint64_t& free_bytes, uint64_t& total_bytes) {
  if (Status st = s_->bind(device); !ok(st)) return st;
  size_t f = 0, t = 0;
  const Status st = FUNNEL_CU(s_->drv, cuMemGetInfo, &f, &t);
  if (ok(st)) {
    free_bytes = f;
    total_bytes = t;
  }
  return st;
}

Status CudaBackend::mem_alloc(int device, uint64_t size, DeviceAddress& out) {
  if (Status st = s_->bind(device); !ok(st)) return st;
  out = 0;
  if (size == 0) return Status::Success;  // cudaMalloc(0): success, null pointer
  CUdeviceptr p = 0;
  const Status st = FUNNEL_CU(s_->drv, cuMemAlloc, &p, size);
  if (ok(st)) out = p;
  return st;
}

// The virtual memory API places memory at a chosen address (cuMemAlloc cannot): reserve
// exactly `at`, back it with a physical allocation of the device, allow the device access.
// Peers get no access to such a range (doc/not-supported.md).
// New memory of `device` mapped over [va, va + bytes) of a reserved range, readable and writable
// by the device (cuMemCreate, cuMemMap, cuMemSetAccess); nothing left behind on an error.
Status CudaBackend::map_new(int device, CUdeviceptr va, uint64_t bytes) {
  const Driver& d = s_->drv;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = s_->devices[static_cast<size_t>(device)].handle;
  CUmemGenericAllocationHandle h = 0;
  Status st = FUNNEL_CU(d, cuMemCreate, &h, bytes, &prop, 0);
  if (ok(st)) {
    st = FUNNEL_CU(d, cuMemMap, va, bytes, 0, h, 0);
    FUNNEL_CU(d, cuMemRelease, h);  // the mapping keeps the memory
  }
  if (ok(st)) {
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    st = FUNNEL_CU(d, cuMemSetAccess, va, bytes, &access, 1);
    if (!ok(st)) FUNNEL_CU(d, cuMemUnmap, va, bytes);
  }
  return st;
}

Status CudaBackend::address_reserve(uint64_t size, uint64_t alignment, DeviceAddress& out) {
  if (Status st = s_->bind(0); !ok(st)) return st;
  CUdeviceptr va = 0;
  const Status st = FUNNEL_CU(s_->drv, cuMemAddressReserve, &va, size, alignment, 0, 0);
  if (ok(st)) out = va;
  return st;
}

Status CudaBackend::address_free(DeviceAddress at, uint64_t size) {
  if (Status st = s_->bind(0); !ok(st)) return st;
  return FUNNEL_CU(s_->drv, cuMemAddressFree, device_pointer(at), size);
}

Status CudaBackend::mem_map(int device, DeviceAddress at, uint64_t size) {
  if (Status st = s_->bind(device); !ok(st)) return st;
  return map_new(device, device_pointer(at), size);
}

Status CudaBackend::mem_unmap(int device, DeviceAddress at, uint64_t size) {
  if (Status st = s_->bind(device); !ok(st)) return st;
  return FUNNEL_CU(s_->drv, cuMemUnmap, device_pointer(at), size);
}

Status CudaBackend::mem_alloc_at(int device, uint64_t size, DeviceAddress at) {
  if (Status st = s_->bind(device); !ok(st)) return st;
  if (size == 0 || at == 0 || at % kPlacedGranule != 0) return Status::InvalidValue;
  const Driver& d = s_->drv;
  const uint64_t bytes = (size + kPlacedGranule - 1) / kPlacedGranule * kPlacedGranule;
  CUdeviceptr va = 0;
  // A range the driver cannot give (in use here, or outside its address window) makes the
  // client choose another.
  if (!ok(FUNNEL_CU_QUIET(d, cuMemAddressReserve, &va, bytes, kPlacedGranule, at, 0)))
    return Status::AlreadyMapped;
  if (va != at) {
    FUNNEL_CU(d, cuMemAddressFree, va, bytes);
    return Status::AlreadyMapped;
  }
  const Status st = map_new(device, va, bytes);
  if (!ok(st)) {
    FUNNEL_CU(d, cuMemAddressFree, va, bytes);
    return st;
  }
  std::lock_guard lk(placed_mu_);
  placed_[at] = bytes;
  return Status::Success;
}

Status CudaBackend::mem_free(int device, DeviceAddress address) {
  if (Status st = s_->bind(device); !ok(st)) return st;
  if (address == 0) return Status::Success;
  uint64_t placed = 0;
  {
    std::lock_guard lk(placed_mu_);
    if (auto it = placed_.find(address); it != placed_.end()) {
      placed = it->second;
      placed_.erase(it);
    }
  }
  if (placed == 0) return FUNNEL_CU(s_->drv, cuMemFree, device_pointer(address));
  const Status st = FUNNEL_CU(s_->drv, cuMemUnmap, device_pointer(address), placed);
  const Status freed = FUNNEL_CU(s_->drv, cuMemAddressFree, device_pointer(address), placed);
  return ok(st) ? freed : st;
}

Status CudaBackend::mem_alloc_async(BackendStream& bs, uint64_t size, DeviceAddress& out) {
  CudaStream& s = enqueue_on(bs);
  if (Status st = s_->bind(s.device()); !ok(st)) return st;
  out = 0;
  if (size == 0) return Status::Success;
  CUdeviceptr p = 0;
  const Status st = FUNNEL_CU(s_->drv, cuMemAllocAsync, &p, size, s.handle());
  if (ok(st)) out = p;
  return st;
}

Status CudaBackend::mem_free_async(BackendStream& bs, DeviceAddress address) {
  CudaStream& s = enqueue_on(bs);
  if (Status st = s_->bind(s.device()); !ok(st)) return st;
  if (address == 0) return Status::Success;
  return FUNNEL_CU(s_->drv, cuMemFreeAsync, device_pointer(address), s.handle());
}

// PORTABLE: the pages count as pinned in every context, i.e. for every device.
Status CudaBackend::host_register(void* p, uint64_t size) {
  if (p == nullptr || size == 0) return Status::InvalidValue;
  std::shared_lock lk(s_->reset_mu);
  return s_->on_any_device(
      [&] { return FUNNEL_CU(s_->drv, cuMemHostRegister, p, size, CU_MEMHOSTREGISTER_PORTABLE); });
}

Status CudaBackend::host_unregister(void* p) {
  std::shared_lock lk(s_->reset_mu);
  return s_->on_any_device([&] { return FUNNEL_CU(s_->drv, cuMemHostUnregister, p); });
}

Status CudaBackend::copy(BackendStream& bs, const CopyDesc& c) {
  CudaStream& s = enqueue_on(bs);
  if (Status st = s_->bind(s.device()); !ok(st)) return st;
  if (c.width == 0 || c.height == 0) return Status::Success;
  const Driver& d = s_->drv;
  const CUstream h = s.handle();
  if (c.dst.array != nullptr || c.src.array != nullptr) {
    const CUDA_MEMCPY3D m = array_copy_params(c);
    return FUNNEL_CU(d, cuMemcpy3DAsync, &m, h);
  }
  if (c.height == 1) {
    if (c.dst.device && !c.src.device) {
      return FUNNEL_CU(d, cuMemcpyHtoDAsync, device_pointer(c.dst.address), host_pointer(c.src.address), c.width, h);
    }
    if (!c.dst.device && c.src.device) {
      return FUNNEL_CU(d, cuMemcpyDtoHAsync, host_pointer(c.dst.address), device_pointer(c.src.address), c.width, h);
    }
    if (c.dst.device && c.src.device) {
      // cuMemcpyAsync infers both sides from the unified address space, so a copy
      // between two GPUs works too (cuMemcpyDtoDAsync is for one context).
      return FUNNEL_CU(d, cuMemcpyAsync, device_pointer(c.dst.address), device_pointer(c.src.address), c.width, h);
    }
    // host to host falls through to the 2-D path (HOST/HOST is well defined there).
  }
  CUDA_MEMCPY2D m{};
  m.srcXInBytes = 0;
  m.srcY = 0;
  if (c.src.device) {
    m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    m.srcDevice = device_pointer(c.src.address);
  } else {
    m.srcMemoryType = CU_MEMORYTYPE_HOST;
    m.srcHost = host_pointer(c.src.address);
  }
  m.srcPitch = c.height == 1 ? c.width : c.src_pitch;
  m.dstXInBytes = 0;
  m.dstY = 0;
  if (c.dst.device) {
    m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    m.dstDevice = device_pointer(c.dst.address);
  } else {
    m.dstMemoryType = CU_MEMORYTYPE_HOST;
    m.dstHost = host_pointer(c.dst.address);
  }
  m.dstPitch = c.height == 1 ? c.width : c.dst_pitch;
  m.WidthInBytes = c.width;
  m.Height = c.height;
  return FUNNEL_CU(d, cuMemcpy2DAsync, &m, h);
}

Status CudaBackend::memset(BackendStream& bs, DeviceAddress dst, uint64_t pitch, uint64_t width, uint64_t height,
                           uint32_t value, uint32_t element) {
  CudaStream& s = enqueue_on(bs);
  if (Status st = s_->bind(s.device()); !ok(st)) return st;
  if (width == 0 || height == 0) return Status::Success;
  const CUdeviceptr p = device_pointer(dst);
  const size_t n = width / element;
  auto& drv = s_->drv;
  switch (element) {
    case 2:
      if (height == 1) return FUNNEL_CU(drv, cuMemsetD16Async, p, static_cast<uint16_t>(value), n, s.handle());
      return FUNNEL_CU(drv, cuMemsetD2D16Async, p, pitch, static_cast<uint16_t>(value), n, height, s.handle());
    case 4:
      if (height == 1) return FUNNEL_CU(drv, cuMemsetD32Async, p, value, n, s.handle());
      return FUNNEL_CU(drv, cuMemsetD2D32Async, p, pitch, value, n, height, s.handle());
    default:
      if (height == 1) return FUNNEL_CU(drv, cuMemsetD8Async, p, static_cast<uint8_t>(value), n, s.handle());
      return FUNNEL_CU(drv, cuMemsetD2D8Async, p, pitch, static_cast<uint8_t>(value), n, height, s.handle());
  }
}

}  // namespace funnel::server::cuda
