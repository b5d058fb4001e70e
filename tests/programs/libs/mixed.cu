// Runtime and driver API mixed (shared cudart + libcuda): cuMemsetD32/cuMemcpyDtoH on a cudaMalloc
// buffer, cuCtxGetCurrent after runtime calls is the primary context, cuPointerGetAttribute on a
// cudaMalloc pointer, a runtime launch on a cuStreamCreate stream, and cuMemsetD32 called through
// cudaGetDriverEntryPointByVersion and the deprecated cudaGetDriverEntryPoint.
// Build: nvcc -cudart shared mixed.cu -lcuda   (at build time: -L/usr/local/cuda/lib64/stubs)
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "libcheck.h"

typedef CUresult (*MemsetD32Fn)(CUdeviceptr, unsigned int, size_t);

__global__ void add_index(unsigned* p, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += i;
}

static void expect(bool ok, const char* what) { libcheck::expect("mixed", ok, what); }

static bool all_equal(const std::vector<unsigned>& v, unsigned value) {
  for (unsigned x : v)
    if (x != value) return false;
  return true;
}

int main() {
  const unsigned n = 4096;
  const size_t bytes = n * sizeof(unsigned);
  unsigned* buf = nullptr;
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaMalloc(&buf, bytes));  // the runtime creates/uses the primary context
  CUdeviceptr dbuf = reinterpret_cast<CUdeviceptr>(buf);
  std::vector<unsigned> h(n);

  // The driver sees the runtime's context.
  CU_CHECK(cuInit(0));
  CUcontext cur = nullptr, primary = nullptr;
  CUdevice dev;
  CU_CHECK(cuCtxGetCurrent(&cur));
  CU_CHECK(cuDeviceGet(&dev, 0));
  CU_CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
  expect(cur != nullptr && cur == primary, "cuCtxGetCurrent after cudaMalloc is the primary context");
  CU_CHECK(cuDevicePrimaryCtxRelease(dev));

  // Driver memset/copy on a runtime allocation.
  CU_CHECK(cuMemsetD32(dbuf, 0x01020304u, n));
  CU_CHECK(cuMemcpyDtoH(h.data(), dbuf, bytes));
  expect(all_equal(h, 0x01020304u), "cuMemsetD32 + cuMemcpyDtoH on a cudaMalloc buffer");

  unsigned mem_type = 0;
  CU_CHECK(cuPointerGetAttribute(&mem_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dbuf));
  expect(mem_type == CU_MEMORYTYPE_DEVICE, "cuPointerGetAttribute(cudaMalloc ptr) == CU_MEMORYTYPE_DEVICE");
  CUcontext owner = nullptr;
  CU_CHECK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, dbuf));
  expect(owner == primary, "cuPointerGetAttribute(CONTEXT) is the primary context");

  // Runtime launch on a driver-created stream.
  CUstream cs;
  CU_CHECK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
  cudaStream_t rs = reinterpret_cast<cudaStream_t>(cs);
  CUDA_CHECK(cudaMemsetAsync(buf, 0, bytes, rs));
  add_index<<<(n + 255) / 256, 256, 0, rs>>>(buf, n);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamSynchronize(rs));
  CU_CHECK(cuStreamSynchronize(cs));
  CUDA_CHECK(cudaMemcpy(h.data(), buf, bytes, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (unsigned i = 0; i < n; ++i) ok = ok && h[i] == i;
  expect(ok, "runtime kernel launch on a cuStreamCreate stream");
  CU_CHECK(cuStreamDestroy(cs));

  // cuMemsetD32 through the runtime's driver entry point lookups.
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult qr = cudaDriverEntryPointSymbolNotFound;
  CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuMemsetD32", &fn, CUDART_VERSION, cudaEnableDefault, &qr));
  expect(qr == cudaDriverEntryPointSuccess && fn != nullptr, "cudaGetDriverEntryPointByVersion(cuMemsetD32)");
  CU_CHECK(reinterpret_cast<MemsetD32Fn>(fn)(dbuf, 0xCAFEF00Du, n));
  CUDA_CHECK(cudaMemcpy(h.data(), buf, bytes, cudaMemcpyDeviceToHost));
  expect(all_equal(h, 0xCAFEF00Du), "cuMemsetD32 via the ByVersion entry point");

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  fn = nullptr;
  qr = cudaDriverEntryPointSymbolNotFound;
  CUDA_CHECK(cudaGetDriverEntryPoint("cuMemsetD32", &fn, cudaEnableDefault, &qr));
#pragma GCC diagnostic pop
  expect(qr == cudaDriverEntryPointSuccess && fn != nullptr, "cudaGetDriverEntryPoint(cuMemsetD32) (deprecated)");
  CU_CHECK(reinterpret_cast<MemsetD32Fn>(fn)(dbuf, 0x0BADF00Du, n));
  CUDA_CHECK(cudaMemcpy(h.data(), buf, bytes, cudaMemcpyDeviceToHost));
  expect(all_equal(h, 0x0BADF00Du), "cuMemsetD32 via the deprecated entry point");

  CUDA_CHECK(cudaFree(buf));
  std::printf("mixed: all ok\n");
  return 0;
}
