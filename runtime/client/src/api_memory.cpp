// Memory: device allocations (server-side, remembered here to classify pointers),
// pinned host allocations (files mapped in both processes), registered ranges, and
// the copy/memset entry points (copy_engine.cpp does the work).
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <vector>

#include "arrays.hpp"
#include "api.hpp"
#include "copy_engine.hpp"
#include "device_memory.hpp"
#include "graphs.hpp"
#include "ipc_memory.hpp"
#include "managed.hpp"
#include "funnel/ipc/protocol.hpp"
#include "mem_pool.hpp"
#include "pinned.hpp"

using namespace funnel::client;

namespace {

StreamRef legacy() { return StreamRef{0, current_device()}; }

// cudaMemcpy3D(Async): linear memory slice by slice over the 2-D copy path; an array's side is
// its region (arrays.hpp), the extent and the array's x position then in its elements.
cudaError_t memcpy_3d(const cudaMemcpy3DParms* p, cudaStream_t stream, bool async, bool per_thread) {
  if (p == nullptr) return cudaErrorInvalidValue;
  uint64_t element = 1;
  for (cudaArray_const_t a : {p->srcArray, p->dstArray}) {
    if (a == nullptr) continue;
    const std::optional<ArrayInfo> info = array_info(a, false);
    if (!info) return cudaErrorInvalidResourceHandle;
    element = info->element_bytes;
  }
  const cudaExtent e{p->extent.width * element, p->extent.height, p->extent.depth};
  // One side: an array's region (its x in elements) or a pitched pointer's.
  auto side = [&](cudaArray_const_t array, const cudaPitchedPtr& ptr, const cudaPos& pos, CopySide& out,
                  Pitches& pitches) {
    if (array != nullptr) return array_side(array, pos.x * element, pos.y, pos.z, out, pitches);
    if (ptr.ptr == nullptr || !fits(ptr, pos, e)) return cudaErrorInvalidValue;
    out.ptr = at(ptr, pos);
    pitches = Pitches{ptr.pitch, ptr.pitch * ptr.ysize};
    return cudaSuccess;
  };
  CopySide ds, ss;
  Pitches dp{}, sp{};
  if (cudaError_t err = side(p->dstArray, p->dstPtr, p->dstPos, ds, dp); err != cudaSuccess) return err;
  if (cudaError_t err = side(p->srcArray, p->srcPtr, p->srcPos, ss, sp); err != cudaSuccess) return err;
  return copy_sides(ds, dp, ss, sp, {e.width, e.height, e.depth}, p->kind, stream, async, per_thread);
}

cudaError_t memset_pitched(cudaPitchedPtr p, int value, cudaExtent e, cudaStream_t stream, bool per_thread) {
  if (p.ptr == nullptr || !fits(p, cudaPos{0, 0, 0}, e)) return cudaErrorInvalidValue;
  return memset_3d(p.ptr, {p.pitch, p.pitch * p.ysize}, value, {e.width, e.height, e.depth}, stream, per_thread);
}

}  // namespace

FUNNEL_API cudaError_t cudaMalloc(void** ptr, size_t size) {
  return guarded(__func__, [&] { return device_alloc(ptr, size, Opcode::MemAlloc, legacy()); });
}

FUNNEL_API cudaError_t cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  return guarded(__func__, [&] { return pitched_alloc(ptr, pitch, width, height, legacy()); });
}

// A 3-D allocation is a pitched one of height*depth rows.
FUNNEL_API cudaError_t cudaMalloc3D(cudaPitchedPtr* p, cudaExtent e) {
  return guarded(__func__, [&] {
    if (p == nullptr) return cudaErrorInvalidValue;
    size_t rows = 0, pitch = 0;
    void* ptr = nullptr;
    if (__builtin_mul_overflow(e.height, e.depth, &rows)) return cudaErrorMemoryAllocation;
    if (cudaError_t err = pitched_alloc(&ptr, &pitch, e.width, rows, legacy()); err != cudaSuccess) return err;
    *p = cudaPitchedPtr{ptr, pitch, e.width, e.height};
    return cudaSuccess;
  });
}

FUNNEL_API cudaError_t cudaFree(void* ptr) {
  return guarded(__func__, [&] {
    if (ptr == nullptr) return cudaSuccess;
    if (cudaError_t e = attach(); e != cudaSuccess) return e;
    if (cudaError_t managed = cudaSuccess; managed_free(ptr, managed)) return managed;
    return device_free(ptr, Opcode::MemFree, legacy());
  });
}

// ---- IPC memory handles (ipc_memory.hpp) --------------------------------------------------

