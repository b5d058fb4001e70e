// The virtual memory calls (cuMemAddressReserve, cuMemCreate, cuMemMap, ...: PyTorch's expandable
// segments, JAX): the reserved ranges and the mappings are the server's (the core's
// address_reserve, map_memory; doc/design/driver-client.md), the physical-memory handles are
// records here.  A handle's memory is made on the server when it is mapped, and given back when
// it is unmapped: a handle maps once, whole, at offset 0 (what PyTorch does); mapping one handle
// twice (aliasing), part of one, exporting one (IPC) are refused by name; a handle may be asked
// for with the POSIX file descriptor type (it is never exported).
#include <map>
#include <memory>
#include <mutex>

#include "device_memory.hpp"
#include "front.hpp"

using funnel::client::Runtime;

namespace {

constexpr size_t kGranule = funnel::ipc::kPlacedGranule;

struct Handle {
  size_t size = 0;
  int device = 0;
  CUdeviceptr mapped_at = 0;  // 0: not mapped
  int refs = 1;               // cuMemCreate's, plus cuMemRetainAllocationHandle's
  CUmemAllocationHandleType types = CU_MEM_HANDLE_TYPE_NONE;  // as asked (never exported)
};

struct Handles {
  std::mutex mu;
  std::map<CUmemGenericAllocationHandle, std::unique_ptr<Handle>> handles;
  std::map<CUdeviceptr, CUmemGenericAllocationHandle> mappings;  // by address
  CUmemGenericAllocationHandle next = 1;

  // The mapping that covers `at` (its start, its handle), or nullptr.  Caller holds mu.
  const std::pair<const CUdeviceptr, CUmemGenericAllocationHandle>* mapping_at(CUdeviceptr at, const Handle*& hd) const {
    auto m = mappings.upper_bound(at);
    if (m == mappings.begin()) return nullptr;
    --m;
    hd = handles.at(m->second).get();
    return at < m->first + hd->size ? &*m : nullptr;
  }
};
Handles& handles() {
  static auto* h = new Handles;  // lives past exit, as the other handle tables
  return *h;
}

// A device-memory allocation property on a device of ours, nothing asked that funnel does not do.
CUresult check_prop(const CUmemAllocationProp* prop, const char* call) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return funnel::driver::not_supported_detail(call, static_cast<int>(prop->location.type));
  if (prop->location.id < 0 || prop->location.id >= Runtime::get().device_count()) return CUDA_ERROR_INVALID_DEVICE;
  // A handle that may be exported as a file descriptor (PyTorch's expandable segments and JAX
  // ask for one, in case they share it): made as any other; an export is what is refused
  // (cuMemExportToShareableHandle, a stub).  Fabric handles (multi-node NVLink) are refused, and
  // the callers then ask without them.
  if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE &&
      prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return funnel::driver::not_supported_detail("cuMemCreate with a shareable handle type",
                                                static_cast<int>(prop->requestedHandleTypes));
  if (prop->allocFlags.compressionType != 0)
    return funnel::driver::not_supported_detail("cuMemCreate with compression", prop->allocFlags.compressionType);
  return CUDA_SUCCESS;
}

}  // namespace

// 2 MiB, the H100's granularity for device memory (minimum and recommended alike).
FUNNEL_DRIVER_API CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                         CUmemAllocationGranularity_flags option) {
  if (granularity == nullptr || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                                 option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_prop(prop, "cuMemGetAllocationGranularity for a location type"); r != CUDA_SUCCESS) return r;
  *granularity = kGranule;
  return CUDA_SUCCESS;
}

// The hint `addr` is a hint: the server's driver picks the range.
FUNNEL_DRIVER_API CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr,
                                               unsigned long long flags) {
  if (ptr == nullptr || size == 0 || size % kGranule != 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment != 0 && (alignment % kGranule != 0 || (alignment & (alignment - 1)) != 0))
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  uint64_t at = 0;
  if (CUresult r = funnel::driver::to_cu(funnel::client::address_reserve(size, alignment, at)); r != CUDA_SUCCESS)
    return r;
  *ptr = at;
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::address_free(ptr, size));
}

FUNNEL_DRIVER_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                       const CUmemAllocationProp* prop, unsigned long long flags) {
  if (handle == nullptr || size == 0 || size % kGranule != 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_prop(prop, "cuMemCreate for a location type"); r != CUDA_SUCCESS) return r;
  Handles& h = handles();
  std::lock_guard lk(h.mu);
  const CUmemGenericAllocationHandle id = h.next++;
  h.handles[id] = std::make_unique<Handle>(Handle{size, prop->location.id, 0, 1, prop->requestedHandleTypes});
  *handle = id;
  return CUDA_SUCCESS;
}

