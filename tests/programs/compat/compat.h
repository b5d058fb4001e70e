// Shared by the compatibility programs (tests/programs/compat): each program checks its
// results against a CPU reference, prints only what is identical natively and through funnel
// (no pointers, no timings), and ends with one PASS or FAIL line (exit code 0 or 1).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "check.h"

// A failed expectation: printed, counted, and the program ends with FAIL.
inline int& compat_failures() {
  static int n = 0;
  return n;
}
#define EXPECT(cond, ...)                                  \
  do {                                                     \
    if (!(cond)) {                                         \
      std::printf("MISMATCH %s:%d: ", __FILE__, __LINE__); \
      std::printf(__VA_ARGS__);                            \
      std::printf("\n");                                   \
      ++compat_failures();                                 \
    }                                                      \
  } while (0)

// Relative error check for floating-point results computed in a different order than the CPU.
inline bool close(double a, double b, double rel = 1e-5) {
  return std::fabs(a - b) <= rel * std::fmax(1.0, std::fmax(std::fabs(a), std::fabs(b)));
}

// Last line of every program.
inline int finish() {
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaGetLastError());
  const bool ok = compat_failures() == 0;
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

// Deterministic pseudo-random numbers, identical on host and device.
__host__ __device__ inline uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}
// In [-1, 1), multiples of 2^-23: exact in float.
__host__ __device__ inline float rnd(uint32_t i) { return static_cast<float>(hash32(i) >> 8) / 8388608.0f - 1.0f; }

// An optional positive integer argument (iteration counts of the benchmark-like programs).
inline int int_arg(int argc, char** argv, int i, int fallback) {
  if (argc <= i) return fallback;
  const int v = std::atoi(argv[i]);
  if (v <= 0) {
    std::printf("FAIL bad argument '%s'\n", argv[i]);
    std::exit(2);
  }
  return v;
}
