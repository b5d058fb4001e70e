// The driver front's arrays, mipmapped arrays, copies to and from arrays, texture and surface
// objects (cuArray*, cuMipmappedArray*, cuMemcpy{HtoA,AtoH,DtoA,AtoD,AtoA}, cuTexObject*,
// cuSurfObject*; doc/design/arrays.md) over the client core's arrays (arrays.hpp).  2-D and 3-D
// copies with array ends are memory.cpp's cuMemcpy2D/3D.
#include "arrays.hpp"
#include "front.hpp"

namespace c = funnel::client;
using funnel::driver::to_cu;

namespace {

CUresult create(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* d, unsigned levels) {
  if (out == nullptr || d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  if (CUresult r = funnel::driver::in_context(device); r != CUDA_SUCCESS) return r;
  constexpr unsigned known = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP |
                             CUDA_ARRAY3D_TEXTURE_GATHER;
  if ((d->Flags & ~known) != 0) {
    c::report_unsupported("a CUDA array with these flags (sparse, deferred mapping, depth texture or color attachment)");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  void* h = nullptr;
  const CUresult r = to_cu(c::array_create(&h, d->Width, d->Height, d->Depth, static_cast<uint32_t>(d->Format),
                                           d->NumChannels, d->Flags, levels));
  if (r == CUDA_SUCCESS) *out = static_cast<CUarray>(h);
  return r;
}

CUDA_ARRAY3D_DESCRIPTOR descriptor_of(const c::ArrayInfo& a) {
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = a.shape.width;
  d.Height = a.shape.height;
  d.Depth = a.shape.depth;
  d.Format = static_cast<CUarray_format>(a.shape.format);
  d.NumChannels = a.shape.channels;
  d.Flags = a.shape.flags;
  return d;
}

// A linear copy of `bytes` between a pointer or an array's bytes from an offset.
CUresult linear(const void* dst_array, const void* dst, size_t dst_off, const void* src_array, const void* src,
                size_t src_off, size_t bytes, cudaMemcpyKind kind, CUstream s, bool async, bool ptds) {
  int device = 0;
  if (CUresult r = funnel::driver::in_context(device); r != CUDA_SUCCESS) return r;
  if ((dst_array == nullptr && dst == nullptr) || (src_array == nullptr && src == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return to_cu(c::linear_copy(c::LinearSide{dst_array, dst, dst_off}, c::LinearSide{src_array, src, src_off}, bytes,
                              kind, reinterpret_cast<cudaStream_t>(s), async, ptds));
}

const void* ptr(CUdeviceptr p) { return reinterpret_cast<const void*>(static_cast<uintptr_t>(p)); }

// A CUDA_RESOURCE_DESC as the server's command; `resource` the array handle it names.
CUresult resource_cmd(const CUDA_RESOURCE_DESC* r, funnel::ipc::TexCreateCmd& cmd, const void*& resource) {
  if (r == nullptr || r->flags != 0) return CUDA_ERROR_INVALID_VALUE;
  cmd.res_type = static_cast<uint32_t>(r->resType);
  resource = nullptr;
  switch (r->resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      resource = r->res.array.hArray;
      return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      resource = r->res.mipmap.hMipmappedArray;
      return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_LINEAR:
      cmd.address = r->res.linear.devPtr;
      cmd.format = static_cast<uint32_t>(r->res.linear.format);
      cmd.channels = r->res.linear.numChannels;
      cmd.size = r->res.linear.sizeInBytes;
      return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_PITCH2D:
      cmd.address = r->res.pitch2D.devPtr;
      cmd.format = static_cast<uint32_t>(r->res.pitch2D.format);
      cmd.channels = r->res.pitch2D.numChannels;
      cmd.width = r->res.pitch2D.width;
      cmd.height = r->res.pitch2D.height;
      cmd.pitch = r->res.pitch2D.pitchInBytes;
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUDA_RESOURCE_DESC resource_desc(const c::TextureRecord& t) {
  CUDA_RESOURCE_DESC r{};
  const funnel::ipc::TexCreateCmd& cmd = t.cmd;
  r.resType = static_cast<CUresourcetype>(cmd.res_type);
  switch (r.resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      r.res.array.hArray = static_cast<CUarray>(const_cast<void*>(t.resource));
      break;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      r.res.mipmap.hMipmappedArray = static_cast<CUmipmappedArray>(const_cast<void*>(t.resource));
      break;
    case CU_RESOURCE_TYPE_LINEAR:
      r.res.linear.devPtr = cmd.address;
      r.res.linear.format = static_cast<CUarray_format>(cmd.format);
      r.res.linear.numChannels = cmd.channels;
      r.res.linear.sizeInBytes = cmd.size;
      break;
    case CU_RESOURCE_TYPE_PITCH2D:
      r.res.pitch2D.devPtr = cmd.address;
      r.res.pitch2D.format = static_cast<CUarray_format>(cmd.format);
      r.res.pitch2D.numChannels = cmd.channels;
      r.res.pitch2D.width = cmd.width;
      r.res.pitch2D.height = cmd.height;
      r.res.pitch2D.pitchInBytes = cmd.pitch;
      break;
  }
  return r;
}

template <class Handle>
CUresult object(Handle* out, const funnel::ipc::TexCreateCmd& cmd, const void* resource) {
  int device = 0;
  if (CUresult r = funnel::driver::in_context(device); r != CUDA_SUCCESS) return r;
  return to_cu(c::texture_create_into(out, cmd, resource));
}

}  // namespace

// ---- arrays -----------------------------------------------------------------------------------

FUNNEL_DRIVER_API CUresult cuArrayCreate_v2(CUarray* out, const CUDA_ARRAY_DESCRIPTOR* d) {
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_ARRAY3D_DESCRIPTOR d3{d->Width, d->Height, 0, d->Format, d->NumChannels, 0};
  return create(out, &d3, 0);
}
FUNNEL_DRIVER_API CUresult cuArray3DCreate_v2(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* d) { return create(out, d, 0); }
FUNNEL_DRIVER_API CUresult cuArrayDestroy(CUarray a) {
  if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return to_cu(c::array_destroy(a, false));
}
FUNNEL_DRIVER_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* out, CUarray a) {
  const std::optional<c::ArrayInfo> info = c::array_info(a, false);
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!info) return CUDA_ERROR_INVALID_HANDLE;
  const CUDA_ARRAY3D_DESCRIPTOR d = descriptor_of(*info);
  *out = CUDA_ARRAY_DESCRIPTOR{d.Width, d.Height, d.Format, d.NumChannels};
  return CUDA_SUCCESS;
}
FUNNEL_DRIVER_API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* out, CUarray a) {
  const std::optional<c::ArrayInfo> info = c::array_info(a, false);
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!info) return CUDA_ERROR_INVALID_HANDLE;
  *out = descriptor_of(*info);
  return CUDA_SUCCESS;
}
FUNNEL_DRIVER_API CUresult cuMipmappedArrayCreate(CUmipmappedArray* out, const CUDA_ARRAY3D_DESCRIPTOR* d,
                                                  unsigned levels) {
  if (levels == 0) return CUDA_ERROR_INVALID_VALUE;
  return create(reinterpret_cast<CUarray*>(out), d, levels);
}
FUNNEL_DRIVER_API CUresult cuMipmappedArrayGetLevel(CUarray* out, CUmipmappedArray m, unsigned level) {
  int device = 0;
  if (CUresult r = funnel::driver::in_context(device); r != CUDA_SUCCESS) return r;
  return to_cu(c::array_level(reinterpret_cast<void**>(out), m, level));
}
FUNNEL_DRIVER_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray m) {
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return to_cu(c::array_destroy(m, true));
}

// ---- 1-D copies to and from arrays --------------------------------------------------------------

FUNNEL_DRIVER_API CUresult cuMemcpyHtoA_v2(CUarray dst, size_t off, const void* src, size_t n) {
  return linear(dst, nullptr, off, nullptr, src, 0, n, cudaMemcpyHostToDevice, nullptr, false, false);
}
FUNNEL_DRIVER_API CUresult cuMemcpyHtoA_v2_ptds(CUarray dst, size_t off, const void* src, size_t n) {
  return linear(dst, nullptr, off, nullptr, src, 0, n, cudaMemcpyHostToDevice, nullptr, false, true);
}
FUNNEL_DRIVER_API CUresult cuMemcpyHtoAAsync_v2(CUarray dst, size_t off, const void* src, size_t n, CUstream s) {
  return linear(dst, nullptr, off, nullptr, src, 0, n, cudaMemcpyHostToDevice, s, true, false);
}
FUNNEL_DRIVER_API CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray dst, size_t off, const void* src, size_t n, CUstream s) {
  return linear(dst, nullptr, off, nullptr, src, 0, n, cudaMemcpyHostToDevice, s, true, true);
}
FUNNEL_DRIVER_API CUresult cuMemcpyAtoH_v2(void* dst, CUarray src, size_t off, size_t n) {
  return linear(nullptr, dst, 0, src, nullptr, off, n, cudaMemcpyDeviceToHost, nullptr, false, false);
}
FUNNEL_DRIVER_API CUresult cuMemcpyAtoH_v2_ptds(void* dst, CUarray src, size_t off, size_t n) {
  return linear(nullptr, dst, 0, src, nullptr, off, n, cudaMemcpyDeviceToHost, nullptr, false, true);
}
FUNNEL_DRIVER_API CUresult cuMemcpyAtoHAsync_v2(void* dst, CUarray src, size_t off, size_t n, CUstream s) {
  return linear(nullptr, dst, 0, src, nullptr, off, n, cudaMemcpyDeviceToHost, s, true, false);
}
FUNNEL_DRIVER_API CUresult cuMemcpyAtoHAsync_v2_ptsz(void* dst, CUarray src, size_t off, size_t n, CUstream s) {
  return linear(nullptr, dst, 0, src, nullptr, off, n, cudaMemcpyDeviceToHost, s, true, true);
}
FUNNEL_DRIVER_API CUresult cuMemcpyDtoA_v2(CUarray dst, size_t off, CUdeviceptr src, size_t n) {
  return linear(dst, nullptr, off, nullptr, ptr(src), 0, n, cudaMemcpyDeviceToDevice, nullptr, false, false);
}
FUNNEL_DRIVER_API CUresult cuMemcpyDtoA_v2_ptds(CUarray dst, size_t off, CUdeviceptr src, size_t n) {
  return linear(dst, nullptr, off, nullptr, ptr(src), 0, n, cudaMemcpyDeviceToDevice, nullptr, false, true);
}
FUNNEL_DRIVER_API CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t off, size_t n) {
  return linear(nullptr, ptr(dst), 0, src, nullptr, off, n, cudaMemcpyDeviceToDevice, nullptr, false, false);
}
FUNNEL_DRIVER_API CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray src, size_t off, size_t n) {
  return linear(nullptr, ptr(dst), 0, src, nullptr, off, n, cudaMemcpyDeviceToDevice, nullptr, false, true);
}
FUNNEL_DRIVER_API CUresult cuMemcpyAtoA_v2(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n) {
  return linear(dst, nullptr, doff, src, nullptr, soff, n, cudaMemcpyDeviceToDevice, nullptr, false, false);
}
FUNNEL_DRIVER_API CUresult cuMemcpyAtoA_v2_ptds(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n) {
  return linear(dst, nullptr, doff, src, nullptr, soff, n, cudaMemcpyDeviceToDevice, nullptr, false, true);
}

