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
#include <type_traits>

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
// texture_create into a front's handle type (cudaTextureObject_t, CUtexObject, ...): *out is set
// on success only.
template <class Handle>
cudaError_t texture_create_into(Handle* out, const ipc::TexCreateCmd& c, const void* resource) {
  uint64_t h = 0;
  const cudaError_t e = texture_create(&h, c, resource);
  if (e == cudaSuccess) *out = static_cast<Handle>(h);
  return e;
}

// The fields the runtime's and the driver's texture and view descriptions share by name
// (cudaTextureDesc / CUDA_TEXTURE_DESC, cudaResourceViewDesc / CUDA_RESOURCE_VIEW_DESC), into the
// command and back; each front adds its flags.
template <class TexDesc>
void put_texture_fields(ipc::TexCreateCmd& c, const TexDesc& t) {
  for (int i = 0; i < 3; ++i) c.address_mode[i] = static_cast<uint32_t>(t.addressMode[i]);
  c.filter_mode = static_cast<uint32_t>(t.filterMode);
  c.max_anisotropy = t.maxAnisotropy;
  c.mipmap_filter_mode = static_cast<uint32_t>(t.mipmapFilterMode);
  c.mipmap_level_bias = t.mipmapLevelBias;
  c.min_mipmap_level_clamp = t.minMipmapLevelClamp;
  c.max_mipmap_level_clamp = t.maxMipmapLevelClamp;
  for (int i = 0; i < 4; ++i) c.border_color[i] = t.borderColor[i];
}
template <class TexDesc>
void get_texture_fields(const ipc::TexCreateCmd& c, TexDesc& t) {
  using Address = std::remove_reference_t<decltype(t.addressMode[0])>;
  using Filter = decltype(t.filterMode);
  for (int i = 0; i < 3; ++i) t.addressMode[i] = static_cast<Address>(c.address_mode[i]);
  t.filterMode = static_cast<Filter>(c.filter_mode);
  t.maxAnisotropy = c.max_anisotropy;
  t.mipmapFilterMode = static_cast<Filter>(c.mipmap_filter_mode);
  t.mipmapLevelBias = c.mipmap_level_bias;
  t.minMipmapLevelClamp = c.min_mipmap_level_clamp;
  t.maxMipmapLevelClamp = c.max_mipmap_level_clamp;
  for (int i = 0; i < 4; ++i) t.borderColor[i] = c.border_color[i];
}
template <class ViewDesc>
void put_view(ipc::TexCreateCmd& c, const ViewDesc* v) {
  if (v == nullptr) return;
  c.has_view = 1;
  c.view_format = static_cast<uint32_t>(v->format);
  c.view_width = v->width;
  c.view_height = v->height;
  c.view_depth = v->depth;
  c.first_level = v->firstMipmapLevel;
  c.last_level = v->lastMipmapLevel;
  c.first_layer = v->firstLayer;
  c.last_layer = v->lastLayer;
}
// The view an object was made with (all zero without one).
template <class ViewDesc>
ViewDesc view_of(const ipc::TexCreateCmd& c) {
  ViewDesc v{};
  if (c.has_view == 0) return v;
  v.format = static_cast<decltype(v.format)>(c.view_format);
  v.width = c.view_width;
  v.height = c.view_height;
  v.depth = c.view_depth;
  v.firstMipmapLevel = c.first_level;
  v.lastMipmapLevel = c.last_level;
  v.firstLayer = c.first_layer;
  v.lastLayer = c.last_layer;
  return v;
}

}  // namespace funnel::client
