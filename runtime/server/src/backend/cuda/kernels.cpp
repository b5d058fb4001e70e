// The cuda backend's modules and kernels (doc/design/kernels.md): loads, kernel and
// variable look-ups, attributes, occupancy.
// A CUlibrary is context-independent: the driver loads its code into a device's context
// when a kernel of it is first used there.  CUkernel handles are launched directly
// (cuLaunchKernelEx takes a CUkernel in place of a CUfunction, in the current context).
// As in driver.cpp: GCC 12/13's false -Warray-bounds in fmt 9 (spdlog), before the includes.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
#include <algorithm>
#include <cstring>
#include <shared_mutex>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/launch.hpp"
#include "funnel/fatbin/fatbin.hpp"

namespace funnel::server::cuda {

Status CudaBackend::module_load(std::span<const std::byte> image, std::unique_ptr<BackendModule>& out) {
  // The driver loads lazily (CUDA_MODULE_LOADING=LAZY is the default) and accepted 4 KiB of
  // junk in the GPU smoke test: check that the bytes are a fat binary, an ELF cubin or PTX text
  // (what cuModuleLoadData takes) first.
  const auto format = funnel::fatbin::module_format(image);
  if (format == funnel::fatbin::ModuleFormat::unknown) return Status::InvalidKernelImage;
  if (format == funnel::fatbin::ModuleFormat::fatbin) {
    try {
      if (funnel::fatbin::parse_fatbin(image).empty()) return Status::InvalidKernelImage;
    } catch (const funnel::fatbin::Error& e) {
      spdlog::warn("cuda: module rejected: {}", e.what());
      return Status::InvalidKernelImage;
    }
  }
  CUlibrary lib = nullptr;
  std::shared_lock lk(s_->reset_mu);
  const Status st = s_->on_any_device([&] {
    return FUNNEL_CU(s_->drv, cuLibraryLoadData, &lib, image.data(), nullptr, nullptr, 0u, nullptr, nullptr, 0u);
  });
  if (!ok(st)) return st == Status::InvalidValue || st == Status::Unknown ? Status::InvalidKernelImage : st;
  out = std::make_unique<CudaModule>(s_, lib);
  return Status::Success;
}

Status CudaBackend::kernel_get(BackendModule& bm, const std::string& name, std::unique_ptr<BackendKernel>& out,
                               std::vector<ParamLayout>& params, uint32_t& param_bytes) {
  auto& m = static_cast<CudaModule&>(bm);
  const Driver& d = s_->drv;
  CUkernel k = nullptr;
  std::shared_lock lk(s_->reset_mu);
  const Status got = s_->on_any_device([&] {
    const CUresult r = d.cuLibraryGetKernel(&k, m.handle(), name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND || r == CUDA_ERROR_INVALID_VALUE) return Status::InvalidDeviceFunction;
    return check(d, "cuLibraryGetKernel", r);
  });
  if (!ok(got)) return got;
  // The driver's own parameter layout: every parameter's offset and size, in order;
  // the index past the last one answers CUDA_ERROR_INVALID_VALUE.
  params.clear();
  param_bytes = 0;
  for (size_t i = 0; i < ipc::kMaxParamBytes; ++i) {
    size_t offset = 0, size = 0;
    if (d.cuKernelGetParamInfo(k, i, &offset, &size) != CUDA_SUCCESS) break;
    params.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(size)});
    param_bytes = std::max(param_bytes, static_cast<uint32_t>(offset + size));
  }
  std::vector<uint32_t> offsets;
  offsets.reserve(params.size());
  for (const ParamLayout& p : params) offsets.push_back(p.offset);
  out = std::make_unique<CudaKernel>(k, std::move(offsets));
  return Status::Success;
}