// ---- texture and surface objects ------------------------------------------------------------------

FUNNEL_DRIVER_API CUresult cuTexObjectCreate(CUtexObject* out, const CUDA_RESOURCE_DESC* r, const CUDA_TEXTURE_DESC* t,
                                             const CUDA_RESOURCE_VIEW_DESC* v) {
  if (out == nullptr || t == nullptr) return CUDA_ERROR_INVALID_VALUE;
  funnel::ipc::TexCreateCmd cmd{};
  const void* resource = nullptr;
  if (CUresult e = resource_cmd(r, cmd, resource); e != CUDA_SUCCESS) return e;
  c::put_texture_fields(cmd, *t);
  cmd.flags = t->flags;
  c::put_view(cmd, v);
  return object(out, cmd, resource);
}
FUNNEL_DRIVER_API CUresult cuTexObjectDestroy(CUtexObject t) { return to_cu(c::texture_destroy(t, false)); }
FUNNEL_DRIVER_API CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC* out, CUtexObject t) {
  const std::optional<c::TextureRecord> rec = c::texture_record(t, false);
  if (out == nullptr || !rec) return CUDA_ERROR_INVALID_VALUE;
  *out = resource_desc(*rec);
  return CUDA_SUCCESS;
}
FUNNEL_DRIVER_API CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC* out, CUtexObject t) {
  const std::optional<c::TextureRecord> rec = c::texture_record(t, false);
  if (out == nullptr || !rec) return CUDA_ERROR_INVALID_VALUE;
  *out = CUDA_TEXTURE_DESC{};
  c::get_texture_fields(rec->cmd, *out);
  out->flags = rec->cmd.flags;
  return CUDA_SUCCESS;
}
FUNNEL_DRIVER_API CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC* out, CUtexObject t) {
  const std::optional<c::TextureRecord> rec = c::texture_record(t, false);
  if (out == nullptr || !rec) return CUDA_ERROR_INVALID_VALUE;
  *out = c::view_of<CUDA_RESOURCE_VIEW_DESC>(rec->cmd);
  return CUDA_SUCCESS;
}
FUNNEL_DRIVER_API CUresult cuSurfObjectCreate(CUsurfObject* out, const CUDA_RESOURCE_DESC* r) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  funnel::ipc::TexCreateCmd cmd{};
  cmd.surface = 1;
  const void* resource = nullptr;
  if (CUresult e = resource_cmd(r, cmd, resource); e != CUDA_SUCCESS) return e;
  if (cmd.res_type != CU_RESOURCE_TYPE_ARRAY) return CUDA_ERROR_INVALID_VALUE;
  return object(out, cmd, resource);
}
FUNNEL_DRIVER_API CUresult cuSurfObjectDestroy(CUsurfObject s) { return to_cu(c::texture_destroy(s, true)); }
FUNNEL_DRIVER_API CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC* out, CUsurfObject s) {
  const std::optional<c::TextureRecord> rec = c::texture_record(s, true);
  if (out == nullptr || !rec) return CUDA_ERROR_INVALID_VALUE;
  *out = resource_desc(*rec);
  return CUDA_SUCCESS;
}
