// Thread block clusters (sm_90): a kernel with __cluster_dims__, a kernel given its cluster
// shape at launch (cudaLaunchKernelExC with cudaLaunchAttributeClusterDimension), cluster.sync()
// and distributed shared memory (cluster.map_shared_rank), cudaOccupancyMaxActiveClusters.
#include <cooperative_groups.h>

#include <vector>

#include "compat.h"

namespace cg = cooperative_groups;

// Each block puts its rank in shared memory; after cluster.sync() every block reads all of its
// cluster's blocks' values through distributed shared memory.
__device__ void ring_sum(int* out) {
  __shared__ int mine;
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  if (threadIdx.x == 0) mine = static_cast<int>(rank + 1) * 10 + static_cast<int>(blockIdx.x);
  cluster.sync();
  int sum = 0;
  for (unsigned r = 0; r < cluster.num_blocks(); ++r) sum += *cluster.map_shared_rank(&mine, r);
  cluster.sync();  // nobody leaves while others still read its shared memory
  if (threadIdx.x == 0) out[blockIdx.x] = sum * 1000 + static_cast<int>(cluster.num_blocks());
}

__global__ void __cluster_dims__(4, 1, 1) fixed_clusters(int* out) { ring_sum(out); }
__global__ void launch_clusters(int* out) { ring_sum(out); }

std::vector<int> expected(int blocks, int csize) {
  std::vector<int> e(blocks);
  for (int b = 0; b < blocks; ++b) {
    const int first = b / csize * csize;
    int sum = 0;
    for (int r = 0; r < csize; ++r) sum += (r + 1) * 10 + first + r;
    e[b] = sum * 1000 + csize;
  }
  return e;
}

void check(const char* how, const int* d, int blocks, int csize) {
  std::vector<int> h(blocks);
  CHECK(cudaMemcpy(h.data(), d, blocks * sizeof(int), cudaMemcpyDeviceToHost));
  const auto e = expected(blocks, csize);
  int bad = 0;
  for (int b = 0; b < blocks; ++b) bad += h[b] != e[b];
  std::printf("%s cluster %d: mismatches %d, block 5 -> %d\n", how, csize, bad, h[5]);
  EXPECT(bad == 0, "%s %d", how, csize);
}

int main() {
  const int blocks = 64;
  int* d;
  CHECK(cudaMalloc(&d, blocks * sizeof(int)));
  CHECK(cudaMemset(d, 0, blocks * sizeof(int)));
  fixed_clusters<<<blocks, 128>>>(d);
  CHECK(cudaGetLastError());
  check("__cluster_dims__", d, blocks, 4);
  cudaFuncAttributes fa{};
  CHECK(cudaFuncGetAttributes(&fa, fixed_clusters));
  std::printf("required cluster %dx%dx%d\n", fa.requiredClusterWidth, fa.requiredClusterHeight,
              fa.requiredClusterDepth);
  EXPECT(fa.requiredClusterWidth == 4 && fa.requiredClusterHeight == 1 && fa.requiredClusterDepth == 1,
         "required cluster");

  for (int csize : {1, 2, 8}) {
    CHECK(cudaMemset(d, 0, blocks * sizeof(int)));
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(128);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = csize;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (csize == 8) {
      int clusters = 0;
      CHECK(cudaOccupancyMaxActiveClusters(&clusters, launch_clusters, &cfg));
      std::printf("max active clusters of 8 > 0: %s\n", clusters > 0 ? "yes" : "no");
      EXPECT(clusters > 0, "max active clusters");
    }
    void* args[] = {&d};
    CHECK(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(launch_clusters), args));
    CHECK(cudaDeviceSynchronize());
    check("attribute", d, blocks, csize);
  }
  CHECK(cudaFree(d));
  return finish();
}
