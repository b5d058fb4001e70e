// Every function the NVIDIA driver exports, as a weak stub that answers CUDA_ERROR_NOT_SUPPORTED
// and names itself once on stderr; the functions funnel serves override their stub. The list is
// runtime/client/driver/driver_symbols.txt (the driver's exports). A stub takes no parameters:
// under the x86-64 calling convention a caller's arguments are simply left unread.
#include "driver.hpp"

#define FUNNEL_DRIVER_STUB(name) \
  extern "C" __attribute__((weak, visibility("default"))) int name() { return funnel::driver::not_supported(#name); }
#include "driver_stubs.inc"
