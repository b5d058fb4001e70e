// Textures and surfaces read and written by kernels (issue 30; GPU only): point-sampled and
// linearly filtered reads of a 2-D float array (unnormalised and normalised coordinates), integer
// fetches from linear memory, reads of pitched memory, a layered array, a mipmapped array sampled
// at level 1, 8-bit data read as normalised floats, and a kernel writing a surface that the host
// reads back.  Exact results checked on the CPU; filtered ones summed and printed (the same GPU
// filters them the same way natively and through funnel).
// Build: nvcc -cudart shared textures.cu
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "libcheck.h"

static void expect(bool ok, const char* what) { libcheck::expect("textures", ok, what); }

static const int W = 64, H = 48;

__global__ void read2d(cudaTextureObject_t t, float* out, int w, int h, float dx, float dy, int normalized) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  float u = x + 0.5f + dx, v = y + 0.5f + dy;
  if (normalized) u /= w, v /= h;
  out[y * w + x] = tex2D<float>(t, u, v);
}
__global__ void fetch1d(cudaTextureObject_t t, int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<int>(t, i) * 2;
}
__global__ void read_layered(cudaTextureObject_t t, float* out, int w, int layers) {
  const int x = threadIdx.x, l = blockIdx.x;
  if (x < w && l < layers) out[l * w + x] = tex1DLayered<float>(t, x + 0.5f, l);
}
__global__ void read_lod(cudaTextureObject_t t, float* out, float lod) {
  out[threadIdx.x] = tex2DLod<float>(t, (threadIdx.x + 0.5f) / 32.f, 0.5f, lod);
}
__global__ void read_uchar4(cudaTextureObject_t t, float4* out, int w) {
  const int x = threadIdx.x;
  if (x < w) out[x] = tex2D<float4>(t, x + 0.5f, 0.5f);
}
__global__ void write_surface(cudaSurfaceObject_t s, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) surf2Dwrite(static_cast<float>(x * 1000 + y), s, x * static_cast<int>(sizeof(float)), y);
}

static cudaTextureObject_t array_texture(cudaArray_t a, cudaTextureFilterMode filter, int normalized,
                                         cudaTextureReadMode read = cudaReadModeElementType) {
  cudaResourceDesc r{};
  r.resType = cudaResourceTypeArray;
  r.res.array.array = a;
  cudaTextureDesc t{};
  t.addressMode[0] = t.addressMode[1] = cudaAddressModeClamp;
  t.filterMode = filter;
  t.readMode = read;
  t.normalizedCoords = normalized;
  cudaTextureObject_t o = 0;
  CUDA_CHECK(cudaCreateTextureObject(&o, &r, &t, nullptr));
  return o;
}

