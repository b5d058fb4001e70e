// Copies and memsets: classify both pointers by the client's own maps, then pick
// the path: device/pinned <-> device/pinned as one Copy command (direct DMA on the
// server), pageable host <-> device through the staging slots in pipelined chunks,
// host <-> host as a local memcpy.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace funnel::client {

// A 2-D copy (a 1-D copy is height 1, pitches = width).  `async`: cudaMemcpy*Async
// semantics; `per_thread`: called through a _ptds/_ptsz entry point.
cudaError_t copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                    cudaMemcpyKind kind, cudaStream_t stream, bool async, bool per_thread) noexcept;

cudaError_t memset_2d(void* dst, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream,
                      bool per_thread) noexcept;

}  // namespace funnel::client