Status CudaBackend::global_get(BackendModule& bm, int device, const std::string& name, DeviceAddress& address,
                               uint64_t& size, bool& managed) {
  auto& m = static_cast<CudaModule&>(bm);
  if (Status st = s_->bind(device); !ok(st)) return st;
  CUdeviceptr p = 0;
  size_t bytes = 0;
  // A __managed__ variable is the library's managed memory; the others its globals.
  managed = s_->drv.cuLibraryGetManaged(&p, &bytes, m.handle(), name.c_str()) == CUDA_SUCCESS;
  if (!managed) {
    if (const CUresult r = s_->drv.cuLibraryGetGlobal(&p, &bytes, m.handle(), name.c_str()); r != CUDA_SUCCESS) {
      if (r == CUDA_ERROR_NOT_FOUND || r == CUDA_ERROR_INVALID_VALUE) return Status::SymbolNotFound;
      return check(s_->drv, "cuLibraryGetGlobal", r);
    }
  }
  address = p;
  size = bytes;
  return Status::Success;
}

Status CudaBackend::func_attributes(BackendKernel& bk, int device, ipc::FuncAttributes& out) {
  auto& k = static_cast<CudaKernel&>(bk);
  if (Status st = s_->bind(device); !ok(st)) return st;
  const CUdevice dev = s_->devices[static_cast<size_t>(device)].handle;
  const Driver& d = s_->drv;
  Status first = Status::Success;
  auto get = [&](CUfunction_attribute a) -> uint64_t {
    int v = 0;
    const Status st = FUNNEL_CU(d, cuKernelGetAttribute, &v, a, k.handle(), dev);
    if (!ok(st) && ok(first)) first = st;
    return static_cast<uint64_t>(std::max(v, 0));
  };
  out = ipc::FuncAttributes{};
  out.shared_size_bytes = get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
  out.const_size_bytes = get(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
  out.local_size_bytes = get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
  out.max_threads_per_block = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK));
  out.num_regs = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_NUM_REGS));
  out.ptx_version = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_PTX_VERSION));
  out.binary_version = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_BINARY_VERSION));
  out.cache_mode_ca = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_CACHE_MODE_CA));
  out.max_dynamic_shared_size_bytes = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES));
  out.preferred_shmem_carveout = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT));
  out.cluster_dim_must_be_set = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET));
  out.required_cluster[0] = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH));
  out.required_cluster[1] = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT));
  out.required_cluster[2] = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH));
  out.non_portable_cluster_size_allowed =
      static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED));
  out.cluster_scheduling_policy_preference =
      static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE));
  return first;
}

// cudaFuncAttribute 8..15 have the numbers of the CUfunction_attribute they set.
Status CudaBackend::func_set_attribute(BackendKernel& bk, int device, uint32_t attribute, int32_t value) {
  auto& k = static_cast<CudaKernel&>(bk);
  if (Status st = s_->bind(device); !ok(st)) return st;
  const CUdevice dev = s_->devices[static_cast<size_t>(device)].handle;
  if (attribute == ipc::kFuncCacheConfig) {
    if (value < CU_FUNC_CACHE_PREFER_NONE || value > CU_FUNC_CACHE_PREFER_EQUAL) return Status::InvalidValue;
    return FUNNEL_CU(s_->drv, cuKernelSetCacheConfig, k.handle(), static_cast<CUfunc_cache>(value), dev);
  }
  if (attribute < CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ||
      attribute > CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE)
    return Status::InvalidValue;
  return FUNNEL_CU(s_->drv, cuKernelSetAttribute, static_cast<CUfunction_attribute>(attribute), value, k.handle(),
                   dev);
}

Status CudaBackend::occupancy(BackendKernel& bk, int device, uint32_t block_size, uint64_t dynamic_shared_bytes,
                              uint32_t flags, int& blocks_per_sm) {
  CUfunction f = nullptr;
  if (Status st = function_of(bk, device, f); !ok(st)) return st;
  int v = 0;
  const Status st = FUNNEL_CU(s_->drv, cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, &v, f,
                              static_cast<int>(block_size), dynamic_shared_bytes, flags);
  if (ok(st)) blocks_per_sm = v;
  return st;
}

