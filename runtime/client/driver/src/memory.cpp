// Memory of the driver front: allocations and copies through the client core, the same tables
// and copy paths as the runtime front's (a cuMemAlloc'd pointer is a cudaMalloc'd one).
#include <string>

#include "arrays.hpp"
#include "copy_engine.hpp"
#include "device_memory.hpp"
#include <cstring>

#include "front.hpp"
#include "graphs.hpp"
#include "ipc_memory.hpp"
#include "managed.hpp"
#include "pinned.hpp"
#include "tensor_maps.hpp"

using funnel::client::Reply;
using funnel::client::Runtime;
using funnel::client::StreamRef;
using funnel::ipc::Opcode;

namespace {

void* host(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }

// A 1-D copy: synchronous (cuMemcpy*) or on a stream (cuMemcpy*Async); `per_thread` for the
// _ptds/_ptsz entry points.
CUresult copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, CUstream s, bool async, bool per_thread) {
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::copy_3d(dst, {n, 0}, src, {n, 0}, {n, 1, 1}, kind,
                                                       reinterpret_cast<cudaStream_t>(s), async, per_thread));
}

// One side of a CUDA_MEMCPY2D/3D: the address of its first byte and its pitches, or an array's
// region (the core's arrays.hpp: its pitches are the array's rows and slices).
CUresult side(CUmemorytype type, const void* host_ptr, CUdeviceptr dev, CUarray array, size_t x, size_t y, size_t z,
              size_t pitch, size_t height, size_t width, size_t rows, size_t depth, funnel::client::CopySide& out,
              funnel::client::Pitches& pitches) {
  if (type == CU_MEMORYTYPE_ARRAY) {
    if (array == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return funnel::driver::to_cu(funnel::client::array_side(array, x, y, z, out, pitches));
  }
  const char* base = nullptr;
  switch (type) {
    case CU_MEMORYTYPE_HOST: base = static_cast<const char*>(host_ptr); break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: base = static_cast<const char*>(host(dev)); break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  if (base == nullptr) return CUDA_ERROR_INVALID_VALUE;
  out = funnel::client::CopySide{base + z * pitch * height + y * pitch + x};
  pitches = {rows > 1 || depth > 1 ? pitch : width, pitch * height};
  return CUDA_SUCCESS;
}

CUresult copy3d(const CUDA_MEMCPY3D* c, CUstream s, bool async, bool per_thread, const char*) {
  if (c == nullptr || c->srcLOD != 0 || c->dstLOD != 0 || c->reserved0 != nullptr || c->reserved1 != nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  funnel::client::CopySide dst, src;
  funnel::client::Pitches dp{}, sp{};
  if (CUresult r = side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes, c->dstY, c->dstZ,
                        c->dstPitch, c->dstHeight, c->WidthInBytes, c->Height, c->Depth, dst, dp);
      r != CUDA_SUCCESS)
    return r;
  if (CUresult r = side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes, c->srcY, c->srcZ,
                        c->srcPitch, c->srcHeight, c->WidthInBytes, c->Height, c->Depth, src, sp);
      r != CUDA_SUCCESS)
    return r;
  return funnel::driver::to_cu(funnel::client::copy_sides(dst, dp, src, sp, {c->WidthInBytes, c->Height, c->Depth},
                                                          cudaMemcpyDefault, reinterpret_cast<cudaStream_t>(s), async,
                                                          per_thread));
}

// A 2-D copy is a 3-D copy of one slice.
CUresult copy2d(const CUDA_MEMCPY2D* c, CUstream s, bool async, bool per_thread, const char* call) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D m{};
  m.srcXInBytes = c->srcXInBytes;
  m.srcY = c->srcY;
  m.srcMemoryType = c->srcMemoryType;
  m.srcHost = c->srcHost;
  m.srcDevice = c->srcDevice;
  m.srcArray = c->srcArray;
  m.srcPitch = c->srcPitch;
  m.dstXInBytes = c->dstXInBytes;
  m.dstY = c->dstY;
  m.dstMemoryType = c->dstMemoryType;
  m.dstHost = c->dstHost;
  m.dstDevice = c->dstDevice;
  m.dstArray = c->dstArray;
  m.dstPitch = c->dstPitch;
  m.WidthInBytes = c->WidthInBytes;
  m.Height = c->Height;
  m.Depth = 1;
  return copy3d(&m, s, async, per_thread, call);
}

