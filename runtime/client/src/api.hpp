// Shared by the api_*.cpp files: the export macro, the per-thread state (current
// device, last error, per-thread default streams) and the error-safe wrapper that
// every exported function goes through.
#pragma once
#include <atomic>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include "log.hpp"
#include "runtime.hpp"

#define FUNNEL_API extern "C" __attribute__((visibility("default")))

namespace funnel::client {

// funnel::ipc::Status crosses the channel; its numbers are cudaError_t's.
static_assert(int(Status::Success) == cudaSuccess);
static_assert(int(Status::InvalidValue) == cudaErrorInvalidValue);
static_assert(int(Status::MemoryAllocation) == cudaErrorMemoryAllocation);
static_assert(int(Status::InitializationError) == cudaErrorInitializationError);
static_assert(int(Status::InvalidPitchValue) == cudaErrorInvalidPitchValue);
static_assert(int(Status::InvalidDevicePointer) == cudaErrorInvalidDevicePointer);
static_assert(int(Status::InvalidMemcpyDirection) == cudaErrorInvalidMemcpyDirection);
static_assert(int(Status::DevicesUnavailable) == cudaErrorDevicesUnavailable);
static_assert(int(Status::NoDevice) == cudaErrorNoDevice);
static_assert(int(Status::InvalidDevice) == cudaErrorInvalidDevice);
static_assert(int(Status::UnsupportedLimit) == cudaErrorUnsupportedLimit);
static_assert(int(Status::OperatingSystem) == cudaErrorOperatingSystem);
static_assert(int(Status::InvalidResourceHandle) == cudaErrorInvalidResourceHandle);
static_assert(int(Status::IllegalState) == cudaErrorIllegalState);
static_assert(int(Status::NotReady) == cudaErrorNotReady);
static_assert(int(Status::IllegalAddress) == cudaErrorIllegalAddress);
static_assert(int(Status::LaunchFailure) == cudaErrorLaunchFailure);
static_assert(int(Status::NotPermitted) == cudaErrorNotPermitted);
static_assert(int(Status::NotSupported) == cudaErrorNotSupported);
static_assert(int(Status::MpsMaxClientsReached) == cudaErrorMpsMaxClientsReached);
static_assert(int(Status::Timeout) == cudaErrorTimeout);
static_assert(int(Status::InvalidClusterSize) == cudaErrorInvalidClusterSize);
static_assert(int(Status::Unknown) == cudaErrorUnknown);
static_assert(int(Status::InvalidConfiguration) == cudaErrorInvalidConfiguration);
static_assert(int(Status::InvalidDeviceFunction) == cudaErrorInvalidDeviceFunction);
static_assert(int(Status::InvalidKernelImage) == cudaErrorInvalidKernelImage);
static_assert(int(Status::AlreadyMapped) == cudaErrorAlreadyMapped);
static_assert(int(Status::NoKernelImageForDevice) == cudaErrorNoKernelImageForDevice);
static_assert(int(Status::SymbolNotFound) == cudaErrorSymbolNotFound);
static_assert(int(Status::LaunchOutOfResources) == cudaErrorLaunchOutOfResources);
static_assert(int(Status::LaunchTimeout) == cudaErrorLaunchTimeout);
static_assert(int(Status::Assert) == cudaErrorAssert);
static_assert(int(Status::HardwareStackError) == cudaErrorHardwareStackError);
static_assert(int(Status::IllegalInstruction) == cudaErrorIllegalInstruction);
static_assert(int(Status::MisalignedAddress) == cudaErrorMisalignedAddress);
static_assert(int(Status::InvalidAddressSpace) == cudaErrorInvalidAddressSpace);
static_assert(int(Status::InvalidPc) == cudaErrorInvalidPc);
static_assert(int(Status::CooperativeLaunchTooLarge) == cudaErrorCooperativeLaunchTooLarge);

inline cudaError_t to_cuda(Status s) noexcept { return static_cast<cudaError_t>(s); }

int& current_device() noexcept;          // per host thread, as the CUDA runtime's current context
// A device's context flags (cudaSetDeviceFlags, cuDevicePrimaryCtxSetFlags, cuCtxSetFlags: the
// CU_CTX_* values), one per device of this process, shared by both fronts.  The scheduling policy
// is how this process's threads wait for the server (Runtime::wait_options); the others are kept
// and answered back.  0 for a device out of range.
std::atomic<unsigned>& context_flags(int device) noexcept;
// Checks and stores a device's context flags for `call` (a CUDA function's name): a scheduling
// policy of auto, spin, yield or blocking sync (else cudaErrorInvalidValue), map-host and
// local-memory resize kept; other flags (synchronous memops, core dumps) refused by name
// ("<call> with flags(N) is not supported yet", cudaErrorNotSupported).
cudaError_t set_context_flags(int device, unsigned flags, const char* call) noexcept;
// cudaDeviceGetByPCIBusId, cuDeviceGetByPCIBusId: the device whose PCI id is `id` in any form
// the driver accepts (domain:bus:device.function, domain:bus:device, bus:device.function; hex,
// any case); cudaErrorInvalidValue for text of no such form, cudaErrorInvalidDevice for no device.
// Attached already.
cudaError_t device_by_pci_bus_id(const char* id, int& device) noexcept;
// A device's cache preference (cudaDeviceSetCacheConfig, cuCtxSetCacheConfig: cudaFuncCache
// values), kept per process and answered back (no effect on Hopper, as under CUDA).
std::atomic<int>& cache_config(int device) noexcept;
// A limit of `device`'s context (a cudaLimit/CUlimit value), kept by the server: cudaDeviceGetLimit,
// cudaDeviceSetLimit, cuCtxGetLimit, cuCtxSetLimit.
cudaError_t get_limit(int device, uint32_t limit, uint64_t& value);
cudaError_t set_limit(int device, uint32_t limit, uint64_t value);
// cudaProfilerStart/Stop, cuProfilerStart/Stop: this process's profiled range on `device`.
cudaError_t profiler(int device, bool start);
// cudaCtxResetPersistingL2Cache, cuCtxResetPersistingL2Cache: `device`'s persisting L2 lines made
// normal (the server's context: every client's on the device).
cudaError_t reset_persisting_l2(int device);
// cudaDeviceCanAccessPeer, cuDeviceCanAccessPeer: 0 for two valid devices (funnel gives no peer
// access yet: doc/not-supported.md), cudaErrorInvalidDevice otherwise.  Attached already.
cudaError_t can_access_peer(int* can, int device, int peer) noexcept;
// cudaHostGetFlags, cuMemHostGetFlags: the flags a pinned buffer was made with (cudaHostAlloc's),
// as CUDA reports them under unified addressing (mapped always set).
cudaError_t host_get_flags(unsigned* flags, const void* p) noexcept;
cudaError_t& last_error() noexcept;      // per host thread

// Records a failing status as the thread's last error (cudaErrorNotReady is not an
// error: CUDA does not record it) and returns it.
inline cudaError_t record(cudaError_t e) noexcept {
  if (e != cudaSuccess && e != cudaErrorNotReady) last_error() = e;
  return e;
}

// Runs the body of an exported function: no exception escapes the library.
template <class F>
cudaError_t guarded(const char* name, F&& body) noexcept {
  try {
    return record(body());
  } catch (const std::exception& e) {
    log_error(fmt::format("funnel: internal error in {}: {}", name, e.what()));
  } catch (...) {
    log_error(fmt::format("funnel: internal error in {}", name));
  }
  return record(cudaErrorUnknown);
}

// ready() of the process's runtime, as a cudaError_t.
inline cudaError_t attach() noexcept { return to_cuda(Runtime::get().ready()); }

// Whether the stream with this id (nonzero) is being captured into a graph (graphs.hpp): work
// sent to it becomes nodes of the capture's graph instead of going to the server.
bool capture_active(uint64_t stream_id) noexcept;

// A stream as the server knows it.
struct StreamRef {
  uint64_t id = 0;  // 0: the legacy default stream
  int device = 0;
  bool blocking = true;  // synchronizes with the legacy stream (not cudaStreamNonBlocking)
  bool capturing() const noexcept { return id != 0 && capture_active(id); }
};

// Resolves an application's stream handle.  `per_thread` is true in the _ptsz/_ptds
// entry points, where stream 0 means the calling thread's default stream.
// Attaches when needed.  cudaErrorInvalidResourceHandle for unknown handles.
cudaError_t resolve_stream(cudaStream_t s, bool per_thread, StreamRef& out) noexcept;
// A text field of a fixed-size record (a device's name, its PCI bus id) into a caller's buffer
// of `len` bytes: as much as fits with the terminating 0 (cudaDeviceGetPCIBusId, cuDeviceGetName,
// cuDeviceGetPCIBusId).
template <size_t N>
cudaError_t copy_text(char* out, int len, const char (&field)[N]) noexcept {
  if (out == nullptr || len <= 0) return cudaErrorInvalidValue;
  const size_t n = std::min(strnlen(field, N), static_cast<size_t>(len) - 1);
  std::memcpy(out, field, n);
  out[n] = '\0';
  return cudaSuccess;
}

}  // namespace funnel::client
