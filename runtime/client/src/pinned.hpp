// Pinned host memory (cudaMallocHost, cudaHostAlloc, cuMemAllocHost, cuMemHostAlloc): a file in
// the run directory that funnel-server maps and registers with the driver, mapped here too.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace funnel::client {

// `size` bytes of pinned memory for `*ptr` (nullptr for 0 bytes); `flags` as cudaHostAlloc's.
cudaError_t pinned_alloc(void** ptr, size_t size, unsigned flags);
// Frees a pinned_alloc buffer (nullptr: nothing); cudaErrorInvalidValue for any other address.
cudaError_t pinned_free(void* ptr);

}  // namespace funnel::client
