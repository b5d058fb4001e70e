// cuRAND host API: XORWOW (on a non-default stream) and PHILOX4_32_10 (default stream) device
// generators with fixed seeds: the first 1024 uniforms must equal a host generator's
// (curandCreateGeneratorHost, same type/seed/offset/ordering) bit for bit; normal statistics;
// a Monte Carlo pi from 2^20 uniform pairs counted on the GPU and checked against a CPU count.
// Build: nvcc -cudart shared curand.cu -lcurand
#include <cuda_runtime.h>
#include <curand.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "libcheck.h"

static const char* curand_name(curandStatus_t s) {
  switch (s) {
    case CURAND_STATUS_VERSION_MISMATCH: return "CURAND_STATUS_VERSION_MISMATCH";
    case CURAND_STATUS_NOT_INITIALIZED: return "CURAND_STATUS_NOT_INITIALIZED";
    case CURAND_STATUS_ALLOCATION_FAILED: return "CURAND_STATUS_ALLOCATION_FAILED";
    case CURAND_STATUS_TYPE_ERROR: return "CURAND_STATUS_TYPE_ERROR";
    case CURAND_STATUS_OUT_OF_RANGE: return "CURAND_STATUS_OUT_OF_RANGE";
    case CURAND_STATUS_LENGTH_NOT_MULTIPLE: return "CURAND_STATUS_LENGTH_NOT_MULTIPLE";
    case CURAND_STATUS_LAUNCH_FAILURE: return "CURAND_STATUS_LAUNCH_FAILURE";
    case CURAND_STATUS_PREEXISTING_FAILURE: return "CURAND_STATUS_PREEXISTING_FAILURE";
    case CURAND_STATUS_INITIALIZATION_FAILED: return "CURAND_STATUS_INITIALIZATION_FAILED";
    case CURAND_STATUS_ARCH_MISMATCH: return "CURAND_STATUS_ARCH_MISMATCH";
    case CURAND_STATUS_INTERNAL_ERROR: return "CURAND_STATUS_INTERNAL_ERROR";
    default: return "CURAND_STATUS_(other)";
  }
}
#define CURAND_CHECK(call) \
  LIBCHECK_CALL(#call, call, curandStatus_t, CURAND_STATUS_SUCCESS, curand_name, int)

// Counts pairs (u[2i], u[2i+1]) inside the unit circle; double products of floats are exact.
__global__ void count_inside(const float* u, int pairs, unsigned long long* count) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int in = 0;
  if (i < pairs) {
    double x = u[2 * i], y = u[2 * i + 1];
    in = (x * x + y * y <= 1.0) ? 1 : 0;
  }
  int block_count = __syncthreads_count(in);
  if (threadIdx.x == 0) atomicAdd(count, (unsigned long long)block_count);
}

static void configure(curandGenerator_t g, unsigned long long seed) {
  CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(g, seed));
  CURAND_CHECK(curandSetGeneratorOffset(g, 0));
  CURAND_CHECK(curandSetGeneratorOrdering(g, CURAND_ORDERING_PSEUDO_DEFAULT));
}

