// Templates: one kernel template instantiated for many types and non-type parameters
// (40+ kernels in one fat binary), functor and lambda parameters, variadic templates.
#include <type_traits>
#include <vector>

#include "compat.h"

struct Pair {
  int a;
  short b;
  __host__ __device__ Pair operator+(const Pair& o) const { return {a + o.a, static_cast<short>(b + o.b)}; }
  __host__ __device__ bool operator!=(const Pair& o) const { return a != o.a || b != o.b; }
};

template <typename T>
__host__ __device__ T make(int i) {
  if constexpr (std::is_same_v<T, Pair>) {
    return {i, static_cast<short>(i % 300)};
  } else {
    return static_cast<T>(i % 100);
  }
}

template <typename T, int kScale, typename Op>
__global__ void apply(T* out, int n, Op op) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    T v = make<T>(i);
    for (int s = 0; s < kScale; ++s) v = op(v, make<T>(i + s));
    out[i] = v;
  }
}

template <typename... Ts>
__global__ void sum_args(long long* out, Ts... xs) {
  *out = (static_cast<long long>(xs) + ... + 0);
}

struct Plus {
  template <typename T>
  __host__ __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

template <typename T, int kScale>
int check_one(const char* tname) {
  const int n = 1000;
  T* d;
  CHECK(cudaMalloc(&d, n * sizeof(T)));
  apply<T, kScale><<<(n + 127) / 128, 128>>>(d, n, Plus{});
  CHECK(cudaGetLastError());
  std::vector<T> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    T v = make<T>(i);
    for (int s = 0; s < kScale; ++s) v = Plus{}(v, make<T>(i + s));
    bad += h[i] != v;
  }
  CHECK(cudaFree(d));
  std::printf("apply<%s,%d>: mismatches %d\n", tname, kScale, bad);
  EXPECT(bad == 0, "apply<%s,%d>", tname, kScale);
  return bad;
}

template <typename T>
void check_type(const char* tname) {
  check_one<T, 0>(tname);
  check_one<T, 1>(tname);
  check_one<T, 2>(tname);
  check_one<T, 3>(tname);
  check_one<T, 5>(tname);
  check_one<T, 8>(tname);
}

int main() {
  check_type<char>("char");
  check_type<short>("short");
  check_type<int>("int");
  check_type<unsigned long long>("u64");
  check_type<float>("float");
  check_type<double>("double");
  check_type<Pair>("Pair");
  // An extended lambda (nvcc --extended-lambda) as the operation.
  const int n = 512;
  int* d;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  const int k = 7;
  apply<int, 4><<<4, 128>>>(d, n, [k] __device__(int a, int b) { return a * k - b; });
  std::vector<int> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    int v = i % 100;
    for (int s = 0; s < 4; ++s) v = v * k - (i + s) % 100;
    bad += h[i] != v;
  }
  std::printf("lambda: mismatches %d\n", bad);
  EXPECT(bad == 0, "lambda");
  CHECK(cudaFree(d));

  long long* dl;
  long long r = 0;
  CHECK(cudaMalloc(&dl, sizeof r));
  sum_args<<<1, 1>>>(dl, 1, 2LL, static_cast<char>(3), 4.0, 5.0f, static_cast<short>(6), 7u);
  CHECK(cudaMemcpy(&r, dl, sizeof r, cudaMemcpyDeviceToHost));
  std::printf("variadic 7 args: %lld\n", r);
  EXPECT(r == 28, "variadic");
  sum_args<<<1, 1>>>(dl);
  CHECK(cudaMemcpy(&r, dl, sizeof r, cudaMemcpyDeviceToHost));
  std::printf("variadic 0 args: %lld\n", r);
  EXPECT(r == 0, "variadic empty");
  CHECK(cudaFree(dl));
  return finish();
}
