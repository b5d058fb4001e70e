// cuFFT: 1-D C2C (n=64, batch 4), 2-D C2C (32x16), 3-D C2C (8x8x8) forward + inverse, and 1-D R2C
// (n=64) + C2R round trip. Forward results are compared with a naive CPU DFT in double, inverse
// results with the input scaled by n. Plans run on a non-default stream (cufftSetStream), the 3-D
// plan on the default stream. Build: nvcc -cudart shared cufft.cu -lcufft
#include <cuda_runtime.h>
#include <cufft.h>

#include <cmath>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "libcheck.h"

static const char* cufft_name(cufftResult r) {
  static const char* names[] = {"CUFFT_SUCCESS", "CUFFT_INVALID_PLAN", "CUFFT_ALLOC_FAILED",
                                "CUFFT_INVALID_TYPE", "CUFFT_INVALID_VALUE", "CUFFT_INTERNAL_ERROR",
                                "CUFFT_EXEC_FAILED", "CUFFT_SETUP_FAILED", "CUFFT_INVALID_SIZE",
                                "CUFFT_UNALIGNED_DATA"};
  int i = int(r);
  return (i >= 0 && i < 10) ? names[i] : "CUFFT_(other)";
}
#define CUFFT_CHECK(call) LIBCHECK_CALL(#call, call, cufftResult, CUFFT_SUCCESS, cufft_name, int)

using cd = std::complex<double>;
static cudaStream_t stream;

using libcheck::rel_err;
using libcheck::val;

// Naive DFT along one axis of a row-major array with shape dims (sign -1: forward).
static void dft_axis(std::vector<cd>& d, const std::vector<int>& dims, int axis, int sign) {
  const int n = dims[axis];
  size_t stride = 1;
  for (size_t a = axis + 1; a < dims.size(); ++a) stride *= dims[a];
  std::vector<cd> tmp(n);
  for (size_t base = 0; base < d.size(); ++base) {
    if ((base / stride) % n != 0) continue;  // not the first element of a line
    for (int k = 0; k < n; ++k) {
      cd s = 0;
      for (int j = 0; j < n; ++j) s += d[base + j * stride] * std::polar(1.0, sign * 2 * M_PI * j * k / n);
      tmp[k] = s;
    }
    for (int k = 0; k < n; ++k) d[base + k * stride] = tmp[k];
  }
}

static std::vector<cd> as_complex(const std::vector<cufftComplex>& v) {
  std::vector<cd> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = cd(v[i].x, v[i].y);
  return out;
}

static void check(const char* what, double err) { libcheck::check_rel_err("cufft", what, err, "1e-4"); }

