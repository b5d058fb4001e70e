// Handles across the two fronts (client.fronts): a kernel nvcc registered with the runtime,
// found with cudaGetFuncBySymbol and used as a CUfunction by the driver front (attributes, a
// launch on a runtime stream, timed by driver events that the runtime synchronizes).  Through
// funnel-run on the sim backend; the test finds the launch in the sim's launch log.  Prints
// "done" when every call answered as CUDA does.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>

extern "C" __global__ void fronts_marker_kernel(float* p, float s) { p[threadIdx.x] *= s; }

static int failures = 0;
#define CHECK(call, want)                                                                     \
  do {                                                                                        \
    const int got_ = static_cast<int>(call);                                                  \
    if (got_ != static_cast<int>(want)) {                                                     \
      std::printf("FAIL line %d: %s -> %d, want %d\n", __LINE__, #call, got_, int(want));    \
      ++failures;                                                                             \
    }                                                                                         \
  } while (0)

int main() {
  cudaFunction_t fn = nullptr;
  CHECK(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(fronts_marker_kernel)), cudaSuccess);
  CUfunction f = reinterpret_cast<CUfunction>(fn);
  int threads = 0;
  CHECK(cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f), CUDA_SUCCESS);
  if (threads <= 0 || threads > 1024) std::printf("FAIL: max threads per block %d\n", threads), ++failures;
  size_t offset = 0, size = 0;
  CHECK(cuFuncGetParamInfo(f, 1, &offset, &size), CUDA_SUCCESS);
  if (offset != 8 || size != 4) std::printf("FAIL: parameter 1 at %zu, %zu bytes\n", offset, size), ++failures;

  float* p = nullptr;
  CHECK(cudaMalloc(&p, 64 * sizeof(float)), cudaSuccess);
  cudaStream_t s = nullptr;
  CHECK(cudaStreamCreate(&s), cudaSuccess);
  CUevent start = nullptr, stop = nullptr;
  CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  CHECK(cuEventCreate(&stop, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  float scale = 2.0f;
  void* params[] = {&p, &scale};
  CHECK(cuEventRecord(start, reinterpret_cast<CUstream>(s)), CUDA_SUCCESS);
  CHECK(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, reinterpret_cast<CUstream>(s), params, nullptr), CUDA_SUCCESS);
  CHECK(cuEventRecord(stop, reinterpret_cast<CUstream>(s)), CUDA_SUCCESS);
  CHECK(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(stop)), cudaSuccess);
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, reinterpret_cast<cudaEvent_t>(start), reinterpret_cast<cudaEvent_t>(stop)),
        cudaSuccess);
  if (ms < 0) std::printf("FAIL: elapsed %f ms\n", ms), ++failures;
  // A host stub is not a CUfunction.
  CHECK(cuLaunchKernel(reinterpret_cast<CUfunction>(fronts_marker_kernel), 1, 1, 1, 64, 1, 1, 0, nullptr, params,
                       nullptr),
        CUDA_ERROR_INVALID_HANDLE);
  CHECK(cudaStreamDestroy(s), cudaSuccess);
  CHECK(cudaFree(p), cudaSuccess);
  std::printf("%s\n", failures == 0 ? "done" : "FAILED");
  return failures == 0 ? 0 : 1;
}