Status CudaBackend::available_dynamic_smem(BackendKernel& bk, int device, uint32_t blocks_per_sm, uint32_t block_size,
                                           uint64_t& bytes) {
  CUfunction f = nullptr;
  if (Status st = function_of(bk, device, f); !ok(st)) return st;
  size_t v = 0;
  const Status st = FUNNEL_CU(s_->drv, cuOccupancyAvailableDynamicSMemPerBlock, &v, f,
                              static_cast<int>(blocks_per_sm), static_cast<int>(block_size));
  if (ok(st)) bytes = v;
  return st;
}

Status CudaBackend::max_active_clusters(BackendKernel& bk, int device, const LaunchDesc& d, int& clusters) {
  CUfunction f = nullptr;
  if (Status st = function_of(bk, device, f); !ok(st)) return st;
  LaunchConfig c(d, nullptr);
  int v = 0;
  const Status st = FUNNEL_CU(s_->drv, cuOccupancyMaxActiveClusters, &v, f, &c.config);
  if (ok(st)) clusters = v;
  return st;
}

Status CudaBackend::max_cluster_size(BackendKernel& bk, int device, const LaunchDesc& d, int& size) {
  CUfunction f = nullptr;
  if (Status st = function_of(bk, device, f); !ok(st)) return st;
  LaunchConfig c(d, nullptr);
  int v = 0;
  const Status st = FUNNEL_CU(s_->drv, cuOccupancyMaxPotentialClusterSize, &v, f, &c.config);
  if (ok(st)) size = v;
  return st;
}

Status CudaBackend::tensor_map_encode(int device, const ipc::TensorMapCmd& c,
                                      std::array<std::byte, ipc::kTensorMapBytes>& map) {
  static_assert(sizeof(CUtensorMap) == ipc::kTensorMapBytes);
  if (Status st = s_->bind(device); !ok(st)) return st;
  CUtensorMap m{};
  const Status st = FUNNEL_CU(
      s_->drv, cuTensorMapEncodeTiled, &m, static_cast<CUtensorMapDataType>(c.data_type), c.rank,
      host_pointer(c.global_address), c.global_dim, c.global_strides, c.box_dim, c.element_strides,
      static_cast<CUtensorMapInterleave>(c.interleave), static_cast<CUtensorMapSwizzle>(c.swizzle),
      static_cast<CUtensorMapL2promotion>(c.l2_promotion), static_cast<CUtensorMapFloatOOBfill>(c.oob_fill));
  if (ok(st)) std::memcpy(map.data(), &m, sizeof m);
  return st;
}

Status CudaBackend::reset_persisting_l2(int device) {
  if (Status st = s_->bind(device); !ok(st)) return st;
  return FUNNEL_CU(s_->drv, cuCtxResetPersistingL2Cache);
}

Status CudaBackend::stream_access_policy(BackendStream& bs, DeviceAddress base, uint64_t bytes, float hit_ratio,
                                         uint32_t hit_prop, uint32_t miss_prop) {
  CudaStream& s = enqueue_on(bs);
  if (Status st = s_->bind(s.device()); !ok(st)) return st;
  CUstreamAttrValue v{};
  v.accessPolicyWindow.base_ptr = host_pointer(base);
  v.accessPolicyWindow.num_bytes = bytes;
  v.accessPolicyWindow.hitRatio = hit_ratio;
  v.accessPolicyWindow.hitProp = static_cast<CUaccessProperty>(hit_prop);
  v.accessPolicyWindow.missProp = static_cast<CUaccessProperty>(miss_prop);
  return FUNNEL_CU(s_->drv, cuStreamSetAttribute, s.handle(), CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v);
}

// The kernel's function in the device's context (loads the code there if needed); the
// context is current afterwards.
Status CudaBackend::function_of(BackendKernel& bk, int device, CUfunction& f) {
  if (Status st = s_->bind(device); !ok(st)) return st;
  return FUNNEL_CU(s_->drv, cuKernelGetFunction, &f, static_cast<CudaKernel&>(bk).handle());
}

}  // namespace funnel::server::cuda
