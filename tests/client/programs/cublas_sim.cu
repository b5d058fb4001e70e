// cuBLAS through funnel's client driver on the sim backend: NVIDIA's library (its own static
// runtime, dlopen'ing libcuda.so.1) starts, passes the runtime's integrity check, finds its
// kernels and launches a GEMM on the server.  The sim runs no kernels, so the numbers are not
// checked here (the GPU suite does); libs_sim.sh checks the launch log for the GEMM.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdio>

#define CHECK(call, ok)                                                             \
  do {                                                                              \
    const auto r_ = (call);                                                         \
    if (r_ != (ok)) {                                                               \
      std::printf("FAIL %s -> %d\n", #call, static_cast<int>(r_));                  \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

int main() {
  constexpr int n = 64;
  float *a = nullptr, *b = nullptr, *c = nullptr;
  CHECK(cudaMalloc(&a, n * n * sizeof(float)), cudaSuccess);
  CHECK(cudaMalloc(&b, n * n * sizeof(float)), cudaSuccess);
  CHECK(cudaMalloc(&c, n * n * sizeof(float)), cudaSuccess);
  cudaStream_t s = nullptr;
  CHECK(cudaStreamCreate(&s), cudaSuccess);
  cublasHandle_t h = nullptr;
  CHECK(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  CHECK(cublasSetStream(h, s), CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n), CUBLAS_STATUS_SUCCESS);
  CHECK(cudaStreamSynchronize(s), cudaSuccess);
  CHECK(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
  CHECK(cudaStreamDestroy(s), cudaSuccess);
  CHECK(cudaFree(a), cudaSuccess);
  CHECK(cudaFree(b), cudaSuccess);
  CHECK(cudaFree(c), cudaSuccess);
  std::printf("done\n");
  return 0;
}
