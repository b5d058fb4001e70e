// The runtime front's arrays, mipmapped arrays, copies to and from them, texture and surface
// objects (doc/design/arrays.md) over the client core's arrays (arrays.hpp).  Channel formats
// are the driver's CUarray_format inside funnel: the runtime's cudaChannelFormatDesc is turned
// into one here and back.
#include <cuda.h>

#include <cstring>

#include "arrays.hpp"

using namespace funnel::client;
namespace ipc = funnel::ipc;

namespace {

// A cudaChannelFormatDesc as the driver's format and channels: channels of one size, signed,
// unsigned or float (8/16/32 bits; float 16 or 32).  false for what funnel does not take.
bool format_of(const cudaChannelFormatDesc& d, uint32_t& format, uint32_t& channels) {
  const int bits[4] = {d.x, d.y, d.z, d.w};
  channels = 0;
  for (int b : bits) {
    if (b == 0) break;
    if (b != d.x) return false;
    ++channels;
  }
  if (channels == 3 || channels == 0) return false;
  for (uint32_t i = channels; i < 4; ++i)
    if (bits[i] != 0) return false;
  switch (d.f) {
    case cudaChannelFormatKindSigned:
      format = d.x == 8 ? CU_AD_FORMAT_SIGNED_INT8 : d.x == 16 ? CU_AD_FORMAT_SIGNED_INT16 : d.x == 32 ? CU_AD_FORMAT_SIGNED_INT32 : 0;
      break;
    case cudaChannelFormatKindUnsigned:
      format = d.x == 8 ? CU_AD_FORMAT_UNSIGNED_INT8 : d.x == 16 ? CU_AD_FORMAT_UNSIGNED_INT16 : d.x == 32 ? CU_AD_FORMAT_UNSIGNED_INT32 : 0;
      break;
    case cudaChannelFormatKindFloat:
      format = d.x == 16 ? CU_AD_FORMAT_HALF : d.x == 32 ? CU_AD_FORMAT_FLOAT : 0;
      break;
    default:
      return false;
  }
  return format != 0;
}

cudaChannelFormatDesc desc_of(uint32_t format, uint32_t channels) {
  cudaChannelFormatDesc d{};
  int bits = 0;
  switch (format) {
    case CU_AD_FORMAT_SIGNED_INT8: case CU_AD_FORMAT_UNSIGNED_INT8: bits = 8; break;
    case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_HALF: bits = 16; break;
    default: bits = 32;
  }
  d.f = format == CU_AD_FORMAT_HALF || format == CU_AD_FORMAT_FLOAT ? cudaChannelFormatKindFloat
        : (format == CU_AD_FORMAT_SIGNED_INT8 || format == CU_AD_FORMAT_SIGNED_INT16 || format == CU_AD_FORMAT_SIGNED_INT32)
            ? cudaChannelFormatKindSigned
            : cudaChannelFormatKindUnsigned;
  d.x = bits;
  d.y = channels > 1 ? bits : 0;
  d.z = channels > 2 ? bits : 0;
  d.w = channels > 3 ? bits : 0;
  return d;
}

cudaError_t create(void** out, const cudaChannelFormatDesc* desc, cudaExtent e, unsigned flags, unsigned levels) {
  if (out == nullptr || desc == nullptr) return cudaErrorInvalidValue;
  uint32_t format = 0, channels = 0;
  if (!format_of(*desc, format, channels)) {
    report_unsupported("a CUDA array of this channel format (cudaChannelFormatDesc)");
    return cudaErrorNotSupported;
  }
  // cudaArrayTextureGather and the rest have the driver's values (CUDA_ARRAY3D_*).
  static_assert(cudaArrayLayered == CUDA_ARRAY3D_LAYERED && cudaArraySurfaceLoadStore == CUDA_ARRAY3D_SURFACE_LDST &&
                cudaArrayCubemap == CUDA_ARRAY3D_CUBEMAP && cudaArrayTextureGather == CUDA_ARRAY3D_TEXTURE_GATHER);
  constexpr unsigned known = cudaArrayLayered | cudaArraySurfaceLoadStore | cudaArrayCubemap | cudaArrayTextureGather;
  if ((flags & ~known) != 0) {
    report_unsupported("a CUDA array with these flags (sparse, deferred mapping or color attachment)");
    return cudaErrorNotSupported;
  }
  return array_create(out, e.width, e.height, e.depth, format, channels, flags, levels);
}

bool is_int_format(uint32_t f) { return f != CU_AD_FORMAT_HALF && f != CU_AD_FORMAT_FLOAT; }

// A cudaResourceDesc as the server's command; `resource` the array handle it names.
cudaError_t resource_cmd(const cudaResourceDesc* r, ipc::TexCreateCmd& c, const void*& resource) {
  if (r == nullptr || r->flags != 0) return cudaErrorInvalidValue;
  c.res_type = static_cast<uint32_t>(r->resType);
  resource = nullptr;
  switch (r->resType) {
    case cudaResourceTypeArray:
      resource = r->res.array.array;
      return cudaSuccess;
    case cudaResourceTypeMipmappedArray:
      resource = r->res.mipmap.mipmap;
      return cudaSuccess;
    case cudaResourceTypeLinear:
      if (!format_of(r->res.linear.desc, c.format, c.channels)) return cudaErrorInvalidChannelDescriptor;
      c.address = reinterpret_cast<uint64_t>(r->res.linear.devPtr);
      c.size = r->res.linear.sizeInBytes;
      return cudaSuccess;
    case cudaResourceTypePitch2D:
      if (!format_of(r->res.pitch2D.desc, c.format, c.channels)) return cudaErrorInvalidChannelDescriptor;
      c.address = reinterpret_cast<uint64_t>(r->res.pitch2D.devPtr);
      c.width = r->res.pitch2D.width;
      c.height = r->res.pitch2D.height;
      c.pitch = r->res.pitch2D.pitchInBytes;
      return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

cudaResourceDesc resource_desc(const TextureRecord& t) {
  cudaResourceDesc r{};
  const ipc::TexCreateCmd& c = t.cmd;
  r.resType = static_cast<cudaResourceType>(c.res_type);
  switch (r.resType) {
    case cudaResourceTypeArray:
      r.res.array.array = static_cast<cudaArray_t>(const_cast<void*>(t.resource));
      break;
    case cudaResourceTypeMipmappedArray:
      r.res.mipmap.mipmap = static_cast<cudaMipmappedArray_t>(const_cast<void*>(t.resource));
      break;
    case cudaResourceTypeLinear:
      r.res.linear.devPtr = reinterpret_cast<void*>(c.address);
      r.res.linear.desc = desc_of(c.format, c.channels);
      r.res.linear.sizeInBytes = c.size;
      break;
    case cudaResourceTypePitch2D:
      r.res.pitch2D.devPtr = reinterpret_cast<void*>(c.address);
      r.res.pitch2D.desc = desc_of(c.format, c.channels);
      r.res.pitch2D.width = c.width;
      r.res.pitch2D.height = c.height;
      r.res.pitch2D.pitchInBytes = c.pitch;
      break;
  }
  return r;
}

// The format a texture reads: its array's or its linear memory's.
uint32_t texture_format(const ipc::TexCreateCmd& c, const void* resource) {
  if (c.res_type > 1) return c.format;
  const std::optional<ArrayInfo> a = array_info(resource, c.res_type == 1);
  return a ? a->shape.format : static_cast<uint32_t>(CU_AD_FORMAT_FLOAT);
}

// A 2-D copy with an array on either side (offsets and width in bytes, as the 2-D array calls).
cudaError_t copy_2d_arrays(cudaArray_const_t dst_array, size_t dx, size_t dy, void* dst, size_t dpitch,
                           cudaArray_const_t src_array, size_t sx, size_t sy, const void* src, size_t spitch,
                           size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t s, bool async, bool ptds) {
  CopySide ds{dst}, ss{src};
  Pitches dp{dpitch, 0}, sp{spitch, 0};
  if (dst_array != nullptr)
    if (cudaError_t e = array_side(dst_array, dx, dy, 0, ds, dp); e != cudaSuccess) return e;
  if (src_array != nullptr)
    if (cudaError_t e = array_side(src_array, sx, sy, 0, ss, sp); e != cudaSuccess) return e;
  return copy_sides(ds, dp, ss, sp, {width, height, 1}, kind, s, async, ptds);
}

// The deprecated 1-D calls: `count` bytes from (wOffset, hOffset) on, rows after rows.
cudaError_t copy_linear(cudaArray_const_t dst_array, size_t dx, size_t dy, void* dst, cudaArray_const_t src_array,
                        size_t sx, size_t sy, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t s,
                        bool async, bool ptds) {
  auto side = [](cudaArray_const_t a, size_t x, size_t y, const void* p, LinearSide& out) {
    out = LinearSide{a, p, 0};
    if (a == nullptr) return cudaSuccess;
    const std::optional<ArrayInfo> info = array_info(a, false);
    if (!info) return cudaErrorInvalidResourceHandle;
    out.offset = y * info->shape.width * info->element_bytes + x;
    return cudaSuccess;
  };
  LinearSide d, sr;
  if (cudaError_t e = side(dst_array, dx, dy, dst, d); e != cudaSuccess) return e;
  if (cudaError_t e = side(src_array, sx, sy, src, sr); e != cudaSuccess) return e;
  return linear_copy(d, sr, count, kind, s, async, ptds);
}

}  // namespace

// ---- channel descriptors, arrays ------------------------------------------------------------

FUNNEL_API cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, cudaChannelFormatKind f) {
  return cudaChannelFormatDesc{x, y, z, w, f};
}
FUNNEL_API cudaError_t cudaMallocArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, size_t width,
                                       size_t height, unsigned flags) {
  return guarded(__func__, [&] {
    return create(reinterpret_cast<void**>(array), desc, cudaExtent{width, height, 0}, flags, 0);
  });
}
FUNNEL_API cudaError_t cudaMalloc3DArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, cudaExtent extent,
                                         unsigned flags) {
  return guarded(__func__, [&] { return create(reinterpret_cast<void**>(array), desc, extent, flags, 0); });
}
FUNNEL_API cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t* mipmap, const cudaChannelFormatDesc* desc,
                                                cudaExtent extent, unsigned levels, unsigned flags) {
  return guarded(__func__, [&] {
    if (levels == 0) return cudaErrorInvalidValue;
    return create(reinterpret_cast<void**>(mipmap), desc, extent, flags, levels);
  });
}
FUNNEL_API cudaError_t cudaGetMipmappedArrayLevel(cudaArray_t* level, cudaMipmappedArray_const_t mipmap, unsigned l) {
  return guarded(__func__, [&] { return array_level(reinterpret_cast<void**>(level), mipmap, l); });
}
FUNNEL_API cudaError_t cudaFreeArray(cudaArray_t array) {
  return guarded(__func__, [&] { return array_destroy(array, false); });
}
FUNNEL_API cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mipmap) {
  return guarded(__func__, [&] { return array_destroy(mipmap, true); });
}
FUNNEL_API cudaError_t cudaArrayGetInfo(cudaChannelFormatDesc* desc, cudaExtent* extent, unsigned* flags,
                                        cudaArray_t array) {
  return guarded(__func__, [&] {
    const std::optional<ArrayInfo> a = array_info(array, false);
    if (!a) return cudaErrorInvalidResourceHandle;
    if (desc != nullptr) *desc = desc_of(a->shape.format, a->shape.channels);
    if (extent != nullptr) *extent = cudaExtent{a->shape.width, a->shape.height, a->shape.depth};
    if (flags != nullptr) *flags = a->shape.flags;
    return cudaSuccess;
  });
}
FUNNEL_API cudaError_t cudaGetChannelDesc(cudaChannelFormatDesc* desc, cudaArray_const_t array) {
  return guarded(__func__, [&] {
    if (desc == nullptr) return cudaErrorInvalidValue;
    const std::optional<ArrayInfo> a = array_info(array, false);
    if (!a) return cudaErrorInvalidResourceHandle;
    *desc = desc_of(a->shape.format, a->shape.channels);
    return cudaSuccess;
  });
}

