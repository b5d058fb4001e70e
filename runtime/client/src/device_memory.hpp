// Device memory: allocations the server makes in its context, entered in the client's tables
// (the runtime's cudaMalloc/cudaMallocAsync/cudaFree and the driver's cuMemAlloc/cuMemFree).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "api.hpp"

namespace funnel::client {

// `size` bytes (nullptr for 0) on `on.device`; op MemAlloc, or MemAllocAsync on stream `on`
// (a pooled allocation).
cudaError_t device_alloc(void** ptr, size_t size, Opcode op, const StreamRef& on);
// Frees an allocation of device_alloc: op MemFree (waits), or MemFreeAsync on stream `on`.
// cudaErrorInvalidValue for an address that is not an allocation's start.
cudaError_t device_free(void* ptr, Opcode op, const StreamRef& on);

// cudaMallocPitch, cudaMalloc3D, cuMemAllocPitch: `rows` rows of `width` bytes, each starting
// 512 bytes after the previous one's start at the least; *pitch says how far.
cudaError_t pitched_alloc(void** ptr, size_t* pitch, size_t width, size_t rows, const StreamRef& on);

}  // namespace funnel::client
