// Modules, functions and launches of the driver front: the core's modules (loaded from an image,
// kept by content on the server) and launches (the same checks and Launch records as the runtime
// front's). A CUmodule is the core's Module, a CUfunction its Kernel; handles are checked
// against the ones this front gave out.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "front.hpp"
#include "graphs.hpp"
#include "launch.hpp"
#include "modules.hpp"

using funnel::client::Kernel;
using funnel::client::Module;
using funnel::client::Runtime;

namespace {

struct Handles {
  std::mutex mu;
  std::unordered_set<Module*> modules;
  std::unordered_map<Kernel*, Module*> functions;  // looked up at every launch
};
Handles& handles() {
  static auto* h = new Handles;  // lives past exit: launches may come from atexit handlers
  return *h;
}

// A function of a module this front loaded, or a kernel the runtime registered (the
// cudaFunction_t of cudaGetFuncBySymbol).
Kernel* function_of(CUfunction f) {
  auto* k = reinterpret_cast<Kernel*>(f);
  {
    Handles& h = handles();
    std::lock_guard lk(h.mu);
    if (h.functions.contains(k)) return k;
  }
  return funnel::client::registered_kernel(f);
}

CUresult load(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  Module* m = nullptr;
  if (CUresult r = funnel::driver::to_cu(funnel::client::load_image_module(image, Runtime::get(), d, m));
      r != CUDA_SUCCESS)
    return r;
  Handles& h = handles();
  std::lock_guard lk(h.mu);
  h.modules.insert(m);
  *module = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

// The kernel's parameters as one pointer each: `params` itself, or, from cuLaunchKernel's `extra`
// ({CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END}:
// the parameters packed at their offsets), pointers into that buffer (in `storage`), checked
// against the kernel's parameter layout.  Both, or neither for a kernel with parameters, is an
// invalid value, as the driver says.
CUresult parameters(Kernel& k, int d, void** params, void** extra, std::vector<void*>& storage, void**& out) {
  out = params;
  if (extra == nullptr) return CUDA_SUCCESS;
  if (params != nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::byte* buffer = nullptr;
  const size_t* size = nullptr;
  for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (i >= 16) return CUDA_ERROR_INVALID_VALUE;  // a list without its end
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
      buffer = static_cast<const std::byte*>(extra[i + 1]);
    else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
      size = static_cast<const size_t*>(extra[i + 1]);
    else
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (buffer == nullptr || size == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = funnel::driver::to_cu(funnel::client::kernel_ready(k, Runtime::get(), d)); r != CUDA_SUCCESS)
    return r;
  storage.clear();
  for (const auto& p : k.layout) {
    const size_t at = funnel::ipc::param_offset(p);
    if (at + funnel::ipc::param_size(p) > *size) return CUDA_ERROR_INVALID_VALUE;
    storage.push_back(const_cast<std::byte*>(buffer + at));
  }
  out = storage.data();
  return CUDA_SUCCESS;
}

// cuLaunchKernelEx: the configuration's attributes are cudaLaunchKernelExC's (the same numbers
// and value layout), read by the core.
static_assert(sizeof(CUlaunchAttribute) == sizeof(cudaLaunchAttribute) &&
              offsetof(CUlaunchAttribute, value) == offsetof(cudaLaunchAttribute, val));
static_assert(CU_LAUNCH_ATTRIBUTE_COOPERATIVE == static_cast<int>(cudaLaunchAttributeCooperative) &&
              CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION == static_cast<int>(cudaLaunchAttributeClusterDimension) &&
              CU_LAUNCH_ATTRIBUTE_PRIORITY == static_cast<int>(cudaLaunchAttributePriority));

CUresult read_config(const CUlaunchConfig* c, bool per_thread, funnel::client::LaunchSpec& l) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  l = funnel::client::LaunchSpec{};
  l.grid = dim3(c->gridDimX, c->gridDimY, c->gridDimZ);
  l.block = dim3(c->blockDimX, c->blockDimY, c->blockDimZ);
  l.shared = c->sharedMemBytes;
  l.stream = reinterpret_cast<cudaStream_t>(c->hStream);
  l.per_thread = per_thread;
  return funnel::driver::to_cu(funnel::client::apply_launch_attributes(
      reinterpret_cast<const cudaLaunchAttribute*>(c->attrs), c->numAttrs, "cuLaunchKernelEx", l));
}

CUresult launch_ex(const CUlaunchConfig* c, CUfunction f, void** params, void** extra, bool per_thread) {
  Kernel* k = function_of(f);
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  funnel::client::LaunchSpec l;
  if (CUresult r = read_config(c, per_thread, l); r != CUDA_SUCCESS) return r;
  std::vector<void*> storage;
  if (CUresult r = parameters(*k, d, params, extra, storage, params); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::launch_kernel(*k, l, params));
}

// cuLaunchKernel and the cooperative launch: cuLaunchKernelEx's with the configuration in arguments.
CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned shared, CUstream s, void** params, void** extra, bool per_thread,
                CUlaunchAttribute* attrs = nullptr, unsigned attr_count = 0) {
  const CUlaunchConfig c{gx, gy, gz, bx, by, bz, shared, s, attrs, attr_count};
  return launch_ex(&c, f, params, extra, per_thread);
}

}  // namespace

