// Parameter types shared by launch_kernels.cu (device side) and kernels_test.cpp (host
// side, which packs arguments into the layout the server reports).  Plain C++ only.
// The padded and over-aligned structs are tests/fatbin's.
#pragma once
#include "kernel_types.h"

namespace server_test {

using fatbin_test::Aligned8;  // alignas(8) {int; short}
using fatbin_test::Padded;    // {char; double; int}: 24 bytes with padding

struct Block4k {  // a large by-value parameter
  unsigned char bytes[4000];
};

}  // namespace server_test
