// What tests/mpi/device_buffers.cu and local_messages.cu share: FAIL lines counted per rank, and
// device buffers of ints filled with values that say which rank made them.
#pragma once
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "check.h"

namespace {

int g_rank = 0, g_size = 0, g_failed = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAIL rank %d: %s\n", g_rank, what);
    std::fflush(stdout);
    ++g_failed;
  }
}

// A device copy of `v` (one int of room when it is empty).
int* device_ints(const std::vector<int>& v) {
  int* d = nullptr;
  CHECK(cudaMalloc(&d, (v.empty() ? 1 : v.size()) * sizeof(int)));
  if (!v.empty()) CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(int), cudaMemcpyHostToDevice));
  return d;
}
std::vector<int> host_of(const int* d, size_t n) {
  std::vector<int> v(n);
  CHECK(cudaMemcpy(v.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  return v;
}
std::vector<int> values(int rank, size_t n, int salt) {
  std::vector<int> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = rank * 100000 + salt * 1000 + static_cast<int>(i);
  return v;
}

}  // namespace
