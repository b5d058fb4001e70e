// Modules, functions and launches of the driver front: the core's modules (loaded from an image,
// kept by content on the server) and launches (the same checks and Launch records as the runtime
// front's). A CUmodule is the core's Module, a CUfunction its Kernel; handles are checked
// against the ones this front gave out.
#include <mutex>
#include <set>

#include "front.hpp"
#include "launch.hpp"
#include "modules.hpp"

using funnel::client::Kernel;
using funnel::client::Module;
using funnel::client::Runtime;

namespace {

struct Handles {
  std::mutex mu;
  std::set<Module*> modules;
  std::set<std::pair<Module*, Kernel*>> functions;
};
Handles& handles() {
  static auto* h = new Handles;  // lives past exit: launches may come from atexit handlers
  return *h;
}

Kernel* function_of(CUfunction f) {
  auto* k = reinterpret_cast<Kernel*>(f);
  Handles& h = handles();
  std::lock_guard lk(h.mu);
  for (const auto& [m, kernel] : h.functions)
    if (kernel == k) return k;
  return nullptr;
}

CUresult load(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
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

CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned shared, CUstream s, void** params, void** extra, bool per_thread) {
  Kernel* k = function_of(f);
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (extra != nullptr) return funnel::driver::not_supported_detail("cuLaunchKernel with extra parameters", 0);
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  funnel::client::LaunchSpec l;
  l.grid = dim3(gx, gy, gz);
  l.block = dim3(bx, by, bz);
  l.shared = shared;
  l.stream = reinterpret_cast<cudaStream_t>(s);
  l.per_thread = per_thread;
  return funnel::driver::to_cu(funnel::client::launch_kernel(*k, l, params));
}

}  // namespace

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
    std::erase_if(h.functions, [&](const auto& f) { return f.first == m; });
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
  h.functions.insert({m, k});
  *f = reinterpret_cast<CUfunction>(k);
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