// ---- copies -----------------------------------------------------------------------------------

#define FUNNEL_2D_TO_ARRAY(name, async, ptds, ...)                                                            \
  FUNNEL_API cudaError_t name(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t spitch, \
                              size_t width, size_t height, cudaMemcpyKind kind __VA_ARGS__) {                  \
    return guarded(__func__, [&] {                                                                             \
      return copy_2d_arrays(dst, wOffset, hOffset, nullptr, 0, nullptr, 0, 0, src, spitch, width, height, kind, \
                            FUNNEL_STREAM_ARG, async, ptds);                                                   \
    });                                                                                                        \
  }
#define FUNNEL_2D_FROM_ARRAY(name, async, ptds, ...)                                                              \
  FUNNEL_API cudaError_t name(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset,    \
                              size_t width, size_t height, cudaMemcpyKind kind __VA_ARGS__) {                     \
    return guarded(__func__, [&] {                                                                                \
      return copy_2d_arrays(nullptr, 0, 0, dst, dpitch, src, wOffset, hOffset, nullptr, 0, width, height, kind,   \
                            FUNNEL_STREAM_ARG, async, ptds);                                                      \
    });                                                                                                           \
  }
#define FUNNEL_STREAM_ARG nullptr
FUNNEL_2D_TO_ARRAY(cudaMemcpy2DToArray, false, false)
FUNNEL_2D_TO_ARRAY(cudaMemcpy2DToArray_ptds, false, true)
FUNNEL_2D_FROM_ARRAY(cudaMemcpy2DFromArray, false, false)
FUNNEL_2D_FROM_ARRAY(cudaMemcpy2DFromArray_ptds, false, true)
#undef FUNNEL_STREAM_ARG
#define FUNNEL_STREAM_ARG stream
FUNNEL_2D_TO_ARRAY(cudaMemcpy2DToArrayAsync, true, false, , cudaStream_t stream)
FUNNEL_2D_TO_ARRAY(cudaMemcpy2DToArrayAsync_ptsz, true, true, , cudaStream_t stream)
FUNNEL_2D_FROM_ARRAY(cudaMemcpy2DFromArrayAsync, true, false, , cudaStream_t stream)
FUNNEL_2D_FROM_ARRAY(cudaMemcpy2DFromArrayAsync_ptsz, true, true, , cudaStream_t stream)
#undef FUNNEL_STREAM_ARG

