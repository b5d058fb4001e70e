// Atomics: atomicAdd on int, unsigned long long, float and double (values chosen so any
// order gives the exact sum), atomicSub/Min/Max/Exch/Inc/And/Or/Xor, atomicCAS loops
// (a double max built from CAS), a histogram, block-scope and system-scope variants.
#include <algorithm>
#include <climits>
#include <vector>

#include "compat.h"

struct Counters {
  int add, sub, mn, mx, exch_seen, and_, or_, xor_;
  unsigned inc;
  unsigned long long add64;
  float addf;
  double addd, cas_max;
};

__device__ double atomic_max_double(double* addr, double v) {
  auto* p = reinterpret_cast<unsigned long long*>(addr);
  unsigned long long old = *p, assumed;
  do {
    assumed = old;
    if (__longlong_as_double(assumed) >= v) break;
    old = atomicCAS(p, assumed, __double_as_longlong(v));
  } while (old != assumed);
  return __longlong_as_double(old);
}

__global__ void hammer(Counters* c, int* exch, unsigned* hist, int n) {
  __shared__ int seen;  // block-scope atomics on shared memory, then one device-scope add
  if (threadIdx.x == 0) seen = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    const uint32_t h = hash32(i);
    atomicAdd(&c->add, static_cast<int>(h % 7));
    atomicSub(&c->sub, 1);
    atomicMin(&c->mn, static_cast<int>(h % 100000) - 50000);
    atomicMax(&c->mx, static_cast<int>(h % 100000) - 50000);
    atomicAnd(&c->and_, ~(1 << (i % 31)) | (i % 2));
    atomicOr(&c->or_, 1 << (i % 29));
    atomicXor(&c->xor_, static_cast<int>(h & 0xff));
    atomicInc(&c->inc, 999);
    atomicAdd(&c->add64, static_cast<unsigned long long>(h));
    atomicAdd(&c->addf, static_cast<float>(h % 4) * 0.25f);  // sums < 2^24/4: exact in any order
    atomicAdd(&c->addd, static_cast<double>(h % 1024) / 1024.0);
    atomic_max_double(&c->cas_max, static_cast<double>(h) / 4294967296.0);
    const int old = atomicExch(exch, i);
    if (old >= 0) atomicAdd_block(&seen, 1);
    atomicAdd_system(&hist[h % 64], 1u);
  }
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(&c->exch_seen, seen);
}

int main() {
  const int n = 2'000'000;
  Counters init{};
  init.mn = INT_MAX;
  init.mx = INT_MIN;
  init.and_ = -1;
  init.cas_max = -1.0;
  Counters ref = init;
  std::vector<unsigned> href(64, 0);
  for (int i = 0; i < n; ++i) {
    const uint32_t h = hash32(i);
    ref.add += static_cast<int>(h % 7);
    ref.sub -= 1;
    ref.mn = std::min(ref.mn, static_cast<int>(h % 100000) - 50000);
    ref.mx = std::max(ref.mx, static_cast<int>(h % 100000) - 50000);
    ref.and_ &= ~(1 << (i % 31)) | (i % 2);
    ref.or_ |= 1 << (i % 29);
    ref.xor_ ^= static_cast<int>(h & 0xff);
    ref.inc = ref.inc >= 999 ? 0 : ref.inc + 1;
    ref.add64 += h;
    ref.addf += static_cast<float>(h % 4) * 0.25f;
    ref.addd += static_cast<double>(h % 1024) / 1024.0;
    ref.cas_max = std::max(ref.cas_max, static_cast<double>(h) / 4294967296.0);
    ++href[h % 64];
  }
  ref.exch_seen = n - 1;
  Counters* dc;
  int* dexch;
  unsigned* dhist;
  CHECK(cudaMalloc(&dc, sizeof(Counters)));
  CHECK(cudaMalloc(&dexch, sizeof(int)));
  CHECK(cudaMalloc(&dhist, 64 * sizeof(unsigned)));
  CHECK(cudaMemcpy(dc, &init, sizeof init, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dexch, 0xff, sizeof(int)));
  CHECK(cudaMemset(dhist, 0, 64 * sizeof(unsigned)));
  hammer<<<264, 256>>>(dc, dexch, dhist, n);
  CHECK(cudaGetLastError());
  Counters got;
  std::vector<unsigned> hist(64);
  CHECK(cudaMemcpy(&got, dc, sizeof got, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hist.data(), dhist, 64 * sizeof(unsigned), cudaMemcpyDeviceToHost));
  std::printf("add %d sub %d min %d max %d and %d or %d xor %d\n", got.add, got.sub, got.mn, got.mx, got.and_, got.or_,
              got.xor_);
  std::printf("add64 %llu addf %.2f addd %.6f cas_max %.9f exch_seen %d\n", got.add64, got.addf, got.addd, got.cas_max,
              got.exch_seen);
  EXPECT(got.add == ref.add && got.sub == ref.sub && got.mn == ref.mn && got.mx == ref.mx, "int atomics");
  EXPECT(got.and_ == ref.and_ && got.or_ == ref.or_ && got.xor_ == ref.xor_, "bitwise atomics");
  EXPECT(got.add64 == ref.add64, "atomicAdd u64");
  EXPECT(got.addf == ref.addf, "atomicAdd float %.3f vs %.3f", got.addf, ref.addf);
  EXPECT(got.addd == ref.addd, "atomicAdd double");
  EXPECT(got.cas_max == ref.cas_max, "CAS max");
  EXPECT(got.exch_seen == ref.exch_seen, "atomicExch");
  // atomicInc wraps, so its final value depends on nothing but the count.
  std::printf("inc %u (cpu %u)\n", got.inc, ref.inc);
  EXPECT(got.inc == ref.inc, "atomicInc");
  int bad = 0;
  for (int b = 0; b < 64; ++b) bad += hist[b] != href[b];
  std::printf("histogram bins wrong: %d, bin0 %u\n", bad, hist[0]);
  EXPECT(bad == 0, "histogram");
  CHECK(cudaFree(dc));
  CHECK(cudaFree(dexch));
  CHECK(cudaFree(dhist));
  return finish();
}