// cuMemsetD{8,16,32} and cuMemsetD2D{8,16,32}, sync or async: `width` elements of T in each of
// `height` rows `pitch` bytes apart.  Misalignment is refused here, at the call, as the driver does
// (the server would only find it after the call has returned).
template <typename T>
CUresult memset_n(CUdeviceptr p, size_t pitch, T v, size_t width, size_t height, CUstream s, bool per_thread) {
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  if (p % sizeof(T) != 0 || (height > 1 && pitch % sizeof(T) != 0)) return CUDA_ERROR_INVALID_VALUE;
  const size_t bytes = width * sizeof(T);
  return funnel::driver::to_cu(funnel::client::memset_3d(host(p), {height > 1 ? pitch : bytes, 0},
                                                         static_cast<int>(v), {bytes, height, 1},
                                                         reinterpret_cast<cudaStream_t>(s), per_thread, sizeof(T)));
}

}  // namespace

FUNNEL_DRIVER_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;  // the driver refuses 0 bytes (the runtime does not)
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  void* p = nullptr;
  const CUresult r = funnel::driver::to_cu(funnel::client::device_alloc(&p, bytes, Opcode::MemAlloc, StreamRef{0, d}));
  *dptr = r == CUDA_SUCCESS ? static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)) : 0;
  return r;
}

FUNNEL_DRIVER_API CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                              unsigned int element) {
  if (dptr == nullptr || pitch == nullptr || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element != 4 && element != 8 && element != 16) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  void* p = nullptr;
  const CUresult r = funnel::driver::to_cu(funnel::client::pitched_alloc(&p, pitch, width, height, StreamRef{0, d}));
  *dptr = r == CUDA_SUCCESS ? static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)) : 0;
  return r;
}

FUNNEL_DRIVER_API CUresult cuMemFree_v2(CUdeviceptr p) {
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  if (p == 0) return CUDA_SUCCESS;  // as NVIDIA's driver: the runtime passes cudaFree(nullptr) on
  if (cudaError_t managed = cudaSuccess; funnel::client::managed_free(host(p), managed))
    return funnel::driver::to_cu(managed);
  return funnel::driver::to_cu(funnel::client::device_free(host(p), Opcode::MemFree, StreamRef{0, d}));
}

// ---- IPC memory handles (ipc_memory.hpp): CUipcMemHandle is cudaIpcMemHandle_t ------------

static_assert(sizeof(CUipcMemHandle) == sizeof(cudaIpcMemHandle_t));
FUNNEL_DRIVER_API CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr p) {
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(
      funnel::client::ipc_get_mem_handle(reinterpret_cast<cudaIpcMemHandle_t*>(handle), host(p)));
}
static CUresult ipc_open(CUdeviceptr* p, const CUipcMemHandle& handle, unsigned flags) {
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  void* out = nullptr;
  cudaIpcMemHandle_t h;
  std::memcpy(&h, &handle, sizeof h);
  const CUresult r = funnel::driver::to_cu(funnel::client::ipc_open_mem_handle(&out, h, flags));
  *p = reinterpret_cast<CUdeviceptr>(out);
  return r;
}
FUNNEL_DRIVER_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* p, CUipcMemHandle handle, unsigned flags) {
  return ipc_open(p, handle, flags);
}
FUNNEL_DRIVER_API CUresult cuIpcOpenMemHandle(CUdeviceptr* p, CUipcMemHandle handle, unsigned flags) {
  return ipc_open(p, handle, flags);
}
static_assert(sizeof(CUipcEventHandle) == sizeof(cudaIpcEventHandle_t));
FUNNEL_DRIVER_API CUresult cuIpcGetEventHandle(CUipcEventHandle* handle, CUevent event) {
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::ipc_get_event_handle(reinterpret_cast<cudaIpcEventHandle_t*>(handle),
                                                                     reinterpret_cast<cudaEvent_t>(event)));
}
FUNNEL_DRIVER_API CUresult cuIpcOpenEventHandle(CUevent* event, CUipcEventHandle handle) {
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  cudaIpcEventHandle_t h;
  std::memcpy(&h, &handle, sizeof h);
  return funnel::driver::to_cu(funnel::client::ipc_open_event_handle(reinterpret_cast<cudaEvent_t*>(event), h));
}
FUNNEL_DRIVER_API CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::ipc_close_mem_handle(host(p)));
}

