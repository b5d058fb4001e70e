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