static void run(const char* name, curandRngType_t type, unsigned long long seed, cudaStream_t stream) {
  curandGenerator_t g, host;
  CURAND_CHECK(curandCreateGenerator(&g, type));
  configure(g, seed);
  CURAND_CHECK(curandSetStream(g, stream));

  // 1. First 1024 uniforms: device vs host generator, bit for bit.
  const int n0 = 1024;
  float* d = nullptr;
  const int pairs = 1 << 20, nu = 2 * pairs;
  CUDA_CHECK(cudaMalloc(&d, nu * sizeof(float)));
  CURAND_CHECK(curandGenerateUniform(g, d, n0));
  std::vector<float> dev(n0), ref(n0);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaMemcpy(dev.data(), d, n0 * sizeof(float), cudaMemcpyDeviceToHost));
  CURAND_CHECK(curandCreateGeneratorHost(&host, type));
  configure(host, seed);
  CURAND_CHECK(curandGenerateUniform(host, ref.data(), n0));
  CURAND_CHECK(curandDestroyGenerator(host));
  if (std::memcmp(dev.data(), ref.data(), n0 * sizeof(float)) != 0) {
    for (int i = 0; i < n0; ++i)
      if (dev[i] != ref[i])
        libcheck::fail("FAIL curand %s: uniform[%d] device %.9g host %.9g\n", name, i, dev[i], ref[i]);
  }
  std::printf("curand %s uniform[0..3]: %.6f %.6f %.6f %.6f\n", name, dev[0], dev[1], dev[2], dev[3]);
  std::printf("curand %s uniform x1024: identical to the host generator\n", name);

  // 2. Normal(0, 1), 2^20 values: sample mean and standard deviation.
  const int nn = 1 << 20;
  CURAND_CHECK(curandGenerateNormal(g, d, nn, 0.0f, 1.0f));
  std::vector<float> h(nu);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaMemcpy(h.data(), d, nn * sizeof(float), cudaMemcpyDeviceToHost));
  double s = 0, s2 = 0;
  for (int i = 0; i < nn; ++i) { s += h[i]; s2 += double(h[i]) * h[i]; }
  double mean = s / nn, sd = std::sqrt(s2 / nn - mean * mean);
  if (!(std::fabs(mean) < 0.01 && std::fabs(sd - 1.0) < 0.01))
    libcheck::fail("FAIL curand %s normal: mean %.4f sd %.4f\n", name, mean, sd);
  std::printf("curand %s normal x2^20: ok (|mean| < 0.01, |sd-1| < 0.01)\n", name);

  // 3. Monte Carlo pi from 2^20 uniform pairs; GPU count must equal the CPU count.
  CURAND_CHECK(curandGenerateUniform(g, d, nu));
  unsigned long long* dCount = nullptr;
  CUDA_CHECK(cudaMalloc(&dCount, sizeof(unsigned long long)));
  CUDA_CHECK(cudaMemsetAsync(dCount, 0, sizeof(unsigned long long), stream));
  count_inside<<<pairs / 256, 256, 0, stream>>>(d, pairs, dCount);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamSynchronize(stream));
  unsigned long long gpu_count = 0, cpu_count = 0;
  CUDA_CHECK(cudaMemcpy(&gpu_count, dCount, sizeof gpu_count, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(h.data(), d, nu * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < nu; ++i)
    if (!(h[i] > 0.0f && h[i] <= 1.0f))
      libcheck::fail("FAIL curand %s: uniform value outside (0, 1]\n", name);
  for (int i = 0; i < pairs; ++i) {
    double x = h[2 * i], y = h[2 * i + 1];
    cpu_count += (x * x + y * y <= 1.0) ? 1 : 0;
  }
  if (gpu_count != cpu_count)
    libcheck::fail("FAIL curand %s pi: gpu count %llu cpu count %llu\n", name, gpu_count, cpu_count);
  double pi = 4.0 * double(gpu_count) / pairs;
  if (!(std::fabs(pi - 3.14159) < 0.01))
    libcheck::fail("FAIL curand %s pi: estimate %.5f\n", name, pi);
  std::printf("curand %s pi from 2^20 pairs: %.2f (|pi-3.14159| < 0.01, gpu count == cpu count)\n",
              name, pi);
  CUDA_CHECK(cudaFree(dCount));
  CUDA_CHECK(cudaFree(d));
  CURAND_CHECK(curandDestroyGenerator(g));
}

int main() {
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  run("xorwow", CURAND_RNG_PSEUDO_XORWOW, 1234ULL, stream);
  run("philox4_32_10 (default stream)", CURAND_RNG_PSEUDO_PHILOX4_32_10, 5678ULL, 0);
  CUDA_CHECK(cudaStreamDestroy(stream));
  std::printf("curand: all ok\n");
  return 0;
}
