// blocked_stream: which driver calls wait for a stream of the same context that is held by
// cuStreamWaitValue32?  funnel's server runs every client's work in one context per GPU, so a
// stream memory wait that one client enqueues must not hold up a driver call the server makes for
// another (issue 29: serving cuStreamWaitValue*).  For each call: a non-blocking stream is made
// to wait on a word of mapped pinned host memory, a host thread writes the word 400 ms later, and
// the call is timed; a call that took about 400 ms waited for the held stream ("BLOCKS").  Also
// checks that a wait on a word of device memory is released by a write on another stream
// (cuStreamWriteValue32 and cuMemsetD32Async), as the server releases a gone client's waits.
//   nvcc -O2 -std=c++17 -o blocked_stream bench/probes/blocked_stream.cu -lcuda -lpthread
//   ./blocked_stream           one line per call: name, ms, blocks|free
#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#define CK(x)                                                                    \
  do {                                                                           \
    CUresult r_ = (x);                                                           \
    if (r_ != CUDA_SUCCESS) {                                                    \
      const char* n_ = nullptr;                                                  \
      cuGetErrorName(r_, &n_);                                                   \
      std::printf("FAIL %s: %s (line %d)\n", #x, n_ ? n_ : "?", __LINE__);       \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

static const char* kPtx = R"(
.version 7.0
.target sm_52
.address_size 64
.visible .entry touch(.param .u64 p) {
  .reg .b64 %rd<2>;
  .reg .b32 %r<2>;
  ld.param.u64 %rd1, [p];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, 7;
  st.global.u32 [%rd1], %r1;
  ret;
}
)";

constexpr int kHoldMs = 400;

int main() {
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUstream held, other;
  CK(cuStreamCreate(&held, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  volatile unsigned* word = nullptr;
  CK(cuMemHostAlloc((void**)&word, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr dword;
  CK(cuMemHostGetDevicePointer(&dword, (void*)word, 0));
  CUmodule mod;
  CK(cuModuleLoadData(&mod, kPtx));
  CUfunction touch;
  CK(cuModuleGetFunction(&touch, mod, "touch"));
  CUdeviceptr scratch;
  CK(cuMemAlloc(&scratch, 1 << 20));
  void* kp[] = {&scratch};
  unsigned gen = 0;

  // Holds `held` on the host word, runs `call`, releases the word 400 ms after the hold began.
  auto timed = [&](const char* name, const std::function<void()>& call) {
    ++gen;
    CK(cuStreamWaitValue32(held, dword, gen, CU_STREAM_WAIT_VALUE_GEQ));
    CK(cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, held, kp, nullptr));  // work behind the wait
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto t0 = std::chrono::steady_clock::now();
    std::thread releaser([&, g = gen] {
      std::this_thread::sleep_for(std::chrono::milliseconds(kHoldMs));
      __atomic_store_n(word, g, __ATOMIC_SEQ_CST);
    });
    call();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    releaser.join();
    CK(cuStreamSynchronize(held));
    std::printf("%-58s %8.2f ms  %s\n", name, ms, ms > kHoldMs * 0.75 ? "BLOCKS" : "free");
    std::fflush(stdout);
  };

  timed("control: cuCtxSynchronize", [&] { CK(cuCtxSynchronize()); });
  timed("control: cuStreamSynchronize(other)", [&] { CK(cuStreamSynchronize(other)); });
  timed("cuMemAlloc 1 MiB", [&] {
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 1 << 20));
    static std::vector<CUdeviceptr> keep;
    keep.push_back(p);
  });
  CUdeviceptr spare;
  CK(cuMemAlloc(&spare, 1 << 20));
  timed("cuMemFree 1 MiB (unused by the held stream)", [&] { CK(cuMemFree(spare)); });
  CK(cuMemAlloc(&spare, 64 << 20));
  timed("cuMemFree 64 MiB", [&] { CK(cuMemFree(spare)); });
  timed("cuMemAlloc 256 MiB + cuMemFree", [&] {
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 256 << 20));
    CK(cuMemFree(p));
  });
  timed("cuMemAllocHost 2 MiB + cuMemFreeHost", [&] {
    void* p;
    CK(cuMemAllocHost(&p, 2 << 20));
    CK(cuMemFreeHost(p));
  });
  std::vector<char> pageable(4 << 20);
  timed("cuMemHostRegister 4 MiB + Unregister", [&] {
    CK(cuMemHostRegister(pageable.data(), pageable.size(), 0));
    CK(cuMemHostUnregister(pageable.data()));
  });
  timed("cuModuleLoadData + cuModuleUnload", [&] {
    CUmodule m;
    CK(cuModuleLoadData(&m, kPtx));
    CK(cuModuleUnload(m));
  });
  timed("cuStreamCreate + cuStreamDestroy", [&] {
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuStreamDestroy(s));
  });
  timed("cuEventCreate + cuEventDestroy", [&] {
    CUevent e;
    CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CK(cuEventDestroy(e));
  });
  timed("kernel + memset + HtoD on another stream, synchronized", [&] {
    unsigned v = 3;
    CK(cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, other, kp, nullptr));
    CK(cuMemsetD8Async(scratch, 1, 4096, other));
    CK(cuMemcpyHtoDAsync(scratch, &v, 4, other));
    CK(cuStreamSynchronize(other));
  });
  timed("cuMemAllocAsync + cuMemFreeAsync on another stream, synchronized", [&] {
    CUdeviceptr p;
    CK(cuMemAllocAsync(&p, 1 << 20, other));
    CK(cuMemFreeAsync(p, other));
    CK(cuStreamSynchronize(other));
  });
  timed("cuMemcpyHtoD (synchronous, pageable)", [&] {
    unsigned v = 5;
    CK(cuMemcpyHtoD(scratch, &v, 4));
  });
  timed("cuMemsetD8 (synchronous)", [&] { CK(cuMemsetD8(scratch, 0, 4096)); });
  size_t gran = 0;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  timed("virtual memory: reserve, create, map, access", [&] {
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, gran, 0, 0, 0));
    CUmemGenericAllocationHandle h;
    CK(cuMemCreate(&h, gran, &prop, 0));
    CK(cuMemMap(va, gran, 0, h, 0));
    CUmemAccessDesc acc{};
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(va, gran, &acc, 1));
    CK(cuMemRelease(h));
    static std::vector<CUdeviceptr> keep;
    keep.push_back(va);
    spare = va;
  });
  timed("virtual memory: unmap, address free", [&] {
    CK(cuMemUnmap(spare, gran));
    CK(cuMemAddressFree(spare, gran));
  });

  // Release paths: a wait on device memory let go by a write on another stream.
  CUdeviceptr dev_word;
  CK(cuMemAlloc(&dev_word, 256));
  CK(cuMemsetD32(dev_word, 0, 64));
  CK(cuCtxSynchronize());
  auto released = [&](const char* name, const std::function<void()>& release) {
    CK(cuStreamWaitValue32(held, dev_word, 9, CU_STREAM_WAIT_VALUE_EQ));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const bool waiting = cuStreamQuery(held) == CUDA_ERROR_NOT_READY;
    release();
    const auto t0 = std::chrono::steady_clock::now();
    CUresult q = CUDA_ERROR_NOT_READY;
    while ((q = cuStreamQuery(held)) == CUDA_ERROR_NOT_READY &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2))
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    std::printf("release: %-50s %s (held before: %s)\n", name, q == CUDA_SUCCESS ? "released" : "STILL HELD",
                waiting ? "yes" : "no");
    if (q != CUDA_SUCCESS) __atomic_store_n(word, ++gen, __ATOMIC_SEQ_CST);  // never here: best effort
    CK(cuMemsetD32(dev_word, 0, 64));
    CK(cuCtxSynchronize());
  };
  released("cuStreamWriteValue32 on another stream", [&] { CK(cuStreamWriteValue32(other, dev_word, 9, 0)); });
  released("cuMemsetD32Async on another stream", [&] { CK(cuMemsetD32Async(dev_word, 9, 1, other)); });
  CK(cuMemFree(dev_word));
  std::printf("blocked_stream: done\n");
  return 0;
}
