// The runtime calls the compatibility suite found missing or wrong (tests/programs/compat):
// stream priority/flags/device, the default memory pool and its attributes, 3-D allocations,
// copies and memsets (real data, with offsets, pageable, pinned and device to device), and
// the launch errors CUDA 13 returns at the launch itself (configuration, dynamic shared
// memory, cooperative grids too large).  Built twice: plain and with
// --default-stream per-thread (the _ptds/_ptsz entry points); both print the same.
// Handles that are not CUDA's own (a bogus pool, an array) are funnel-only checks.
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "check.h"

#define SHOW(what, call) std::printf("%s: %s\n", what, cudaGetErrorName(call))

__global__ void plain(int* d) { d[threadIdx.x] = 1; }
__global__ void with_static(int* d) {
  __shared__ int s[1024];  // 4 KiB of static shared memory
  extern __shared__ int dyn[];
  s[threadIdx.x] = dyn[threadIdx.x];
  __syncthreads();
  d[threadIdx.x] = s[1023 - threadIdx.x];
}
__global__ void coop(int* d) { d[blockIdx.x] = 1; }

void streams() {
  int lo = 0, hi = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, hi));
  int prio = 1, dev = -1;
  unsigned flags = 7;
  CHECK(cudaStreamGetPriority(s, &prio));
  CHECK(cudaStreamGetFlags(s, &flags));
  CHECK(cudaStreamGetDevice(s, &dev));
  std::printf("stream: greatest priority %s, non-blocking %s, device %d\n", prio == hi ? "yes" : "no",
              flags == cudaStreamNonBlocking ? "yes" : "no", dev);
  cudaStream_t low;
  CHECK(cudaStreamCreateWithPriority(&low, cudaStreamDefault, lo + 10));  // clamped to the least
  CHECK(cudaStreamGetPriority(low, &prio));
  CHECK(cudaStreamGetFlags(low, &flags));
  std::printf("clamped stream: priority least %s, flags %u\n", prio == lo ? "yes" : "no", flags);
  for (cudaStream_t d : {cudaStream_t(nullptr), cudaStreamLegacy, cudaStreamPerThread}) {
    prio = flags = dev = 7;
    CHECK(cudaStreamGetPriority(d, &prio));
    CHECK(cudaStreamGetFlags(d, &flags));
    CHECK(cudaStreamGetDevice(d, &dev));
    std::printf("default stream: priority %d, flags %u, device %d\n", prio, flags, dev);
  }
  SHOW("priority to null", cudaStreamGetPriority(s, nullptr));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(low));
}

uint64_t pool_attr(cudaMemPool_t pool, cudaMemPoolAttr a) {
  uint64_t v = 12345;
  CHECK(cudaMemPoolGetAttribute(pool, a, &v));
  return v;
}

