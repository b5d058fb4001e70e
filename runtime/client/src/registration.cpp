// The entry points nvcc's generated code calls from static constructors: fat binaries,
// kernels and variables are only recorded here (modules.cpp); none of it attaches to a
// server, so a program that never calls CUDA never starts one.  -rdc programs register
// through the same calls: nvcc's link stub (crt/link.stub) registers the device-linked
// fat binary once, with every object's callbacks.
#include "api.hpp"
#include "modules.hpp"

using namespace funnel::client;

namespace {

// Handed out when a Module cannot be allocated: registrations against it are dropped.
void* g_no_module = nullptr;

// nvcc expects a void** handle it only passes back to us: the Module record itself.
Module* from_handle(void** handle) {
  return handle == &g_no_module ? nullptr : reinterpret_cast<Module*>(handle);
}

}  // namespace

FUNNEL_API void** __cudaRegisterFatBinary(void* fatCubin) noexcept {
  Module* m = register_module(fatCubin);
  return m != nullptr ? reinterpret_cast<void**>(m) : &g_no_module;
}

FUNNEL_API void __cudaRegisterFatBinaryEnd(void** /*handle*/) noexcept {}

FUNNEL_API void __cudaUnregisterFatBinary(void** handle) noexcept { unregister_module(from_handle(handle)); }

// Called by nvcc's host code before it first reaches a __managed__ variable (through the pointer
// __cudaRegisterManagedVar registered): the module is loaded, which places the variables.
FUNNEL_API char __cudaInitModule(void** handle) noexcept { return init_module(from_handle(handle)) ? 1 : 0; }

FUNNEL_API void __cudaRegisterFunction(void** handle, const char* hostFun, char* /*deviceFun*/,
                                       const char* deviceName, int /*thread_limit*/, uint3* /*tid*/, uint3* /*bid*/,
                                       dim3* /*bDim*/, dim3* /*gDim*/, int* /*wSize*/) noexcept {
  register_kernel(from_handle(handle), hostFun, deviceName);
}

FUNNEL_API void __cudaRegisterVar(void** handle, char* hostVar, char* /*deviceAddress*/, const char* deviceName,
                                  int /*ext*/, size_t size, int constant, int /*global*/) noexcept {
  register_variable(from_handle(handle), hostVar, deviceName, size, constant != 0);
}

FUNNEL_API void __cudaRegisterManagedVar(void** handle, void** hostVarPtrAddress, char* /*deviceAddress*/,
                                         const char* deviceName, int /*ext*/, size_t size, int /*constant*/,
                                         int /*global*/) noexcept {
  register_managed(from_handle(handle), hostVarPtrAddress, deviceName, size);
}

namespace {

struct CallConfig {
  dim3 grid, block;
  size_t shared;
  cudaStream_t stream;
};
thread_local std::vector<CallConfig> t_configs;

}  // namespace

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