// dims: batch first, then the transform dims (row-major, as cuFFT lays them out).
static void c2c_case(const char* name, cufftHandle plan, const std::vector<int>& dims, bool on_stream) {
  if (on_stream) CUFFT_CHECK(cufftSetStream(plan, stream));
  size_t total = 1, n = 1;
  for (size_t a = 0; a < dims.size(); ++a) total *= dims[a];
  n = total / dims[0];
  std::vector<cufftComplex> in(total), fwd(total), back(total);
  for (size_t i = 0; i < total; ++i) in[i] = make_float2(val(i, 1), val(i, 2));
  cufftComplex *dIn, *dOut, *dBack;
  CUDA_CHECK(cudaMalloc(&dIn, total * sizeof(cufftComplex)));
  CUDA_CHECK(cudaMalloc(&dOut, total * sizeof(cufftComplex)));
  CUDA_CHECK(cudaMalloc(&dBack, total * sizeof(cufftComplex)));
  CUDA_CHECK(cudaMemcpy(dIn, in.data(), total * sizeof(cufftComplex), cudaMemcpyHostToDevice));
  CUFFT_CHECK(cufftExecC2C(plan, dIn, dOut, CUFFT_FORWARD));
  CUFFT_CHECK(cufftExecC2C(plan, dOut, dBack, CUFFT_INVERSE));
  CUDA_CHECK(cudaStreamSynchronize(on_stream ? stream : 0));
  CUDA_CHECK(cudaMemcpy(fwd.data(), dOut, total * sizeof(cufftComplex), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(back.data(), dBack, total * sizeof(cufftComplex), cudaMemcpyDeviceToHost));

  std::vector<cd> ref(total), scaled(total);
  for (size_t i = 0; i < total; ++i) {
    ref[i] = cd(in[i].x, in[i].y);
    scaled[i] = ref[i] * double(n);
  }
  for (size_t a = 1; a < dims.size(); ++a) dft_axis(ref, dims, a, -1);
  char what[128];
  std::snprintf(what, sizeof what, "c2c %s forward vs cpu dft", name);
  check(what, rel_err(as_complex(fwd), ref));
  std::snprintf(what, sizeof what, "c2c %s inverse(forward(x)) == n*x", name);
  check(what, rel_err(as_complex(back), scaled));
  CUDA_CHECK(cudaFree(dIn)); CUDA_CHECK(cudaFree(dOut)); CUDA_CHECK(cudaFree(dBack));
  CUFFT_CHECK(cufftDestroy(plan));
}

static void r2c_case() {
  const int n = 64, nc = n / 2 + 1;
  cufftHandle r2c, c2r;
  CUFFT_CHECK(cufftPlan1d(&r2c, n, CUFFT_R2C, 1));
  CUFFT_CHECK(cufftPlan1d(&c2r, n, CUFFT_C2R, 1));
  CUFFT_CHECK(cufftSetStream(r2c, stream));
  CUFFT_CHECK(cufftSetStream(c2r, stream));
  std::vector<float> in(n), back(n);
  for (int i = 0; i < n; ++i) in[i] = val(i, 3);
  std::vector<cufftComplex> fwd(nc);
  cufftReal *dIn, *dBack;
  cufftComplex* dFreq;
  CUDA_CHECK(cudaMalloc(&dIn, n * sizeof(cufftReal)));
  CUDA_CHECK(cudaMalloc(&dBack, n * sizeof(cufftReal)));
  CUDA_CHECK(cudaMalloc(&dFreq, nc * sizeof(cufftComplex)));
  CUDA_CHECK(cudaMemcpy(dIn, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CUFFT_CHECK(cufftExecR2C(r2c, dIn, dFreq));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaMemcpy(fwd.data(), dFreq, nc * sizeof(cufftComplex), cudaMemcpyDeviceToHost));
  CUFFT_CHECK(cufftExecC2R(c2r, dFreq, dBack));  // may overwrite dFreq: copied out above
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaMemcpy(back.data(), dBack, n * sizeof(float), cudaMemcpyDeviceToHost));

  std::vector<cd> ref(n);
  for (int i = 0; i < n; ++i) ref[i] = in[i];
  dft_axis(ref, {n}, 0, -1);
  ref.resize(nc);
  check("r2c 64 vs cpu dft", rel_err(as_complex(fwd), ref));
  std::vector<double> scaled(n);
  for (int i = 0; i < n; ++i) scaled[i] = double(n) * in[i];
  check("c2r(r2c(x)) 64 == n*x", rel_err(back, scaled));
  CUFFT_CHECK(cufftDestroy(r2c)); CUFFT_CHECK(cufftDestroy(c2r));
  CUDA_CHECK(cudaFree(dIn)); CUDA_CHECK(cudaFree(dBack)); CUDA_CHECK(cudaFree(dFreq));
}

int main() {
  CUDA_CHECK(cudaStreamCreate(&stream));
  cufftHandle p;
  CUFFT_CHECK(cufftPlan1d(&p, 64, CUFFT_C2C, 4));
  c2c_case("1d 64 batch 4", p, {4, 64}, true);
  CUFFT_CHECK(cufftPlan2d(&p, 32, 16, CUFFT_C2C));
  c2c_case("2d 32x16", p, {1, 32, 16}, true);
  CUFFT_CHECK(cufftPlan3d(&p, 8, 8, 8, CUFFT_C2C));
  c2c_case("3d 8x8x8 (default stream)", p, {1, 8, 8, 8}, false);
  r2c_case();
  CUDA_CHECK(cudaStreamDestroy(stream));
  std::printf("cufft: all ok\n");
  return 0;
}
