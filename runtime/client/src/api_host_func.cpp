// Host functions on streams (cudaLaunchHostFunc, cudaStreamAddCallback): the runtime front of
// the core's host function machinery (host_func.cpp).
#include "api.hpp"
#include "host_func.hpp"

using namespace funnel::client;

FUNNEL_API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  return guarded(__func__, [&] { return launch_host_func(stream, fn, data, false); });
}
FUNNEL_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  return guarded(__func__, [&] { return launch_host_func(stream, fn, data, true); });
}
FUNNEL_API cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t cb, void* data,
                                             unsigned int flags) {
  return guarded(__func__, [&] { return add_callback(stream, cb, data, flags, false); });
}
FUNNEL_API cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t cb, void* data,
                                                  unsigned int flags) {
  return guarded(__func__, [&] { return add_callback(stream, cb, data, flags, true); });
}