// ---- managed memory (managed.hpp) ---------------------------------------------------------

static_assert(sizeof(CUmemLocation) == sizeof(cudaMemLocation) && static_cast<int>(CU_MEM_LOCATION_TYPE_DEVICE) ==
                                                                         static_cast<int>(cudaMemLocationTypeDevice));
static_assert(static_cast<int>(CU_MEM_ADVISE_SET_ACCESSED_BY) == cudaMemAdviseSetAccessedBy &&
              static_cast<int>(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID) ==
                  cudaMemRangeAttributeLastPrefetchLocationId);
namespace {
cudaMemLocation location_of(CUmemLocation l) { return cudaMemLocation{static_cast<cudaMemLocationType>(l.type), l.id}; }
// The first versions took a device: CU_DEVICE_CPU (-1) for the host.
cudaMemLocation location_of(CUdevice d) {
  return d == CU_DEVICE_CPU ? cudaMemLocation{cudaMemLocationTypeHost, 0} : cudaMemLocation{cudaMemLocationTypeDevice, d};
}
CUresult prefetch(CUdeviceptr p, size_t n, cudaMemLocation l, unsigned flags, CUstream s, bool ptds) {
  return funnel::driver::to_cu(
      funnel::client::managed_prefetch(host(p), n, l, flags, reinterpret_cast<cudaStream_t>(s), ptds));
}
}  // namespace

FUNNEL_DRIVER_API CUresult cuMemAllocManaged(CUdeviceptr* p, size_t size, unsigned flags) {
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  void* out = nullptr;
  const CUresult r = funnel::driver::to_cu(funnel::client::managed_alloc(&out, size, flags));
  if (r == CUDA_SUCCESS) *p = reinterpret_cast<CUdeviceptr>(out);
  return r;
}
FUNNEL_DRIVER_API CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation l, unsigned flags, CUstream s) {
  return prefetch(p, n, location_of(l), flags, s, false);
}
FUNNEL_DRIVER_API CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation l, unsigned flags,
                                                      CUstream s) {
  return prefetch(p, n, location_of(l), flags, s, true);
}
FUNNEL_DRIVER_API CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice d, CUstream s) {
  return prefetch(p, n, location_of(d), 0, s, false);
}
FUNNEL_DRIVER_API CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice d, CUstream s) {
  return prefetch(p, n, location_of(d), 0, s, true);
}
FUNNEL_DRIVER_API CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation l) {
  return funnel::driver::to_cu(funnel::client::managed_advise(host(p), n, advice, location_of(l)));
}
FUNNEL_DRIVER_API CUresult cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise advice, CUdevice d) {
  return funnel::driver::to_cu(funnel::client::managed_advise(host(p), n, advice, location_of(d)));
}
FUNNEL_DRIVER_API CUresult cuMemRangeGetAttribute(void* data, size_t size, CUmem_range_attribute a, CUdeviceptr p,
                                                  size_t n) {
  return funnel::driver::to_cu(funnel::client::managed_range_attribute(data, size, a, host(p), n));
}
FUNNEL_DRIVER_API CUresult cuMemRangeGetAttributes(void** data, size_t* sizes, CUmem_range_attribute* attrs,
                                                   size_t count, CUdeviceptr p, size_t n) {
  if (count == 0 || data == nullptr || sizes == nullptr || attrs == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i)
    if (CUresult r = funnel::driver::to_cu(funnel::client::managed_range_attribute(data[i], sizes[i], attrs[i], host(p), n));
        r != CUDA_SUCCESS)
      return r;
  return CUDA_SUCCESS;
}
FUNNEL_DRIVER_API CUresult cuStreamAttachMemAsync(CUstream s, CUdeviceptr p, size_t length, unsigned flags) {
  return funnel::driver::to_cu(
      funnel::client::managed_attach(reinterpret_cast<cudaStream_t>(s), host(p), length, flags, false));
}
FUNNEL_DRIVER_API CUresult cuStreamAttachMemAsync_ptsz(CUstream s, CUdeviceptr p, size_t length, unsigned flags) {
  return funnel::driver::to_cu(
      funnel::client::managed_attach(reinterpret_cast<cudaStream_t>(s), host(p), length, flags, true));
}