// A graph kernel node of the driver front (CUDA_KERNEL_NODE_PARAMS_v2: a CUfunction or a
// CUkernel, parameters or `extra`), on the current context's device.
CUresult funnel::driver::kernel_node(const CUDA_KERNEL_NODE_PARAMS* p, std::unique_ptr<funnel::client::NodeObj>& out) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Kernel* k = function_of(p->func != nullptr ? p->func : reinterpret_cast<CUfunction>(p->kern));
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  int d = 0;
  if (CUresult r = funnel::driver::in_context(d); r != CUDA_SUCCESS) return r;
  std::vector<void*> storage;
  void** params = nullptr;
  if (CUresult r = parameters(*k, d, p->kernelParams, p->extra, storage, params); r != CUDA_SUCCESS) return r;
  funnel::client::LaunchSpec l;
  l.grid = dim3(p->gridDimX, p->gridDimY, p->gridDimZ);
  l.block = dim3(p->blockDimX, p->blockDimY, p->blockDimZ);
  l.shared = p->sharedMemBytes;
  out = std::make_unique<funnel::client::NodeObj>();
  return funnel::driver::to_cu(funnel::client::make_kernel_node(*out, *k, p->func != nullptr ? static_cast<const void*>(p->func) : static_cast<const void*>(p->kern), l, params, d));
}

// JIT options (log buffers, optimisation level, ...) are not passed on: the server loads with
// the driver's defaults, and log buffers stay as the caller left them.
FUNNEL_DRIVER_API CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, CUjit_option*,
                                              void**) {
  return load(module, image);
}
FUNNEL_DRIVER_API CUresult cuModuleLoadData(CUmodule* module, const void* image) { return load(module, image); }
FUNNEL_DRIVER_API CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fat) { return load(module, fat); }

