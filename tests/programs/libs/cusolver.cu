// cuSOLVER dense: Sgetrf + Sgetrs (32x32, a row-permuted diagonally dominant matrix so that
// partial pivoting swaps rows; workspace from Sgetrf_bufferSize) on a non-default stream, and
// Spotrf + Spotrs (32x32 SPD, workspace from Spotrf_bufferSize) on the default stream. Checks
// devInfo == 0 and ||Ax-b||/||b|| < 1e-4 in double on the CPU. Build: nvcc -cudart shared cusolver.cu -lcusolver
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "libcheck.h"

static const char* cusolver_name(cusolverStatus_t s) {
  static const char* names[] = {"CUSOLVER_STATUS_SUCCESS", "CUSOLVER_STATUS_NOT_INITIALIZED",
                                "CUSOLVER_STATUS_ALLOC_FAILED", "CUSOLVER_STATUS_INVALID_VALUE",
                                "CUSOLVER_STATUS_ARCH_MISMATCH", "CUSOLVER_STATUS_MAPPING_ERROR",
                                "CUSOLVER_STATUS_EXECUTION_FAILED", "CUSOLVER_STATUS_INTERNAL_ERROR",
                                "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED",
                                "CUSOLVER_STATUS_NOT_SUPPORTED"};
  int i = int(s);
  return (i >= 0 && i < 10) ? names[i] : "CUSOLVER_STATUS_(other)";
}
#define CUSOLVER_CHECK(call) \
  LIBCHECK_CALL(#call, call, cusolverStatus_t, CUSOLVER_STATUS_SUCCESS, cusolver_name, int)

static const int N = 32, NRHS = 2;

using libcheck::to_dev;
using libcheck::val;

static void check_info(const char* what, const int* dInfo) {
  int info = -1;
  CUDA_CHECK(cudaMemcpy(&info, dInfo, sizeof info, cudaMemcpyDeviceToHost));
  if (info != 0) libcheck::fail("FAIL cusolver %s: devInfo = %d\n", what, info);
}

// max over right-hand sides of ||A x - b|| / ||b|| (column-major A, N x N).
static void check_residual(const char* what, const std::vector<float>& A, const std::vector<float>& x,
                           const std::vector<float>& b) {
  double worst = 0;
  for (int c = 0; c < NRHS; ++c) {
    double rn = 0, bn = 0;
    for (int i = 0; i < N; ++i) {
      double s = 0;
      for (int j = 0; j < N; ++j) s += double(A[i + j * N]) * x[j + c * N];
      rn += (s - b[i + c * N]) * (s - b[i + c * N]);
      bn += double(b[i + c * N]) * b[i + c * N];
    }
    worst = std::fmax(worst, std::sqrt(rn / bn));
  }
  if (!(worst < 1e-4)) libcheck::fail("FAIL cusolver %s: residual %.3e >= 1e-4\n", what, worst);
  std::printf("cusolver %s: ok (devInfo == 0, ||Ax-b||/||b|| < 1e-4)\n", what);
}

static void lu_case(cusolverDnHandle_t h, cudaStream_t stream) {
  std::vector<float> A(N * N), b(N * NRHS);
  for (int j = 0; j < N; ++j)
    for (int i = 0; i < N; ++i) A[i + j * N] = (i == j) ? 10.0f + val(i, 1) : val(i + j * N, 2);
  for (int j = 0; j < N; ++j)  // swap row pairs: the largest entry of each column is off the diagonal
    for (int i = 0; i + 1 < N; i += 2) std::swap(A[i + j * N], A[i + 1 + j * N]);
  for (int i = 0; i < N * NRHS; ++i) b[i] = val(i, 3);
  float *dA = to_dev(A), *dB = to_dev(b), *dWork = nullptr;
  int *dIpiv = nullptr, *dInfo = nullptr, lwork = 0;
  CUDA_CHECK(cudaMalloc(&dIpiv, N * sizeof(int)));
  CUDA_CHECK(cudaMalloc(&dInfo, sizeof(int)));
  CUSOLVER_CHECK(cusolverDnSetStream(h, stream));
  CUSOLVER_CHECK(cusolverDnSgetrf_bufferSize(h, N, N, dA, N, &lwork));
  CUDA_CHECK(cudaMalloc(&dWork, size_t(lwork > 0 ? lwork : 1) * sizeof(float)));
  CUSOLVER_CHECK(cusolverDnSgetrf(h, N, N, dA, N, dWork, dIpiv, dInfo));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  check_info("sgetrf", dInfo);
  CUSOLVER_CHECK(cusolverDnSgetrs(h, CUBLAS_OP_N, N, NRHS, dA, N, dIpiv, dB, N, dInfo));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  check_info("sgetrs", dInfo);
  std::vector<int> ipiv(N);
  std::vector<float> x(N * NRHS);
  CUDA_CHECK(cudaMemcpy(ipiv.data(), dIpiv, N * sizeof(int), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(x.data(), dB, x.size() * sizeof(float), cudaMemcpyDeviceToHost));
  int swaps = 0;
  for (int i = 0; i < N; ++i) swaps += (ipiv[i] != i + 1);
  if (swaps == 0) libcheck::fail("FAIL cusolver sgetrf: no row was pivoted\n");
  check_residual("sgetrf+sgetrs 32x32 nrhs=2 (rows pivoted)", A, x, b);
  CUDA_CHECK(cudaFree(dA)); CUDA_CHECK(cudaFree(dB)); CUDA_CHECK(cudaFree(dWork));
  CUDA_CHECK(cudaFree(dIpiv)); CUDA_CHECK(cudaFree(dInfo));
}

static void cholesky_case(cusolverDnHandle_t h) {
  std::vector<float> M(N * N), A(N * N), b(N * NRHS);
  for (int i = 0; i < N * N; ++i) M[i] = val(i, 4);
  for (int j = 0; j < N; ++j)  // A = M^T M / N + I  (symmetric positive definite)
    for (int i = 0; i < N; ++i) {
      double s = 0;
      for (int p = 0; p < N; ++p) s += double(M[p + i * N]) * M[p + j * N];
      A[i + j * N] = float(s / N + (i == j ? 1.0 : 0.0));
    }
  for (int j = 0; j < N; ++j)  // exact symmetry
    for (int i = 0; i < j; ++i) A[i + j * N] = A[j + i * N];
  for (int i = 0; i < N * NRHS; ++i) b[i] = val(i, 5);
  float *dA = to_dev(A), *dB = to_dev(b), *dWork = nullptr;
  int *dInfo = nullptr, lwork = 0;
  CUDA_CHECK(cudaMalloc(&dInfo, sizeof(int)));
  CUSOLVER_CHECK(cusolverDnSetStream(h, 0));  // default stream
  CUSOLVER_CHECK(cusolverDnSpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, N, dA, N, &lwork));
  CUDA_CHECK(cudaMalloc(&dWork, size_t(lwork > 0 ? lwork : 1) * sizeof(float)));
  CUSOLVER_CHECK(cusolverDnSpotrf(h, CUBLAS_FILL_MODE_LOWER, N, dA, N, dWork, lwork, dInfo));
  check_info("spotrf", dInfo);
  CUSOLVER_CHECK(cusolverDnSpotrs(h, CUBLAS_FILL_MODE_LOWER, N, NRHS, dA, N, dB, N, dInfo));
  check_info("spotrs", dInfo);
  std::vector<float> x(N * NRHS);
  CUDA_CHECK(cudaMemcpy(x.data(), dB, x.size() * sizeof(float), cudaMemcpyDeviceToHost));
  check_residual("spotrf+spotrs 32x32 spd nrhs=2 (default stream)", A, x, b);
  CUDA_CHECK(cudaFree(dA)); CUDA_CHECK(cudaFree(dB)); CUDA_CHECK(cudaFree(dWork));
  CUDA_CHECK(cudaFree(dInfo));
}

int main() {
  cusolverDnHandle_t h;
  CUSOLVER_CHECK(cusolverDnCreate(&h));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  lu_case(h, stream);
  cholesky_case(h);
  CUSOLVER_CHECK(cusolverDnDestroy(h));
  CUDA_CHECK(cudaStreamDestroy(stream));
  std::printf("cusolver: all ok\n");
  return 0;
}
