// Driver API only (no runtime): device queries, a context from cuCtxCreate (CUDA 13 form, with
// CUctxCreateParams*) and the primary context; a vector-add module JIT-compiled from embedded PTX
// (.target sm_52), function attributes, occupancy, pinned memory, async copies on a stream, events,
// cuLaunchKernel with kernelParams, pointer attributes, cuMemGetInfo, stream memory operations
// (a launch held by cuStreamWaitValue32 until another stream writes the flag, a 64-bit wait);
// results checked on the CPU.
// Build: nvcc driver_api.cpp -L/usr/local/cuda/lib64/stubs -lcuda
#include <cuda.h>
#include <cudaProfiler.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "libcheck.h"

static void expect(bool ok, const char* what) { libcheck::expect("driver", ok, what); }

// c[i] = a[i] + b[i] for i < n. Validated with: ptxas -arch=sm_90 (and sm_75).
static const char* kPtx = R"(
.version 7.0
.target sm_52
.address_size 64

.visible .entry vadd(
    .param .u64 vadd_a,
    .param .u64 vadd_b,
    .param .u64 vadd_c,
    .param .u32 vadd_n
)
{
    .reg .pred  %p<2>;
    .reg .f32   %f<4>;
    .reg .b32   %r<6>;
    .reg .b64   %rd<11>;

    ld.param.u64    %rd1, [vadd_a];
    ld.param.u64    %rd2, [vadd_b];
    ld.param.u64    %rd3, [vadd_c];
    ld.param.u32    %r2, [vadd_n];
    mov.u32         %r3, %ctaid.x;
    mov.u32         %r4, %ntid.x;
    mov.u32         %r5, %tid.x;
    mad.lo.s32      %r1, %r3, %r4, %r5;
    setp.ge.u32     %p1, %r1, %r2;
    @%p1 bra        DONE;
    cvta.to.global.u64  %rd4, %rd1;
    cvta.to.global.u64  %rd5, %rd2;
    cvta.to.global.u64  %rd6, %rd3;
    mul.wide.u32    %rd7, %r1, 4;
    add.s64         %rd8, %rd4, %rd7;
    add.s64         %rd9, %rd5, %rd7;
    add.s64         %rd10, %rd6, %rd7;
    ld.global.f32   %f1, [%rd8];
    ld.global.f32   %f2, [%rd9];
    add.f32         %f3, %f1, %f2;
    st.global.f32   [%rd10], %f3;
DONE:
    ret;
}
)";

static const unsigned N = 5000, BLOCK = 256;

static bool check_vadd(const float* a, const float* b, const float* c) {
  for (unsigned i = 0; i < N; ++i)
    if (c[i] != a[i] + b[i]) {
      std::printf("FAIL driver vadd: c[%u] = %g, expected %g\n", i, c[i], a[i] + b[i]);
      return false;
    }
  return true;
}