FUNNEL_DRIVER_API CUresult cuModuleUnload(CUmodule module) {
  auto* m = reinterpret_cast<Module*>(module);
  {
    Handles& h = handles();
    std::lock_guard lk(h.mu);
    if (h.modules.erase(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
    std::erase_if(h.functions, [&](const auto& f) { return f.second == m; });
  }
  funnel::client::unload_image_module(m);
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuModuleGetFunction(CUfunction* f, CUmodule module, const char* name) {
  if (f == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* m = reinterpret_cast<Module*>(module);
  {
    Handles& h = handles();
    std::lock_guard lk(h.mu);
    if (!h.modules.contains(m)) return CUDA_ERROR_INVALID_HANDLE;
  }
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  Kernel* k = nullptr;
  const funnel::ipc::Status s = funnel::client::image_kernel(*m, name, Runtime::get(), d, k);
  // The driver says a missing name is not found (the runtime: an invalid device function).
  if (s == funnel::ipc::Status::InvalidDeviceFunction) return CUDA_ERROR_NOT_FOUND;
  if (CUresult r = funnel::driver::to_cu(s); r != CUDA_SUCCESS) return r;
  Handles& h = handles();
  std::lock_guard lk(h.mu);
  h.functions.emplace(k, m);
  *f = reinterpret_cast<CUfunction>(k);
  return CUDA_SUCCESS;
}

// The module's kernels as functions, in the order its image declares them (each as
// cuModuleGetFunction finds it).
static CUresult module_functions(CUmodule module, std::vector<CUfunction>& out) {
  auto* m = reinterpret_cast<Module*>(module);
  {
    Handles& h = handles();
    std::lock_guard lk(h.mu);
    if (!h.modules.contains(m)) return CUDA_ERROR_INVALID_HANDLE;
  }
  std::vector<std::string> names;
  if (CUresult r = funnel::driver::to_cu(funnel::client::image_kernel_names(*m, names)); r != CUDA_SUCCESS) return r;
  out.clear();
  for (const auto& name : names) {
    CUfunction f = nullptr;
    if (CUresult r = cuModuleGetFunction(&f, module, name.c_str()); r != CUDA_SUCCESS) return r;
    out.push_back(f);
  }
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuModuleGetFunctionCount(unsigned int* count, CUmodule module) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUfunction> f;
  if (CUresult r = module_functions(module, f); r != CUDA_SUCCESS) return r;
  *count = static_cast<unsigned>(f.size());
  return CUDA_SUCCESS;
}
// At most `n` of them, as the driver documents it.
FUNNEL_DRIVER_API CUresult cuModuleEnumerateFunctions(CUfunction* functions, unsigned int n, CUmodule module) {
  if (functions == nullptr && n != 0) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUfunction> f;
  if (CUresult r = module_functions(module, f); r != CUDA_SUCCESS) return r;
  std::copy_n(f.begin(), std::min<size_t>(n, f.size()), functions);
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                          unsigned bz, unsigned shared, CUstream s, void** params, void** extra) {
  return launch(f, gx, gy, gz, bx, by, bz, shared, s, params, extra, false);
}
FUNNEL_DRIVER_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                               unsigned by, unsigned bz, unsigned shared, CUstream s, void** params,
                                               void** extra) {
  return launch(f, gx, gy, gz, bx, by, bz, shared, s, params, extra, true);
}

namespace {

// A kernel's device for the calls that take one: ready on it (module loaded).
CUresult ready_on(Kernel* k, int d) {
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  if (d < 0 || d >= Runtime::get().device_count()) return CUDA_ERROR_INVALID_DEVICE;
  return funnel::driver::to_cu(funnel::client::kernel_ready(*k, Runtime::get(), d));
}

CUresult current_kernel(CUfunction f, Kernel*& k, int& d) {
  k = function_of(f);
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  return ready_on(k, d);
}

}  // namespace

FUNNEL_DRIVER_API CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  return launch_ex(c, f, params, extra, false);
}
FUNNEL_DRIVER_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  return launch_ex(c, f, params, extra, true);
}
// A cooperative launch is a launch with the cooperative attribute.
FUNNEL_DRIVER_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                     unsigned by, unsigned bz, unsigned shared, CUstream s,
                                                     void** params) {
  CUlaunchAttribute coop{};
  coop.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  coop.value.cooperative = 1;
  return launch(f, gx, gy, gz, bx, by, bz, shared, s, params, nullptr, false, &coop, 1);
}
FUNNEL_DRIVER_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                          unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                                          CUstream s, void** params) {
  CUlaunchAttribute coop{};
  coop.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  coop.value.cooperative = 1;
  return launch(f, gx, gy, gz, bx, by, bz, shared, s, params, nullptr, true, &coop, 1);
}