static cudaError_t array_to_array_2d(cudaArray_t dst, size_t dx, size_t dy, cudaArray_const_t src, size_t sx, size_t sy,
                                     size_t width, size_t height, cudaMemcpyKind kind, bool ptds) {
  if (kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  return copy_2d_arrays(dst, dx, dy, nullptr, 0, src, sx, sy, nullptr, 0, width, height, kind, nullptr, false, ptds);
}
FUNNEL_API cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t dx, size_t dy, cudaArray_const_t src,
                                                size_t sx, size_t sy, size_t width, size_t height, cudaMemcpyKind kind) {
  return guarded(__func__, [&] { return array_to_array_2d(dst, dx, dy, src, sx, sy, width, height, kind, false); });
}
FUNNEL_API cudaError_t cudaMemcpy2DArrayToArray_ptds(cudaArray_t dst, size_t dx, size_t dy, cudaArray_const_t src,
                                                     size_t sx, size_t sy, size_t width, size_t height,
                                                     cudaMemcpyKind kind) {
  return guarded(__func__, [&] { return array_to_array_2d(dst, dx, dy, src, sx, sy, width, height, kind, true); });
}

// The deprecated 1-D calls.
FUNNEL_API cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t x, size_t y, const void* src, size_t count,
                                         cudaMemcpyKind kind) {
  return guarded(__func__, [&] { return copy_linear(dst, x, y, nullptr, nullptr, 0, 0, src, count, kind, nullptr, false, false); });
}
FUNNEL_API cudaError_t cudaMemcpyToArray_ptds(cudaArray_t dst, size_t x, size_t y, const void* src, size_t count,
                                              cudaMemcpyKind kind) {
  return guarded(__func__, [&] { return copy_linear(dst, x, y, nullptr, nullptr, 0, 0, src, count, kind, nullptr, false, true); });
}
FUNNEL_API cudaError_t cudaMemcpyToArrayAsync(cudaArray_t dst, size_t x, size_t y, const void* src, size_t count,
                                              cudaMemcpyKind kind, cudaStream_t s) {
  return guarded(__func__, [&] { return copy_linear(dst, x, y, nullptr, nullptr, 0, 0, src, count, kind, s, true, false); });
}
FUNNEL_API cudaError_t cudaMemcpyToArrayAsync_ptsz(cudaArray_t dst, size_t x, size_t y, const void* src, size_t count,
                                                   cudaMemcpyKind kind, cudaStream_t s) {
  return guarded(__func__, [&] { return copy_linear(dst, x, y, nullptr, nullptr, 0, 0, src, count, kind, s, true, true); });
}
FUNNEL_API cudaError_t cudaMemcpyFromArray(void* dst, cudaArray_const_t src, size_t x, size_t y, size_t count,
                                           cudaMemcpyKind kind) {
  return guarded(__func__, [&] { return copy_linear(nullptr, 0, 0, dst, src, x, y, nullptr, count, kind, nullptr, false, false); });
}
FUNNEL_API cudaError_t cudaMemcpyFromArray_ptds(void* dst, cudaArray_const_t src, size_t x, size_t y, size_t count,
                                                cudaMemcpyKind kind) {
  return guarded(__func__, [&] { return copy_linear(nullptr, 0, 0, dst, src, x, y, nullptr, count, kind, nullptr, false, true); });
}
FUNNEL_API cudaError_t cudaMemcpyFromArrayAsync(void* dst, cudaArray_const_t src, size_t x, size_t y, size_t count,
                                                cudaMemcpyKind kind, cudaStream_t s) {
  return guarded(__func__, [&] { return copy_linear(nullptr, 0, 0, dst, src, x, y, nullptr, count, kind, s, true, false); });
}
FUNNEL_API cudaError_t cudaMemcpyFromArrayAsync_ptsz(void* dst, cudaArray_const_t src, size_t x, size_t y,
                                                     size_t count, cudaMemcpyKind kind, cudaStream_t s) {
  return guarded(__func__, [&] { return copy_linear(nullptr, 0, 0, dst, src, x, y, nullptr, count, kind, s, true, true); });
}
FUNNEL_API cudaError_t cudaMemcpyArrayToArray(cudaArray_t dst, size_t dx, size_t dy, cudaArray_const_t src, size_t sx,
                                              size_t sy, size_t count, cudaMemcpyKind kind) {
  return guarded(__func__, [&] { return copy_linear(dst, dx, dy, nullptr, src, sx, sy, nullptr, count, kind, nullptr, false, false); });
}
FUNNEL_API cudaError_t cudaMemcpyArrayToArray_ptds(cudaArray_t dst, size_t dx, size_t dy, cudaArray_const_t src,
                                                   size_t sx, size_t sy, size_t count, cudaMemcpyKind kind) {
  return guarded(__func__, [&] { return copy_linear(dst, dx, dy, nullptr, src, sx, sy, nullptr, count, kind, nullptr, false, true); });
}

