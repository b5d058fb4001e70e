// Separate compilation (-rdc=true, device link): kernels here call an extern __device__
// function and read/write an extern __device__ variable defined in rdc_lib.cu, and launch a
// kernel defined there; the host sets the other file's variable with cudaMemcpyToSymbol.
#include <vector>

#include "compat.h"
#include "rdc_lib.h"

__global__ void use_lib(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = lib_transform(in[i]);
    atomicAdd(&lib_calls, 1);
  }
}

int main() {
  const int n = 50000;
  std::vector<float> in(n), out(n);
  for (int i = 0; i < n; ++i) in[i] = rnd(i);
  const float factor = 3.0f;
  CHECK(cudaMemcpyToSymbol(lib_factor, &factor, sizeof factor));
  const int zero = 0;
  CHECK(cudaMemcpyToSymbol(lib_calls, &zero, sizeof zero));
  float *din, *dout;
  CHECK(cudaMalloc(&din, n * sizeof(float)));
  CHECK(cudaMalloc(&dout, n * sizeof(float)));
  CHECK(cudaMemcpy(din, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  use_lib<<<(n + 255) / 256, 256>>>(din, dout, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += !close(out[i], in[i] * 3.0 + 1.0, 1e-6);
  int calls = 0;
  CHECK(cudaMemcpyFromSymbol(&calls, lib_calls, sizeof calls));
  std::printf("cross-file device function: mismatches %d, calls %d\n", bad, calls);
  EXPECT(bad == 0 && calls == n, "use_lib");

  lib_kernel<<<(n + 255) / 256, 256>>>(dout, n);  // defined in the other file
  CHECK(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpyFromSymbol(&calls, lib_calls, sizeof calls));
  int bad2 = 0;
  for (int i = 0; i < n; ++i) bad2 += !close(out[i], (in[i] * 3.0 + 1.0) * 3.0 + 1.0, 1e-6);
  std::printf("kernel from the other file: mismatches %d, calls %d\n", bad2, calls);
  EXPECT(bad2 == 0 && calls == 2 * n, "lib_kernel");
  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  return finish();
}
