// cuBLAS: Sgemm (square, and non-square with transposes), Dgemm, SgemmStridedBatched, Strsm,
// SgetrfBatched + SgetrsBatched, and one Sgemm with CUBLAS_POINTER_MODE_DEVICE; each result is
// checked against a CPU reference (double). Runs on a non-default stream, the last cases on the
// default stream. Build: nvcc -cudart shared cublas.cu -lcublas
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "libcheck.h"

#define CUBLAS_CHECK(call)                                                                 \
  LIBCHECK_CALL(#call, call, cublasStatus_t, CUBLAS_STATUS_SUCCESS, cublasGetStatusName, \
                cublasGetStatusString)

using libcheck::fill;
using libcheck::rel_err;
using libcheck::to_dev;
using libcheck::val;

static cublasHandle_t handle;
static cudaStream_t stream;

template <typename T>
static std::vector<T> to_host(const T* d, size_t n) {
  std::vector<T> h(n);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

static void report(const char* what, double err, const char* tol) {
  libcheck::check_rel_err("cublas", what, err, tol);
}

// C (m x n) = alpha op(A) op(B) + beta C, column-major, in double.
template <typename T>
static std::vector<double> ref_gemm(bool ta, bool tb, int m, int n, int k, double alpha,
                                    const std::vector<T>& A, int lda, const std::vector<T>& B,
                                    int ldb, double beta, const std::vector<T>& C) {
  std::vector<double> out(size_t(m) * n);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int p = 0; p < k; ++p) {
        double a = ta ? A[p + size_t(i) * lda] : A[i + size_t(p) * lda];
        double b = tb ? B[j + size_t(p) * ldb] : B[p + size_t(j) * ldb];
        s += a * b;
      }
      out[i + size_t(j) * m] = alpha * s + beta * C[i + size_t(j) * m];
    }
  return out;
}

static void sgemm_case(const char* what, bool ta, bool tb, int m, int n, int k) {
  int lda = ta ? k : m, ldb = tb ? n : k;
  auto A = fill(m * k, 1), B = fill(k * n, 2), C = fill(m * n, 3);
  float alpha = 1.5f, beta = 0.25f;
  float *dA = to_dev(A), *dB = to_dev(B), *dC = to_dev(C);
  CUBLAS_CHECK(cublasSgemm(handle, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                           m, n, k, &alpha, dA, lda, dB, ldb, &beta, dC, m));
  auto g = to_host(dC, C.size());
  report(what, rel_err(g, ref_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C)), "1e-4");
  CUDA_CHECK(cudaFree(dA)); CUDA_CHECK(cudaFree(dB)); CUDA_CHECK(cudaFree(dC));
}

static void dgemm_case() {
  const int n = 64;
  std::vector<double> A(n * n), B(n * n), C(n * n, 0.0);
  for (int i = 0; i < n * n; ++i) { A[i] = val(i, 4); B[i] = val(i, 5) * 0.5; }
  double alpha = 1.0, beta = 0.0;
  double *dA = to_dev(A), *dB = to_dev(B), *dC = to_dev(C);
  CUBLAS_CHECK(cublasDgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, dA, n, dB, n, &beta, dC, n));
  auto g = to_host(dC, C.size());
  report("dgemm 64x64x64", rel_err(g, ref_gemm(false, false, n, n, n, alpha, A, n, B, n, beta, C)), "1e-12");
  CUDA_CHECK(cudaFree(dA)); CUDA_CHECK(cudaFree(dB)); CUDA_CHECK(cudaFree(dC));
}

static void batched_case() {
  const int n = 32, batch = 8;
  const long long stride = n * n;
  auto A = fill(n * n * batch, 6), B = fill(n * n * batch, 7);
  std::vector<float> C(n * n * batch, 0.0f);
  float alpha = 1.0f, beta = 0.0f;
  float *dA = to_dev(A), *dB = to_dev(B), *dC = to_dev(C);
  CUBLAS_CHECK(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, dA, n,
                                         stride, dB, n, stride, &beta, dC, n, stride, batch));
  auto g = to_host(dC, C.size());
  std::vector<double> ref;
  for (int b = 0; b < batch; ++b) {
    std::vector<float> a(A.begin() + b * stride, A.begin() + (b + 1) * stride);
    std::vector<float> bb(B.begin() + b * stride, B.begin() + (b + 1) * stride);
    std::vector<float> c(stride, 0.0f);
    auto r = ref_gemm(false, false, n, n, n, 1.0, a, n, bb, n, 0.0, c);
    ref.insert(ref.end(), r.begin(), r.end());
  }
  report("sgemm strided batched 8x32x32x32", rel_err(g, ref), "1e-4");
  CUDA_CHECK(cudaFree(dA)); CUDA_CHECK(cudaFree(dB)); CUDA_CHECK(cudaFree(dC));
}