int main() {
  CU_CHECK(cuInit(0));
  int count = 0;
  CU_CHECK(cuDeviceGetCount(&count));
  expect(count >= 1, "cuDeviceGetCount >= 1");
  CUdevice dev;
  CU_CHECK(cuDeviceGet(&dev, 0));
  char name[256] = {};
  CU_CHECK(cuDeviceGetName(name, sizeof name, dev));
  size_t total_mem = 0;
  CU_CHECK(cuDeviceTotalMem(&total_mem, dev));
  expect(name[0] != '\0' && total_mem > 0, "cuDeviceGetName non-empty, cuDeviceTotalMem > 0");

  // 1. A context of our own (CUDA 13: cuCtxCreate(ctx, CUctxCreateParams*, flags, dev)).
  CUcontext ctx, cur;
  CU_CHECK(cuCtxCreate(&ctx, nullptr, 0, dev));
  CU_CHECK(cuCtxGetCurrent(&cur));
  expect(cur == ctx, "cuCtxCreate makes the new context current");
  unsigned api_version = 0;
  CU_CHECK(cuCtxGetApiVersion(ctx, &api_version));
  std::printf("cuCtxGetApiVersion: %u\n", api_version);  // compared with the native run's

  char jit_log[4096] = {};
  CUjit_option jopt[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* jval[] = {jit_log, (void*)(size_t)sizeof jit_log};
  CUmodule mod;
  CUresult jr = cuModuleLoadDataEx(&mod, kPtx, 2, jopt, jval);
  if (jr != CUDA_SUCCESS) std::printf("JIT log: %s\n", jit_log);
  CU_CHECK(jr);
  CUfunction fn;
  CU_CHECK(cuModuleGetFunction(&fn, mod, "vadd"));
  int max_threads = 0, regs = -1;
  CU_CHECK(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn));
  CU_CHECK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn));
  expect(max_threads >= int(BLOCK) && regs >= 0, "ptx jit + cuFuncGetAttribute (max threads >= 256)");
  int blocks_per_sm = 0;
  CU_CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, fn, BLOCK, 0));
  expect(blocks_per_sm >= 1, "cuOccupancyMaxActiveBlocksPerMultiprocessor >= 1");

  const size_t bytes = N * sizeof(float);
  CUstream stream;
  CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr da, db, dc;
  CU_CHECK(cuMemAlloc(&da, bytes));
  CU_CHECK(cuMemAlloc(&db, bytes));
  CU_CHECK(cuMemAlloc(&dc, bytes));
  float *ha, *hb, *hc;
  CU_CHECK(cuMemAllocHost((void**)&ha, bytes));
  CU_CHECK(cuMemAllocHost((void**)&hb, bytes));
  CU_CHECK(cuMemAllocHost((void**)&hc, bytes));
  for (unsigned i = 0; i < N; ++i) {
    ha[i] = float(i) * 0.5f;
    hb[i] = float(N - i);
  }
  CU_CHECK(cuMemsetD32(dc, 0xDEADBEEFu, N));
  CU_CHECK(cuMemcpyDtoH(hc, dc, bytes));
  bool set_ok = true;
  for (unsigned i = 0; i < N; ++i) set_ok = set_ok && reinterpret_cast<unsigned*>(hc)[i] == 0xDEADBEEFu;
  expect(set_ok, "cuMemsetD32 + cuMemcpyDtoH");

  CUevent e0, e1;
  CU_CHECK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CU_CHECK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
  CU_CHECK(cuMemcpyHtoDAsync(da, ha, bytes, stream));
  CU_CHECK(cuMemcpyHtoDAsync(db, hb, bytes, stream));
  CU_CHECK(cuEventRecord(e0, stream));
  unsigned n = N;
  void* params[] = {&da, &db, &dc, &n};
  CU_CHECK(cuLaunchKernel(fn, (N + BLOCK - 1) / BLOCK, 1, 1, BLOCK, 1, 1, 0, stream, params, nullptr));
  CU_CHECK(cuEventRecord(e1, stream));
  CU_CHECK(cuStreamSynchronize(stream));
  CU_CHECK(cuEventSynchronize(e1));
  float ms = -1.0f;
  CU_CHECK(cuEventElapsedTime(&ms, e0, e1));  // not printed: timings differ between runs
  expect(ms >= 0.0f, "events around the launch (elapsed time >= 0)");
  CU_CHECK(cuMemcpyDtoH(hc, dc, bytes));
  expect(check_vadd(ha, hb, hc), "vadd n=5000 on a stream via cuLaunchKernel");

  unsigned mem_type = 0;
  CU_CHECK(cuPointerGetAttribute(&mem_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, da));
  expect(mem_type == CU_MEMORYTYPE_DEVICE, "cuPointerGetAttribute(cuMemAlloc) == CU_MEMORYTYPE_DEVICE");
  CU_CHECK(cuPointerGetAttribute(&mem_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)ha));
  expect(mem_type == CU_MEMORYTYPE_HOST, "cuPointerGetAttribute(cuMemAllocHost) == CU_MEMORYTYPE_HOST");
  size_t free_b = 0, total_b = 0;
  CU_CHECK(cuMemGetInfo(&free_b, &total_b));  // values not printed
  expect(total_b > 0 && free_b <= total_b, "cuMemGetInfo (free <= total)");

  CU_CHECK(cuEventDestroy(e0));
  CU_CHECK(cuEventDestroy(e1));
  CU_CHECK(cuStreamDestroy(stream));
  CU_CHECK(cuMemFree(da));
  CU_CHECK(cuMemFree(db));
  CU_CHECK(cuMemFree(dc));
  CU_CHECK(cuModuleUnload(mod));
  std::vector<float> a(ha, ha + N), b(hb, hb + N), c(N);  // pageable copies for part 2
  CU_CHECK(cuMemFreeHost(ha));
  CU_CHECK(cuMemFreeHost(hb));
  CU_CHECK(cuMemFreeHost(hc));
  CU_CHECK(cuCtxDestroy(ctx));

  // 2. The primary context: load the module again (cuModuleLoadData), launch on the NULL stream.
  CUcontext primary;
  CU_CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
  CU_CHECK(cuCtxSetCurrent(primary));
  CU_CHECK(cuModuleLoadData(&mod, kPtx));
  CU_CHECK(cuModuleGetFunction(&fn, mod, "vadd"));
  CU_CHECK(cuMemAlloc(&da, bytes));
  CU_CHECK(cuMemAlloc(&db, bytes));
  CU_CHECK(cuMemAlloc(&dc, bytes));
  CU_CHECK(cuMemcpyHtoD(da, b.data(), bytes));  // swapped operands this time
  CU_CHECK(cuMemcpyHtoD(db, a.data(), bytes));
  CU_CHECK(cuMemsetD32(dc, 0, N));
  CU_CHECK(cuLaunchKernel(fn, (N + BLOCK - 1) / BLOCK, 1, 1, BLOCK, 1, 1, 0, nullptr, params, nullptr));
  CU_CHECK(cuCtxSynchronize());
  CU_CHECK(cuMemcpyDtoH(c.data(), dc, bytes));
  expect(check_vadd(b.data(), a.data(), c.data()), "vadd n=5000 in the primary context (default stream)");
  // 3. Stream memory operations: stream x waits for a flag in device memory, then launches and
  // writes a 64-bit word; stream y writes the flag through a batch.  Then x waits (64-bit, GEQ,
  // through a batch) for a word that y writes with cuStreamWriteValue64.
  CUstream x, y;
  CU_CHECK(cuStreamCreate(&x, CU_STREAM_NON_BLOCKING));
  CU_CHECK(cuStreamCreate(&y, CU_STREAM_NON_BLOCKING));
  CUdeviceptr flags;
  CU_CHECK(cuMemAlloc(&flags, 32));
  CU_CHECK(cuMemsetD32(flags, 0, 8));
  CU_CHECK(cuMemsetD32(dc, 0, N));
  CU_CHECK(cuCtxSynchronize());  // the memsets are asynchronous to the host; x and y do not wait for them
  CU_CHECK(cuStreamWaitValue32(x, flags, 1, CU_STREAM_WAIT_VALUE_EQ));
  CU_CHECK(cuLaunchKernel(fn, (N + BLOCK - 1) / BLOCK, 1, 1, BLOCK, 1, 1, 0, x, params, nullptr));
  CU_CHECK(cuStreamWriteValue64(x, flags + 8, 0x1122334455667788ull, 0));
  const CUresult held = cuStreamQuery(x);
  CUstreamBatchMemOpParams op = {};
  op.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  op.writeValue.address = flags;
  op.writeValue.value = 1;
  CU_CHECK(cuStreamBatchMemOp(y, 1, &op, 0));
  CU_CHECK(cuStreamSynchronize(x));
  CU_CHECK(cuStreamSynchronize(y));
  unsigned long long words[2] = {};
  CU_CHECK(cuMemcpyDtoH(words, flags, sizeof words));
  CU_CHECK(cuMemcpyDtoH(c.data(), dc, bytes));
  expect(held == CUDA_ERROR_NOT_READY && (words[0] & 0xffffffffu) == 1 && words[1] == 0x1122334455667788ull &&
             check_vadd(b.data(), a.data(), c.data()),
         "cuStreamWaitValue32 held a launch and a cuStreamWriteValue64 until cuStreamBatchMemOp wrote the flag");
  op = {};
  op.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
  op.waitValue.address = flags + 16;
  op.waitValue.value64 = 0x100000000ull;
  op.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
  CU_CHECK(cuStreamBatchMemOp(x, 1, &op, 0));
  CU_CHECK(cuMemsetD32Async(dc, 0, N, x));
  const CUresult held64 = cuStreamQuery(x);
  CU_CHECK(cuStreamWriteValue64(y, flags + 16, 0x100000005ull, 0));
  CU_CHECK(cuStreamSynchronize(x));
  CU_CHECK(cuMemcpyDtoH(c.data(), dc, bytes));
  bool cleared = true;
  for (unsigned i = 0; i < N; ++i) cleared = cleared && c[i] == 0.0f;
  expect(held64 == CUDA_ERROR_NOT_READY && cleared,
         "a 64-bit wait (cuStreamBatchMemOp, GEQ) held a memset until cuStreamWriteValue64 met it");
  CU_CHECK(cuStreamDestroy(x));
  CU_CHECK(cuStreamDestroy(y));
  CU_CHECK(cuMemFree(flags));
  CU_CHECK(cuMemFree(da));
  CU_CHECK(cuMemFree(db));
  CU_CHECK(cuMemFree(dc));
  CU_CHECK(cuModuleUnload(mod));
  // 4. A profiled region and the persisting L2 set-aside (the context's, kept by the server).
  int max_persisting = 0;
  CU_CHECK(cuDeviceGetAttribute(&max_persisting, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, dev));
  size_t l2 = 0;
  CU_CHECK(cuProfilerStart());
  CU_CHECK(cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, static_cast<size_t>(max_persisting) / 2));
  CU_CHECK(cuCtxGetLimit(&l2, CU_LIMIT_PERSISTING_L2_CACHE_SIZE));
  CU_CHECK(cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0));
  CU_CHECK(cuProfilerStop());
  expect(l2 > 0 && l2 <= static_cast<size_t>(max_persisting),
         "cuProfilerStart/Stop around cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE)");
  // 5. A device by its PCI id (with and without the domain); the cache preference read back.
  char bus[32] = {};
  CU_CHECK(cuDeviceGetPCIBusId(bus, sizeof bus, dev));
  CUdevice by_id = -1, by_short = -1;
  CU_CHECK(cuDeviceGetByPCIBusId(&by_id, bus));
  CU_CHECK(cuDeviceGetByPCIBusId(&by_short, bus + 5));
  CU_CHECK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED));
  CUfunc_cache cache = CU_FUNC_CACHE_PREFER_NONE;
  CU_CHECK(cuCtxGetCacheConfig(&cache));
  CU_CHECK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_NONE));
  expect(by_id == dev && by_short == dev && cache == CU_FUNC_CACHE_PREFER_SHARED,
         "cuDeviceGetByPCIBusId (with and without the domain), cuCtxSet/GetCacheConfig");
  // A tensor map (what Triton and XLA encode for Hopper's bulk tensor copies): through funnel the
  // server's driver encodes it; printed for an address of no allocation (the encoding takes the
  // address as it is, and the same one natively), so the bytes are compared with the native
  // run's. And one of real memory, encoded twice (the second from funnel's client): the same.
  {
    const cuuint64_t dims[2] = {1024, 64};
    const cuuint64_t strides[1] = {1024 * 4};
    const cuuint32_t box[2] = {64, 16};
    const cuuint32_t elem[2] = {1, 1};
    CUtensorMap fixed{};
    CU_CHECK(cuTensorMapEncodeTiled(&fixed, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, reinterpret_cast<void*>(0x7f0000000000ull),
                                    dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    std::printf("tensor map:");
    const auto* bytes = reinterpret_cast<const unsigned char*>(&fixed);
    for (size_t i = 0; i < sizeof fixed; ++i) std::printf("%s%02x", i % 32 == 0 ? "\n  " : "", bytes[i]);
    std::printf("\n");
    CUdeviceptr g = 0;
    CU_CHECK(cuMemAlloc(&g, 1024 * 64 * 4));
    CUtensorMap m1{}, m2{};
    for (CUtensorMap* m : {&m1, &m2})
      CU_CHECK(cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, reinterpret_cast<void*>(g), dims, strides,
                                      box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    expect(std::memcmp(&m1, &m2, sizeof m1) == 0, "cuTensorMapEncodeTiled of device memory, twice");
    CU_CHECK(cuMemFree(g));
  }
  // Through funnel only: a wait left pending at exit on a word nothing writes, which the server
  // must meet when the client goes (tests/gpu/libs.sh then checks that the server shut down).
  if (dlsym(RTLD_DEFAULT, "funnel_client_driver") != nullptr) {
    CUstream z;
    CU_CHECK(cuStreamCreate(&z, CU_STREAM_NON_BLOCKING));
    CU_CHECK(cuMemAlloc(&flags, 64));
    CU_CHECK(cuMemsetD32(flags, 0, 16));
    CU_CHECK(cuCtxSynchronize());
    CU_CHECK(cuStreamWaitValue32(z, flags, 1, CU_STREAM_WAIT_VALUE_EQ));
    CU_CHECK(cuMemsetD8Async(flags + 32, 1, 4, z));
    if (cuStreamQuery(z) != CUDA_ERROR_NOT_READY) {  // silent when right: the output stays native's
      std::printf("FAIL driver a wait left pending at exit did not hold its stream\n");
      return 1;
    }
  }
  CU_CHECK(cuCtxSetCurrent(nullptr));
  CU_CHECK(cuDevicePrimaryCtxRelease(dev));
  std::printf("driver: all ok\n");
  return 0;
}
