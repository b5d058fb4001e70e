// The driver test programs' check (driver_sim.cpp, driver_launch.cpp): a call's result against
// the one expected, a FAIL line naming both, counted in `failures` (the program's exit status).
#pragma once
#include <cstdio>

static int failures = 0;
#define CHECK(call, want)                                                                              \
  do {                                                                                                 \
    const int got_ = static_cast<int>(call);                                                           \
    if (got_ != static_cast<int>(want)) {                                                              \
      std::printf("FAIL line %d: %s -> %d, want %d\n", __LINE__, #call, got_, static_cast<int>(want)); \
      ++failures;                                                                                      \
    }                                                                                                  \
  } while (0)

// The driver's export table `id` (32 hex digits, as the tracer prints them), as its words; a FAIL
// when the driver refuses it.
#ifdef __cuda_cuda_h__
#include <cstring>
static void* const* export_table(const char* id) {
  CUuuid u{};
  for (int i = 0; i < 16; ++i) {
    unsigned byte = 0;
    std::sscanf(id + 2 * i, "%2x", &byte);
    u.bytes[i] = static_cast<char>(byte);
  }
  const void* table = nullptr;
  CHECK(cuGetExportTable(&table, &u), CUDA_SUCCESS);
  return static_cast<void* const*>(const_cast<void*>(table));
}
#endif