FUNNEL_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* ptr) {
  return guarded(__func__, [&] { return ipc_get_mem_handle(handle, ptr); });
}
FUNNEL_API cudaError_t cudaIpcOpenMemHandle(void** ptr, cudaIpcMemHandle_t handle, unsigned flags) {
  return guarded(__func__, [&] { return ipc_open_mem_handle(ptr, handle, flags); });
}
FUNNEL_API cudaError_t cudaIpcCloseMemHandle(void* ptr) {
  return guarded(__func__, [&] { return ipc_close_mem_handle(ptr); });
}
FUNNEL_API cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t* handle, cudaEvent_t event) {
  return guarded(__func__, [&] { return ipc_get_event_handle(handle, event); });
}
FUNNEL_API cudaError_t cudaIpcOpenEventHandle(cudaEvent_t* event, cudaIpcEventHandle_t handle) {
  return guarded(__func__, [&] { return ipc_open_event_handle(event, handle); });
}

// ---- managed memory (managed.hpp) ---------------------------------------------------------

FUNNEL_API cudaError_t cudaMallocManaged(void** ptr, size_t size, unsigned flags) {
  return guarded(__func__, [&] { return managed_alloc(ptr, size, flags); });
}
FUNNEL_API cudaError_t cudaMemPrefetchAsync(const void* p, size_t n, cudaMemLocation location, unsigned flags,
                                            cudaStream_t s) {
  return guarded(__func__, [&] { return managed_prefetch(p, n, location, flags, s, false); });
}
FUNNEL_API cudaError_t cudaMemPrefetchAsync_ptsz(const void* p, size_t n, cudaMemLocation location, unsigned flags,
                                                 cudaStream_t s) {
  return guarded(__func__, [&] { return managed_prefetch(p, n, location, flags, s, true); });
}
FUNNEL_API cudaError_t cudaMemAdvise(const void* p, size_t n, cudaMemoryAdvise advice, cudaMemLocation location) {
  return guarded(__func__, [&] { return managed_advise(p, n, advice, location); });
}
FUNNEL_API cudaError_t cudaMemRangeGetAttribute(void* data, size_t size, cudaMemRangeAttribute attribute,
                                                const void* p, size_t n) {
  return guarded(__func__, [&] { return managed_range_attribute(data, size, attribute, p, n); });
}
FUNNEL_API cudaError_t cudaMemRangeGetAttributes(void** data, size_t* sizes, cudaMemRangeAttribute* attributes,
                                                 size_t count, const void* p, size_t n) {
  return guarded(__func__, [&] {
    if (count == 0 || data == nullptr || sizes == nullptr || attributes == nullptr) return cudaErrorInvalidValue;
    for (size_t i = 0; i < count; ++i)
      if (cudaError_t e = managed_range_attribute(data[i], sizes[i], attributes[i], p, n); e != cudaSuccess) return e;
    return cudaSuccess;
  });
}
FUNNEL_API cudaError_t cudaStreamAttachMemAsync(cudaStream_t s, void* p, size_t length, unsigned flags) {
  return guarded(__func__, [&] { return managed_attach(s, p, length, flags, false); });
}
FUNNEL_API cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t s, void* p, size_t length, unsigned flags) {
  return guarded(__func__, [&] { return managed_attach(s, p, length, flags, true); });
}

static cudaError_t malloc_async(void** ptr, size_t size, cudaStream_t stream, bool ptds) {
  StreamRef s;
  if (cudaError_t e = resolve_stream(stream, ptds, s); e != cudaSuccess) return e;
  if (s.capturing()) return capture_alloc(s, ptr, size);  // a memory alloc node
  return device_alloc(ptr, size, Opcode::MemAllocAsync, s);
}
static cudaError_t free_async(void* ptr, cudaStream_t stream, bool ptds) {
  if (ptr == nullptr) return cudaSuccess;
  StreamRef s;
  if (cudaError_t e = resolve_stream(stream, ptds, s); e != cudaSuccess) return e;
  if (s.capturing()) return capture_free(s, ptr);  // a memory free node
  return device_free(ptr, Opcode::MemFreeAsync, s);
}

// Only a device's default pool exists (api_mempool.cpp): allocating from it is
// cudaMallocAsync on the pool's device.
static cudaError_t malloc_from_pool(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream, bool ptds) {
  int device = 0;
  if (cudaError_t e = pool_device(pool, device); e != cudaSuccess) return e;
  StreamRef s;
  if (cudaError_t e = resolve_stream(stream, ptds, s); e != cudaSuccess) return e;
  if (s.id == 0) s.device = device;  // the legacy stream of the pool's device
  if (s.device != device) {
    report_unsupported("cudaMallocFromPoolAsync on a stream of another device than the pool's");
    return cudaErrorNotSupported;
  }
  if (s.capturing()) return capture_refuse(s, "cudaMallocFromPoolAsync in a stream capture (graph memory nodes)");
  return device_alloc(ptr, size, Opcode::MemAllocAsync, s);
}

