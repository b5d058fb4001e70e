// The module client.driver.launch loads through the driver API (as a fat binary and as a cubin).
extern "C" __device__ float factor = 1.5f;

extern "C" __global__ void scale(float* p, float s, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= s * factor;
}

// A __managed__ variable (cuModuleGetGlobal gives funnel's managed memory).
extern "C" __managed__ int hits = 7;

// A second kernel, for the enumeration of a module's functions.
extern "C" __global__ void fill(float* p, float v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
  if (i == 0) hits += 1;
}
