// Managed memory of both fronts (cudaMallocManaged, cuMemAllocManaged; doc/design/managed.md): a
// pinned buffer (pinned.hpp) that is always mapped at the address the server and the GPU see it
// at, so the program's host code and its kernels use the same pointer and the same bytes
// (zero-copy: kernels reach it over the bus, nothing migrates).  Prefetches and advice are
// checked and kept (cudaMemRangeGetAttribute answers them back); they move nothing.
#pragma once
#include "api.hpp"

namespace funnel::client {

// cudaMallocManaged: flags cudaMemAttachGlobal or cudaMemAttachHost; size 0 gives nullptr.
cudaError_t managed_alloc(void** ptr, size_t size, unsigned flags);
// cudaFree of a managed buffer (false: `ptr` starts none, nothing done).
bool managed_free(void* ptr, cudaError_t& result);
// cudaMemPrefetchAsync: [p, p + n) in one managed buffer, a location of a device or the host; in
// stream order on `stream` (nothing to move: the data is where both see it).
cudaError_t managed_prefetch(const void* p, size_t n, cudaMemLocation location, unsigned flags, cudaStream_t stream,
                             bool ptds);
// cudaMemAdvise: kept for the buffer, answered by managed_range_attribute.
cudaError_t managed_advise(const void* p, size_t n, int advice, cudaMemLocation location);
// cudaMemRangeGetAttribute of a range in one managed buffer.
cudaError_t managed_range_attribute(void* data, size_t size, int attribute, const void* p, size_t n);
// cudaStreamAttachMemAsync: checked (a managed buffer, or 0 length on one; flags Global, Host or
// Single), nothing else to do (every stream sees the memory).
cudaError_t managed_attach(cudaStream_t stream, void* p, size_t length, unsigned flags, bool ptds);

}  // namespace funnel::client