FUNNEL_API cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t s) {
  return guarded(__func__, [&] { return malloc_async(ptr, size, s, false); });
}
FUNNEL_API cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t size, cudaStream_t s) {
  return guarded(__func__, [&] { return malloc_async(ptr, size, s, true); });
}
FUNNEL_API cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t s) {
  return guarded(__func__, [&] { return malloc_from_pool(ptr, size, pool, s, false); });
}
FUNNEL_API cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t s) {
  return guarded(__func__, [&] { return malloc_from_pool(ptr, size, pool, s, true); });
}
FUNNEL_API cudaError_t cudaFreeAsync(void* ptr, cudaStream_t s) {
  return guarded(__func__, [&] { return free_async(ptr, s, false); });
}
FUNNEL_API cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t s) {
  return guarded(__func__, [&] { return free_async(ptr, s, true); });
}

FUNNEL_API cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return guarded(__func__, [&] { return pinned_alloc(ptr, size, 0); });
}
FUNNEL_API cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  return guarded(__func__, [&] { return pinned_alloc(ptr, size, flags); });
}

FUNNEL_API cudaError_t cudaHostGetFlags(unsigned* flags, void* host) {
  return guarded(__func__, [&] { return host_get_flags(flags, host); });
}

FUNNEL_API cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  return guarded(__func__, [&] { return pinned_device_pointer(pDevice, pHost, flags, "cudaHostGetDevicePointer"); });
}

FUNNEL_API cudaError_t cudaFreeHost(void* ptr) {
  return guarded(__func__, [&] { return pinned_free(ptr); });
}

// Registered ranges are remembered only: copies from them are staged like pageable
// memory (the server cannot map another process's anonymous memory).
FUNNEL_API cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int /*flags*/) {
  return guarded(__func__, [&] {
    if (ptr == nullptr || size == 0) return cudaErrorInvalidValue;
    return Runtime::get().tables.add_registered(reinterpret_cast<uintptr_t>(ptr), size)
               ? cudaSuccess
               : cudaErrorHostMemoryAlreadyRegistered;
  });
}

FUNNEL_API cudaError_t cudaHostUnregister(void* ptr) {
  return guarded(__func__, [&] {
    return Runtime::get().tables.remove_registered(reinterpret_cast<uintptr_t>(ptr)) ? cudaSuccess
                                                                                     : cudaErrorHostMemoryNotRegistered;
  });
}

FUNNEL_API cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  return guarded(__func__, [&] {
    if (attr == nullptr) return cudaErrorInvalidValue;
    std::memset(attr, 0, sizeof *attr);
    Runtime& rt = Runtime::get();
    const Classified c = rt.tables.classify(ptr);
    attr->device = c.kind == Classified::Device ? c.device : current_device();
    if (c.kind == Classified::Device) {
      attr->type = cudaMemoryTypeDevice;
      attr->devicePointer = const_cast<void*>(ptr);
    } else if (c.kind == Classified::Pinned) {
      // Pinned and managed memory: host memory the GPU sees at the server's address.
      attr->type = c.managed ? cudaMemoryTypeManaged : cudaMemoryTypeHost;
      attr->hostPointer = const_cast<void*>(ptr);
      if (c.pinned_device != 0)
        attr->devicePointer = reinterpret_cast<void*>(c.pinned_device + (reinterpret_cast<uint64_t>(ptr) - c.base));
    } else {
      const bool reg = rt.tables.is_registered(reinterpret_cast<uintptr_t>(ptr));
      attr->type = reg ? cudaMemoryTypeHost : cudaMemoryTypeUnregistered;
      if (reg) attr->hostPointer = const_cast<void*>(ptr);
    }
    return cudaSuccess;
  });
}

// ---- copies -------------------------------------------------------------------

