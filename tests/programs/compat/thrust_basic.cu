// Thrust on device_vector: sequence, transform (functor and binary functor), sort_by_key,
// reduce, transform_reduce, inclusive_scan, count_if, unique, max_element, copy back to
// host_vector. Thrust launches its kernels through the same runtime entry points as any code.
#include <thrust/count.h>
#include <thrust/device_vector.h>
#include <thrust/extrema.h>
#include <thrust/functional.h>
#include <thrust/host_vector.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>
#include <thrust/unique.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "compat.h"

struct Hash {
  __host__ __device__ int operator()(int i) const {
    return static_cast<int>(hash32(static_cast<uint32_t>(i)) % 100000);
  }
};
struct Square {
  __host__ __device__ long long operator()(int v) const { return static_cast<long long>(v) * v; }
};
struct IsEven {
  __host__ __device__ bool operator()(int v) const { return v % 2 == 0; }
};

int main() {
  const int n = 1 << 20;
  thrust::device_vector<int> idx(n);
  thrust::sequence(idx.begin(), idx.end());
  thrust::device_vector<int> v(n);
  thrust::transform(idx.begin(), idx.end(), v.begin(), Hash{});
  std::vector<int> ref(n);
  for (int i = 0; i < n; ++i) ref[i] = Hash{}(i);

  const long long sum = thrust::reduce(v.begin(), v.end(), 0LL);
  const long long sq = thrust::transform_reduce(v.begin(), v.end(), Square{}, 0LL, thrust::plus<long long>());
  const auto evens = thrust::count_if(v.begin(), v.end(), IsEven{});
  const int mx = *thrust::max_element(v.begin(), v.end());
  long long rsum = 0, rsq = 0, revens = 0;
  for (int x : ref) {
    rsum += x;
    rsq += static_cast<long long>(x) * x;
    revens += x % 2 == 0;
  }
  std::printf("reduce %lld, sum of squares %lld, evens %lld, max %d\n", sum, sq, static_cast<long long>(evens), mx);
  EXPECT(sum == rsum && sq == rsq && evens == revens && mx == *std::max_element(ref.begin(), ref.end()), "reductions");

  thrust::device_vector<int> scanned(n);
  thrust::inclusive_scan(v.begin(), v.begin() + 1000, scanned.begin());
  thrust::host_vector<int> hs(scanned.begin(), scanned.begin() + 1000);
  std::vector<int> rs(1000);
  std::partial_sum(ref.begin(), ref.begin() + 1000, rs.begin());
  std::printf("scan[999] %d\n", hs[999]);
  EXPECT(std::equal(rs.begin(), rs.end(), hs.begin()), "scan");

  thrust::device_vector<int> keys = v;
  thrust::sort_by_key(keys.begin(), keys.end(), idx.begin());
  thrust::host_vector<int> hk = keys, hi = idx;
  bool sorted = true, pairs = true;
  for (int i = 0; i < n; ++i) {
    if (i > 0 && hk[i - 1] > hk[i]) sorted = false;
    if (ref[hi[i]] != hk[i]) pairs = false;
  }
  std::printf("sort_by_key: sorted %s, pairs kept %s, first %d last %d\n", sorted ? "yes" : "no", pairs ? "yes" : "no",
              static_cast<int>(hk[0]), static_cast<int>(hk[n - 1]));
  EXPECT(sorted && pairs, "sort_by_key");

  const auto end = thrust::unique(keys.begin(), keys.end());
  std::sort(ref.begin(), ref.end());
  const long long distinct = std::unique(ref.begin(), ref.end()) - ref.begin();
  std::printf("distinct values %lld\n", static_cast<long long>(end - keys.begin()));
  EXPECT(end - keys.begin() == distinct, "unique");

  thrust::device_vector<double> dv(1000);
  thrust::sequence(dv.begin(), dv.end(), 0.5, 0.25);
  thrust::transform(dv.begin(), dv.end(), dv.begin(), dv.begin(), thrust::multiplies<double>());
  const double dsum = thrust::reduce(dv.begin(), dv.end());
  double rd = 0;
  for (int i = 0; i < 1000; ++i) rd += (0.5 + 0.25 * i) * (0.5 + 0.25 * i);
  std::printf("double squares sum %.4f (cpu %.4f)\n", dsum, rd);
  EXPECT(close(dsum, rd, 1e-12), "double");
  return finish();
}
