// Pinned host memory (cudaMallocHost, cudaHostAlloc, cuMemAllocHost, cuMemHostAlloc): a file in
// the run directory that funnel-server maps and registers with the driver, mapped here too.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace funnel::client {

// `size` bytes of pinned memory for `*ptr` (nullptr for 0 bytes); `flags` as cudaHostAlloc's.
// `managed`: managed memory (managed.hpp), mapped at the address the GPU sees it at or not at all.
cudaError_t pinned_alloc(void** ptr, size_t size, unsigned flags, bool managed = false);
// cudaHostGetDevicePointer / cuMemHostGetDevicePointer: the address kernels use for `host`, in
// a pinned_alloc buffer: the buffer's address in the server (registered there, so mapped for the
// GPU at that address), the same as `host` when the client could map the buffer there too.
// cudaErrorInvalidValue for other memory; memory registered with cudaHostRegister is refused
// by name (the GPU cannot reach another process's memory).
cudaError_t pinned_device_pointer(void** device, void* host, unsigned flags, const char* call);
// Frees a pinned_alloc buffer (nullptr: nothing); cudaErrorInvalidValue for any other address.
// `managed`: a managed buffer (cudaFree's), else a pinned one (cudaFreeHost's).
cudaError_t pinned_free(void* ptr, bool managed = false);

}  // namespace funnel::client
