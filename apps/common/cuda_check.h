// CK(call): a failed CUDA runtime call prints where and why, then exits with 2; CU(call) the
// same for a driver call (CUresult; include <cuda.h> first), CB(call) for a cuBLAS call
// (cublasStatus_t; include <cublas_v2.h> first).  Shared by the benchmark apps that run natively
// and through funnel-run alike.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

// A failed call that returns a status other than `ok`: where, the call, the status number.
#define FUNNEL_CHECK_STATUS_(call, ok)                                                              \
  do {                                                                                             \
    const auto s_ = (call);                                                                        \
    if (s_ != (ok)) {                                                                              \
      std::fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, static_cast<int>(s_)); \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)
#define CU(call) FUNNEL_CHECK_STATUS_(call, CUDA_SUCCESS)
#define CB(call) FUNNEL_CHECK_STATUS_(call, CUBLAS_STATUS_SUCCESS)
