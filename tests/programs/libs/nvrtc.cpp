// NVRTC + driver API: compiles a saxpy kernel from a source string for the current GPU's
// sm_XY (nvrtcGetCUBIN), loads it with cuModuleLoadData in the primary context, launches it with
// cuLaunchKernel and checks the result on the CPU. Host C++ only, no runtime API.
// Build: nvcc nvrtc.cpp -lnvrtc -lcuda   (or g++ -I/usr/local/cuda/include ... -L/usr/local/cuda/lib64)
#include <cuda.h>
#include <nvrtc.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "libcheck.h"

#define NVRTC_CHECK(call) \
  LIBCHECK_CALL(#call, call, nvrtcResult, NVRTC_SUCCESS, nvrtcGetErrorString, libcheck::no_detail)

static const char* kSource = R"(
extern "C" __global__ void saxpy(float a, const float* x, const float* y, float* out, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}
)";

int main() {
  CU_CHECK(cuInit(0));
  CUdevice dev;
  CU_CHECK(cuDeviceGet(&dev, 0));
  int major = 0, minor = 0;
  CU_CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CU_CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  std::string arch = "--gpu-architecture=sm_" + std::to_string(major) + std::to_string(minor);

  nvrtcProgram prog;
  NVRTC_CHECK(nvrtcCreateProgram(&prog, kSource, "saxpy.cu", 0, nullptr, nullptr));
  const char* opts[] = {arch.c_str(), "--std=c++17"};
  nvrtcResult cr = nvrtcCompileProgram(prog, 2, opts);
  size_t log_size = 0;
  NVRTC_CHECK(nvrtcGetProgramLogSize(prog, &log_size));
  if (cr != NVRTC_SUCCESS) {
    std::string log(log_size, '\0');
    NVRTC_CHECK(nvrtcGetProgramLog(prog, &log[0]));
    std::printf("ERROR nvrtcCompileProgram(%s): %s\n%s\n", arch.c_str(), nvrtcGetErrorString(cr), log.c_str());
    return 2;
  }
  size_t cubin_size = 0;
  NVRTC_CHECK(nvrtcGetCUBINSize(prog, &cubin_size));
  std::vector<char> cubin(cubin_size);
  NVRTC_CHECK(nvrtcGetCUBIN(prog, cubin.data()));
  NVRTC_CHECK(nvrtcDestroyProgram(&prog));
  if (cubin_size == 0) {
    std::printf("FAIL nvrtc: empty cubin\n");
    return 1;
  }
  std::printf("nvrtc compile saxpy for the device's sm_XY: ok (cubin non-empty)\n");

  CUcontext ctx;
  CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU_CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CU_CHECK(cuModuleLoadData(&mod, cubin.data()));
  CUfunction fn;
  CU_CHECK(cuModuleGetFunction(&fn, mod, "saxpy"));

  const unsigned n = 10000;
  std::vector<float> x(n), y(n), out(n);
  for (unsigned i = 0; i < n; ++i) {
    x[i] = float(i % 97) * 0.25f;
    y[i] = float(i % 31) - 15.0f;
  }
  CUdeviceptr dx, dy, dout;
  CU_CHECK(cuMemAlloc(&dx, n * sizeof(float)));
  CU_CHECK(cuMemAlloc(&dy, n * sizeof(float)));
  CU_CHECK(cuMemAlloc(&dout, n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CU_CHECK(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
  float a = 2.5f;
  unsigned count = n;
  void* params[] = {&a, &dx, &dy, &dout, &count};
  const unsigned block = 128, grid = (n + block - 1) / block;
  CU_CHECK(cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, nullptr, params, nullptr));
  CU_CHECK(cuCtxSynchronize());
  CU_CHECK(cuMemcpyDtoH(out.data(), dout, n * sizeof(float)));
  for (unsigned i = 0; i < n; ++i) {
    double ref = double(a) * x[i] + y[i];  // exact in float for these inputs
    if (std::fabs(out[i] - ref) > 1e-6 * std::fmax(1.0, std::fabs(ref))) {
      std::printf("FAIL nvrtc saxpy: out[%u] = %.9g, expected %.9g\n", i, out[i], ref);
      return 1;
    }
  }
  std::printf("nvrtc saxpy n=%u via cuLaunchKernel: ok (rel err <= 1e-6)\n", n);

  CU_CHECK(cuMemFree(dx));
  CU_CHECK(cuMemFree(dy));
  CU_CHECK(cuMemFree(dout));
  CU_CHECK(cuModuleUnload(mod));
  CU_CHECK(cuDevicePrimaryCtxRelease(dev));
  std::printf("nvrtc: all ok\n");
  return 0;
}
