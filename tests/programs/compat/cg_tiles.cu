// Cooperative groups inside a block: this_thread_block().sync(), static tiled_partition<N>
// (shfl_down, shfl_xor, any/all/ballot, cg::reduce with plus/greater, cg::inclusive_scan),
// dynamic tiled_partition(block, n), coalesced_threads() in divergent code (warp-aggregated
// atomic), labeled_partition of a warp.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "compat.h"

namespace cg = cooperative_groups;

template <int kTile>
__global__ void tiles(const int* in, int* sums, int* maxes, int* scans, unsigned* votes) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<kTile> tile = cg::tiled_partition<kTile>(block);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int v = in[i];
  const int tid = i / kTile;
  const int s = cg::reduce(tile, v, cg::plus<int>());
  const int m = cg::reduce(tile, v, cg::greater<int>());
  scans[i] = cg::inclusive_scan(tile, v);
  int manual = v;
  for (int o = kTile / 2; o > 0; o /= 2) manual += tile.shfl_xor(manual, o);
  if (tile.thread_rank() == 0) {
    sums[tid] = s == manual ? s : -1;
    maxes[tid] = m;
  }
  const bool big = v > 50;
  // Every lane of the tile takes part in each vote: any/all inside the rank-0 branch would be a
  // vote.sync whose mask names lanes that never arrive (it hung on an H100).
  const unsigned ballot = tile.ballot(big);
  const bool any = tile.any(big), all = tile.all(big);
  if (tile.thread_rank() == 0) votes[tid] = ballot | (any ? 1u << 30 : 0) | (all ? 1u << 31 : 0);
  block.sync();
}

__global__ void dynamic_and_coalesced(const int* in, int* out, int* counter, int* slots) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_group g = cg::tiled_partition(block, 8);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  // Dynamic group: sum over the group of 8 through shared memory.
  __shared__ int s[256];
  s[threadIdx.x] = in[i];
  g.sync();
  int acc = 0;
  const int base = threadIdx.x - static_cast<int>(g.thread_rank());
  for (unsigned k = 0; k < g.size(); ++k) acc += s[base + static_cast<int>(k)];
  // Divergent code: a warp-aggregated atomic over whichever lanes run together (the result
  // does not depend on how the warp is split).
  if (in[i] % 3 == 0) {
    cg::coalesced_group active = cg::coalesced_threads();
    int first = 0;
    if (active.thread_rank() == 0) first = atomicAdd(counter, static_cast<int>(active.size()));
    first = active.shfl(first, 0);
    slots[first + static_cast<int>(active.thread_rank())] = i;
  }
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  cg::coalesced_group lab = cg::labeled_partition(warp, in[i] % 4);
  out[i] = acc + static_cast<int>(lab.size()) * 100000 + static_cast<int>(lab.thread_rank()) * 1000;
}

template <int kTile>
void run(const std::vector<int>& h, const int* din, int n) {
  int *sums, *maxes, *scans;
  unsigned* votes;
  CHECK(cudaMalloc(&sums, n / kTile * sizeof(int)));
  CHECK(cudaMalloc(&maxes, n / kTile * sizeof(int)));
  CHECK(cudaMalloc(&scans, n * sizeof(int)));
  CHECK(cudaMalloc(&votes, n / kTile * sizeof(unsigned)));
  tiles<kTile><<<n / 256, 256>>>(din, sums, maxes, scans, votes);
  CHECK(cudaGetLastError());
  std::vector<int> gs(n / kTile), gm(n / kTile), gsc(n);
  std::vector<unsigned> gv(n / kTile);
  CHECK(cudaMemcpy(gs.data(), sums, gs.size() * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(gm.data(), maxes, gm.size() * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(gsc.data(), scans, gsc.size() * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(gv.data(), votes, gv.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int t = 0; t < n / kTile; ++t) {
    int s = 0, m = INT_MIN;
    unsigned ballot = 0;
    bool any = false, all = true;
    for (int k = 0; k < kTile; ++k) {
      const int v = h[t * kTile + k];
      s += v;
      m = std::max(m, v);
      bad += gsc[t * kTile + k] != s;
      ballot |= v > 50 ? 1u << k : 0;
      any |= v > 50;
      all &= v > 50;
    }
    bad += gs[t] != s || gm[t] != m;
    bad += gv[t] != (ballot | (any ? 1u << 30 : 0) | (all ? 1u << 31 : 0));
  }
  std::printf("tile %2d: mismatches %d, first sum %d max %d vote %08x\n", kTile, bad, gs[0], gm[0], gv[0]);
  EXPECT(bad == 0, "tile %d", kTile);
  CHECK(cudaFree(sums));
  CHECK(cudaFree(maxes));
  CHECK(cudaFree(scans));
  CHECK(cudaFree(votes));
}

int main() {
  const int n = 1 << 16;
  std::vector<int> h(n);
  for (int i = 0; i < n; ++i) h[i] = static_cast<int>(hash32(i) % 100);
  int *din, *dout;
  CHECK(cudaMalloc(&din, n * sizeof(int)));
  CHECK(cudaMalloc(&dout, n * sizeof(int)));
  CHECK(cudaMemcpy(din, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  run<4>(h, din, n);
  run<16>(h, din, n);
  run<32>(h, din, n);
  int *dcount, *dslots;
  CHECK(cudaMalloc(&dcount, sizeof(int)));
  CHECK(cudaMalloc(&dslots, n * sizeof(int)));
  CHECK(cudaMemset(dcount, 0, sizeof(int)));
  dynamic_and_coalesced<<<n / 256, 256>>>(din, dout, dcount, dslots);
  std::vector<int> g(n), slots(n);
  int count = 0;
  CHECK(cudaMemcpy(g.data(), dout, n * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&count, dcount, sizeof count, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(slots.data(), dslots, n * sizeof(int), cudaMemcpyDeviceToHost));
  int bad = 0;
  std::vector<int> div3;
  for (int i = 0; i < n; ++i) {
    const int b8 = i / 8 * 8, w = i / 32 * 32;
    int want = 0, same = 0, below = 0;
    for (int k = 0; k < 8; ++k) want += h[b8 + k];
    for (int k = 0; k < 32; ++k) {
      same += h[w + k] % 4 == h[i] % 4;
      below += w + k < i && h[w + k] % 4 == h[i] % 4;
    }
    bad += g[i] != want + same * 100000 + below * 1000;
    if (h[i] % 3 == 0) div3.push_back(i);
  }
  std::sort(slots.begin(), slots.begin() + std::min(count, n));
  const bool slots_ok = count == static_cast<int>(div3.size()) && std::equal(div3.begin(), div3.end(), slots.begin());
  std::printf("dynamic tiles + labeled: mismatches %d, out[0] %d\n", bad, g[0]);
  std::printf("coalesced aggregated atomic: %d slots, each taken once: %s\n", count, slots_ok ? "yes" : "no");
  EXPECT(bad == 0, "dynamic");
  EXPECT(slots_ok, "coalesced");
  CHECK(cudaFree(dcount));
  CHECK(cudaFree(dslots));
  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  return finish();
}
