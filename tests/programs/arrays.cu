// CUDA arrays, textures and surfaces (issue 30): 2-D, 3-D, layered and mipmapped arrays made and
// described (cudaArrayGetInfo, cudaGetChannelDesc); copies into and out of them from pageable and
// pinned host memory and from device memory (cudaMemcpy2DToArray/FromArray, their Async forms,
// cudaMemcpy3D with an array on either side, array to array, the deprecated row-spanning
// cudaMemcpyToArray/FromArray), regions at offsets; texture objects of an array, of linear and of
// pitched memory and a surface object, made, described and destroyed; and the errors.  Every
// printed value comes from copies, never from a kernel (the sim backend runs none; kernels that
// read textures are in libs/textures.cu): the output is the same natively and through funnel.
#include <cstring>
#include <vector>

#include "check.h"

// cudaMemcpyToArray and cudaMemcpyFromArray are deprecated, and tested on purpose.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static unsigned sum(const float* p, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += p[i];
  return static_cast<unsigned>(s);
}

static void print_info(const char* what, cudaArray_t a) {
  cudaChannelFormatDesc d;
  cudaExtent e;
  unsigned flags = 0;
  CHECK(cudaArrayGetInfo(&d, &e, &flags, a));
  std::printf("%s: %zu x %zu x %zu, channels %d/%d/%d/%d bits, kind %d, flags %#x\n", what, e.width, e.height, e.depth,
              d.x, d.y, d.z, d.w, static_cast<int>(d.f), flags);
}

