// Pitched and 2D memory with kernels: cudaMallocPitch, cudaMemcpy2D (host to device, device to
// device with a column offset, device to host), cudaMemset2D, a kernel indexing rows by pitch,
// cudaMalloc3D + cudaMemcpy3D with a kernel on the pitched 3D volume.
#include <vector>

#include "compat.h"

__global__ void scale_rows(float* base, size_t pitch, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) {
    float* row = reinterpret_cast<float*>(reinterpret_cast<char*>(base) + y * pitch);
    row[x] = row[x] * 2.0f + static_cast<float>(y);
  }
}

__global__ void volume(cudaPitchedPtr p, int w, int h, int d) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y, z = blockIdx.z;
  if (x < w && y < h && z < d) {
    char* slice = static_cast<char*>(p.ptr) + z * p.pitch * h;
    reinterpret_cast<int*>(slice + y * p.pitch)[x] += x + 100 * y + 10000 * z;
  }
}

int main() {
  const int w = 1000, h = 300;
  std::vector<float> src(w * h), dst(w * h);
  for (int i = 0; i < w * h; ++i) src[i] = rnd(i);
  float *d, *d2;
  size_t pitch = 0, pitch2 = 0;
  CHECK(cudaMallocPitch(&d, &pitch, w * sizeof(float), h));
  CHECK(cudaMallocPitch(&d2, &pitch2, (w + 10) * sizeof(float), h));
  std::printf("pitch covers the row: %s, aligned: %s\n", pitch >= w * sizeof(float) ? "yes" : "no",
              pitch % 128 == 0 ? "yes" : "no");
  CHECK(cudaMemcpy2D(d, pitch, src.data(), w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
  dim3 block(32, 8), grid((w + 31) / 32, (h + 7) / 8);
  scale_rows<<<grid, block>>>(d, pitch, w, h);
  CHECK(cudaGetLastError());
  // Into the second array 10 columns to the right, after zeroing it with cudaMemset2D.
  CHECK(cudaMemset2D(d2, pitch2, 0, (w + 10) * sizeof(float), h));
  CHECK(cudaMemcpy2D(d2 + 10, pitch2, d, pitch, w * sizeof(float), h, cudaMemcpyDeviceToDevice));
  std::vector<float> wide((w + 10) * h);
  CHECK(cudaMemcpy2D(wide.data(), (w + 10) * sizeof(float), d2, pitch2, (w + 10) * sizeof(float), h,
                     cudaMemcpyDeviceToHost));
  int bad = 0;
  double sum = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w + 10; ++x) {
      const float want = x < 10 ? 0.0f : src[y * w + x - 10] * 2.0f + static_cast<float>(y);
      bad += wide[y * (w + 10) + x] != want;
      sum += wide[y * (w + 10) + x];
    }
  std::printf("2D: mismatches %d, checksum %.4f\n", bad, sum);
  EXPECT(bad == 0, "2D");

  const int vw = 70, vh = 20, vd = 9;
  cudaPitchedPtr p;
  CHECK(cudaMalloc3D(&p, make_cudaExtent(vw * sizeof(int), vh, vd)));
  std::vector<int> hv(vw * vh * vd);
  for (size_t i = 0; i < hv.size(); ++i) hv[i] = static_cast<int>(i);
  cudaMemcpy3DParms up{};
  up.srcPtr = make_cudaPitchedPtr(hv.data(), vw * sizeof(int), vw, vh);
  up.dstPtr = p;
  up.extent = make_cudaExtent(vw * sizeof(int), vh, vd);
  up.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&up));
  volume<<<dim3(1, vh, vd), 128>>>(p, vw, vh, vd);
  std::vector<int> back(hv.size());
  cudaMemcpy3DParms down{};
  down.srcPtr = p;
  down.dstPtr = make_cudaPitchedPtr(back.data(), vw * sizeof(int), vw, vh);
  down.extent = up.extent;
  down.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&down));
  int bad3 = 0;
  for (int z = 0; z < vd; ++z)
    for (int y = 0; y < vh; ++y)
      for (int x = 0; x < vw; ++x) {
        const int i = (z * vh + y) * vw + x;
        bad3 += back[i] != i + x + 100 * y + 10000 * z;
      }
  std::printf("3D: mismatches %d\n", bad3);
  EXPECT(bad3 == 0, "3D");
  CHECK(cudaFree(d));
  CHECK(cudaFree(d2));
  CHECK(cudaFree(p.ptr));
  return finish();
}
