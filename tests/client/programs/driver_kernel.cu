// The module client.driver.launch loads through the driver API (as a fat binary and as a cubin).
extern "C" __device__ float factor = 1.5f;

extern "C" __global__ void scale(float* p, float s, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= s * factor;
}

// A second kernel, for the enumeration of a module's functions.
extern "C" __global__ void fill(float* p, float v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}