// Stream-ordered allocations from the device's default pool, as cudaMallocAsync/cudaFreeAsync.
namespace {
CUresult alloc_async(CUdeviceptr* dptr, size_t bytes, CUstream stream, bool per_thread) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  StreamRef s;
  if (CUresult r = funnel::driver::to_cu(
          funnel::client::resolve_stream(reinterpret_cast<cudaStream_t>(stream), per_thread, s));
      r != CUDA_SUCCESS)
    return r;
  void* p = nullptr;
  const CUresult r = funnel::driver::to_cu(s.capturing() ? funnel::client::capture_alloc(s, &p, bytes)  // an alloc node
                                                         : funnel::client::device_alloc(&p, bytes, Opcode::MemAllocAsync, s));
  *dptr = r == CUDA_SUCCESS ? static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)) : 0;
  return r;
}
CUresult free_async(CUdeviceptr p, CUstream stream, bool per_thread) {
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  if (p == 0) return CUDA_ERROR_INVALID_VALUE;
  StreamRef s;
  if (CUresult r = funnel::driver::to_cu(
          funnel::client::resolve_stream(reinterpret_cast<cudaStream_t>(stream), per_thread, s));
      r != CUDA_SUCCESS)
    return r;
  if (s.capturing()) return funnel::driver::to_cu(funnel::client::capture_free(s, host(p)));  // a free node
  return funnel::driver::to_cu(funnel::client::device_free(host(p), Opcode::MemFreeAsync, s));
}
}  // namespace

FUNNEL_DRIVER_API CUresult cuMemAllocAsync(CUdeviceptr* p, size_t bytes, CUstream s) {
  return alloc_async(p, bytes, s, false);
}
FUNNEL_DRIVER_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr* p, size_t bytes, CUstream s) {
  return alloc_async(p, bytes, s, true);
}
FUNNEL_DRIVER_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { return free_async(p, s, false); }
FUNNEL_DRIVER_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return free_async(p, s, true); }