static void trsm_case() {
  const int n = 32, nrhs = 8;
  std::vector<float> L(n * n, 0.0f);  // lower triangular, strong diagonal
  for (int j = 0; j < n; ++j)
    for (int i = j; i < n; ++i) L[i + j * n] = (i == j) ? 4.0f + val(i, 8) : 0.5f * val(i + j * n, 9);
  auto B = fill(n * nrhs, 10);
  float alpha = 1.0f;
  float *dL = to_dev(L), *dB = to_dev(B);
  CUBLAS_CHECK(cublasStrsm(handle, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
                           CUBLAS_DIAG_NON_UNIT, n, nrhs, &alpha, dL, n, dB, n));
  auto g = to_host(dB, B.size());
  std::vector<double> x(n * nrhs);  // forward substitution in double
  for (int c = 0; c < nrhs; ++c)
    for (int i = 0; i < n; ++i) {
      double s = B[i + c * n];
      for (int p = 0; p < i; ++p) s -= double(L[i + p * n]) * x[p + c * n];
      x[i + c * n] = s / L[i + i * n];
    }
  report("strsm lower 32x32 nrhs=8", rel_err(g, x), "1e-4");
  CUDA_CHECK(cudaFree(dL)); CUDA_CHECK(cudaFree(dB));
}

static void getrf_batched_case() {
  const int n = 16, batch = 4;
  std::vector<float> A(n * n * batch), B(n * batch);
  std::vector<double> xtrue(n * batch);
  for (int b = 0; b < batch; ++b) {
    float* a = &A[b * n * n];
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < n; ++i) a[i + j * n] = (i == j) ? 20.0f + b : val(i + j * n, 11 + b);
    for (int i = 0; i < n; ++i) xtrue[b * n + i] = val(i, 20 + b);
    for (int i = 0; i < n; ++i) {  // b = A x (x exactly representable, rounding only in b)
      double s = 0;
      for (int j = 0; j < n; ++j) s += double(a[i + j * n]) * float(xtrue[b * n + j]);
      B[b * n + i] = float(s);
    }
  }
  float *dA = to_dev(A), *dB = to_dev(B);
  std::vector<float*> pa(batch), pb(batch);
  for (int b = 0; b < batch; ++b) { pa[b] = dA + b * n * n; pb[b] = dB + b * n; }
  float** dPA = to_dev(pa);
  float** dPB = to_dev(pb);
  int *dPiv = nullptr, *dInfo = nullptr;
  CUDA_CHECK(cudaMalloc(&dPiv, n * batch * sizeof(int)));
  CUDA_CHECK(cudaMalloc(&dInfo, batch * sizeof(int)));
  CUBLAS_CHECK(cublasSgetrfBatched(handle, n, dPA, n, dPiv, dInfo, batch));
  int hinfo = 0;
  CUBLAS_CHECK(cublasSgetrsBatched(handle, CUBLAS_OP_N, n, 1, dPA, n, dPiv, dPB, n, &hinfo, batch));
  auto info = to_host(dInfo, batch);
  for (int b = 0; b < batch; ++b)
    if (info[b] != 0 || hinfo != 0)
      libcheck::fail("FAIL cublas getrf/getrs batched: info[%d]=%d getrs info=%d\n", b, info[b], hinfo);
  auto g = to_host(dB, B.size());
  report("sgetrf+sgetrs batched 4x16x16", rel_err(g, xtrue), "1e-4");
  CUDA_CHECK(cudaFree(dA)); CUDA_CHECK(cudaFree(dB)); CUDA_CHECK(cudaFree(dPA));
  CUDA_CHECK(cudaFree(dPB)); CUDA_CHECK(cudaFree(dPiv)); CUDA_CHECK(cudaFree(dInfo));
}

static void pointer_mode_device_case() {
  const int m = 48, n = 40, k = 56;
  auto A = fill(m * k, 12), B = fill(k * n, 13), C = fill(m * n, 14);
  std::vector<float> ab = {2.0f, -0.5f};  // alpha, beta in device memory
  float *dA = to_dev(A), *dB = to_dev(B), *dC = to_dev(C), *dAB = to_dev(ab);
  CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_DEVICE));
  CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, dAB, dA, m, dB, k, dAB + 1, dC, m));
  CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
  auto g = to_host(dC, C.size());
  report("sgemm pointer-mode-device 48x40x56 (default stream)",
         rel_err(g, ref_gemm(false, false, m, n, k, 2.0, A, m, B, k, -0.5, C)), "1e-4");
  CUDA_CHECK(cudaFree(dA)); CUDA_CHECK(cudaFree(dB)); CUDA_CHECK(cudaFree(dC)); CUDA_CHECK(cudaFree(dAB));
}

int main() {
  CUBLAS_CHECK(cublasCreate(&handle));
  CUDA_CHECK(cudaStreamCreate(&stream));
  CUBLAS_CHECK(cublasSetStream(handle, stream));
  sgemm_case("sgemm 64x64x64", false, false, 64, 64, 64);
  sgemm_case("sgemm 96x32x48 transA transB", true, true, 96, 32, 48);
  dgemm_case();
  batched_case();
  trsm_case();
  getrf_batched_case();
  CUBLAS_CHECK(cublasSetStream(handle, 0));  // the remaining case runs on the default stream
  pointer_mode_device_case();
  CUBLAS_CHECK(cublasDestroy(handle));
  CUDA_CHECK(cudaStreamDestroy(stream));
  std::printf("cublas: all ok\n");
  return 0;
}
