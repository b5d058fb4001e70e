// Warp-level and bit intrinsics: __ballot_sync, __any_sync, __all_sync, __activemask,
// __shfl_sync / __shfl_up_sync (warp inclusive scan), __match_any_sync, __reduce_add_sync,
// __syncwarp, __popc, __clz, __ffs, __brev, __byte_perm, __funnelshift_l, __dp4a, __ldg,
// __threadfence with a last-block-done pattern.
#include <vector>

#include "compat.h"

__device__ unsigned done_blocks;

__global__ void warp_ops(const unsigned* in, unsigned* out, unsigned* total) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
  const unsigned v = __ldg(in + i);
  unsigned* o = out + 16 * i;
  o[0] = __ballot_sync(0xffffffffu, v & 1);
  o[1] = __any_sync(0xffffffffu, v == 7) | (__all_sync(0xffffffffu, v < 0x80000000u) << 1);
  unsigned scan = v & 0xff;
  for (int d = 1; d < 32; d *= 2) {
    const unsigned up = __shfl_up_sync(0xffffffffu, scan, d);
    if (lane >= d) scan += up;
  }
  o[2] = scan;
  o[3] = __shfl_sync(0xffffffffu, v, 5);
  o[4] = __match_any_sync(0xffffffffu, v % 4);
  o[5] = __reduce_add_sync(0xffffffffu, v & 0xff);
  __syncwarp();
  const unsigned active = __activemask();  // converged: all 32 lanes
  o[6] = __popc(v);
  o[7] = __clz(v);
  o[8] = __ffs(v);
  o[9] = __brev(v);
  o[10] = __byte_perm(v, 0x01234567u, 0x7531);
  o[11] = __funnelshift_l(v, 0xdeadbeefu, lane);
  o[12] = static_cast<unsigned>(__dp4a(static_cast<int>(v), 0x01020304, 5));
  o[13] = lane % 2 ? active : 0;
  o[14] = o[15] = 0;
  atomicAdd(total, v & 0xff);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned prev = atomicInc(&done_blocks, gridDim.x - 1);
    if (prev == gridDim.x - 1) total[1] = atomicAdd(total, 0u);  // the last block sees every block's additions
  }
}

int main() {
  const int n = 8192;
  std::vector<unsigned> h(n), out(16 * n);
  for (int i = 0; i < n; ++i) h[i] = hash32(i) >> (i % 5);
  unsigned *din, *dout, *dtot;
  CHECK(cudaMalloc(&din, n * 4));
  CHECK(cudaMalloc(&dout, 16 * n * 4));
  CHECK(cudaMalloc(&dtot, 8));
  CHECK(cudaMemset(dtot, 0, 8));
  CHECK(cudaMemcpy(din, h.data(), n * 4, cudaMemcpyHostToDevice));
  warp_ops<<<n / 128, 128>>>(din, dout, dtot);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
  unsigned tot[2];
  CHECK(cudaMemcpy(tot, dtot, 8, cudaMemcpyDeviceToHost));
  int bad[14] = {};
  for (int w = 0; w < n / 32; ++w) {
    unsigned ballot = 0, sum = 0, scan = 0;
    bool any7 = false, all_small = true;
    for (int l = 0; l < 32; ++l) {
      const unsigned v = h[w * 32 + l];
      ballot |= (v & 1u) << l;
      sum += v & 0xff;
      any7 |= v == 7;
      all_small &= v < 0x80000000u;
    }
    for (int l = 0; l < 32; ++l) {
      const int i = w * 32 + l;
      const unsigned v = h[i];
      const unsigned* o = &out[16 * i];
      unsigned match = 0;
      for (int m = 0; m < 32; ++m) match |= (h[w * 32 + m] % 4 == v % 4 ? 1u : 0u) << m;
      scan += v & 0xff;
      const unsigned bytes[8] = {v & 0xff, v >> 8 & 0xff, v >> 16 & 0xff, v >> 24, 0x67, 0x45, 0x23, 0x01};
      const unsigned perm = bytes[1] | bytes[3] << 8 | bytes[5] << 16 | bytes[7] << 24;
      const unsigned long long cat = 0xdeadbeefull << 32 | v;  // hi:lo
      const unsigned fsl = static_cast<unsigned>(cat << l >> 32);
      int dp = 5;
      for (int b = 0; b < 4; ++b) dp += static_cast<signed char>(v >> (8 * b)) * (4 - b);
      unsigned brev = 0;
      for (int b = 0; b < 32; ++b) brev |= (v >> b & 1u) << (31 - b);
      const unsigned want[14] = {ballot,
                                 (any7 ? 1u : 0u) | (all_small ? 2u : 0u),
                                 scan,
                                 h[w * 32 + 5],
                                 match,
                                 sum,
                                 static_cast<unsigned>(__builtin_popcount(v)),
                                 v ? static_cast<unsigned>(__builtin_clz(v)) : 32,
                                 static_cast<unsigned>(__builtin_ffs(static_cast<int>(v))),
                                 brev,
                                 perm,
                                 fsl,
                                 static_cast<unsigned>(dp),
                                 l % 2 ? 0xffffffffu : 0};
      for (int k = 0; k < 14; ++k) bad[k] += o[k] != want[k];
    }
  }
  const char* names[14] = {"ballot", "any/all", "shfl_up scan", "shfl",      "match_any",   "reduce_add", "popc",
                           "clz",    "ffs",     "brev",         "byte_perm", "funnelshift", "dp4a",       "activemask"};
  for (int k = 0; k < 14; ++k) {
    std::printf("%-12s mismatches %d\n", names[k], bad[k]);
    EXPECT(bad[k] == 0, "%s", names[k]);
  }
  unsigned long long want_total = 0;
  for (unsigned v : h) want_total += v & 0xff;
  std::printf("threadfence total %u, as the last block saw it %u\n", tot[0], tot[1]);
  EXPECT(tot[0] == want_total && tot[1] == want_total, "threadfence");
  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  CHECK(cudaFree(dtot));
  return finish();
}