FUNNEL_DRIVER_API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  Reply reply;
  if (CUresult r = funnel::driver::to_cu(Runtime::get().call(Opcode::MemGetInfo, d, 0, nullptr, 0, &reply));
      r != CUDA_SUCCESS)
    return r;
  if (free_bytes != nullptr) *free_bytes = reply.value[0];
  if (total != nullptr) *total = reply.value[1];
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return copy(host(dst), src, n, cudaMemcpyHostToDevice, nullptr, false, false);
}
FUNNEL_DRIVER_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  return copy(host(dst), src, n, cudaMemcpyHostToDevice, nullptr, false, true);
}
FUNNEL_DRIVER_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return copy(dst, host(src), n, cudaMemcpyDeviceToHost, nullptr, false, false);
}
FUNNEL_DRIVER_API CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  return copy(dst, host(src), n, cudaMemcpyDeviceToHost, nullptr, false, true);
}
FUNNEL_DRIVER_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy(host(dst), host(src), n, cudaMemcpyDeviceToDevice, nullptr, false, false);
}
FUNNEL_DRIVER_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy(host(dst), host(src), n, cudaMemcpyDeviceToDevice, nullptr, false, true);
}
FUNNEL_DRIVER_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return copy(host(dst), src, n, cudaMemcpyHostToDevice, s, true, false);
}
FUNNEL_DRIVER_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return copy(host(dst), src, n, cudaMemcpyHostToDevice, s, true, true);
}
FUNNEL_DRIVER_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy(dst, host(src), n, cudaMemcpyDeviceToHost, s, true, false);
}
FUNNEL_DRIVER_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy(dst, host(src), n, cudaMemcpyDeviceToHost, s, true, true);
}
FUNNEL_DRIVER_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy(host(dst), host(src), n, cudaMemcpyDeviceToDevice, s, true, false);
}
FUNNEL_DRIVER_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy(host(dst), host(src), n, cudaMemcpyDeviceToDevice, s, true, true);
}
// Unified addressing: the kind of each side is what the pointer is.
FUNNEL_DRIVER_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy(host(dst), host(src), n, cudaMemcpyDefault, nullptr, false, false);
}
FUNNEL_DRIVER_API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy(host(dst), host(src), n, cudaMemcpyDefault, nullptr, false, true);
}
FUNNEL_DRIVER_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy(host(dst), host(src), n, cudaMemcpyDefault, s, true, false);
}
FUNNEL_DRIVER_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy(host(dst), host(src), n, cudaMemcpyDefault, s, true, true);
}
FUNNEL_DRIVER_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* c) { return copy2d(c, nullptr, false, false, "cuMemcpy2D"); }
FUNNEL_DRIVER_API CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* c) {
  return copy2d(c, nullptr, false, true, "cuMemcpy2D");
}
FUNNEL_DRIVER_API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* c) {
  return copy2d(c, nullptr, false, false, "cuMemcpy2DUnaligned");
}
FUNNEL_DRIVER_API CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* c) {
  return copy2d(c, nullptr, false, true, "cuMemcpy2DUnaligned");
}
FUNNEL_DRIVER_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* c, CUstream s) {
  return copy2d(c, s, true, false, "cuMemcpy2DAsync");
}
FUNNEL_DRIVER_API CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* c, CUstream s) {
  return copy2d(c, s, true, true, "cuMemcpy2DAsync");
}
FUNNEL_DRIVER_API CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* c) { return copy3d(c, nullptr, false, false, "cuMemcpy3D"); }
FUNNEL_DRIVER_API CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* c) {
  return copy3d(c, nullptr, false, true, "cuMemcpy3D");
}
FUNNEL_DRIVER_API CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* c, CUstream s) {
  return copy3d(c, s, true, false, "cuMemcpy3DAsync");
}
FUNNEL_DRIVER_API CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* c, CUstream s) {
  return copy3d(c, s, true, true, "cuMemcpy3DAsync");
}

// The eight entry points of one element width: 1-D and 2-D, sync and async, each also in its
// per-thread-default-stream form.
#define FUNNEL_MEMSET_ENTRY_POINTS(bits, T)                                                                      \
  FUNNEL_DRIVER_API CUresult cuMemsetD##bits##_v2(CUdeviceptr p, T v, size_t n) {                               \
    return memset_n(p, 0, v, n, 1, nullptr, false);                                                            \
  }                                                                                                            \
  FUNNEL_DRIVER_API CUresult cuMemsetD##bits##_v2_ptds(CUdeviceptr p, T v, size_t n) {                          \
    return memset_n(p, 0, v, n, 1, nullptr, true);                                                             \
  }                                                                                                            \
  FUNNEL_DRIVER_API CUresult cuMemsetD##bits##Async(CUdeviceptr p, T v, size_t n, CUstream s) {                 \
    return memset_n(p, 0, v, n, 1, s, false);                                                                  \
  }                                                                                                            \
  FUNNEL_DRIVER_API CUresult cuMemsetD##bits##Async_ptsz(CUdeviceptr p, T v, size_t n, CUstream s) {            \
    return memset_n(p, 0, v, n, 1, s, true);                                                                   \
  }                                                                                                            \
  FUNNEL_DRIVER_API CUresult cuMemsetD2D##bits##_v2(CUdeviceptr p, size_t pitch, T v, size_t w, size_t h) {     \
    return memset_n(p, pitch, v, w, h, nullptr, false);                                                        \
  }                                                                                                            \
  FUNNEL_DRIVER_API CUresult cuMemsetD2D##bits##_v2_ptds(CUdeviceptr p, size_t pitch, T v, size_t w, size_t h) { \
    return memset_n(p, pitch, v, w, h, nullptr, true);                                                         \
  }                                                                                                            \
  FUNNEL_DRIVER_API CUresult cuMemsetD2D##bits##Async(CUdeviceptr p, size_t pitch, T v, size_t w, size_t h,     \
                                                      CUstream s) {                                            \
    return memset_n(p, pitch, v, w, h, s, false);                                                              \
  }                                                                                                            \
  FUNNEL_DRIVER_API CUresult cuMemsetD2D##bits##Async_ptsz(CUdeviceptr p, size_t pitch, T v, size_t w,          \
                                                           size_t h, CUstream s) {                             \
    return memset_n(p, pitch, v, w, h, s, true);                                                               \
  }

