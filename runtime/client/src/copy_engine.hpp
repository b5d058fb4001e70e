// Copies and memsets: classify both pointers by the client's own maps, then pick
// the path: device/pinned <-> device/pinned as one Copy command per slice (direct DMA on
// the server), pageable host <-> device through the staging slots in pipelined chunks,
// host <-> host as a local memcpy.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "funnel/ipc/commands.hpp"

namespace funnel::client {

// The layout of a 3-D region in memory: rows `pitch` bytes apart, slices `slice` bytes
// apart (unused when there is one slice).
struct Pitches {
  size_t pitch;
  size_t slice;
};
// A region's size: `depth` slices of `height` rows of `width` bytes.
struct Extent3 {
  size_t width;
  size_t height;
  size_t depth;
};

// Where a 3-D copy or memset starts in a pitched region: `pos` is in bytes (x), rows
// and slices, as for every copy between linear memory.
inline std::byte* at(const cudaPitchedPtr& p, const cudaPos& pos) {
  return static_cast<std::byte*>(p.ptr) + (pos.z * p.ysize + pos.y) * p.pitch + pos.x;
}

// Whether `extent` from `pos` stays within the region's rows (and, with several slices,
// within its slices' rows), as CUDA checks it.
inline bool fits(const cudaPitchedPtr& p, const cudaPos& pos, const cudaExtent& extent) {
  if (extent.width > p.pitch || pos.x > p.pitch - extent.width) return false;
  return extent.depth <= 1 || (extent.height <= p.ysize && pos.y <= p.ysize - extent.height);
}

// A 3-D copy (a 2-D copy is depth 1; a 1-D copy also height 1, pitches = width).
// `async`: cudaMemcpy*Async semantics; `per_thread`: called through a _ptds/_ptsz entry
// point.  Every slice is checked before anything is sent.
cudaError_t copy_3d(void* dst, Pitches dp, const void* src, Pitches sp, Extent3 extent, cudaMemcpyKind kind,
                    cudaStream_t stream, bool async, bool per_thread) noexcept;

// One side of a copy: a pointer, or (array_id not 0) the region of an array at byte offset `ptr`
// of its rows (row bytes apart) and slices (rows * height apart) laid one after the other, the
// array `array_bytes` long in that layout, of `device` (arrays.hpp).
struct CopySide {
  const void* ptr = nullptr;
  uint64_t array_id = 0;
  int device = 0;
  uint64_t array_bytes = 0;
};
// copy_3d with either side an array's region (the array side's pitches are its row bytes and
// slice bytes); arrays are refused in a stream capture.
cudaError_t copy_sides(const CopySide& dst, Pitches dp, const CopySide& src, Pitches sp, Extent3 extent,
                       cudaMemcpyKind kind, cudaStream_t stream, bool async, bool per_thread) noexcept;

inline cudaError_t copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                           cudaMemcpyKind kind, cudaStream_t stream, bool async, bool per_thread) noexcept {
  return copy_3d(dst, {dpitch, 0}, src, {spitch, 0}, {width, height, 1}, kind, stream, async, per_thread);
}

// The one Copy command of a copy between device memory and pinned buffers (a graph's copy node):
// checked as copy_3d checks it; slices that do not fold into one 2-D region, pageable host memory
// and host-to-host copies are refused naming `call` (cudaErrorNotSupported).  `device`: the
// device of its device side.
cudaError_t direct_copy_command(void* dst, Pitches dp, const void* src, Pitches sp, Extent3 extent,
                                cudaMemcpyKind kind, const char* call, ipc::CopyCmd& out, int& device) noexcept;

// Widths and pitches in bytes; `value` is one element of `element` bytes (1: cudaMemset's byte,
// 2 and 4: cuMemsetD16/D32), and the address, width and pitch are multiples of it.
cudaError_t memset_3d(void* dst, Pitches p, int value, Extent3 extent, cudaStream_t stream, bool per_thread,
                      uint32_t element = 1) noexcept;

inline cudaError_t memset_2d(void* dst, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream,
                             bool per_thread) noexcept {
  return memset_3d(dst, {pitch, 0}, value, {width, height, 1}, stream, per_thread);
}

}  // namespace funnel::client
