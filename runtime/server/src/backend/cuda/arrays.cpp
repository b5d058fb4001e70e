// The cuda backend's arrays, mipmapped arrays, texture and surface objects (doc/design/arrays.md):
// CUarrays of the device's context, copies to and from them as cuMemcpy3DAsync, objects made by
// cuTexObjectCreate/cuSurfObjectCreate from the worker's checked description.
#include "backend/array_shape.hpp"
#include "backend/cuda/cuda_backend.hpp"

namespace funnel::server::cuda {

namespace {

class CudaArray final : public BackendArray {
 public:
  CudaArray(std::shared_ptr<const Shared> shared) : shared_(std::move(shared)) {}
  ~CudaArray() override {
    if (!ok(shared_->bind(device))) return;
    if (mipmap != nullptr) FUNNEL_CU(shared_->drv, cuMipmappedArrayDestroy, mipmap);
    else if (array != nullptr && owned) FUNNEL_CU(shared_->drv, cuArrayDestroy, array);
  }
  CudaArray(const CudaArray&) = delete;
  CudaArray& operator=(const CudaArray&) = delete;
  CUarray array = nullptr;             // an array or a level
  CUmipmappedArray mipmap = nullptr;   // a mipmapped array
  bool owned = true;                   // a level is its mipmapped array's

