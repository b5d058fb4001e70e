// Shared by the mpi test programs (sim backend: copies and memsets only).
#pragma once
#include <cstddef>
#include <cstdio>
#include <vector>

#include "check.h"

// Writes a rank-specific pattern, memsets the middle on the device, reads it back and frees.
// 0 when every byte came back as expected, 1 (with a FAIL line) otherwise; a CUDA error
// ends the process (CHECK).
inline int round_trip(int rank, int round) {
  const size_t n = (1u << 20) + 7 * static_cast<size_t>(rank);  // odd sizes: staged in pieces
  std::vector<unsigned char> in(n), out(n, 0);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<unsigned char>(i * 31 + rank * 7 + round);
  void* d = nullptr;
  CHECK(cudaMalloc(&d, n));
  CHECK(cudaMemcpy(d, in.data(), n, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(static_cast<char*>(d) + n / 4, 0xAB, n / 2));
  CHECK(cudaMemcpy(out.data(), d, n, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(d));
  for (size_t i = 0; i < n; ++i) {
    const unsigned char want = (i >= n / 4 && i < n / 4 + n / 2) ? 0xAB : in[i];
    if (out[i] != want) {
      std::printf("FAIL rank %d round %d: byte %zu is %d, expected %d\n", rank, round, i, out[i], want);
      return 1;
    }
  }
  return 0;
}
