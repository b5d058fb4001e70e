// The virtual memory calls as PyTorch's expandable segments use them (runtime + driver API): a
// large reserved range, physical chunks created and mapped end to end as the segment grows, access
// set over the mapped part, runtime memsets, copies and a kernel over several chunks at once, the
// segment shrunk from its end (unmap, release) and the range freed; results checked on the CPU.
// Build: nvcc -cudart shared vmm.cu -lcuda   (at build time: -L/usr/local/cuda/lib64/stubs)
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "libcheck.h"

__global__ void add_index(unsigned* p, size_t n) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] += static_cast<unsigned>(i);
}

static void expect(bool ok, const char* what) { libcheck::expect("vmm", ok, what); }

int main() {
  CUDA_CHECK(cudaFree(nullptr));  // the runtime's context is current for the driver calls
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t g = 0;
  CU_CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  expect(g > 0 && g % 4096 == 0, "cuMemGetAllocationGranularity (a multiple of the page)");
  const size_t chunks = 8;
  CUdeviceptr base = 0;
  CU_CHECK(cuMemAddressReserve(&base, chunks * g, 0, 0, 0));
  std::vector<CUmemGenericAllocationHandle> handles;
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  // Grows the segment by one chunk, as an expandable segment does.
  auto grow = [&] {
    CUmemGenericAllocationHandle h = 0;
    CU_CHECK(cuMemCreate(&h, g, &prop, 0));
    CU_CHECK(cuMemMap(base + handles.size() * g, g, 0, h, 0));
    CU_CHECK(cuMemSetAccess(base + handles.size() * g, g, &access, 1));
    handles.push_back(h);
  };
  for (int i = 0; i < 3; ++i) grow();

  // Runtime work over the three chunks at once.
  auto* p = reinterpret_cast<unsigned*>(base);
  const size_t n = 3 * g / sizeof(unsigned);
  CUDA_CHECK(cudaMemset(p, 0, 3 * g));
  add_index<<<static_cast<unsigned>((n + 255) / 256), 256>>>(p, n);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned> back(n);
  CUDA_CHECK(cudaMemcpy(back.data(), p, 3 * g, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (size_t i = 0; i < n; ++i) ok = ok && back[i] == static_cast<unsigned>(i);
  expect(ok, "a kernel and a memset over three mapped chunks (3 x granularity)");

  // Grown by one chunk: a copy across the old end and the new chunk.
  grow();
  std::vector<unsigned> pattern(2048), got(2048);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<unsigned>(i * 2654435761u);
  unsigned* across = p + 3 * g / sizeof(unsigned) - pattern.size() / 2;
  CUDA_CHECK(cudaMemcpy(across, pattern.data(), pattern.size() * sizeof(unsigned), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(got.data(), across, got.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
  expect(got == pattern, "the segment grown by a chunk: a copy across the old end");
  unsigned long long flags = 0;
  CU_CHECK(cuMemGetAccess(&flags, &prop.location, base + 3 * g));
  expect(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "cuMemGetAccess of the new chunk (read-write)");

  // Shrunk from its end: the first chunks keep their data.
  for (int i = 0; i < 2; ++i) {
    CU_CHECK(cuMemUnmap(base + (handles.size() - 1) * g, g));
    CU_CHECK(cuMemRelease(handles.back()));
    handles.pop_back();
  }
  std::vector<unsigned> first(g / sizeof(unsigned));
  CUDA_CHECK(cudaMemcpy(first.data(), p + g / sizeof(unsigned), g, cudaMemcpyDeviceToHost));
  ok = true;
  for (size_t i = 0; i < first.size(); ++i) ok = ok && first[i] == static_cast<unsigned>(i + g / sizeof(unsigned));
  expect(ok, "shrunk by two chunks: the second chunk kept its data");

  for (size_t i = 0; i < handles.size(); ++i) {
    CU_CHECK(cuMemUnmap(base + i * g, g));
    CU_CHECK(cuMemRelease(handles[i]));
  }
  CU_CHECK(cuMemAddressFree(base, chunks * g));
  std::printf("vmm: all ok\n");
  return 0;
}