FUNNEL_API cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return guarded(__func__, [&] { return copy_2d(dst, n, src, n, n, 1, kind, nullptr, false, false); });
}
FUNNEL_API cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return guarded(__func__, [&] { return copy_2d(dst, n, src, n, n, 1, kind, nullptr, false, true); });
}
FUNNEL_API cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
  return guarded(__func__, [&] { return copy_2d(dst, n, src, n, n, 1, kind, s, true, false); });
}
FUNNEL_API cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
  return guarded(__func__, [&] { return copy_2d(dst, n, src, n, n, 1, kind, s, true, true); });
}
FUNNEL_API cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                    size_t height, cudaMemcpyKind kind) {
  return guarded(__func__,
                 [&] { return copy_2d(dst, dpitch, src, spitch, width, height, kind, nullptr, false, false); });
}
FUNNEL_API cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                         size_t height, cudaMemcpyKind kind) {
  return guarded(__func__,
                 [&] { return copy_2d(dst, dpitch, src, spitch, width, height, kind, nullptr, false, true); });
}
FUNNEL_API cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                         size_t height, cudaMemcpyKind kind, cudaStream_t s) {
  return guarded(__func__, [&] { return copy_2d(dst, dpitch, src, spitch, width, height, kind, s, true, false); });
}
FUNNEL_API cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                              size_t height, cudaMemcpyKind kind, cudaStream_t s) {
  return guarded(__func__, [&] { return copy_2d(dst, dpitch, src, spitch, width, height, kind, s, true, true); });
}

FUNNEL_API cudaError_t cudaMemcpy3D(const cudaMemcpy3DParms* p) {
  return guarded(__func__, [&] { return memcpy_3d(p, nullptr, false, false); });
}
FUNNEL_API cudaError_t cudaMemcpy3D_ptds(const cudaMemcpy3DParms* p) {
  return guarded(__func__, [&] { return memcpy_3d(p, nullptr, false, true); });
}
FUNNEL_API cudaError_t cudaMemcpy3DAsync(const cudaMemcpy3DParms* p, cudaStream_t s) {
  return guarded(__func__, [&] { return memcpy_3d(p, s, true, false); });
}
FUNNEL_API cudaError_t cudaMemcpy3DAsync_ptsz(const cudaMemcpy3DParms* p, cudaStream_t s) {
  return guarded(__func__, [&] { return memcpy_3d(p, s, true, true); });
}

// ---- memsets ------------------------------------------------------------------
FUNNEL_API cudaError_t cudaMemset(void* p, int v, size_t n) {
  return guarded(__func__, [&] { return memset_2d(p, n, v, n, 1, nullptr, false); });
}
FUNNEL_API cudaError_t cudaMemset_ptds(void* p, int v, size_t n) {
  return guarded(__func__, [&] { return memset_2d(p, n, v, n, 1, nullptr, true); });
}
FUNNEL_API cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) {
  return guarded(__func__, [&] { return memset_2d(p, n, v, n, 1, s, false); });
}
FUNNEL_API cudaError_t cudaMemsetAsync_ptsz(void* p, int v, size_t n, cudaStream_t s) {
  return guarded(__func__, [&] { return memset_2d(p, n, v, n, 1, s, true); });
}
FUNNEL_API cudaError_t cudaMemset2D(void* p, size_t pitch, int v, size_t w, size_t h) {
  return guarded(__func__, [&] { return memset_2d(p, pitch, v, w, h, nullptr, false); });
}
FUNNEL_API cudaError_t cudaMemset2D_ptds(void* p, size_t pitch, int v, size_t w, size_t h) {
  return guarded(__func__, [&] { return memset_2d(p, pitch, v, w, h, nullptr, true); });
}
FUNNEL_API cudaError_t cudaMemset2DAsync(void* p, size_t pitch, int v, size_t w, size_t h, cudaStream_t s) {
  return guarded(__func__, [&] { return memset_2d(p, pitch, v, w, h, s, false); });
}
FUNNEL_API cudaError_t cudaMemset2DAsync_ptsz(void* p, size_t pitch, int v, size_t w, size_t h, cudaStream_t s) {
  return guarded(__func__, [&] { return memset_2d(p, pitch, v, w, h, s, true); });
}
FUNNEL_API cudaError_t cudaMemset3D(cudaPitchedPtr p, int v, cudaExtent e) {
  return guarded(__func__, [&] { return memset_pitched(p, v, e, nullptr, false); });
}
FUNNEL_API cudaError_t cudaMemset3D_ptds(cudaPitchedPtr p, int v, cudaExtent e) {
  return guarded(__func__, [&] { return memset_pitched(p, v, e, nullptr, true); });
}
FUNNEL_API cudaError_t cudaMemset3DAsync(cudaPitchedPtr p, int v, cudaExtent e, cudaStream_t s) {
  return guarded(__func__, [&] { return memset_pitched(p, v, e, s, false); });
}
FUNNEL_API cudaError_t cudaMemset3DAsync_ptsz(cudaPitchedPtr p, int v, cudaExtent e, cudaStream_t s) {
  return guarded(__func__, [&] { return memset_pitched(p, v, e, s, true); });
}