FUNNEL_MEMSET_ENTRY_POINTS(8, unsigned char)
FUNNEL_MEMSET_ENTRY_POINTS(16, unsigned short)
FUNNEL_MEMSET_ENTRY_POINTS(32, unsigned int)
#undef FUNNEL_MEMSET_ENTRY_POINTS

// ---- pinned host memory and what a pointer is ------------------------------------------------

FUNNEL_DRIVER_API CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  if (pp == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  static_assert(CU_MEMHOSTALLOC_PORTABLE == cudaHostAllocPortable && CU_MEMHOSTALLOC_DEVICEMAP == cudaHostAllocMapped &&
                CU_MEMHOSTALLOC_WRITECOMBINED == cudaHostAllocWriteCombined);
  return funnel::driver::to_cu(funnel::client::pinned_alloc(pp, bytes, flags));
}
FUNNEL_DRIVER_API CUresult cuMemAllocHost_v2(void** pp, size_t bytes) { return cuMemHostAlloc(pp, bytes, 0); }
// The program's own memory, registered: known to the client's tables, as cudaHostRegister does
// (copies from it stay staged; mapping it into kernels is issue 30).
FUNNEL_DRIVER_API CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int /*flags*/) {
  if (p == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  return Runtime::get().tables.add_registered(reinterpret_cast<uintptr_t>(p), bytes)
             ? CUDA_SUCCESS
             : CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
}
FUNNEL_DRIVER_API CUresult cuMemHostUnregister(void* p) {
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  return Runtime::get().tables.remove_registered(reinterpret_cast<uintptr_t>(p)) ? CUDA_SUCCESS
                                                                                 : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

// The address kernels use for pinned memory (pinned_device_pointer): the host address itself
// when the client mapped the buffer at the server's address.
FUNNEL_DRIVER_API CUresult cuMemHostGetFlags(unsigned* flags, void* p) {
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::host_get_flags(flags, p));
}
FUNNEL_DRIVER_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int flags) {
  if (pdptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  void* dev = nullptr;
  const CUresult r =
      funnel::driver::to_cu(funnel::client::pinned_device_pointer(&dev, p, flags, "cuMemHostGetDevicePointer"));
  if (r == CUDA_SUCCESS) *pdptr = reinterpret_cast<CUdeviceptr>(dev);
  return r;
}

FUNNEL_DRIVER_API CUresult cuMemFreeHost(void* p) {
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::pinned_free(p));
}

