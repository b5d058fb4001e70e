// Device math library: double and float sin, cos, exp, log, pow, sqrt, erf, lgamma, tgamma,
// cbrt, atan2, sincos, fma, and the fast intrinsics __sinf, __expf, __fdividef; compared with
// the host's libm within a few ulp (intrinsics more loosely). GPU results are printed as
// checksums: the same binary gives the same bits natively and through funnel.
#include <vector>

#include "compat.h"

constexpr int kFuncs = 12;

__global__ void dmath(const double* x, double* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const double v = x[i];
  double s, c;
  sincos(v, &s, &c);
  double* o = out + kFuncs * i;
  o[0] = sin(v), o[1] = cos(v), o[2] = exp(v), o[3] = log(fabs(v) + 1e-3), o[4] = pow(fabs(v), 1.7),
  o[5] = sqrt(fabs(v)), o[6] = erf(v), o[7] = lgamma(fabs(v) + 0.5), o[8] = tgamma(fabs(v) + 0.5), o[9] = cbrt(v),
  o[10] = atan2(v, 0.75), o[11] = s * s + c * c;
}

__global__ void fmath(const float* x, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  float* o = out + 6 * i;
  o[0] = sinf(v), o[1] = expf(v), o[2] = logf(fabsf(v) + 1e-3f), o[3] = __sinf(v), o[4] = __expf(v),
  o[5] = __fdividef(v, 3.0f);
}

int main() {
  const int n = 20000;
  std::vector<double> x(n), out(kFuncs * n);
  std::vector<float> xf(n), outf(6 * n);
  for (int i = 0; i < n; ++i) {
    x[i] = rnd(i) * 6.0;
    xf[i] = static_cast<float>(x[i] * 0.5);  // [-3, 3): where __sinf's error bound holds
  }
  double* dx;
  double* dout;
  float *dxf, *doutf;
  CHECK(cudaMalloc(&dx, n * sizeof(double)));
  CHECK(cudaMalloc(&dout, out.size() * sizeof(double)));
  CHECK(cudaMalloc(&dxf, n * sizeof(float)));
  CHECK(cudaMalloc(&doutf, outf.size() * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(double), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dxf, xf.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  dmath<<<(n + 127) / 128, 128>>>(dx, dout, n);
  fmath<<<(n + 127) / 128, 128>>>(dxf, doutf, n);
  CHECK(cudaMemcpy(out.data(), dout, out.size() * sizeof(double), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(outf.data(), doutf, outf.size() * sizeof(float), cudaMemcpyDeviceToHost));
  const char* dn[kFuncs] = {"sin", "cos",    "exp",    "log",  "pow",   "sqrt",
                            "erf", "lgamma", "tgamma", "cbrt", "atan2", "sincos"};
  for (int k = 0; k < kFuncs; ++k) {
    int bad = 0;
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      const double v = x[i];
      const double want[kFuncs] = {std::sin(v),
                                   std::cos(v),
                                   std::exp(v),
                                   std::log(std::fabs(v) + 1e-3),
                                   std::pow(std::fabs(v), 1.7),
                                   std::sqrt(std::fabs(v)),
                                   std::erf(v),
                                   std::lgamma(std::fabs(v) + 0.5),
                                   std::tgamma(std::fabs(v) + 0.5),
                                   std::cbrt(v),
                                   std::atan2(v, 0.75),
                                   1.0};
      bad += !close(out[kFuncs * i + k], want[k], 1e-14);
      sum += out[kFuncs * i + k];
    }
    std::printf("double %-7s mismatches %d, checksum %.15e\n", dn[k], bad, sum);
    EXPECT(bad == 0, "%s", dn[k]);
  }
  const char* fnames[6] = {"sinf", "expf", "logf", "__sinf", "__expf", "__fdividef"};
  const double tol[6] = {1e-6, 1e-6, 1e-6, 1e-5, 1e-5, 1e-6};
  for (int k = 0; k < 6; ++k) {
    int bad = 0;
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      const double v = xf[i];
      const double want[6] = {std::sin(v), std::exp(v), std::log(std::fabs(v) + 1e-3f),
                              std::sin(v), std::exp(v), v / 3.0};
      bad += !close(outf[6 * i + k], want[k], tol[k]);
      sum += outf[6 * i + k];
    }
    std::printf("float  %-10s mismatches %d, checksum %.8e\n", fnames[k], bad, sum);
    EXPECT(bad == 0, "%s", fnames[k]);
  }
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dout));
  CHECK(cudaFree(dxf));
  CHECK(cudaFree(doutf));
  return finish();
}
