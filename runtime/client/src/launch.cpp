// Launches of a kernel (both fronts) and the launch checks: launch.hpp.
#include "launch.hpp"

#include <algorithm>
#include <vector>

#include "graphs.hpp"
#include "launch_params.hpp"

namespace funnel::client {

static bool over(unsigned v, int limit) { return limit > 0 && v > static_cast<unsigned>(limit); }

// What CUDA checks before a launch reaches the GPU, against the device's limits.  CUDA 13
// answers every one of these with cudaErrorInvalidValue (seen on the H100; CUDA 12 said
// cudaErrorInvalidConfiguration).
cudaError_t check_shape(const LaunchSpec& l, const ipc::DeviceRecord& d) {
  const dim3 &g = l.grid, &b = l.block;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0) return cudaErrorInvalidValue;
  auto attr = [&](cudaDeviceAttr a) { return a < ipc::kMaxDeviceAttributes ? d.attributes[a] : 0; };
  if (over(b.x, attr(cudaDevAttrMaxBlockDimX)) || over(b.y, attr(cudaDevAttrMaxBlockDimY)) ||
      over(b.z, attr(cudaDevAttrMaxBlockDimZ)) || over(g.x, attr(cudaDevAttrMaxGridDimX)) ||
      over(g.y, attr(cudaDevAttrMaxGridDimY)) || over(g.z, attr(cudaDevAttrMaxGridDimZ)))
    return cudaErrorInvalidValue;
  const uint64_t threads = uint64_t{b.x} * b.y * b.z;
  if (attr(cudaDevAttrMaxThreadsPerBlock) > 0 && threads > static_cast<uint64_t>(attr(cudaDevAttrMaxThreadsPerBlock)))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

// The kernel's launch-check cache, emptied for a new Runtime (k.mu held).
static void limits_for_locked(Kernel& k, Runtime& rt) {
  if (k.limits_for == &rt) return;
  k.attributes.clear();
  k.blocks_per_sm.clear();
  k.limits_for = &rt;
}

// The kernel's attributes on `device` (FuncGetAttributes), asked for once.  Only this
// client's own cudaFuncSetAttribute changes them (the server gives a client that sets one
// its own instance of a shared module), and forget_limits sees to that.  The kernel must be
// ready.
cudaError_t kernel_attributes(Kernel& k, int device, ipc::FuncAttributes& out) {
  Runtime& rt = Runtime::get();
  std::lock_guard lk(k.mu);
  limits_for_locked(k, rt);
  if (auto it = k.attributes.find(device); it != k.attributes.end()) {
    out = it->second;
    return cudaSuccess;
  }
  ipc::KernelCmd c{k.id};
  Reply r;
  if (cudaError_t e = to_cuda(rt.ask(Opcode::FuncGetAttributes, device, &c, sizeof c, {}, &r)); e != cudaSuccess)
    return e;
  out = ipc::unpack_func_attributes(r.value);
  k.attributes[device] = out;
  return cudaSuccess;
}

// Blocks of `threads` threads and `shared` bytes of dynamic shared memory that fit on one
// multiprocessor of `device` (Occupancy), asked for once.
cudaError_t kernel_blocks_per_sm(Kernel& k, int device, uint32_t threads, uint64_t shared, int& out, uint32_t flags) {
  Runtime& rt = Runtime::get();
  std::lock_guard lk(k.mu);
  limits_for_locked(k, rt);
  const auto key = std::make_tuple(device, threads, shared, flags);
  if (auto it = k.blocks_per_sm.find(key); it != k.blocks_per_sm.end()) {
    out = it->second;
    return cudaSuccess;
  }
  ipc::OccupancyCmd c{k.id, threads, flags, shared};
  Reply r;
  if (cudaError_t e = to_cuda(rt.ask(Opcode::Occupancy, device, &c, sizeof c, {}, &r)); e != cudaSuccess) return e;
  out = static_cast<int>(r.value[0]);
  k.blocks_per_sm[key] = out;
  return cudaSuccess;
}

// cudaFuncSetAttribute and cudaFuncSetCacheConfig may change both.
void forget_limits(Kernel& k) {
  std::lock_guard lk(k.mu);
  k.attributes.clear();
  k.blocks_per_sm.clear();
}

// What CUDA refuses at the launch from the kernel's own limits: more dynamic shared memory
// than its cudaFuncAttributeMaxDynamicSharedMemorySize, and a cooperative grid larger than
// the blocks that can be resident at once (blocks per multiprocessor x multiprocessors).
cudaError_t check_kernel(Kernel& k, const LaunchSpec& l, int device, const ipc::DeviceRecord& d) {
  if (l.shared > 0) {
    ipc::FuncAttributes a;
    if (cudaError_t e = kernel_attributes(k, device, a); e != cudaSuccess) return e;
    if (l.shared > a.max_dynamic_shared_size_bytes) return cudaErrorInvalidValue;
  }
  if ((l.flags & ipc::kLaunchCooperative) != 0) {
    const uint32_t threads = l.block.x * l.block.y * l.block.z;  // check_shape bounded it
    int per_sm = 0;
    if (cudaError_t e = kernel_blocks_per_sm(k, device, threads, l.shared, per_sm); e != cudaSuccess) return e;
    const uint64_t blocks = uint64_t{l.grid.x} * l.grid.y * l.grid.z;
    const int sms = d.attributes[cudaDevAttrMultiProcessorCount];
    if (blocks > uint64_t(std::max(per_sm, 0)) * uint64_t(std::max(sms, 0))) return cudaErrorCooperativeLaunchTooLarge;
  }
  return cudaSuccess;
}

namespace {
thread_local bool t_params_gone = false;  // trivially destructible: readable at any time
struct ParamBuffer {
  std::vector<std::byte> bytes;
  ~ParamBuffer() { t_params_gone = true; }
};
thread_local ParamBuffer t_params;
}  // namespace

cudaError_t prepare_launch(Kernel& k, const LaunchSpec& l, int device, void** args, ipc::LaunchCmd& c,
                           std::vector<std::byte>& params) {
  Runtime& rt = Runtime::get();
  if (device < 0 || device >= rt.device_count()) return cudaErrorInvalidDevice;
  if (cudaError_t e = check_shape(l, rt.device(device)); e != cudaSuccess) return e;
  if (cudaError_t e = to_cuda(kernel_ready(k, rt, device)); e != cudaSuccess) return e;
  if (args == nullptr && !k.layout.empty()) return cudaErrorInvalidValue;
  if (l.shared > UINT32_MAX) return cudaErrorInvalidValue;
  if (cudaError_t e = check_kernel(k, l, device, rt.device(device)); e != cudaSuccess) return e;
  params.resize(k.param_bytes);
  pack_params(k.layout, k.param_bytes, args, params.data());
  c = ipc::LaunchCmd{};
  c.kernel_id = k.id;
  c.grid[0] = l.grid.x, c.grid[1] = l.grid.y, c.grid[2] = l.grid.z;
  c.block[0] = l.block.x, c.block[1] = l.block.y, c.block[2] = l.block.z;
  c.shared_bytes = static_cast<uint32_t>(l.shared);
  c.flags = l.flags;
  for (int i = 0; i < 3; ++i) c.cluster[i] = l.cluster[i];
  c.priority = l.priority;
  c.param_bytes = k.param_bytes;
  return cudaSuccess;
}

cudaError_t launch_kernel(Kernel& k, const LaunchSpec& l, void** args) {
  StreamRef s;
  if (cudaError_t e = resolve_stream(l.stream, l.per_thread, s); e != cudaSuccess) return e;
  if (s.capturing()) return capture_launch(s, k, l, args);
  // One parameter buffer per thread; a launch from an exit handler, after the thread's
  // thread_local objects were destroyed, packs into one of its own.
  std::vector<std::byte> own;
  std::vector<std::byte>& params = t_params_gone ? own : t_params.bytes;
  ipc::LaunchCmd c;
  if (cudaError_t e = prepare_launch(k, l, s.device, args, c, params); e != cudaSuccess) return e;
  return to_cuda(Runtime::get().post(Opcode::Launch, s.device, s.id, &c, sizeof c, params));
}

cudaError_t kernel_occupancy(Kernel& k, int device, int block_size, size_t dynamic_shared, unsigned flags,
                             int& blocks) {
  return kernel_blocks_per_sm(k, device, static_cast<uint32_t>(block_size), dynamic_shared, blocks, flags);
}

// OccupancyCmd carries the block count.
cudaError_t kernel_available_smem(Kernel& k, int device, int blocks, int block_size, size_t& bytes) {
  ipc::OccupancyCmd c{k.id, static_cast<uint32_t>(block_size), 0, static_cast<uint64_t>(blocks)};
  Reply r;
  const cudaError_t e = to_cuda(Runtime::get().ask(Opcode::OccupancyDynamicSmem, device, &c, sizeof c, {}, &r));
  if (e == cudaSuccess) bytes = r.value[0];
  return e;
}

namespace {

const char* attribute_name(cudaLaunchAttributeID id) {
  switch (id) {
    case cudaLaunchAttributeAccessPolicyWindow:
      return "cudaLaunchAttributeAccessPolicyWindow";
    case cudaLaunchAttributeSynchronizationPolicy:
      return "cudaLaunchAttributeSynchronizationPolicy";
    case cudaLaunchAttributeClusterSchedulingPolicyPreference:
      return "cudaLaunchAttributeClusterSchedulingPolicyPreference";
    case cudaLaunchAttributeProgrammaticStreamSerialization:
      return "cudaLaunchAttributeProgrammaticStreamSerialization";
    case cudaLaunchAttributeProgrammaticEvent:
      return "cudaLaunchAttributeProgrammaticEvent";
    case cudaLaunchAttributeMemSyncDomainMap:
      return "cudaLaunchAttributeMemSyncDomainMap";
    case cudaLaunchAttributeMemSyncDomain:
      return "cudaLaunchAttributeMemSyncDomain";
    case cudaLaunchAttributePreferredClusterDimension:
      return "cudaLaunchAttributePreferredClusterDimension";
    case cudaLaunchAttributeLaunchCompletionEvent:
      return "cudaLaunchAttributeLaunchCompletionEvent";
    case cudaLaunchAttributeDeviceUpdatableKernelNode:
      return "cudaLaunchAttributeDeviceUpdatableKernelNode";
    case cudaLaunchAttributePreferredSharedMemoryCarveout:
      return "cudaLaunchAttributePreferredSharedMemoryCarveout";
    case cudaLaunchAttributeNvlinkUtilCentricScheduling:
      return "cudaLaunchAttributeNvlinkUtilCentricScheduling";
    default:
      return nullptr;
  }
}

// cudaFuncSetAttribute, cudaFuncSetCacheConfig: one-way after the local checks.
cudaError_t post_attribute(Kernel& k, int dev, uint32_t attribute, int value) {
  ipc::FuncSetAttributeCmd c{k.id, attribute, value};
  const cudaError_t e = to_cuda(Runtime::get().post(Opcode::FuncSetAttribute, dev, 0, &c, sizeof c));
  forget_limits(k);  // asked again after the set, which the server handles first (ring order)
  return e;
}

}  // namespace

cudaError_t apply_launch_attributes(const cudaLaunchAttribute* attrs, unsigned n, const char* call, LaunchSpec& l) {
  if (n != 0 && attrs == nullptr) return cudaErrorInvalidValue;
  for (unsigned i = 0; i < n; ++i) {
    const cudaLaunchAttribute& a = attrs[i];
    switch (a.id) {
      case cudaLaunchAttributeIgnore:
        break;
      case cudaLaunchAttributeCooperative:
        if (a.val.cooperative != 0) l.flags |= ipc::kLaunchCooperative;
        break;
      case cudaLaunchAttributeClusterDimension:
        l.cluster[0] = a.val.clusterDim.x, l.cluster[1] = a.val.clusterDim.y, l.cluster[2] = a.val.clusterDim.z;
        break;
      case cudaLaunchAttributePriority:
        l.priority = a.val.priority;
        break;
      case cudaLaunchAttributeProgrammaticStreamSerialization:
        // Allows the kernel to start before the one before it in the stream ends (programmatic
        // dependent launch); stream order is one of the orders allowed (its
        // cudaGridDependencySynchronize then returns at once).
        break;
      default: {
        const char* name = attribute_name(a.id);
        const std::string what =
            name != nullptr ? fmt::format("{} with {}", call, name)
                            : fmt::format("{} with launch attribute {}", call, static_cast<int>(a.id));
        report_unsupported(what.c_str());
        return cudaErrorNotSupported;
      }
    }
  }
  return cudaSuccess;
}

cudaError_t set_kernel_attribute(Kernel& k, int dev, int attr, int value) {
  switch (static_cast<cudaFuncAttribute>(attr)) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize: {
      if (value < 0) return cudaErrorInvalidValue;
      Runtime& rt = Runtime::get();
      if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
      if (dev < 0 || dev >= rt.device_count()) return cudaErrorInvalidDevice;
      static_assert(cudaDevAttrMaxSharedMemoryPerBlockOptin < ipc::kMaxDeviceAttributes);
      const int optin = rt.device(dev).attributes[cudaDevAttrMaxSharedMemoryPerBlockOptin];
      if (optin <= 0) break;
      if (value > optin) return cudaErrorInvalidValue;
      // The kernel's static shared memory counts against the same opt-in limit.
      ipc::FuncAttributes a;
      if (cudaError_t e = kernel_attributes(k, dev, a); e != cudaSuccess) return e;
      if (uint64_t(value) + a.shared_size_bytes > uint64_t(optin)) return cudaErrorInvalidValue;
      // Libraries set it before each launch of the kernel: a set to the value it has is not
      // sent, and a set that changes it keeps the rest of the kernel's attributes known.
      if (static_cast<uint32_t>(value) == a.max_dynamic_shared_size_bytes) return cudaSuccess;
      const cudaError_t e = post_attribute(k, dev, static_cast<uint32_t>(attr), value);
      if (e == cudaSuccess) {
        a.max_dynamic_shared_size_bytes = static_cast<uint32_t>(value);
        std::lock_guard lk(k.mu);
        limits_for_locked(k, rt);
        k.attributes[dev] = a;
      }
      return e;
    }
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      if (value < -1 || value > 100) return cudaErrorInvalidValue;
      break;
    case cudaFuncAttributeClusterDimMustBeSet:
    case cudaFuncAttributeRequiredClusterWidth:
    case cudaFuncAttributeRequiredClusterHeight:
    case cudaFuncAttributeRequiredClusterDepth:
    case cudaFuncAttributeNonPortableClusterSizeAllowed:
    case cudaFuncAttributeClusterSchedulingPolicyPreference:
      if (value < 0) return cudaErrorInvalidValue;
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return post_attribute(k, dev, static_cast<uint32_t>(attr), value);
}


cudaError_t set_kernel_cache_config(Kernel& k, int dev, int config) {
  if (config < cudaFuncCachePreferNone || config > cudaFuncCachePreferEqual) return cudaErrorInvalidValue;
  return post_attribute(k, dev, ipc::kFuncCacheConfig, config);
}

// A cluster question about a launch configuration (MaxActiveClusters, MaxClusterSize).
static cudaError_t cluster_query(Opcode op, Kernel& k, int dev, const LaunchSpec& l, int& out) {
  if (l.shared > UINT32_MAX) return cudaErrorInvalidValue;
  ipc::LaunchCmd c{};  // no parameters follow (param_bytes 0)
  c.kernel_id = k.id;
  c.grid[0] = l.grid.x, c.grid[1] = l.grid.y, c.grid[2] = l.grid.z;
  c.block[0] = l.block.x, c.block[1] = l.block.y, c.block[2] = l.block.z;
  c.shared_bytes = static_cast<uint32_t>(l.shared);
  for (int i = 0; i < 3; ++i) c.cluster[i] = l.cluster[i];
  Reply r;
  const cudaError_t e = to_cuda(Runtime::get().ask(op, dev, &c, sizeof c, {}, &r));
  if (e == cudaSuccess) out = static_cast<int>(r.value[0]);
  return e;
}

cudaError_t kernel_max_active_clusters(Kernel& k, int dev, const LaunchSpec& l, int& clusters) {
  return cluster_query(Opcode::MaxActiveClusters, k, dev, l, clusters);
}

cudaError_t kernel_max_cluster_size(Kernel& k, int dev, const LaunchSpec& l, int& size) {
  return cluster_query(Opcode::MaxClusterSize, k, dev, l, size);
}

}  // namespace funnel::client
