// Parameter types shared by kernels.cu (device side) and the test (host side, which
// computes the expected layouts with offsetof/sizeof/alignof).  Plain C++ only.
#pragma once
#include <cstdint>

namespace fatbin_test {

struct Padded {
  char c;
  double d;
  int i;
};

struct alignas(8) Aligned8 {
  int a;
  short b;
};

struct alignas(16) Aligned16 {
  float x, y, z, w;
};

struct Big {
  unsigned char bytes[1024];
};

// Over 4 KiB of parameters (allowed since CUDA 12.1): nvcc records the list with
// EIATTR_KPARAM_INFO_V2 instead of EIATTR_KPARAM_INFO.
struct Huge {
  unsigned char bytes[20000];
};

}  // namespace fatbin_test