int main() {
  const dim3 block(16, 16), grid((W + 15) / 16, (H + 15) / 16);
  std::vector<float> img(W * H), got(W * H);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) img[y * W + x] = static_cast<float>((x * 7 + y * 13) % 101);
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
  cudaArray_t a;
  CUDA_CHECK(cudaMallocArray(&a, &fd, W, H));
  CUDA_CHECK(cudaMemcpy2DToArray(a, 0, 0, img.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
  float* out;
  CUDA_CHECK(cudaMalloc(&out, W * H * sizeof(float)));

  // 1. Point sampling at texel centres: the image itself.
  cudaTextureObject_t point = array_texture(a, cudaFilterModePoint, 0);
  read2d<<<grid, block>>>(point, out, W, H, 0.f, 0.f, 0);
  CUDA_CHECK(cudaMemcpy(got.data(), out, W * H * sizeof(float), cudaMemcpyDeviceToHost));
  expect(got == img, "point-sampled tex2D reads the array's texels");
  // 2. Linear filtering half a texel off, normalised coordinates: sums of blends.
  cudaTextureObject_t lin = array_texture(a, cudaFilterModeLinear, 1);
  read2d<<<grid, block>>>(lin, out, W, H, 0.5f, 0.5f, 1);
  CUDA_CHECK(cudaMemcpy(got.data(), out, W * H * sizeof(float), cudaMemcpyDeviceToHost));
  double s = 0;
  for (float v : got) s += v;
  std::printf("linear filtering: sum %.3f, texel (10,10) %.4f\n", s, got[10 * W + 10]);
  const float want = 0.25f * (img[10 * W + 10] + img[10 * W + 11] + img[11 * W + 10] + img[11 * W + 11]);
  expect(got[10 * W + 10] > want - 0.5f && got[10 * W + 10] < want + 0.5f, "linear filtering blends four texels");

  // 3. Integer fetches from linear device memory.
  const int n = 1000;
  std::vector<int> ints(n), twice(n);
  for (int i = 0; i < n; ++i) ints[i] = i * 3 - 500;
  int *lin_mem, *iout;
  CUDA_CHECK(cudaMalloc(&lin_mem, n * sizeof(int)));
  CUDA_CHECK(cudaMalloc(&iout, n * sizeof(int)));
  CUDA_CHECK(cudaMemcpy(lin_mem, ints.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  cudaResourceDesc lr{};
  lr.resType = cudaResourceTypeLinear;
  lr.res.linear.devPtr = lin_mem;
  lr.res.linear.desc = cudaCreateChannelDesc<int>();
  lr.res.linear.sizeInBytes = n * sizeof(int);
  cudaTextureDesc ld{};
  ld.readMode = cudaReadModeElementType;
  cudaTextureObject_t ti;
  CUDA_CHECK(cudaCreateTextureObject(&ti, &lr, &ld, nullptr));
  fetch1d<<<(n + 255) / 256, 256>>>(ti, iout, n);
  CUDA_CHECK(cudaMemcpy(twice.data(), iout, n * sizeof(int), cudaMemcpyDeviceToHost));
  bool fetched = true;
  for (int i = 0; i < n; ++i) fetched = fetched && twice[i] == 2 * ints[i];
  expect(fetched, "tex1Dfetch of linear memory");

  // 4. Pitched memory read with point sampling.
  size_t pitch = 0;
  float* pm;
  CUDA_CHECK(cudaMallocPitch(&pm, &pitch, W * sizeof(float), H));
  CUDA_CHECK(cudaMemcpy2D(pm, pitch, img.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
  cudaResourceDesc pr{};
  pr.resType = cudaResourceTypePitch2D;
  pr.res.pitch2D.devPtr = pm;
  pr.res.pitch2D.desc = fd;
  pr.res.pitch2D.width = W;
  pr.res.pitch2D.height = H;
  pr.res.pitch2D.pitchInBytes = pitch;
  cudaTextureDesc pd{};
  pd.filterMode = cudaFilterModePoint;
  pd.readMode = cudaReadModeElementType;
  cudaTextureObject_t tp;
  CUDA_CHECK(cudaCreateTextureObject(&tp, &pr, &pd, nullptr));
  read2d<<<grid, block>>>(tp, out, W, H, 0.f, 0.f, 0);
  CUDA_CHECK(cudaMemcpy(got.data(), out, W * H * sizeof(float), cudaMemcpyDeviceToHost));
  expect(got == img, "tex2D of pitched memory");

  // 5. A 1-D layered array of 3 layers, layer l holding 100 * l + x.
  cudaArray_t la;
  CUDA_CHECK(cudaMalloc3DArray(&la, &fd, make_cudaExtent(32, 0, 3), cudaArrayLayered));
  std::vector<float> layers(32 * 3), lout(32 * 3);
  for (int i = 0; i < 96; ++i) layers[i] = static_cast<float>(100 * (i / 32) + i % 32);
  cudaMemcpy3DParms lp{};
  lp.srcPtr = make_cudaPitchedPtr(layers.data(), 32 * sizeof(float), 32, 1);
  lp.dstArray = la;
  lp.extent = make_cudaExtent(32, 1, 3);
  lp.kind = cudaMemcpyHostToDevice;
  CUDA_CHECK(cudaMemcpy3D(&lp));
  cudaTextureObject_t tl = array_texture(la, cudaFilterModePoint, 0);
  read_layered<<<3, 32>>>(tl, out, 32, 3);
  CUDA_CHECK(cudaMemcpy(lout.data(), out, 96 * sizeof(float), cudaMemcpyDeviceToHost));
  expect(lout == layers, "tex1DLayered reads each layer");

  // 6. A mipmapped array: level 0 all 1, level 1 all 2; sampled at level 1.
  cudaMipmappedArray_t mm;
  CUDA_CHECK(cudaMallocMipmappedArray(&mm, &fd, make_cudaExtent(32, 32, 0), 2));
  for (unsigned l = 0; l < 2; ++l) {
    cudaArray_t lev;
    CUDA_CHECK(cudaGetMipmappedArrayLevel(&lev, mm, l));
    const int side = 32 >> l;
    std::vector<float> fill(side * side, static_cast<float>(l + 1));
    CUDA_CHECK(cudaMemcpy2DToArray(lev, 0, 0, fill.data(), side * sizeof(float), side * sizeof(float), side,
                                   cudaMemcpyHostToDevice));
  }
  cudaResourceDesc mr{};
  mr.resType = cudaResourceTypeMipmappedArray;
  mr.res.mipmap.mipmap = mm;
  cudaTextureDesc md{};
  md.filterMode = cudaFilterModePoint;
  md.mipmapFilterMode = cudaFilterModePoint;
  md.normalizedCoords = 1;
  md.maxMipmapLevelClamp = 1.f;
  md.readMode = cudaReadModeElementType;
  cudaTextureObject_t tm;
  CUDA_CHECK(cudaCreateTextureObject(&tm, &mr, &md, nullptr));
  read_lod<<<1, 32>>>(tm, out, 1.f);
  std::vector<float> lod(32);
  CUDA_CHECK(cudaMemcpy(lod.data(), out, 32 * sizeof(float), cudaMemcpyDeviceToHost));
  expect(lod == std::vector<float>(32, 2.f), "tex2DLod reads mipmap level 1");

  // 7. 8-bit RGBA read as normalised floats.
  cudaChannelFormatDesc cd = cudaCreateChannelDesc<uchar4>();
  cudaArray_t ca;
  CUDA_CHECK(cudaMallocArray(&ca, &cd, 16, 1));
  std::vector<uchar4> px(16);
  for (int i = 0; i < 16; ++i) px[i] = make_uchar4(i * 16, 255 - i, 0, 255);
  CUDA_CHECK(cudaMemcpy2DToArray(ca, 0, 0, px.data(), 16 * sizeof(uchar4), 16 * sizeof(uchar4), 1, cudaMemcpyHostToDevice));
  cudaTextureObject_t tc = array_texture(ca, cudaFilterModePoint, 0, cudaReadModeNormalizedFloat);
  float4* f4;
  CUDA_CHECK(cudaMalloc(&f4, 16 * sizeof(float4)));
  read_uchar4<<<1, 16>>>(tc, f4, 16);
  std::vector<float4> norm(16);
  CUDA_CHECK(cudaMemcpy(norm.data(), f4, 16 * sizeof(float4), cudaMemcpyDeviceToHost));
  bool normalized = true;
  for (int i = 0; i < 16; ++i)
    normalized = normalized && norm[i].x == (i * 16) / 255.f && norm[i].y == (255 - i) / 255.f && norm[i].w == 1.f;
  std::printf("normalised uchar4: texel 5 = %.4f %.4f %.4f %.4f\n", norm[5].x, norm[5].y, norm[5].z, norm[5].w);
  expect(normalized, "uchar4 data read as normalised floats");

  // 8. A surface written by a kernel, read back by a copy.
  cudaArray_t sa;
  CUDA_CHECK(cudaMallocArray(&sa, &fd, W, H, cudaArraySurfaceLoadStore));
  cudaResourceDesc sr{};
  sr.resType = cudaResourceTypeArray;
  sr.res.array.array = sa;
  cudaSurfaceObject_t so;
  CUDA_CHECK(cudaCreateSurfaceObject(&so, &sr));
  write_surface<<<grid, block>>>(so, W, H);
  CUDA_CHECK(cudaMemcpy2DFromArray(got.data(), W * sizeof(float), sa, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToHost));
  bool surf = true;
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) surf = surf && got[y * W + x] == static_cast<float>(x * 1000 + y);
  expect(surf, "surf2Dwrite from a kernel, read back by cudaMemcpy2DFromArray");

  CUDA_CHECK(cudaGetLastError());
  for (cudaTextureObject_t t : {point, lin, ti, tp, tl, tm, tc}) CUDA_CHECK(cudaDestroyTextureObject(t));
  CUDA_CHECK(cudaDestroySurfaceObject(so));
  for (cudaArray_t x : {a, la, ca, sa}) CUDA_CHECK(cudaFreeArray(x));
  CUDA_CHECK(cudaFreeMipmappedArray(mm));
  for (void* p : {static_cast<void*>(out), static_cast<void*>(lin_mem), static_cast<void*>(iout),
                  static_cast<void*>(pm), static_cast<void*>(f4)})
    CUDA_CHECK(cudaFree(p));
  std::printf("textures: all ok\n");
  return 0;
}