void pools() {
  cudaMemPool_t pool, current;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  CHECK(cudaDeviceGetMemPool(&current, 0));
  std::printf("current pool is the default: %s\n", pool == current ? "yes" : "no");
  CHECK(cudaDeviceSetMemPool(0, pool));
  SHOW("default pool of device 99", cudaDeviceGetDefaultMemPool(&current, 99));
  uint64_t threshold = 256ull << 20;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  std::printf("release threshold: %llu MiB\n",
              static_cast<unsigned long long>(pool_attr(pool, cudaMemPoolAttrReleaseThreshold) >> 20));
  int reuse = -1;
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &reuse));
  std::printf("opportunistic reuse: %d", reuse);
  reuse = 0;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &reuse));
  reuse = -1;
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &reuse));
  std::printf(", then %d\n", reuse);

  auto show = [&](const char* when) {
    std::printf("%s: used %llu (high %llu), reserved %llu (high %llu)\n", when,
                static_cast<unsigned long long>(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent)),
                static_cast<unsigned long long>(pool_attr(pool, cudaMemPoolAttrUsedMemHigh)),
                static_cast<unsigned long long>(pool_attr(pool, cudaMemPoolAttrReservedMemCurrent)),
                static_cast<unsigned long long>(pool_attr(pool, cudaMemPoolAttrReservedMemHigh)));
  };
  show("start");
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  void *a, *b, *c, *plain_alloc;
  CHECK(cudaMalloc(&plain_alloc, 1 << 20));  // not from the pool
  CHECK(cudaMallocAsync(&a, 1000, s));
  CHECK(cudaMallocAsync(&b, 3000, s));
  show("after 1000 + 3000");
  CHECK(cudaFreeAsync(b, s));
  show("after freeing 3000");
  uint64_t zero = 0, one = 1;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
  show("after resetting the highs");
  SHOW("high set to 1", cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &one));
  SHOW("current set", cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &zero));
  SHOW("attribute to null", cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, nullptr));

  // From the pool explicitly: real memory, as cudaMallocAsync's.
  CHECK(cudaMallocFromPoolAsync(&c, 500, pool, s));
  show("after 500 from the pool");
  std::vector<unsigned char> in(500), out(500, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 7);
  CHECK(cudaMemcpyAsync(c, in.data(), in.size(), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(out.data(), c, out.size(), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  std::printf("pool allocation round trip: %s\n", in == out ? "ok" : "WRONG");
  CHECK(cudaFree(c));  // a stream-ordered allocation freed by cudaFree
  show("after cudaFree of 500");
  CHECK(cudaFreeAsync(a, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemPoolTrimTo(pool, 0));
  show("end");
  CHECK(cudaFree(plain_alloc));

  int bogus = 0;
  auto* not_a_pool = reinterpret_cast<cudaMemPool_t>(&bogus);
  SHOW("from a pool that is not one", cudaMallocFromPoolAsync(&c, 16, not_a_pool, s));
  SHOW("set another pool", cudaDeviceSetMemPool(0, not_a_pool));
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t own;
  SHOW("create a pool", cudaMemPoolCreate(&own, &props));
  cudaGetLastError();
  CHECK(cudaStreamDestroy(s));
}

// The CPU model of a dense W x H x D byte volume.
struct Volume {
  size_t w, h, d;
  std::vector<unsigned char> v;
  Volume(size_t w_, size_t h_, size_t d_) : w(w_), h(h_), d(d_), v(w_ * h_ * d_, 0) {}
  unsigned char& at(size_t x, size_t y, size_t z) { return v[(z * h + y) * w + x]; }
  cudaPitchedPtr ptr() { return make_cudaPitchedPtr(v.data(), w, w, h); }
};

// What cudaMemcpy3D does, on the models.
void model_copy(Volume& dst, cudaPos dp, Volume& src, cudaPos sp, cudaExtent e) {
  for (size_t z = 0; z < e.depth; ++z)
    for (size_t y = 0; y < e.height; ++y)
      for (size_t x = 0; x < e.width; ++x)
        dst.at(dp.x + x, dp.y + y, dp.z + z) = src.at(sp.x + x, sp.y + y, sp.z + z);
}

cudaMemcpy3DParms parms(cudaPitchedPtr dst, cudaPos dp, cudaPitchedPtr src, cudaPos sp, cudaExtent e,
                        cudaMemcpyKind kind) {
  cudaMemcpy3DParms p{};
  p.dstPtr = dst, p.dstPos = dp, p.srcPtr = src, p.srcPos = sp, p.extent = e, p.kind = kind;
  return p;
}

// Downloads a whole device volume (dense) and counts the bytes that differ from the model.
int differences(cudaPitchedPtr dev, Volume& model) {
  Volume got(model.w, model.h, model.d);
  const cudaExtent all = make_cudaExtent(model.w, model.h, model.d);
  const cudaMemcpy3DParms p = parms(got.ptr(), {}, dev, {}, all, cudaMemcpyDeviceToHost);
  CHECK(cudaMemcpy3D(&p));
  int bad = 0;
  for (size_t i = 0; i < got.v.size(); ++i) bad += got.v[i] != model.v[i];
  return bad;
}

void volumes() {
  const size_t W = 300, H = 20, D = 9;
  cudaPitchedPtr p;
  CHECK(cudaMalloc3D(&p, make_cudaExtent(W, H, D)));
  std::printf("malloc3d: pitch covers the row %s, aligned %s, xsize %zu, ysize %zu\n", p.pitch >= W ? "yes" : "no",
              p.pitch % 128 == 0 ? "yes" : "no", p.xsize, p.ysize);
  Volume model(W, H, D), host(W, H, D), other(W, H, D);
  for (size_t i = 0; i < host.v.size(); ++i) {
    host.v[i] = static_cast<unsigned char>(i * 31 + 7);
    other.v[i] = static_cast<unsigned char>(i * 13 + 1);
  }
  // Whole volume: memset, then pageable host to device.
  CHECK(cudaMemset3D(p, 0x5a, make_cudaExtent(W, H, D)));
  std::fill(model.v.begin(), model.v.end(), 0x5a);
  std::printf("memset3d whole: differences %d\n", differences(p, model));
  const cudaExtent all = make_cudaExtent(W, H, D);
  cudaMemcpy3DParms up = parms(p, {}, host.ptr(), {}, all, cudaMemcpyHostToDevice);
  CHECK(cudaMemcpy3D(&up));
  model.v = host.v;
  std::printf("pageable upload whole: differences %d\n", differences(p, model));

  // A memset of a box inside: the pointer moved to (5, 2, 1), rows and slices as allocated.
  cudaPitchedPtr inner = p;
  inner.ptr = static_cast<char*>(p.ptr) + (1 * H + 2) * p.pitch + 5;
  CHECK(cudaMemset3D(inner, 0xab, make_cudaExtent(12, 4, 2)));
  for (size_t z = 1; z < 3; ++z)
    for (size_t y = 2; y < 6; ++y)
      for (size_t x = 5; x < 17; ++x) model.at(x, y, z) = 0xab;
  std::printf("memset3d box: differences %d\n", differences(p, model));

  // Pageable host to device, box to box with offsets on both sides, slice by slice.
  const cudaExtent box = make_cudaExtent(40, 5, 3);
  up = parms(p, {16, 3, 4}, other.ptr(), {8, 2, 1}, box, cudaMemcpyHostToDevice);
  CHECK(cudaMemcpy3D(&up));
  model_copy(model, {16, 3, 4}, other, {8, 2, 1}, box);
  std::printf("pageable upload box: differences %d\n", differences(p, model));

  // Device to pageable host, a box with offsets.
  Volume down(W, H, D), down_model(W, H, D);
  cudaMemcpy3DParms dn = parms(down.ptr(), {3, 1, 2}, p, {14, 2, 3}, make_cudaExtent(50, 7, 4), cudaMemcpyDeviceToHost);
  CHECK(cudaMemcpy3D(&dn));
  model_copy(down_model, {3, 1, 2}, model, {14, 2, 3}, make_cudaExtent(50, 7, 4));
  std::printf("pageable download box: %s\n", down.v == down_model.v ? "ok" : "WRONG");

  // Device to device into a volume of another shape (more rows per slice), asynchronously.
  cudaPitchedPtr q;
  CHECK(cudaMalloc3D(&q, make_cudaExtent(W, H + 3, D)));
  Volume qmodel(W, H + 3, D);
  CHECK(cudaMemset3D(q, 0, make_cudaExtent(W, H + 3, D)));
  // cudaMemset3D on device memory may return before it is done, and under
  // --default-stream per-thread stream s below is not ordered after it (seen on the sim:
  // the memset ran after the copy, api_gaps_ptds under load).
  CHECK(cudaDeviceSynchronize());
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  const cudaExtent dd = make_cudaExtent(100, 6, 4);
  cudaMemcpy3DParms d2d = parms(q, {10, 0, 5}, p, {0, 1, 2}, dd, cudaMemcpyDeviceToDevice);
  CHECK(cudaMemcpy3DAsync(&d2d, s));
  CHECK(cudaStreamSynchronize(s));
  model_copy(qmodel, {10, 0, 5}, model, {0, 1, 2}, dd);
  std::printf("device to device box: differences %d\n", differences(q, qmodel));

  // Pinned host memory both ways (direct copies), asynchronously, with offsets.
  const size_t PW = 256, PH = 30, PD = 5;
  unsigned char* pinned;
  CHECK(cudaMallocHost(&pinned, PW * PH * PD));
  std::memset(pinned, 0, PW * PH * PD);
  Volume pmodel(PW, PH, PD);
  cudaMemcpy3DParms to_pinned = parms(make_cudaPitchedPtr(pinned, PW, PW, PH), {7, 9, 1}, p, {20, 0, 5},
                                      make_cudaExtent(60, 11, 4), cudaMemcpyDeviceToHost);
  CHECK(cudaMemcpy3DAsync(&to_pinned, s));
  CHECK(cudaStreamSynchronize(s));
  model_copy(pmodel, {7, 9, 1}, model, {20, 0, 5}, make_cudaExtent(60, 11, 4));
  std::printf("download to pinned: %s\n", std::memcmp(pinned, pmodel.v.data(), pmodel.v.size()) == 0 ? "ok" : "WRONG");
  for (size_t i = 0; i < PW * PH * PD; ++i) pinned[i] = static_cast<unsigned char>(255 - i % 251);
  std::memcpy(pmodel.v.data(), pinned, pmodel.v.size());
  cudaMemcpy3DParms from_pinned = parms(p, {200, 10, 0}, make_cudaPitchedPtr(pinned, PW, PW, PH), {1, 2, 0},
                                        make_cudaExtent(90, 8, 5), cudaMemcpyDefault);
  CHECK(cudaMemcpy3D(&from_pinned));
  model_copy(model, {200, 10, 0}, pmodel, {1, 2, 0}, make_cudaExtent(90, 8, 5));
  std::printf("upload from pinned: differences %d\n", differences(p, model));
  CHECK(cudaMemset3DAsync(p, 0, make_cudaExtent(W, H, D), s));
  CHECK(cudaStreamSynchronize(s));
  std::fill(model.v.begin(), model.v.end(), 0);
  std::printf("memset3d async: differences %d\n", differences(p, model));

  // What CUDA refuses.
  cudaMemcpy3DParms bad = parms(p, {}, host.ptr(), {}, make_cudaExtent(p.pitch + 1, 1, 1), cudaMemcpyHostToDevice);
  SHOW("extent wider than the pitch", cudaMemcpy3D(&bad));
  bad = parms(p, {p.pitch - 10, 0, 0}, host.ptr(), {}, make_cudaExtent(20, 1, 1), cudaMemcpyHostToDevice);
  SHOW("position past the pitch", cudaMemcpy3D(&bad));
  bad = parms(p, {0, 15, 0}, host.ptr(), {}, make_cudaExtent(20, 10, 2), cudaMemcpyHostToDevice);
  SHOW("rows past the slice", cudaMemcpy3D(&bad));
  bad = parms(p, {0, 0, 5}, host.ptr(), {}, make_cudaExtent(20, 10, 5), cudaMemcpyHostToDevice);
  SHOW("slices past the allocation", cudaMemcpy3D(&bad));
  bad = parms(p, {}, host.ptr(), {}, make_cudaExtent(20, 10, 2), static_cast<cudaMemcpyKind>(42));
  SHOW("bad kind", cudaMemcpy3D(&bad));
  SHOW("null parameters", cudaMemcpy3D(nullptr));
  SHOW("memset3d wider than the pitch", cudaMemset3D(p, 0, make_cudaExtent(p.pitch + 1, 1, 1)));
  SHOW("memset3d past the allocation", cudaMemset3D(p, 0, make_cudaExtent(W, H, D + 1)));
  bad = parms(p, {}, host.ptr(), {}, make_cudaExtent(20, 10, 2), cudaMemcpyHostToDevice);
  bad.srcArray = reinterpret_cast<cudaArray_t>(&bad);
  SHOW("array source", cudaMemcpy3D(&bad));  // not an array of this process
  cudaGetLastError();
  std::printf("after the refusals: differences %d\n", differences(p, model));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(p.ptr));
  CHECK(cudaFree(q.ptr));
}

void expect_launch_error(const char* what) {
  const cudaError_t peek = cudaPeekAtLastError();
  const cudaError_t got = cudaGetLastError();
  std::printf("%s: %s (peek %s), then %s\n", what, cudaGetErrorName(got), peek == got ? "same" : "DIFFERENT",
              cudaGetErrorName(cudaGetLastError()));
}

void launches() {
  int* d;
  CHECK(cudaMalloc(&d, 1 << 20));
  plain<<<1, 2048>>>(d);
  expect_launch_error("2048 threads per block");
  plain<<<0, 32>>>(d);
  expect_launch_error("empty grid");
  plain<<<1, 0>>>(d);
  expect_launch_error("empty block");
  plain<<<dim3(1, 70000), 32>>>(d);
  expect_launch_error("grid.y 70000");
  plain<<<1, dim3(1, 1, 128)>>>(d);
  expect_launch_error("block.z 128");
  plain<<<1, 32, 200 * 1024>>>(d);
  expect_launch_error("200 KiB dynamic shared memory");
  void* args[] = {&d};
  const cudaError_t direct =
      cudaLaunchKernel(reinterpret_cast<const void*>(plain), dim3(1), dim3(4096), args, 0, nullptr);
  std::printf("cudaLaunchKernel 4096 threads: %s, then %s\n", cudaGetErrorName(direct),
              cudaGetErrorName(cudaGetLastError()));

  // Dynamic shared memory against the kernel's limit: 48 KiB less its static shared memory
  // until set; the opt-in limit less static at most.
  cudaFuncAttributes fa;
  CHECK(cudaFuncGetAttributes(&fa, with_static));
  const int static_bytes = static_cast<int>(fa.sharedSizeBytes);
  std::printf("with_static: static at least 4 KiB %s, max dynamic 48 KiB less static %s\n",
              static_bytes >= 4096 ? "yes" : "no", fa.maxDynamicSharedSizeBytes == 48 * 1024 - static_bytes ? "yes" : "no");
  with_static<<<1, 32, fa.maxDynamicSharedSizeBytes>>>(d);
  expect_launch_error("default maximum");
  with_static<<<1, 32, fa.maxDynamicSharedSizeBytes + 1>>>(d);
  expect_launch_error("default maximum + 1");
  int optin = 0;
  CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  SHOW("raise to the opt-in limit", cudaFuncSetAttribute(with_static, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                         optin));
  cudaGetLastError();
  SHOW("raise to the opt-in limit less static",
       cudaFuncSetAttribute(with_static, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - static_bytes));
  with_static<<<1, 32, optin - static_bytes>>>(d);
  expect_launch_error("opt-in less static, raised");
  with_static<<<1, 32, optin - static_bytes + 1>>>(d);
  expect_launch_error("one byte more");
  CHECK(cudaFuncSetAttribute(with_static, cudaFuncAttributeMaxDynamicSharedMemorySize, 1024));
  with_static<<<1, 32, 2048>>>(d);
  expect_launch_error("2 KiB after lowering to 1 KiB");

  // Cooperative grids: as many blocks as fit at once, and one more.
  int coop_ok = 0, sms = 0, per_sm = 0, per_sm_smem = 0;
  CHECK(cudaDeviceGetAttribute(&coop_ok, cudaDevAttrCooperativeLaunch, 0));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, coop, 256, 0));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_smem, coop, 256, 40 * 1024));
  CHECK(cudaFuncSetAttribute(coop, cudaFuncAttributeMaxDynamicSharedMemorySize, 40 * 1024));
  std::printf("cooperative: supported %s, fewer blocks with shared memory %s\n", coop_ok ? "yes" : "no",
              per_sm_smem < per_sm ? "yes" : "no");
  SHOW("cooperative full grid", cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(coop), dim3(per_sm * sms),
                                                            dim3(256), args, 0, nullptr));
  SHOW("cooperative one block more",
       cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(coop), dim3(per_sm * sms + 1), dim3(256), args, 0,
                                   nullptr));
  std::printf("last error: %s\n", cudaGetErrorName(cudaGetLastError()));
  SHOW("cooperative full grid with 40 KiB",
       cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(coop), dim3(per_sm_smem * sms), dim3(256), args,
                                   40 * 1024, nullptr));
  SHOW("cooperative one block more with 40 KiB",
       cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(coop), dim3(per_sm_smem * sms + 1), dim3(256), args,
                                   40 * 1024, nullptr));
  cudaGetLastError();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(per_sm, sms);
  cfg.blockDim = dim3(256);
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  SHOW("cudaLaunchKernelEx cooperative, full 2-D grid", cudaLaunchKernelEx(&cfg, coop, d));
  cfg.gridDim = dim3(per_sm + 1, sms);
  SHOW("cudaLaunchKernelEx cooperative, too large", cudaLaunchKernelEx(&cfg, coop, d));
  cudaGetLastError();
  attr[0].val.cooperative = 0;
  SHOW("the same grid, not cooperative", cudaLaunchKernelEx(&cfg, coop, d));

  // Launch errors are not sticky.
  plain<<<256, 1024>>>(d);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(d));
}

