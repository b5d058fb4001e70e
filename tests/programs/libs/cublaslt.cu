// cuBLASLt: FP32 cublasLtMatmul with CUBLASLT_EPILOGUE_BIAS (bias vector in device memory) on a
// non-default stream, and a plain matmul (transposed A, beta != 0) on the default stream; both
// use cublasLtMatmulAlgoGetHeuristic and a 4 MiB cudaMalloc workspace, checked against a CPU
// reference in double. Build: nvcc -cudart shared cublaslt.cu -lcublasLt
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "libcheck.h"

// libcublasLt has no cublasGetStatusName (that lives in libcublas): name the common codes here.
static const char* lt_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_(other)";
  }
}
#define LT_CHECK(call) \
  LIBCHECK_CALL(#call, call, cublasStatus_t, CUBLAS_STATUS_SUCCESS, lt_status_name, int)

static const size_t kWorkspaceBytes = 4u << 20;

using libcheck::fill;
using libcheck::to_dev;

// D (m x n, column-major) = alpha op(A) B + beta C (+ bias[row]); A is k x m if transA else m x k.
static void run_case(cublasLtHandle_t lt, void* ws, cudaStream_t stream, const char* what, int m,
                     int n, int k, bool transA, bool bias, float alpha, float beta) {
  int lda = transA ? k : m;
  auto A = fill(m * k, 1), B = fill(k * n, 2), C = fill(m * n, 3), bv = fill(m, 4);
  float *dA = to_dev(A), *dB = to_dev(B), *dC = to_dev(C), *dBias = to_dev(bv), *dD = nullptr;
  CUDA_CHECK(cudaMalloc(&dD, sizeof(float) * m * n));

  cublasLtMatmulDesc_t desc;
  LT_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N, opB = CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
  LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
  if (bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dBias,
                                            sizeof(dBias)));
  }
  cublasLtMatrixLayout_t la, lb, lc, ld;
  LT_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, transA ? k : m, transA ? m : k, lda));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m));
  LT_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m));

  cublasLtMatmulPreference_t pref;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t wsBytes = kWorkspaceBytes;
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &wsBytes, sizeof(wsBytes)));
  cublasLtMatmulHeuristicResult_t heur[4] = {};
  int found = 0;
  LT_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, ld, pref, 4, heur, &found));
  if (found < 1)
    libcheck::fail("FAIL cublaslt %s: no algorithm from cublasLtMatmulAlgoGetHeuristic\n", what);
  LT_CHECK(cublasLtMatmul(lt, desc, &alpha, dA, la, dB, lb, &beta, dC, lc, dD, ld, &heur[0].algo,
                          ws, kWorkspaceBytes, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> g(m * n);
  CUDA_CHECK(cudaMemcpy(g.data(), dD, sizeof(float) * m * n, cudaMemcpyDeviceToHost));

  std::vector<double> ref(m * n);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int p = 0; p < k; ++p)
        s += double(transA ? A[p + i * lda] : A[i + p * lda]) * B[p + j * k];
      ref[i + j * m] = alpha * s + beta * C[i + j * m] + (bias ? bv[i] : 0.0);
    }
  libcheck::check_rel_err("cublaslt", what, libcheck::rel_err(g, ref), "1e-4");

  LT_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  LT_CHECK(cublasLtMatrixLayoutDestroy(la));
  LT_CHECK(cublasLtMatrixLayoutDestroy(lb));
  LT_CHECK(cublasLtMatrixLayoutDestroy(lc));
  LT_CHECK(cublasLtMatrixLayoutDestroy(ld));
  LT_CHECK(cublasLtMatmulDescDestroy(desc));
  CUDA_CHECK(cudaFree(dA)); CUDA_CHECK(cudaFree(dB)); CUDA_CHECK(cudaFree(dC));
  CUDA_CHECK(cudaFree(dD)); CUDA_CHECK(cudaFree(dBias));
}

int main() {
  cublasLtHandle_t lt;
  LT_CHECK(cublasLtCreate(&lt));
  void* ws = nullptr;
  CUDA_CHECK(cudaMalloc(&ws, kWorkspaceBytes));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  run_case(lt, ws, stream, "matmul fp32 64x48x32 epilogue bias", 64, 48, 32, false, true, 1.0f, 0.0f);
  run_case(lt, ws, 0, "matmul fp32 96x64x128 transA beta=0.5 (default stream)", 96, 64, 128, true,
           false, 1.0f, 0.5f);
  CUDA_CHECK(cudaStreamDestroy(stream));
  CUDA_CHECK(cudaFree(ws));
  LT_CHECK(cublasLtDestroy(lt));
  std::printf("cublaslt: all ok\n");
  return 0;
}
