// Modules and launches through funnel's driver front (client.driver.launch): a module image
// (argv[1]: a fat binary or a cubin file) loaded with cuModuleLoadData, its function looked up
// and launched with cuLaunchKernel; its __device__ and __managed__ variables; bad images, names and
// handles refused. Prints the device pointer it passed, so that the test can find the launch in
// the sim backend's launch log.
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "driver_check.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::ifstream in(argv[1], std::ios::binary);
  const std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (image.empty()) return 2;
  CHECK(cuInit(0), CUDA_SUCCESS);
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CHECK(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
  CHECK(cuCtxSetCurrent(ctx), CUDA_SUCCESS);

  CUmodule m = nullptr;
  CHECK(cuModuleLoadData(&m, image.data()), CUDA_SUCCESS);
  CUfunction f = nullptr, again = nullptr, none = nullptr;
  CHECK(cuModuleGetFunction(&f, m, "scale"), CUDA_SUCCESS);
  CHECK(cuModuleGetFunction(&again, m, "scale"), CUDA_SUCCESS);
  CHECK(cuModuleGetFunction(&none, m, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  std::printf("module loaded, function found: %s\n", f != nullptr && f == again ? "ok" : "FAIL");

  const int n = 512;
  CUdeviceptr p = 0;
  CHECK(cuMemAlloc(&p, n * sizeof(float)), CUDA_SUCCESS);
  float s = 2.5f;
  int count = n;
  void* params[] = {&p, &s, &count};
  CHECK(cuLaunchKernel(f, 4, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  CHECK(cuLaunchKernel(f, 0, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr), CUDA_ERROR_INVALID_VALUE);
  // The same parameters packed in one buffer at their offsets (pointer 0, float 8, int 12):
  // cuLaunchKernel's `extra`, and cuLaunchKernelEx's.
  unsigned char packed[16] = {};
  std::memcpy(packed, &p, 8);
  std::memcpy(packed + 8, &s, 4);
  std::memcpy(packed + 12, &count, 4);
  size_t packed_size = sizeof packed, short_size = 12;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
                   CU_LAUNCH_PARAM_END};
  void* short_extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &short_size,
                         CU_LAUNCH_PARAM_END};
  CHECK(cuLaunchKernel(f, 5, 1, 1, 16, 1, 1, 0, nullptr, nullptr, extra), CUDA_SUCCESS);
  CUlaunchConfig config{6, 1, 1, 8, 1, 1, 0, nullptr, nullptr, 0};
  CHECK(cuLaunchKernelEx(&config, f, nullptr, extra), CUDA_SUCCESS);
  CHECK(cuLaunchKernel(f, 5, 1, 1, 16, 1, 1, 0, nullptr, params, extra), CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLaunchKernel(f, 5, 1, 1, 16, 1, 1, 0, nullptr, nullptr, short_extra), CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLaunchKernel(reinterpret_cast<CUfunction>(&count), 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr),
        CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuCtxSynchronize(), CUDA_SUCCESS);
  std::printf("launched with pointer 0x%llx\n", static_cast<unsigned long long>(p));

  // The module's global, and the function's attributes.
  CUdeviceptr g = 0;
  size_t gsize = 0;
  float factor = 0;
  CHECK(cuModuleGetGlobal(&g, &gsize, m, "factor"), CUDA_SUCCESS);
  CHECK(cuMemcpyDtoH(&factor, g, sizeof factor), CUDA_SUCCESS);
  CHECK(cuModuleGetGlobal(&g, &gsize, m, "no_such_global"), CUDA_ERROR_NOT_FOUND);
  std::printf("cuModuleGetGlobal: %s\n", gsize == sizeof(float) && factor == 1.5f ? "ok" : "FAIL");
  // A __managed__ variable: its storage is memory the host reads and writes (initial value 7).
  CUdeviceptr mv = 0;
  size_t msize = 0;
  CHECK(cuModuleGetGlobal(&mv, &msize, m, "hits"), CUDA_SUCCESS);
  int* hits = reinterpret_cast<int*>(mv);
  const int initial = *hits;
  *hits = 40;
  int back = 0;
  CHECK(cuMemcpyDtoH(&back, mv, sizeof back), CUDA_SUCCESS);
  unsigned is_managed = 0;
  CHECK(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, mv), CUDA_SUCCESS);
  CUdeviceptr mv_again = 0;
  CHECK(cuModuleGetGlobal(&mv_again, nullptr, m, "hits"), CUDA_SUCCESS);
  std::printf("__managed__ variable: %s\n",
              msize == sizeof(int) && initial == 7 && back == 40 && is_managed == 1 && mv_again == mv ? "ok" : "FAIL");
  int threads = 0, regs = -1;
  CHECK(cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f), CUDA_SUCCESS);
  CHECK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f), CUDA_SUCCESS);
  std::printf("cuFuncGetAttribute: %s\n", threads > 0 && threads <= 1024 && regs >= 0 ? "ok" : "FAIL");
  int per_sm = 0;
  size_t smem = 0;
  CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, 128, 0), CUDA_SUCCESS);
  CHECK(cuOccupancyAvailableDynamicSMemPerBlock(&smem, f, 1, 128), CUDA_SUCCESS);
  CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, 0, 0), CUDA_ERROR_INVALID_VALUE);
  std::printf("occupancy: %s\n", per_sm >= 1 && per_sm <= 32 && smem > 0 ? "ok" : "FAIL");
  // Attributes set, parameter layout, clusters.
  CHECK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024), CUDA_SUCCESS);
  CHECK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, -1), CUDA_ERROR_INVALID_VALUE);
  CHECK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 101), CUDA_ERROR_INVALID_VALUE);
  CHECK(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_SHARED), CUDA_SUCCESS);
  int dyn = 0;
  CHECK(cuFuncGetAttribute(&dyn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f), CUDA_SUCCESS);
  size_t offset = 0, psize = 0;
  CHECK(cuFuncGetParamInfo(f, 2, &offset, &psize), CUDA_SUCCESS);
  CHECK(cuFuncGetParamInfo(f, 3, &offset, &psize), CUDA_ERROR_INVALID_VALUE);
  CUlaunchAttribute cluster{};
  cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = 2, cluster.value.clusterDim.y = 1, cluster.value.clusterDim.z = 1;
  CUlaunchConfig cc{8, 1, 1, 128, 1, 1, 0, nullptr, &cluster, 1};
  int clusters = 0;
  CHECK(cuOccupancyMaxActiveClusters(&clusters, f, &cc), CUDA_SUCCESS);
  std::printf("cuFuncSetAttribute, cuFuncGetParamInfo, cuOccupancyMaxActiveClusters: %s\n",
              dyn == 1024 && offset == 12 && psize == 4 && clusters > 0 ? "ok" : "FAIL");
  CUmoduleLoadingMode mode{};
  size_t stack = 0;
  int least = 1, greatest = 1;
  CHECK(cuModuleGetLoadingMode(&mode), CUDA_SUCCESS);
  CHECK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE), CUDA_SUCCESS);
  CHECK(cuCtxGetStreamPriorityRange(&least, &greatest), CUDA_SUCCESS);
  std::printf("loading mode, stack limit, priorities: %s\n",
              mode == CU_MODULE_LAZY_LOADING && stack > 0 && least == 0 && greatest == -5 ? "ok" : "FAIL");

  // The same image as a library: its kernel, the function for it, a launch of each.
  CUlibrary lib = nullptr;
  CHECK(cuLibraryLoadData(&lib, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_SUCCESS);
  CUkernel k = nullptr;
  CUfunction kf = nullptr;
  CHECK(cuLibraryGetKernel(&k, lib, "scale"), CUDA_SUCCESS);
  CHECK(cuKernelGetFunction(&kf, k), CUDA_SUCCESS);
  CHECK(cuLaunchKernel(kf, 2, 1, 1, 64, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  CHECK(cuLaunchKernel(reinterpret_cast<CUfunction>(k), 3, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  CHECK(cuCtxSynchronize(), CUDA_SUCCESS);
  CHECK(cuLibraryUnload(lib), CUDA_SUCCESS);

  // The module's functions enumerated: through the driver API and through the tools' module
  // table (slot 7 calls back once per function; cuFFT finds its kernels so).
  {
    CUfunction fill = nullptr;
    CHECK(cuModuleGetFunction(&fill, m, "fill"), CUDA_SUCCESS);
    unsigned count = 0;
    CHECK(cuModuleGetFunctionCount(&count, m), CUDA_SUCCESS);
    CUfunction all[4] = {};
    CHECK(cuModuleEnumerateFunctions(all, 4, m), CUDA_SUCCESS);
    CUfunction one[1] = {};
    CHECK(cuModuleEnumerateFunctions(one, 1, m), CUDA_SUCCESS);
    const bool listed = count == 2 && ((all[0] == f && all[1] == fill) || (all[0] == fill && all[1] == f)) &&
                        one[0] == all[0] && all[2] == nullptr;
    void* const* table = export_table("6e163fbeb958444d835ce182aff1991e");
    using Each = uintptr_t (*)(CUcontext, CUmodule, void (*)(void*, CUfunction), void*);
    auto each = reinterpret_cast<Each>(table[7]);
    std::vector<CUfunction> seen;
    const uintptr_t visited = each(ctx, m, [](void* user, CUfunction fn) {
      static_cast<std::vector<CUfunction>*>(user)->push_back(fn);
    }, &seen);
    const bool by_table = visited == 2 && seen.size() == 2 && seen[0] == all[0] && seen[1] == all[1] &&
                          each(ctx, reinterpret_cast<CUmodule>(&seen), [](void*, CUfunction) {}, nullptr) == 0;
    std::printf("functions enumerated: %s; through the tools' module table: %s\n", listed ? "ok" : "FAIL",
                by_table ? "ok" : "FAIL");
  }

  const char junk[] = "\x01\x02\x03 not a module";
  CUmodule bad = nullptr;
  CHECK(cuModuleLoadData(&bad, junk), CUDA_ERROR_INVALID_IMAGE);
  CHECK(cuModuleUnload(m), CUDA_SUCCESS);
  CHECK(cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuLaunchKernel(f, 4, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr), CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuMemFree(p), CUDA_SUCCESS);
  std::printf("%s\n", failures == 0 ? "done" : "FAILED");
  return failures == 0 ? 0 : 1;
}