// A device allocation's addresses are never this process's host memory (unified addressing:
// the driver reserves them natively, the client runtime under funnel), so that
// cudaMemcpyDefault and cudaPointerGetAttributes can tell the two apart.
static void address_space() {
  void* d = nullptr;
  CHECK(cudaMalloc(&d, 3u << 20));
  void* p = mmap(d, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  std::printf("host mapping at a device address: %s\n", p == d ? "GRANTED" : "refused");
  if (p != MAP_FAILED) munmap(p, 4096);
  cudaPointerAttributes a{};
  CHECK(cudaPointerGetAttributes(&a, static_cast<char*>(d) + (2u << 20)));
  std::printf("inside the allocation: %s\n", a.type == cudaMemoryTypeDevice ? "device" : "NOT DEVICE");
  CHECK(cudaFree(d));

  // Host memory of ours where the server's next small allocation would go (the driver and
  // the sim hand out the freed block's neighbourhood again): the allocation is placed
  // elsewhere (before the fix, eight clashing tries in a row failed with out of memory).
  constexpr uintptr_t kGranule = uintptr_t{2} << 20;
  void* s = nullptr;
  CHECK(cudaMalloc(&s, 64));
  CHECK(cudaFree(s));
  const uintptr_t g = reinterpret_cast<uintptr_t>(s) & ~(kGranule - 1);
  void* h = mmap(reinterpret_cast<void*>(g), kGranule, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  void* b[4] = {};
  bool on_host = false, right = true;
  for (void*& p : b) {
    CHECK(cudaMalloc(&p, 64));
    const auto at = reinterpret_cast<uintptr_t>(p);
    on_host |= at >= g && at < g + kGranule;
    CHECK(cudaMemset(p, 7, 64));
  }
  unsigned char back[64];
  for (void* p : b) {
    CHECK(cudaMemcpy(back, p, sizeof back, cudaMemcpyDeviceToHost));
    for (unsigned char c : back) right &= c == 7;
    CHECK(cudaFree(p));
  }
  std::printf("small allocations where host memory lies: %s, %s\n", on_host ? "ON HOST MEMORY" : "placed elsewhere",
              right ? "usable" : "WRONG DATA");
  if (h != MAP_FAILED) munmap(h, kGranule);
}

int main() {
  address_space();
  streams();
  pools();
  volumes();
  launches();
  CHECK(cudaDeviceSynchronize());
  std::printf("done\n");
  return 0;
}
