// Status codes that cross the channel.  Their numbers are the CUDA runtime's
// cudaError_t values, so the client hands them to the application unchanged;
// runtime/client static_asserts that they match cuda_runtime_api.h.
#pragma once
#include <cstdint>

namespace funnel::ipc {

enum class Status : int32_t {
  Success = 0,
  InvalidValue = 1,
  MemoryAllocation = 2,
  InitializationError = 3,
  InvalidPitchValue = 12,
  InvalidDevicePointer = 17,
  InvalidMemcpyDirection = 21,
  DevicesUnavailable = 46,
  NoDevice = 100,
  InvalidDevice = 101,
  UnsupportedLimit = 215,
  OperatingSystem = 304,
  InvalidResourceHandle = 400,
  IllegalState = 401,
  NotReady = 600,
  IllegalAddress = 700,
  LaunchFailure = 719,
  NotPermitted = 800,
  NotSupported = 801,
  MpsMaxClientsReached = 808,
  Timeout = 909,
  Unknown = 999,
};

constexpr bool ok(Status s) noexcept { return s == Status::Success; }

// Errors that poison the whole context, as CUDA makes them sticky.
constexpr bool is_sticky(Status s) noexcept {
  return s == Status::IllegalAddress || s == Status::LaunchFailure;
}

}  // namespace funnel::ipc
