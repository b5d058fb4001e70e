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

// The virtual memory calls of the driver front (doc/design/driver-client.md): a range of the
// server's address space reserved there and here (the server's driver picks it; a range that
// clashes with memory of this process is asked for again, as allocations are), new memory of
// `device` mapped over [addr, addr + size) of one, and each undone.  Sizes and addresses in
// 2 MiB granules (the server checks them, and that a mapping lies in a reservation of ours).
cudaError_t address_reserve(uint64_t size, uint64_t alignment, uint64_t& out);
cudaError_t address_free(uint64_t addr, uint64_t size);
cudaError_t map_memory(uint64_t addr, uint64_t size, int device);
cudaError_t unmap_memory(uint64_t addr, uint64_t size);

// cudaMallocPitch, cudaMalloc3D, cuMemAllocPitch: `rows` rows of `width` bytes, each starting
// 512 bytes after the previous one's start at the least; *pitch says how far.
cudaError_t pitched_alloc(void** ptr, size_t* pitch, size_t width, size_t rows, const StreamRef& on);

}  // namespace funnel::client
