// cuSPARSE generic API: a 128x128 CSR matrix (tridiagonal plus a few far entries), cusparseSpMV
// (y = alpha*A*x + beta*y, external buffer from cusparseSpMV_bufferSize) on a non-default stream,
// and cusparseSpMM with a dense column-major 128x8 matrix on the default stream; both checked
// against a CPU reference in double. Build: nvcc -cudart shared cusparse.cu -lcusparse
#include <cuda_runtime.h>
#include <cusparse.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "libcheck.h"

#define CUSPARSE_CHECK(call)                                                                \
  LIBCHECK_CALL(#call, call, cusparseStatus_t, CUSPARSE_STATUS_SUCCESS, cusparseGetErrorName, \
                cusparseGetErrorString)

static const int N = 128, K = 8;

using libcheck::to_dev;
using libcheck::val;

static void check(const char* what, const std::vector<float>& g, const std::vector<double>& r) {
  libcheck::check_rel_err("cusparse", what, libcheck::rel_err(g, r), "1e-5");
}

int main() {
  // Build the CSR matrix: tridiagonal, plus an entry at column (7*i + 40) % N in every 16th row.
  std::vector<std::map<int, float>> rows(N);
  for (int i = 0; i < N; ++i) {
    rows[i][i] = 4.0f + val(i, 1);
    if (i > 0) rows[i][i - 1] = val(i, 2);
    if (i + 1 < N) rows[i][i + 1] = val(i, 3);
    if (i % 16 == 0) rows[i][(7 * i + 40) % N] = 0.5f + val(i, 4);
  }
  std::vector<int> rowptr(N + 1, 0), colind;
  std::vector<float> vals;
  for (int i = 0; i < N; ++i) {
    for (auto& [c, v] : rows[i]) { colind.push_back(c); vals.push_back(v); }
    rowptr[i + 1] = int(colind.size());
  }
  const int nnz = int(vals.size());
  std::vector<float> x(N), y(N), B(N * K), C(N * K);
  for (int i = 0; i < N; ++i) { x[i] = val(i, 5); y[i] = val(i, 6); }
  for (int i = 0; i < N * K; ++i) { B[i] = val(i, 7); C[i] = val(i, 8); }

  int *dRow = to_dev(rowptr), *dCol = to_dev(colind);
  float *dVal = to_dev(vals), *dX = to_dev(x), *dY = to_dev(y), *dB = to_dev(B), *dC = to_dev(C);

  cusparseHandle_t h;
  CUSPARSE_CHECK(cusparseCreate(&h));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  CUSPARSE_CHECK(cusparseSetStream(h, stream));

  cusparseSpMatDescr_t A;
  cusparseDnVecDescr_t vx, vy;
  CUSPARSE_CHECK(cusparseCreateCsr(&A, N, N, nnz, dRow, dCol, dVal, CUSPARSE_INDEX_32I,
                                   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
  CUSPARSE_CHECK(cusparseCreateDnVec(&vx, N, dX, CUDA_R_32F));
  CUSPARSE_CHECK(cusparseCreateDnVec(&vy, N, dY, CUDA_R_32F));

  // SpMV: y = 1.5 A x - 0.5 y
  float alpha = 1.5f, beta = -0.5f;
  size_t bytes = 0;
  CUSPARSE_CHECK(cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, A, vx, &beta,
                                         vy, CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT, &bytes));
  void* buf = nullptr;
  CUDA_CHECK(cudaMalloc(&buf, bytes > 0 ? bytes : 16));
  CUSPARSE_CHECK(cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, A, vx, &beta, vy,
                              CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT, buf));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> gy(N);
  CUDA_CHECK(cudaMemcpy(gy.data(), dY, N * sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<double> ry(N);
  for (int i = 0; i < N; ++i) {
    double s = 0;
    for (int p = rowptr[i]; p < rowptr[i + 1]; ++p) s += double(vals[p]) * x[colind[p]];
    ry[i] = alpha * s + beta * y[i];
  }
  char what[96];
  std::snprintf(what, sizeof what, "spmv csr 128x128 nnz=%d", nnz);
  check(what, gy, ry);
  CUDA_CHECK(cudaFree(buf));

  // SpMM on the default stream: C (128x8) = A B + 0.25 C, column-major dense matrices.
  CUSPARSE_CHECK(cusparseSetStream(h, 0));
  cusparseDnMatDescr_t mb, mc;
  CUSPARSE_CHECK(cusparseCreateDnMat(&mb, N, K, N, dB, CUDA_R_32F, CUSPARSE_ORDER_COL));
  CUSPARSE_CHECK(cusparseCreateDnMat(&mc, N, K, N, dC, CUDA_R_32F, CUSPARSE_ORDER_COL));
  float alpha2 = 1.0f, beta2 = 0.25f;
  CUSPARSE_CHECK(cusparseSpMM_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                         CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha2, A, mb, &beta2,
                                         mc, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, &bytes));
  CUDA_CHECK(cudaMalloc(&buf, bytes > 0 ? bytes : 16));
  CUSPARSE_CHECK(cusparseSpMM(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE,
                              &alpha2, A, mb, &beta2, mc, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, buf));
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> gc(N * K);
  CUDA_CHECK(cudaMemcpy(gc.data(), dC, gc.size() * sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<double> rc(N * K);
  for (int j = 0; j < K; ++j)
    for (int i = 0; i < N; ++i) {
      double s = 0;
      for (int p = rowptr[i]; p < rowptr[i + 1]; ++p) s += double(vals[p]) * B[colind[p] + j * N];
      rc[i + j * N] = alpha2 * s + beta2 * C[i + j * N];
    }
  std::snprintf(what, sizeof what, "spmm csr 128x128 * dense 128x8 col-major (default stream)");
  check(what, gc, rc);

  CUSPARSE_CHECK(cusparseDestroyDnMat(mb));
  CUSPARSE_CHECK(cusparseDestroyDnMat(mc));
  CUSPARSE_CHECK(cusparseDestroyDnVec(vx));
  CUSPARSE_CHECK(cusparseDestroyDnVec(vy));
  CUSPARSE_CHECK(cusparseDestroySpMat(A));
  CUSPARSE_CHECK(cusparseDestroy(h));
  CUDA_CHECK(cudaStreamDestroy(stream));
  for (void* p : {(void*)dRow, (void*)dCol, (void*)dVal, (void*)dX, (void*)dY, (void*)dB, (void*)dC, buf})
    CUDA_CHECK(cudaFree(p));
  std::printf("cusparse: all ok\n");
  return 0;
}
