// At load time: warn (once) when the main program carries its own static CUDA
// runtime; its CUDA calls then bypass funnel.  funnel-run refuses such programs;
// here the library only warns, since it may be loaded by anything.
#include <unistd.h>

#include "funnel/common/elf_check.hpp"
#include "log.hpp"

namespace {

__attribute__((constructor)) void funnel_check_main_program() noexcept {
  try {
    if (auto info = funnel::inspect_elf("/proc/self/exe"); info && funnel::uses_static_cudart(*info)) {
      char buf[4096];
      const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
      const std::string prog = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("the program");
      funnel::client::log_error("funnel: warning: " + funnel::static_cudart_message(prog));
    }
  } catch (...) {
  }
}

}  // namespace