 private:
  std::shared_ptr<const Shared> shared_;
};

CUDA_ARRAY3D_DESCRIPTOR descriptor(const ArrayShape& s) {
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = s.width;
  d.Height = s.height;
  d.Depth = s.depth;
  d.Format = static_cast<CUarray_format>(s.format);
  d.NumChannels = s.channels;
  d.Flags = s.flags;
  return d;
}

}  // namespace

CUDA_MEMCPY3D array_copy_params(const CopyDesc& c) {
  CUDA_MEMCPY3D m{};
  const auto end = [&c](const CopyEndpoint& e, uint64_t pitch, CUmemorytype& type, const void*& host, CUdeviceptr& dev,
                        CUarray& array, size_t& x, size_t& y, size_t& z, size_t& mpitch, size_t& height) {
    if (e.array != nullptr) {
      type = CU_MEMORYTYPE_ARRAY;
      array = static_cast<const CudaArray*>(e.array)->array;
      x = e.x;
      y = e.y;
      z = e.z;
      return;
    }
    mpitch = c.height > 1 ? pitch : c.width;
    height = c.height;
    if (e.device) {
      type = CU_MEMORYTYPE_DEVICE;
      dev = device_pointer(e.address);
    } else {
      type = CU_MEMORYTYPE_HOST;
      host = host_pointer(e.address);
    }
  };
  const void* src_host = nullptr;
  const void* dst_host = nullptr;
  end(c.src, c.src_pitch, m.srcMemoryType, src_host, m.srcDevice, m.srcArray, m.srcXInBytes, m.srcY, m.srcZ,
      m.srcPitch, m.srcHeight);
  end(c.dst, c.dst_pitch, m.dstMemoryType, dst_host, m.dstDevice, m.dstArray, m.dstXInBytes, m.dstY, m.dstZ,
      m.dstPitch, m.dstHeight);
  m.srcHost = src_host;
  m.dstHost = const_cast<void*>(dst_host);
  m.WidthInBytes = c.width;
  m.Height = c.height;
  m.Depth = 1;
  return m;
}

Status CudaBackend::array_create(int device, const ArrayShape& shape, std::unique_ptr<BackendArray>& out) {
  if (Status st = s_->bind(device); !ok(st)) return st;
  auto a = std::make_unique<CudaArray>(s_);
  a->shape = shape;
  a->device = device;
  const CUDA_ARRAY3D_DESCRIPTOR d = descriptor(shape);
  const Status st = shape.levels == 0 ? FUNNEL_CU(s_->drv, cuArray3DCreate, &a->array, &d)
                                      : FUNNEL_CU(s_->drv, cuMipmappedArrayCreate, &a->mipmap, &d, shape.levels);
  if (!ok(st)) return st;
  out = std::move(a);
  return Status::Success;
}

Status CudaBackend::array_level(BackendArray& mipmap, uint32_t level, std::unique_ptr<BackendArray>& out) {
  auto& m = static_cast<CudaArray&>(mipmap);
  if (m.mipmap == nullptr) return Status::InvalidValue;
  if (Status st = s_->bind(m.device); !ok(st)) return st;
  auto a = std::make_unique<CudaArray>(s_);
  a->shape = level_shape(m.shape, level);
  a->device = m.device;
  a->owned = false;
  if (Status st = FUNNEL_CU(s_->drv, cuMipmappedArrayGetLevel, &a->array, m.mipmap, level); !ok(st)) return st;
  out = std::move(a);
  return Status::Success;
}

Status CudaBackend::texture_create(int device, const ipc::TexCreateCmd& c, const BackendArray* array,
                                   uint64_t& handle) {
  if (Status st = s_->bind(device); !ok(st)) return st;
  CUDA_RESOURCE_DESC r{};
  r.resType = static_cast<CUresourcetype>(c.res_type);
  const auto* a = static_cast<const CudaArray*>(array);
  switch (c.res_type) {
    case CU_RESOURCE_TYPE_ARRAY:
      r.res.array.hArray = a->array;
      break;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      r.res.mipmap.hMipmappedArray = a->mipmap;
      break;
    case CU_RESOURCE_TYPE_LINEAR:
      r.res.linear.devPtr = device_pointer(c.address);
      r.res.linear.format = static_cast<CUarray_format>(c.format);
      r.res.linear.numChannels = c.channels;
      r.res.linear.sizeInBytes = c.size;
      break;
    default:
      r.res.pitch2D.devPtr = device_pointer(c.address);
      r.res.pitch2D.format = static_cast<CUarray_format>(c.format);
      r.res.pitch2D.numChannels = c.channels;
      r.res.pitch2D.width = c.width;
      r.res.pitch2D.height = c.height;
      r.res.pitch2D.pitchInBytes = c.pitch;
      break;
  }
  if (c.surface != 0) {
    CUsurfObject s = 0;
    const Status st = FUNNEL_CU(s_->drv, cuSurfObjectCreate, &s, &r);
    if (ok(st)) handle = s;
    return st;
  }
  CUDA_TEXTURE_DESC t{};
  for (int i = 0; i < 3; ++i) t.addressMode[i] = static_cast<CUaddress_mode>(c.address_mode[i]);
  t.filterMode = static_cast<CUfilter_mode>(c.filter_mode);
  t.flags = c.flags;
  t.maxAnisotropy = c.max_anisotropy;
  t.mipmapFilterMode = static_cast<CUfilter_mode>(c.mipmap_filter_mode);
  t.mipmapLevelBias = c.mipmap_level_bias;
  t.minMipmapLevelClamp = c.min_mipmap_level_clamp;
  t.maxMipmapLevelClamp = c.max_mipmap_level_clamp;
  for (int i = 0; i < 4; ++i) t.borderColor[i] = c.border_color[i];
  CUDA_RESOURCE_VIEW_DESC v{};
  if (c.has_view != 0) {
    v.format = static_cast<CUresourceViewFormat>(c.view_format);
    v.width = c.view_width;
    v.height = c.view_height;
    v.depth = c.view_depth;
    v.firstMipmapLevel = c.first_level;
    v.lastMipmapLevel = c.last_level;
    v.firstLayer = c.first_layer;
    v.lastLayer = c.last_layer;
  }
  CUtexObject tex = 0;
  const Status st = FUNNEL_CU(s_->drv, cuTexObjectCreate, &tex, &r, &t, c.has_view != 0 ? &v : nullptr);
  if (ok(st)) handle = tex;
  return st;
}

Status CudaBackend::texture_destroy(int device, uint64_t handle, bool surface) {
  if (Status st = s_->bind(device); !ok(st)) return st;
  return surface ? FUNNEL_CU(s_->drv, cuSurfObjectDestroy, handle) : FUNNEL_CU(s_->drv, cuTexObjectDestroy, handle);
}

}  // namespace funnel::server::cuda