// a) A 2-D float array of 64 x 32: a whole round trip through pageable memory, a region at an
//    offset from pinned memory, async copies on a stream.
static void two_d() {
  const size_t W = 64, H = 32;
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
  cudaArray_t a;
  CHECK(cudaMallocArray(&a, &fd, W, H));
  print_info("2-D float array", a);
  std::vector<float> in(W * H), out(W * H, -1.f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 977);
  CHECK(cudaMemcpy2DToArray(a, 0, 0, in.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2DFromArray(out.data(), W * sizeof(float), a, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToHost));
  std::printf("2-D round trip: %s, sum %u\n", out == in ? "ok" : "FAIL", sum(out.data(), out.size()));
  // 8 x 4 floats at column 4 (16 bytes), row 3, from pinned memory.
  float* pin;
  CHECK(cudaMallocHost(&pin, 32 * sizeof(float)));
  for (int i = 0; i < 32; ++i) pin[i] = 5000.f + i;
  CHECK(cudaMemcpy2DToArray(a, 4 * sizeof(float), 3, pin, 8 * sizeof(float), 8 * sizeof(float), 4, cudaMemcpyDefault));
  CHECK(cudaMemcpy2DFromArray(out.data(), W * sizeof(float), a, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToHost));
  bool region = true;
  for (size_t r = 0; r < H; ++r)
    for (size_t c = 0; c < W; ++c) {
      const bool inside = r >= 3 && r < 7 && c >= 4 && c < 12;
      const float want = inside ? 5000.f + (r - 3) * 8 + (c - 4) : in[r * W + c];
      region = region && out[r * W + c] == want;
    }
  std::printf("2-D region at an offset: %s, element (3,4) %.0f\n", region ? "ok" : "FAIL", out[3 * W + 4]);
  // Async through pinned memory on a stream, then back into a device buffer and out.
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *pin_all, *dev;
  CHECK(cudaMallocHost(&pin_all, W * H * sizeof(float)));
  CHECK(cudaMalloc(&dev, W * H * sizeof(float)));
  for (size_t i = 0; i < W * H; ++i) pin_all[i] = static_cast<float>(2 * i);
  CHECK(cudaMemcpy2DToArrayAsync(a, 0, 0, pin_all, W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpy2DFromArrayAsync(dev, W * sizeof(float), a, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaStreamSynchronize(s));  // the pinned source is rewritten next
  std::memset(pin_all, 0, W * H * sizeof(float));
  CHECK(cudaMemcpyAsync(pin_all, dev, W * H * sizeof(float), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  bool async_ok = true;
  for (size_t i = 0; i < W * H; ++i) async_ok = async_ok && pin_all[i] == static_cast<float>(2 * i);
  std::printf("2-D async through a stream and device memory: %s\n", async_ok ? "ok" : "FAIL");
  // Array to array: the left half of a into a second array's right half.
  cudaArray_t b;
  CHECK(cudaMallocArray(&b, &fd, W, H));
  std::vector<float> zero(W * H, 0.f);
  CHECK(cudaMemcpy2DToArray(b, 0, 0, zero.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2DArrayToArray(b, W / 2 * sizeof(float), 0, a, 0, 0, W / 2 * sizeof(float), H));
  CHECK(cudaMemcpy2DFromArray(out.data(), W * sizeof(float), b, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToHost));
  bool a2a = true;
  for (size_t r = 0; r < H; ++r)
    for (size_t c = 0; c < W; ++c)
      a2a = a2a && out[r * W + c] == (c < W / 2 ? 0.f : static_cast<float>(2 * (r * W + c - W / 2)));
  std::printf("array to array: %s\n", a2a ? "ok" : "FAIL");
  // The deprecated 1-D calls span rows: 160 floats (2.5 rows) from column 8 of row 1.
  std::vector<float> line(160);
  for (size_t i = 0; i < line.size(); ++i) line[i] = 9000.f + i;
  CHECK(cudaMemcpyToArray(b, 8 * sizeof(float), 1, line.data(), line.size() * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<float> back(160, 0.f);
  CHECK(cudaMemcpyFromArray(back.data(), b, 8 * sizeof(float), 1, back.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy2DFromArray(out.data(), W * sizeof(float), b, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToHost));
  std::printf("row-spanning 1-D copies: %s, element (3,39) %.0f\n", back == line ? "ok" : "FAIL", out[3 * W + 39]);
  // Errors: a region past the array's right edge or bottom.
  std::printf("a copy past the right edge: %s\n",
              cudaGetErrorName(cudaMemcpy2DToArray(a, 60 * sizeof(float), 0, in.data(), W * sizeof(float),
                                                   8 * sizeof(float), 2, cudaMemcpyHostToDevice)));
  std::printf("a copy past the bottom: %s\n",
              cudaGetErrorName(cudaMemcpy2DToArray(a, 0, 30, in.data(), W * sizeof(float), W * sizeof(float), 4,
                                                   cudaMemcpyHostToDevice)));
  cudaGetLastError();
  CHECK(cudaFreeArray(a));
  CHECK(cudaFreeArray(b));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(dev));
  CHECK(cudaFreeHost(pin));
  CHECK(cudaFreeHost(pin_all));
}

// b) A 3-D int array 16 x 8 x 4 through cudaMemcpy3D: pageable host -> array, array -> pitched
//    device memory, device -> host; a 1-D layered array of 3 layers.
static void three_d() {
  const size_t W = 16, H = 8, D = 4;
  cudaChannelFormatDesc id = cudaCreateChannelDesc<int>();
  cudaArray_t a;
  CHECK(cudaMalloc3DArray(&a, &id, make_cudaExtent(W, H, D)));
  print_info("3-D int array", a);
  std::vector<int> in(W * H * D), out(W * H * D, -1);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i * 3 + 1);
  cudaMemcpy3DParms p{};
  p.srcPtr = make_cudaPitchedPtr(in.data(), W * sizeof(int), W, H);
  p.dstArray = a;
  p.extent = make_cudaExtent(W, H, D);
  p.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&p));
  cudaPitchedPtr dev;
  CHECK(cudaMalloc3D(&dev, make_cudaExtent(W * sizeof(int), H, D)));
  cudaMemcpy3DParms q{};
  q.srcArray = a;
  q.dstPtr = dev;
  q.extent = make_cudaExtent(W, H, D);
  q.kind = cudaMemcpyDeviceToDevice;
  CHECK(cudaMemcpy3D(&q));
  cudaMemcpy3DParms r{};
  r.srcPtr = dev;
  r.dstPtr = make_cudaPitchedPtr(out.data(), W * sizeof(int), W, H);
  r.extent = make_cudaExtent(W * sizeof(int), H, D);
  r.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&r));
  std::printf("3-D host -> array -> device -> host: %s\n", out == in ? "ok" : "FAIL");
  // A box of 4 x 2 x 2 at (5, 3, 1) read back to the host.
  std::vector<int> box(4 * 2 * 2, 0);
  cudaMemcpy3DParms b{};
  b.srcArray = a;
  b.srcPos = make_cudaPos(5, 3, 1);
  b.dstPtr = make_cudaPitchedPtr(box.data(), 4 * sizeof(int), 4, 2);
  b.extent = make_cudaExtent(4, 2, 2);
  b.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&b));
  bool box_ok = true;
  for (int z = 0; z < 2; ++z)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 4; ++x)
        box_ok = box_ok && box[(z * 2 + y) * 4 + x] == in[((1 + z) * H + 3 + y) * W + 5 + x];
  std::printf("3-D box at (5,3,1): %s, first %d\n", box_ok ? "ok" : "FAIL", box[0]);
  CHECK(cudaFreeArray(a));
  CHECK(cudaFree(dev.ptr));
  // 1-D layered: 32 floats x 3 layers.
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
  cudaArray_t l;
  CHECK(cudaMalloc3DArray(&l, &fd, make_cudaExtent(32, 0, 3), cudaArrayLayered));
  print_info("1-D layered array", l);
  std::vector<float> lin(32 * 3), lout(32 * 3, 0.f);
  for (size_t i = 0; i < lin.size(); ++i) lin[i] = 0.5f * i;
  cudaMemcpy3DParms m{};
  m.srcPtr = make_cudaPitchedPtr(lin.data(), 32 * sizeof(float), 32, 1);
  m.dstArray = l;
  m.extent = make_cudaExtent(32, 1, 3);
  m.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&m));
  cudaMemcpy3DParms n{};
  n.srcArray = l;
  n.dstPtr = make_cudaPitchedPtr(lout.data(), 32 * sizeof(float), 32, 1);
  n.extent = make_cudaExtent(32, 1, 3);
  n.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&n));
  std::printf("1-D layered round trip: %s\n", lout == lin ? "ok" : "FAIL");
  CHECK(cudaFreeArray(l));
}

