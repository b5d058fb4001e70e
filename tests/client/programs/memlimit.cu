// FUNNEL_DEVICE_MEM_LIMIT=0=64M (or CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=64M) through the
// client runtime: cudaMemGetInfo reports the limit, and cudaMalloc, cudaMallocPitch,
// cudaMalloc3D and cudaMallocAsync fail with cudaErrorMemoryAllocation past it.
#include "check.h"

static constexpr size_t MiB = size_t{1} << 20;

static void info(const char* when) {
  size_t free_bytes = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total));
  std::printf("%s: free %zu MiB of %zu MiB\n", when, free_bytes / MiB, total / MiB);
}

static void expect_oom(cudaError_t e, const char* what) {
  std::printf("%s: %s\n", what, cudaGetErrorName(e));
  // Not sticky: the next call works, and cudaGetLastError hands the error out once.
  std::printf("  last error: %s\n", cudaGetErrorName(cudaGetLastError()));
}

int main() {
  info("start");
  void *a = nullptr, *b = nullptr, *c = nullptr;
  CHECK(cudaMalloc(&a, 48 * MiB));
  expect_oom(cudaMalloc(&b, 32 * MiB), "cudaMalloc 32 MiB past the limit");
  std::printf("  pointer left null: %s\n", b == nullptr ? "yes" : "no");
  info("after 48 MiB");
  size_t pitch = 0;
  CHECK(cudaMallocPitch(&b, &pitch, 4096, 4096));  // 16 MiB: exactly up to the limit
  info("after 64 MiB");
  expect_oom(cudaMalloc(&c, 1), "cudaMalloc 1 byte at the limit");
  CHECK(cudaFree(b));
  cudaPitchedPtr p{};
  expect_oom(cudaMalloc3D(&p, make_cudaExtent(1024, 1024, 17)), "cudaMalloc3D 17 MiB");
  CHECK(cudaMalloc3D(&p, make_cudaExtent(1024, 1024, 16)));
  CHECK(cudaFree(p.ptr));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaMallocAsync(&c, 16 * MiB, s));
  expect_oom(cudaMallocAsync(&b, MiB, s), "cudaMallocAsync 1 MiB at the limit");
  CHECK(cudaFreeAsync(c, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(a));
  info("end");
  std::printf("done\n");
  return 0;
}