// The memory goes once the handle is neither referenced nor mapped (as the driver's).
FUNNEL_DRIVER_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  Handles& h = handles();
  std::lock_guard lk(h.mu);
  auto it = h.handles.find(handle);
  if (it == h.handles.end() || it->second->refs == 0) return CUDA_ERROR_INVALID_VALUE;
  if (--it->second->refs == 0 && it->second->mapped_at == 0) h.handles.erase(it);
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                    unsigned long long flags) {
  if (flags != 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  Handles& h = handles();
  std::unique_lock lk(h.mu);
  auto it = h.handles.find(handle);
  if (it == h.handles.end() || it->second->refs == 0) return CUDA_ERROR_INVALID_HANDLE;
  Handle& hd = *it->second;
  if (offset != 0 || size != hd.size)
    return funnel::driver::not_supported_detail("cuMemMap of part of a handle, at offset", static_cast<int>(offset));
  if (hd.mapped_at != 0)
    return funnel::driver::not_supported_detail("cuMemMap of a handle mapped already (aliasing), size in MiB",
                                                static_cast<int>(size >> 20));
  hd.mapped_at = ptr;  // claimed while the server maps it
  lk.unlock();
  const CUresult r = funnel::driver::to_cu(funnel::client::map_memory(ptr, size, hd.device));
  lk.lock();
  if (r != CUDA_SUCCESS) {
    hd.mapped_at = 0;
    return r;
  }
  h.mappings[ptr] = handle;
  return CUDA_SUCCESS;
}

// Whole mappings only.
FUNNEL_DRIVER_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  Handles& h = handles();
  CUmemGenericAllocationHandle handle = 0;
  {
    std::lock_guard lk(h.mu);
    auto m = h.mappings.find(ptr);
    if (m == h.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    handle = m->second;
    if (h.handles.at(handle)->size != size)
      return funnel::driver::not_supported_detail("cuMemUnmap of part of a mapping, size in MiB",
                                                  static_cast<int>(size >> 20));
  }
  if (CUresult r = funnel::driver::to_cu(funnel::client::unmap_memory(ptr, size)); r != CUDA_SUCCESS) return r;
  std::lock_guard lk(h.mu);
  h.mappings.erase(ptr);
  auto it = h.handles.find(handle);
  it->second->mapped_at = 0;
  if (it->second->refs == 0) h.handles.erase(it);
  return CUDA_SUCCESS;
}

// The server maps memory readable and writable by its device: that is what a program may ask
// for that device; other devices (peer access) and read-only access are refused by name.
FUNNEL_DRIVER_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  Handles& h = handles();
  std::lock_guard lk(h.mu);
  // [ptr, ptr + size) covered by mappings end to end.
  for (CUdeviceptr at = ptr; at < ptr + size;) {
    const Handle* found = nullptr;
    const auto* m = h.mapping_at(at, found);
    if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const Handle& hd = *found;
    for (size_t i = 0; i < count; ++i) {
      if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return funnel::driver::not_supported_detail("cuMemSetAccess for a location type",
                                                    static_cast<int>(desc[i].location.type));
      if (desc[i].location.id != hd.device)
        return funnel::driver::not_supported_detail("cuMemSetAccess for another device (peer access), device",
                                                    desc[i].location.id);
      if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return funnel::driver::not_supported_detail("cuMemSetAccess with access flags",
                                                    static_cast<int>(desc[i].flags));
    }
    at = m->first + hd.size;
  }
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Handles& h = handles();
  std::lock_guard lk(h.mu);
  const Handle* hd = nullptr;
  if (h.mapping_at(ptr, hd) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = location->type == CU_MEM_LOCATION_TYPE_DEVICE && location->id == hd->device
               ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
               : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                                  CUmemGenericAllocationHandle handle) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Handles& h = handles();
  std::lock_guard lk(h.mu);
  auto it = h.handles.find(handle);
  if (it == h.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  *prop = CUmemAllocationProp{};
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = it->second->device;
  prop->requestedHandleTypes = it->second->types;
  return CUDA_SUCCESS;
}

// The handle of the mapping at `addr` (its start), with one more reference.
FUNNEL_DRIVER_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Handles& h = handles();
  std::lock_guard lk(h.mu);
  auto m = h.mappings.find(reinterpret_cast<CUdeviceptr>(addr));
  if (m == h.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  ++h.handles.at(m->second)->refs;
  *handle = m->second;
  return CUDA_SUCCESS;
}