// c) A mipmapped array of 3 levels: level 1's shape, a round trip through it.
static void mipmapped() {
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<float4>();
  cudaMipmappedArray_t mm;
  CHECK(cudaMallocMipmappedArray(&mm, &fd, make_cudaExtent(32, 32, 0), 3));
  cudaArray_t l1;
  CHECK(cudaGetMipmappedArrayLevel(&l1, mm, 1));
  print_info("mipmap level 1", l1);
  std::vector<float> in(16 * 16 * 4), out(16 * 16 * 4, 0.f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  CHECK(cudaMemcpy2DToArray(l1, 0, 0, in.data(), 16 * 4 * sizeof(float), 16 * 4 * sizeof(float), 16,
                            cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2DFromArray(out.data(), 16 * 4 * sizeof(float), l1, 0, 0, 16 * 4 * sizeof(float), 16,
                              cudaMemcpyDeviceToHost));
  std::printf("mipmap level 1 round trip: %s\n", out == in ? "ok" : "FAIL");
  CHECK(cudaFreeMipmappedArray(mm));
}

// d) Texture objects of an array, of linear and of pitched memory, a surface object: made,
//    described, destroyed.
static void objects() {
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
  cudaArray_t a;
  CHECK(cudaMallocArray(&a, &fd, 64, 64, cudaArraySurfaceLoadStore));
  cudaResourceDesc rd{};
  rd.resType = cudaResourceTypeArray;
  rd.res.array.array = a;
  cudaTextureDesc td{};
  td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
  td.filterMode = cudaFilterModeLinear;
  td.readMode = cudaReadModeElementType;
  td.normalizedCoords = 1;
  cudaTextureObject_t t = 0;
  CHECK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
  cudaResourceDesc got{};
  CHECK(cudaGetTextureObjectResourceDesc(&got, t));
  cudaTextureDesc gtd{};
  CHECK(cudaGetTextureObjectTextureDesc(&gtd, t));
  std::printf("array texture: made %s, resource %s, filter %d, normalized %d, address %d\n", t != 0 ? "yes" : "no",
              got.resType == cudaResourceTypeArray && got.res.array.array == a ? "the array" : "FAIL",
              static_cast<int>(gtd.filterMode), gtd.normalizedCoords, static_cast<int>(gtd.addressMode[0]));
  float* lin;
  CHECK(cudaMalloc(&lin, 1024 * sizeof(float)));
  cudaResourceDesc ld{};
  ld.resType = cudaResourceTypeLinear;
  ld.res.linear.devPtr = lin;
  ld.res.linear.desc = fd;
  ld.res.linear.sizeInBytes = 1024 * sizeof(float);
  cudaTextureDesc pd{};
  pd.readMode = cudaReadModeElementType;
  cudaTextureObject_t tl = 0;
  CHECK(cudaCreateTextureObject(&tl, &ld, &pd, nullptr));
  CHECK(cudaGetTextureObjectResourceDesc(&got, tl));
  std::printf("linear texture: resource %s, %zu bytes\n",
              got.resType == cudaResourceTypeLinear && got.res.linear.devPtr == lin ? "the memory" : "FAIL",
              got.res.linear.sizeInBytes);
  size_t pitch = 0;
  float* pitched;
  CHECK(cudaMallocPitch(&pitched, &pitch, 32 * sizeof(float), 16));
  cudaResourceDesc p2{};
  p2.resType = cudaResourceTypePitch2D;
  p2.res.pitch2D.devPtr = pitched;
  p2.res.pitch2D.desc = fd;
  p2.res.pitch2D.width = 32;
  p2.res.pitch2D.height = 16;
  p2.res.pitch2D.pitchInBytes = pitch;
  cudaTextureObject_t tp = 0;
  CHECK(cudaCreateTextureObject(&tp, &p2, &pd, nullptr));
  std::printf("pitched texture: made %s\n", tp != 0 && tp != tl && tp != t ? "yes" : "no");
  cudaSurfaceObject_t sf = 0;
  CHECK(cudaCreateSurfaceObject(&sf, &rd));
  CHECK(cudaGetSurfaceObjectResourceDesc(&got, sf));
  std::printf("surface: resource %s\n", got.resType == cudaResourceTypeArray && got.res.array.array == a ? "the array" : "FAIL");
  // Linear memory that is not the program's device memory.
  std::vector<float> host(16);
  ld.res.linear.devPtr = host.data();
  ld.res.linear.sizeInBytes = 16 * sizeof(float);
  cudaTextureObject_t bad = 0;
  std::printf("a texture of host memory refused: %s\n", cudaCreateTextureObject(&bad, &ld, &pd, nullptr) != cudaSuccess ? "yes" : "no");
  cudaGetLastError();
  CHECK(cudaDestroySurfaceObject(sf));
  CHECK(cudaDestroyTextureObject(t));
  CHECK(cudaDestroyTextureObject(tl));
  CHECK(cudaDestroyTextureObject(tp));
  CHECK(cudaFreeArray(a));
  CHECK(cudaFree(lin));
  CHECK(cudaFree(pitched));
}

int main() {
  two_d();
  three_d();
  mipmapped();
  objects();
  CHECK(cudaDeviceSynchronize());
  std::printf("arrays: done\n");
  return 0;
}
