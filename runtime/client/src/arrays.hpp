// CUDA arrays, mipmapped arrays, texture and surface objects of both fronts
// (doc/design/arrays.md).  An array lives on the server (a CUarray of its context); the client
// keeps its shape and an id: cudaArray_t, cudaMipmappedArray_t, CUarray and CUmipmappedArray are
// ArrayObj*, checked against the registry (an unknown handle is cudaErrorInvalidValue, or
// cudaErrorInvalidResourceHandle where CUDA answers that).  Copies reach an array's region as a
// copy side of its own (copy_engine.hpp's CopySide).  A texture or surface object is the server's
// handle, the value kernels take.
#pragma once
#include <cstdint>
#include <optional>

#include "api.hpp"
#include "copy_engine.hpp"

namespace funnel::client {

// The shape the server got: width/height/depth in elements (0: absent), CUarray_format, channels,
// CUDA_ARRAY3D_* flags, levels (0: an array).
struct ArrayInfo {
  uint64_t id = 0;
  int device = 0;
  ipc::ArrayCreateCmd shape{};
  uint32_t element_bytes = 0;
  uint64_t mipmap = 0;  // a level: its mipmapped array's id (the level goes with it)
};

// Bytes of one channel of a CUarray_format (0: not a format funnel takes).
uint32_t array_format_bytes(uint32_t format) noexcept;

cudaError_t array_create(void** out, uint64_t width, uint64_t height, uint64_t depth, uint32_t format,
                         uint32_t channels, uint32_t flags, uint32_t levels);
// An array (mipmap false) or a mipmapped array (true); its levels go with it.
cudaError_t array_destroy(const void* handle, bool mipmap);
cudaError_t array_level(void** out, const void* mipmap, unsigned level);
// The shape of an array (mipmap false) or mipmapped array (true); nullopt for an unknown handle.
std::optional<ArrayInfo> array_info(const void* handle, bool mipmap);
// The copy side of an array's region starting at byte x of row y of slice z, and the array's row
// and slice bytes (the side's pitches).
cudaError_t array_side(const void* handle, uint64_t x, uint64_t y, uint64_t z, CopySide& side, Pitches& pitches);

// A copy of `bytes` bytes between linear ranges where either side may be an array's (its rows and
// slices one after the other from byte `offset`; cudaMemcpyToArray, cuMemcpyHtoA, cuMemcpyAtoA,
// ...): as few 2-D copies as the arrays' rows allow.  A pointer side's `offset` is added to it.
struct LinearSide {
  const void* array = nullptr;  // an array handle, or null: `ptr`
  const void* ptr = nullptr;
  uint64_t offset = 0;
};
cudaError_t linear_copy(const LinearSide& dst, const LinearSide& src, uint64_t bytes, cudaMemcpyKind kind,
                        cudaStream_t stream, bool async, bool per_thread);

// Texture (surface false) and surface objects: c as the server takes it, its res_id set from
// `resource` (an array or mipmapped array handle; null for linear memory).
cudaError_t texture_create(uint64_t* out, ipc::TexCreateCmd c, const void* resource);
cudaError_t texture_destroy(uint64_t handle, bool surface);
// What an object was made of: the command and the resource's handle.
struct TextureRecord {
  ipc::TexCreateCmd cmd;
  const void* resource;
};
std::optional<TextureRecord> texture_record(uint64_t handle, bool surface);

}  // namespace funnel::client