// Function attributes set: the runtime's checks and command (CUfunction_attribute and
// cudaFuncAttribute number them alike).
FUNNEL_DRIVER_API CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int value) {
  Kernel* k = nullptr;
  int d = 0;
  if (CUresult r = current_kernel(f, k, d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::set_kernel_attribute(*k, d, a, value));
}
FUNNEL_DRIVER_API CUresult cuKernelSetAttribute(CUfunction_attribute a, int value, CUkernel kernel, CUdevice d) {
  Kernel* k = function_of(reinterpret_cast<CUfunction>(kernel));
  if (CUresult r = ready_on(k, d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::set_kernel_attribute(*k, d, a, value));
}
FUNNEL_DRIVER_API CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache config) {
  Kernel* k = nullptr;
  int d = 0;
  if (CUresult r = current_kernel(f, k, d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::set_kernel_cache_config(*k, d, config));
}
FUNNEL_DRIVER_API CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice d) {
  Kernel* k = function_of(reinterpret_cast<CUfunction>(kernel));
  if (CUresult r = ready_on(k, d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::set_kernel_cache_config(*k, d, config));
}
// Deprecated and without effect since Volta: checked, then accepted (as cudaFuncSetSharedMemConfig).
FUNNEL_DRIVER_API CUresult cuFuncSetSharedMemConfig(CUfunction f, CUsharedconfig config) {
  if (config < CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE || config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
    return CUDA_ERROR_INVALID_VALUE;
  Kernel* k = nullptr;
  int d = 0;
  return current_kernel(f, k, d);
}
// Where a kernel's parameter lies in its parameter buffer, from the layout the server read.
FUNNEL_DRIVER_API CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t* offset, size_t* size) {
  Kernel* k = nullptr;
  int d = 0;
  if (CUresult r = current_kernel(f, k, d); r != CUDA_SUCCESS) return r;
  if (index >= k->layout.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = funnel::ipc::param_offset(k->layout[index]);
  if (size != nullptr) *size = funnel::ipc::param_size(k->layout[index]);
  return CUDA_SUCCESS;
}
FUNNEL_DRIVER_API CUresult cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t* offset, size_t* size) {
  return cuFuncGetParamInfo(reinterpret_cast<CUfunction>(kernel), index, offset, size);
}

// cuOccupancyMaxActiveClusters and MaxPotentialClusterSize: `query` (launch.hpp) of the function.
static CUresult cluster_query(int* out, CUfunction f, const CUlaunchConfig* c,
                              cudaError_t (*query)(Kernel&, int, const funnel::client::LaunchSpec&, int&)) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Kernel* k = nullptr;
  int d = 0;
  if (CUresult r = current_kernel(f, k, d); r != CUDA_SUCCESS) return r;
  funnel::client::LaunchSpec l;
  if (CUresult r = read_config(c, false, l); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(query(*k, d, l, *out));
}
FUNNEL_DRIVER_API CUresult cuOccupancyMaxActiveClusters(int* clusters, CUfunction f, const CUlaunchConfig* c) {
  return cluster_query(clusters, f, c, funnel::client::kernel_max_active_clusters);
}
FUNNEL_DRIVER_API CUresult cuOccupancyMaxPotentialClusterSize(int* size, CUfunction f, const CUlaunchConfig* c) {
  return cluster_query(size, f, c, funnel::client::kernel_max_cluster_size);
}

// ---- globals, libraries and kernels, function attributes --------------------------------------
// A CUlibrary is a module too, a CUkernel the same Kernel as the CUfunction cuKernelGetFunction
// gives for it (CUDA accepts a CUkernel wherever a CUfunction goes).

namespace {

Module* module_of(void* handle) {
  auto* m = static_cast<Module*>(handle);
  Handles& h = handles();
  std::lock_guard lk(h.mu);
  return h.modules.contains(m) ? m : nullptr;
}

// A module's variable (`managed`: a __managed__ one, cuLibraryGetManaged).
CUresult global(CUdeviceptr* dptr, size_t* bytes, void* handle, const char* name, bool managed = false) {
  Module* m = module_of(handle);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  uint64_t address = 0, size = 0;
  const auto find = managed ? funnel::client::image_managed : funnel::client::image_global;
  if (CUresult r = funnel::driver::to_cu(find(*m, name, Runtime::get(), d, address, size)); r != CUDA_SUCCESS)
    return r;
  if (dptr != nullptr) *dptr = address;
  if (bytes != nullptr) *bytes = size;
  return CUDA_SUCCESS;
}

CUresult attribute(int* value, CUfunction_attribute a, Kernel* k, int device) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = ready_on(k, device); r != CUDA_SUCCESS) return r;  // a registered kernel may not be yet
  funnel::ipc::FuncAttributes f;
  if (CUresult r = funnel::driver::to_cu(funnel::client::kernel_attributes(*k, device, f)); r != CUDA_SUCCESS) return r;
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = static_cast<int>(f.max_threads_per_block);
      break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      *value = static_cast<int>(f.shared_size_bytes);
      break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
      *value = static_cast<int>(f.const_size_bytes);
      break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
      *value = static_cast<int>(f.local_size_bytes);
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *value = static_cast<int>(f.num_regs);
      break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
      *value = static_cast<int>(f.ptx_version);
      break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      *value = static_cast<int>(f.binary_version);
      break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
      *value = static_cast<int>(f.cache_mode_ca);
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *value = static_cast<int>(f.max_dynamic_shared_size_bytes);
      break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      *value = static_cast<int>(f.preferred_shmem_carveout);
      break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
      *value = static_cast<int>(f.cluster_dim_must_be_set);
      break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
      *value = static_cast<int>(f.required_cluster[0]);
      break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
      *value = static_cast<int>(f.required_cluster[1]);
      break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
      *value = static_cast<int>(f.required_cluster[2]);
      break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
      *value = static_cast<int>(f.non_portable_cluster_size_allowed);
      break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      *value = static_cast<int>(f.cluster_scheduling_policy_preference);
      break;
    default:
      return funnel::driver::not_supported_detail("cuFuncGetAttribute", static_cast<int>(a));
  }
  return CUDA_SUCCESS;
}

}  // namespace

