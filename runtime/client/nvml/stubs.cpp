// Every nvml* function NVIDIA's NVML exports (nvml_symbols.txt, generated into nvml_stubs.inc by
// CMakeLists.txt), as a weak stub that answers NVML_ERROR_NOT_SUPPORTED and names itself once on
// stderr ("funnel: <name> is not supported yet", the client core's report, as funnel's driver's
// stubs do); the functions nvml.cpp serves override their stub. A stub takes no parameters: under
// the x86-64 calling convention a caller's arguments are simply left unread.
#include "log.hpp"

#define FUNNEL_NVML_STUB(name)                                         \
  extern "C" __attribute__((weak, visibility("default"))) int name() { \
    funnel::client::report_unsupported(#name);                         \
    return 3; /* NVML_ERROR_NOT_SUPPORTED */                           \
  }
#include "nvml_stubs.inc"