// ---- texture and surface objects ----------------------------------------------------------------

FUNNEL_API cudaError_t cudaCreateTextureObject(cudaTextureObject_t* out, const cudaResourceDesc* r,
                                               const cudaTextureDesc* t, const cudaResourceViewDesc* v) {
  return guarded(__func__, [&]() -> cudaError_t {
    if (out == nullptr || t == nullptr) return cudaErrorInvalidValue;
    ipc::TexCreateCmd c{};
    const void* resource = nullptr;
    if (cudaError_t e = resource_cmd(r, c, resource); e != cudaSuccess) return e;
    put_texture_fields(c, *t);
    // Element-type reads of integer data read integers (the driver's READ_AS_INTEGER); float data
    // read floats either way.
    if (t->readMode == cudaReadModeElementType && is_int_format(texture_format(c, resource)))
      c.flags |= CU_TRSF_READ_AS_INTEGER;
    if (t->normalizedCoords != 0) c.flags |= CU_TRSF_NORMALIZED_COORDINATES;
    if (t->sRGB != 0) c.flags |= CU_TRSF_SRGB;
    if (t->disableTrilinearOptimization != 0) c.flags |= CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION;
    if (t->seamlessCubemap != 0) c.flags |= CU_TRSF_SEAMLESS_CUBEMAP;
    put_view(c, v);
    return texture_create_into(out, c, resource);
  });
}
FUNNEL_API cudaError_t cudaDestroyTextureObject(cudaTextureObject_t t) {
  return guarded(__func__, [&] { return texture_destroy(t, false); });
}
FUNNEL_API cudaError_t cudaGetTextureObjectResourceDesc(cudaResourceDesc* out, cudaTextureObject_t t) {
  return guarded(__func__, [&] {
    const std::optional<TextureRecord> rec = texture_record(t, false);
    if (out == nullptr || !rec) return cudaErrorInvalidValue;
    *out = resource_desc(*rec);
    return cudaSuccess;
  });
}
FUNNEL_API cudaError_t cudaGetTextureObjectTextureDesc(cudaTextureDesc* out, cudaTextureObject_t t) {
  return guarded(__func__, [&] {
    const std::optional<TextureRecord> rec = texture_record(t, false);
    if (out == nullptr || !rec) return cudaErrorInvalidValue;
    const ipc::TexCreateCmd& c = rec->cmd;
    *out = cudaTextureDesc{};
    get_texture_fields(c, *out);
    out->readMode = (c.flags & CU_TRSF_READ_AS_INTEGER) != 0 || !is_int_format(texture_format(c, rec->resource))
                        ? cudaReadModeElementType
                        : cudaReadModeNormalizedFloat;
    out->sRGB = (c.flags & CU_TRSF_SRGB) != 0;
    out->normalizedCoords = (c.flags & CU_TRSF_NORMALIZED_COORDINATES) != 0;
    out->disableTrilinearOptimization = (c.flags & CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION) != 0;
    out->seamlessCubemap = (c.flags & CU_TRSF_SEAMLESS_CUBEMAP) != 0;
    return cudaSuccess;
  });
}
FUNNEL_API cudaError_t cudaGetTextureObjectResourceViewDesc(cudaResourceViewDesc* out, cudaTextureObject_t t) {
  return guarded(__func__, [&] {
    const std::optional<TextureRecord> rec = texture_record(t, false);
    if (out == nullptr || !rec) return cudaErrorInvalidValue;
    *out = view_of<cudaResourceViewDesc>(rec->cmd);
    return cudaSuccess;
  });
}
FUNNEL_API cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t* out, const cudaResourceDesc* r) {
  return guarded(__func__, [&]() -> cudaError_t {
    if (out == nullptr) return cudaErrorInvalidValue;
    ipc::TexCreateCmd c{};
    c.surface = 1;
    const void* resource = nullptr;
    if (cudaError_t e = resource_cmd(r, c, resource); e != cudaSuccess) return e;
    if (c.res_type != cudaResourceTypeArray) return cudaErrorInvalidValue;
    return texture_create_into(out, c, resource);
  });
}
FUNNEL_API cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t s) {
  return guarded(__func__, [&] { return texture_destroy(s, true); });
}
FUNNEL_API cudaError_t cudaGetSurfaceObjectResourceDesc(cudaResourceDesc* out, cudaSurfaceObject_t s) {
  return guarded(__func__, [&] {
    const std::optional<TextureRecord> rec = texture_record(s, true);
    if (out == nullptr || !rec) return cudaErrorInvalidValue;
    *out = resource_desc(*rec);
    return cudaSuccess;
  });
}
