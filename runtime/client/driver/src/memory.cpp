// Memory of the driver front: allocations and copies through the client core, the same tables
// and copy paths as the runtime front's (a cuMemAlloc'd pointer is a cudaMalloc'd one).
#include "copy_engine.hpp"
#include "device_memory.hpp"
#include "front.hpp"

using funnel::client::Reply;
using funnel::client::Runtime;
using funnel::client::StreamRef;
using funnel::ipc::Opcode;

namespace {

CUresult on_current(StreamRef& legacy) {
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  legacy = StreamRef{0, d};
  return CUDA_SUCCESS;
}

void* host(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }

// A 1-D copy: synchronous (cuMemcpy*) or on a stream (cuMemcpy*Async); `per_thread` for the
// _ptds/_ptsz entry points.
CUresult copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, CUstream s, bool async, bool per_thread) {
  StreamRef legacy;
  if (CUresult r = on_current(legacy); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::copy_3d(dst, {n, 0}, src, {n, 0}, {n, 1, 1}, kind,
                                                       reinterpret_cast<cudaStream_t>(s), async, per_thread));
}

CUresult memset8(CUdeviceptr p, unsigned char v, size_t n, CUstream s, bool per_thread) {
  StreamRef legacy;
  if (CUresult r = on_current(legacy); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(
      funnel::client::memset_3d(host(p), {n, 0}, v, {n, 1, 1}, reinterpret_cast<cudaStream_t>(s), per_thread));
}

}  // namespace

FUNNEL_DRIVER_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;  // the driver refuses 0 bytes (the runtime does not)
  StreamRef legacy;
  if (CUresult r = on_current(legacy); r != CUDA_SUCCESS) return r;
  void* p = nullptr;
  const CUresult r = funnel::driver::to_cu(funnel::client::device_alloc(&p, bytes, Opcode::MemAlloc, legacy));
  *dptr = r == CUDA_SUCCESS ? static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)) : 0;
  return r;
}

FUNNEL_DRIVER_API CUresult cuMemFree_v2(CUdeviceptr p) {
  StreamRef legacy;
  if (CUresult r = on_current(legacy); r != CUDA_SUCCESS) return r;
  if (p == 0) return CUDA_ERROR_INVALID_VALUE;
  return funnel::driver::to_cu(funnel::client::device_free(host(p), Opcode::MemFree, legacy));
}

FUNNEL_DRIVER_API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  StreamRef legacy;
  if (CUresult r = on_current(legacy); r != CUDA_SUCCESS) return r;
  Reply reply;
  if (CUresult r = funnel::driver::to_cu(Runtime::get().call(Opcode::MemGetInfo, legacy.device, 0, nullptr, 0, &reply));
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
FUNNEL_DRIVER_API CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) {
  return memset8(p, v, n, nullptr, false);
}
FUNNEL_DRIVER_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr p, unsigned char v, size_t n) {
  return memset8(p, v, n, nullptr, true);
}
FUNNEL_DRIVER_API CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
  return memset8(p, v, n, s, false);
}
FUNNEL_DRIVER_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
  return memset8(p, v, n, s, true);
}