namespace {

// One attribute of what `ptr` is, as the driver answers it: device memory (funnel's
// allocations and module globals), host memory (funnel's pinned buffers and registered ranges)
// or, for anything else, CUDA_ERROR_INVALID_VALUE (how MPI libraries tell host memory apart).
CUresult pointer_attribute(void* data, CUpointer_attribute a, CUdeviceptr ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Runtime& rt = Runtime::get();
  const funnel::client::Classified c = rt.tables.classify(host(ptr));
  const bool device = c.kind == funnel::client::Classified::Device;
  const bool pinned = c.kind == funnel::client::Classified::Pinned;
  const bool registered = !device && !pinned && rt.tables.is_registered(static_cast<uintptr_t>(ptr));
  if (!device && !pinned && !registered) return CUDA_ERROR_INVALID_VALUE;
  const int dev = device ? c.device : funnel::client::current_device();
  switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = funnel::driver::context_of(dev);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:  // managed memory says "device", as the driver does
      *static_cast<unsigned*>(data) = device || c.managed ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      if (pinned && c.pinned_device != 0) {  // where the GPU sees a pinned or managed buffer
        *static_cast<CUdeviceptr*>(data) = c.pinned_device + (ptr - c.base);
        return CUDA_SUCCESS;
      }
      if (!device) return CUDA_ERROR_INVALID_VALUE;  // registered memory stays the program's own
      *static_cast<CUdeviceptr*>(data) = ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = host(ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<unsigned*>(data) = c.managed ? 1 : 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = dev;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:  // unique while the allocation lives: its start
      *static_cast<unsigned long long*>(data) = device || pinned ? c.base : static_cast<uintptr_t>(ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      if (!device && !pinned) break;
      *static_cast<CUdeviceptr*>(data) = c.base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      if (!device && !pinned) break;
      *static_cast<size_t*>(data) = c.size;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<unsigned*>(data) = 1;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:  // funnel exports no allocation to a shareable handle
      *static_cast<unsigned long long*>(data) = CU_MEM_HANDLE_TYPE_NONE;
      return CUDA_SUCCESS;
    default:
      break;
  }
  return funnel::driver::not_supported_detail("cuPointerGetAttribute", static_cast<int>(a));
}

}  // namespace

FUNNEL_DRIVER_API CUresult cuPointerGetAttribute(void* data, CUpointer_attribute a, CUdeviceptr ptr) {
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  return pointer_attribute(data, a, ptr);
}

FUNNEL_DRIVER_API CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attrs, void** data,
                                                  CUdeviceptr ptr) {
  if (attrs == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  // As the driver: an attribute that does not apply to this pointer leaves its slot as a zero
  // value rather than failing the call (host memory funnel does not know is "unregistered").
  for (unsigned i = 0; i < n; ++i) {
    if (data[i] == nullptr) continue;
    const CUresult r = pointer_attribute(data[i], attrs[i], ptr);
    if (r == CUDA_ERROR_NOT_SUPPORTED) return r;
    if (r != CUDA_SUCCESS) {
      if (attrs[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE) *static_cast<unsigned*>(data[i]) = 0;
      if (attrs[i] == CU_POINTER_ATTRIBUTE_CONTEXT) *static_cast<CUcontext*>(data[i]) = nullptr;
      if (attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_POINTER || attrs[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
        *static_cast<CUdeviceptr*>(data[i]) = 0;
      if (attrs[i] == CU_POINTER_ATTRIBUTE_IS_MANAGED || attrs[i] == CU_POINTER_ATTRIBUTE_MAPPED)
        *static_cast<unsigned*>(data[i]) = 0;
    }
  }
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  const funnel::client::Classified c = Runtime::get().tables.classify(host(ptr));
  if (c.kind != funnel::client::Classified::Device) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = c.base;
  if (size != nullptr) *size = c.size;
  return CUDA_SUCCESS;
}

// A tensor-memory-accelerator descriptor (Hopper's bulk tensor copies; Triton and XLA encode one
// before each launch that uses it): encoded by the server's driver (tensor_maps.hpp), for the
// device of the current context, or device 0 without one (the call needs no context).
FUNNEL_DRIVER_API CUresult cuTensorMapEncodeTiled(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                                  cuuint32_t tensorRank, void* globalAddress, const cuuint64_t* globalDim,
                                                  const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
                                                  const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
                                                  CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                                  CUtensorMapFloatOOBfill oobFill) {
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  if (tensorMap == nullptr || tensorRank == 0 || tensorRank > funnel::ipc::kTensorMapMaxRank || globalDim == nullptr ||
      (tensorRank > 1 && globalStrides == nullptr) || boxDim == nullptr || elementStrides == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  funnel::ipc::TensorMapCmd c{};
  c.data_type = static_cast<uint32_t>(tensorDataType);
  c.rank = tensorRank;
  c.interleave = static_cast<uint32_t>(interleave);
  c.swizzle = static_cast<uint32_t>(swizzle);
  c.l2_promotion = static_cast<uint32_t>(l2Promotion);
  c.oob_fill = static_cast<uint32_t>(oobFill);
  c.global_address = reinterpret_cast<uintptr_t>(globalAddress);
  for (cuuint32_t i = 0; i < tensorRank; ++i) {
    c.global_dim[i] = globalDim[i];
    c.box_dim[i] = boxDim[i];
    c.element_strides[i] = elementStrides[i];
    if (i + 1 < tensorRank) c.global_strides[i] = globalStrides[i];
  }
  int d = 0;
  if (funnel::driver::current(d) != CUDA_SUCCESS) d = 0;
  return funnel::driver::to_cu(funnel::client::encode_tensor_map(d, c, tensorMap));
}