FUNNEL_DRIVER_API CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule module, const char* name) {
  return global(dptr, bytes, module, name);
}

FUNNEL_DRIVER_API CUresult cuFuncGetAttribute(int* value, CUfunction_attribute a, CUfunction f) {
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  return attribute(value, a, function_of(f), d);
}

// Library options (and JIT options) are not passed on, as cuModuleLoadDataEx's.
FUNNEL_DRIVER_API CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**, unsigned int,
                                             CUlibraryOption*, void**, unsigned int) {
  return load(reinterpret_cast<CUmodule*>(library), code);
}
FUNNEL_DRIVER_API CUresult cuLibraryUnload(CUlibrary library) {
  return cuModuleUnload(reinterpret_cast<CUmodule>(library));
}
FUNNEL_DRIVER_API CUresult cuLibraryGetModule(CUmodule* module, CUlibrary library) {
  if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (module_of(library) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *module = reinterpret_cast<CUmodule>(library);
  return CUDA_SUCCESS;
}
FUNNEL_DRIVER_API CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  return cuModuleGetFunction(reinterpret_cast<CUfunction*>(kernel), reinterpret_cast<CUmodule>(library), name);
}
FUNNEL_DRIVER_API CUresult cuLibraryGetKernelCount(unsigned int* count, CUlibrary library) {
  return cuModuleGetFunctionCount(count, reinterpret_cast<CUmodule>(library));
}
FUNNEL_DRIVER_API CUresult cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int n, CUlibrary library) {
  return cuModuleEnumerateFunctions(reinterpret_cast<CUfunction*>(kernels), n, reinterpret_cast<CUmodule>(library));
}
FUNNEL_DRIVER_API CUresult cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  return global(dptr, bytes, library, name);
}
// NVIDIA's static runtime asks for each __managed__ variable it registered (doc/design/managed.md).
FUNNEL_DRIVER_API CUresult cuLibraryGetManaged(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  return global(dptr, bytes, library, name, true);
}
FUNNEL_DRIVER_API CUresult cuKernelGetFunction(CUfunction* f, CUkernel kernel) {
  if (f == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (function_of(reinterpret_cast<CUfunction>(kernel)) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *f = reinterpret_cast<CUfunction>(kernel);
  return CUDA_SUCCESS;
}
FUNNEL_DRIVER_API CUresult cuKernelGetAttribute(int* value, CUfunction_attribute a, CUkernel kernel, CUdevice d) {
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  if (d < 0 || d >= Runtime::get().device_count()) return CUDA_ERROR_INVALID_DEVICE;
  return attribute(value, a, function_of(reinterpret_cast<CUfunction>(kernel)), d);
}

// ---- occupancy ------------------------------------------------------------------------------

FUNNEL_DRIVER_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, CUfunction f,
                                                                                int block_size, size_t dynamic_shared,
                                                                                unsigned int flags) {
  if (blocks == nullptr || block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  static_assert(CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE == cudaOccupancyDisableCachingOverride);
  if ((flags & ~unsigned{CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE}) != 0) return CUDA_ERROR_INVALID_VALUE;
  Kernel* k = function_of(f);
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::kernel_occupancy(*k, d, block_size, dynamic_shared, flags, *blocks));
}

FUNNEL_DRIVER_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction f, int block_size,
                                                                       size_t dynamic_shared) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, f, block_size, dynamic_shared, 0);
}

FUNNEL_DRIVER_API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* bytes, CUfunction f, int blocks,
                                                                   int block_size) {
  if (bytes == nullptr || blocks <= 0 || block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  Kernel* k = function_of(f);
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::kernel_available_smem(*k, d, blocks, block_size, *bytes));
}

// The runtimes ask how modules load: lazily unless CUDA_MODULE_LOADING=EAGER, as the driver
// answers (funnel's server loads what a client asks for at once either way).
FUNNEL_DRIVER_API CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char* v = std::getenv("CUDA_MODULE_LOADING");
  *mode = v != nullptr && std::string_view(v) == "EAGER" ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}
