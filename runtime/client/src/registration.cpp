// The entry points nvcc's generated code calls from static constructors and kernel
// stubs.  Registration is only recorded (kernels are the next milestone); none of it
// attaches to a server, so a program that never calls CUDA never starts one.
#include <mutex>
#include <vector>

#include "api.hpp"

using namespace funnel::client;

namespace {

struct FatBinary {
  void* wrapper;  // the __fatDeviceText wrapper nvcc passed (kept for module loading)
  struct Function {
    const char* host;
    const char* device_name;
  };
  std::vector<Function> functions;
  struct Var {
    char* host;
    const char* device_name;
    size_t size;
    int constant;
  };
  std::vector<Var> vars;
};

std::mutex g_mu;
std::vector<FatBinary*>& fatbins() {
  static auto* v = new std::vector<FatBinary*>();  // never destroyed: used from atexit handlers
  return *v;
}

struct CallConfig {
  dim3 grid, block;
  size_t shared;
  cudaStream_t stream;
};
thread_local std::vector<CallConfig> t_configs;

FatBinary* from_handle(void** handle) { return reinterpret_cast<FatBinary*>(handle); }

cudaError_t launch_unsupported(const char* name) {
  (void)name;
  report_unsupported("kernel launch");
  return cudaErrorNotSupported;
}

}  // namespace

// The handle is a pointer to our record; its first member is the wrapper pointer, as
// the handle nvcc expects (a void** it only passes back to us).
FUNNEL_API void** __cudaRegisterFatBinary(void* fatCubin) noexcept {
  try {
    auto* fb = new FatBinary{fatCubin, {}, {}};
    std::lock_guard lk(g_mu);
    fatbins().push_back(fb);
    return reinterpret_cast<void**>(fb);
  } catch (...) {
    static void* fallback = nullptr;
    return &fallback;
  }
}

FUNNEL_API void __cudaRegisterFatBinaryEnd(void** /*handle*/) noexcept {}

FUNNEL_API void __cudaUnregisterFatBinary(void** handle) noexcept {
  std::lock_guard lk(g_mu);
  auto& v = fatbins();
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (reinterpret_cast<void**>(*it) == handle) {
      delete *it;
      v.erase(it);
      return;
    }
  }
}

FUNNEL_API char __cudaInitModule(void** /*handle*/) noexcept { return 1; }

FUNNEL_API void __cudaRegisterFunction(void** handle, const char* hostFun, char* /*deviceFun*/,
                                       const char* deviceName, int /*thread_limit*/, uint3* /*tid*/, uint3* /*bid*/,
                                       dim3* /*bDim*/, dim3* /*gDim*/, int* /*wSize*/) noexcept {
  try {
    std::lock_guard lk(g_mu);
    from_handle(handle)->functions.push_back({hostFun, deviceName});
  } catch (...) {
  }
}

FUNNEL_API void __cudaRegisterVar(void** handle, char* hostVar, char* /*deviceAddress*/, const char* deviceName,
                                  int /*ext*/, size_t size, int constant, int /*global*/) noexcept {
  try {
    std::lock_guard lk(g_mu);
    from_handle(handle)->vars.push_back({hostVar, deviceName, size, constant});
  } catch (...) {
  }
}

FUNNEL_API unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                                struct CUstream_st* stream) noexcept {
  try {
    t_configs.push_back({gridDim, blockDim, sharedMem, stream});
    return 0;
  } catch (...) {
    return 1;
  }
}

FUNNEL_API cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                                  void* stream) noexcept {
  if (t_configs.empty()) return record(cudaErrorInvalidConfiguration);
  const CallConfig c = t_configs.back();
  t_configs.pop_back();
  if (gridDim != nullptr) *gridDim = c.grid;
  if (blockDim != nullptr) *blockDim = c.block;
  if (sharedMem != nullptr) *sharedMem = c.shared;
  if (stream != nullptr) *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

// The kernel handle is the host stub's address: resolved locally, no round trip.
FUNNEL_API cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun) noexcept {
  if (kernel == nullptr) return record(cudaErrorInvalidValue);
  *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void*>(hostFun));
  return cudaSuccess;
}

FUNNEL_API cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t) noexcept {
  return record(launch_unsupported(__func__));
}
FUNNEL_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t) noexcept {
  return record(launch_unsupported(__func__));
}
FUNNEL_API cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) noexcept {
  return record(launch_unsupported(__func__));
}
FUNNEL_API cudaError_t cudaLaunchKernel_ptsz(const void*, dim3, dim3, void**, size_t, cudaStream_t) noexcept {
  return record(launch_unsupported(__func__));
}
