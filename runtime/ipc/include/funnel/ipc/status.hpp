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
  InvalidConfiguration = 9,
  InvalidPitchValue = 12,
  InvalidDevicePointer = 17,
  InvalidMemcpyDirection = 21,
  DevicesUnavailable = 46,
  InvalidDeviceFunction = 98,
  NoDevice = 100,
  InvalidDevice = 101,
  InvalidKernelImage = 200,
  AlreadyMapped = 208,
  NoKernelImageForDevice = 209,
  UnsupportedLimit = 215,
  OperatingSystem = 304,
  InvalidResourceHandle = 400,
  IllegalState = 401,
  SymbolNotFound = 500,
  NotReady = 600,
  IllegalAddress = 700,
  LaunchOutOfResources = 701,
  LaunchTimeout = 702,
  Assert = 710,
  HardwareStackError = 714,
  IllegalInstruction = 715,
  MisalignedAddress = 716,
  InvalidAddressSpace = 717,
  InvalidPc = 718,
  LaunchFailure = 719,
  CooperativeLaunchTooLarge = 720,
  NotPermitted = 800,
  NotSupported = 801,
  MpsMaxClientsReached = 808,
  Timeout = 909,
  InvalidClusterSize = 912,
  Unknown = 999,
};

constexpr bool ok(Status s) noexcept { return s == Status::Success; }

// Errors that poison the whole context, as CUDA makes them sticky.
constexpr bool is_sticky(Status s) noexcept {
  switch (s) {
    case Status::IllegalAddress: case Status::LaunchTimeout: case Status::Assert:
    case Status::HardwareStackError: case Status::IllegalInstruction: case Status::MisalignedAddress:
    case Status::InvalidAddressSpace: case Status::InvalidPc: case Status::LaunchFailure:
      return true;
    default:
      return false;
  }
}

}  // namespace funnel::ipc
