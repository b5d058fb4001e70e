// Reduced precision: __half and __half2 (cuda_fp16.h), __nv_bfloat16 and __nv_bfloat162
// (cuda_bf16.h) arithmetic, fused multiply-add, conversions both ways on host and device,
// and a half-precision dot product accumulated in float. Results are compared with the exact
// result (double) rounded once on the host (the conversions are __host__ __device__).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <vector>

#include "compat.h"

__global__ void ops(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const __half a = __float2half(in[i]), b = __float2half(in[(i + 1) % n]);
  const __half2 a2 = __halves2half2(a, b);
  const __half2 p2 = __hmul2(a2, a2);
  const __nv_bfloat16 x = __float2bfloat16(in[i]), y = __float2bfloat16(in[(i + 1) % n]);
  float* o = out + 8 * i;
  o[0] = __half2float(__hadd(a, b));
  o[1] = __half2float(__hmul(a, b));
  o[2] = __half2float(__hfma(a, b, a));
  o[3] = __low2float(p2) + __high2float(p2);
  o[4] = __bfloat162float(__hadd(x, y));
  o[5] = __bfloat162float(__hmul(x, y));
  o[6] = __bfloat162float(__hfma(x, y, x));
  o[7] = __hlt(a, b) ? 1.0f : 0.0f;
}

__global__ void dot(const __half* a, const __half* b, float* out, int n) {
  __shared__ float s[256];
  float acc = 0;
  for (int i = threadIdx.x; i < n; i += 256) acc += __half2float(a[i]) * __half2float(b[i]);
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = 128; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = s[0];
}

int main() {
  const int n = 4096;
  std::vector<float> in(n), out(8 * n);
  for (int i = 0; i < n; ++i) in[i] = rnd(i) * 8.0f;
  float *din, *dout;
  CHECK(cudaMalloc(&din, n * sizeof(float)));
  CHECK(cudaMalloc(&dout, 8 * n * sizeof(float)));
  CHECK(cudaMemcpy(din, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  ops<<<n / 128, 128>>>(din, dout, n);
  CHECK(cudaMemcpy(out.data(), dout, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  int bad[8] = {};
  double sums[8] = {};
  for (int i = 0; i < n; ++i) {
    // Host reference: round inputs the same way, compute in float, round the result once.
    const float a = __half2float(__float2half(in[i])), b = __half2float(__float2half(in[(i + 1) % n]));
    const float x = __bfloat162float(__float2bfloat16(in[i])), y = __bfloat162float(__float2bfloat16(in[(i + 1) % n]));
    const float h2 = [](float v) { return __half2float(__float2half(v)); }(a * a) +
                     [](float v) { return __half2float(__float2half(v)); }(b * b);
    const double da = a, db = b, dx = x, dy = y;  // sums and products of these are exact in double
    const float want[8] = {__half2float(__double2half(da + db)),
                           __half2float(__double2half(da * db)),
                           __half2float(__double2half(da * db + da)),
                           h2,
                           __bfloat162float(__double2bfloat16(dx + dy)),
                           __bfloat162float(__double2bfloat16(dx * dy)),
                           __bfloat162float(__double2bfloat16(dx * dy + dx)),
                           a < b ? 1.0f : 0.0f};
    for (int k = 0; k < 8; ++k) {
      bad[k] += out[8 * i + k] != want[k];
      sums[k] += out[8 * i + k];
    }
  }
  const char* names[8] = {"hadd", "hmul", "hfma", "hmul2", "bf16 add", "bf16 mul", "bf16 fma", "hlt"};
  for (int k = 0; k < 8; ++k) {
    std::printf("%-9s mismatches %d, sum %.4f\n", names[k], bad[k], sums[k]);
    EXPECT(bad[k] == 0, "%s", names[k]);
  }
  std::vector<__half> ha(n), hb(n);
  double want = 0;
  for (int i = 0; i < n; ++i) {
    ha[i] = __float2half(in[i] / 8.0f);
    hb[i] = __float2half(rnd(i + 17));
    want += static_cast<double>(__half2float(ha[i])) * __half2float(hb[i]);
  }
  __half *da, *db;
  CHECK(cudaMalloc(&da, n * sizeof(__half)));
  CHECK(cudaMalloc(&db, n * sizeof(__half)));
  CHECK(cudaMemcpy(da, ha.data(), n * sizeof(__half), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, hb.data(), n * sizeof(__half), cudaMemcpyHostToDevice));
  dot<<<1, 256>>>(da, db, dout, n);
  float got = 0;
  CHECK(cudaMemcpy(&got, dout, sizeof got, cudaMemcpyDeviceToHost));
  std::printf("half dot %.5f (cpu %.5f)\n", got, want);
  EXPECT(close(got, want, 1e-4), "dot");
  for (void* p : {static_cast<void*>(din), static_cast<void*>(dout), static_cast<void*>(da), static_cast<void*>(db)})
    CHECK(cudaFree(p));
  return finish();
}
