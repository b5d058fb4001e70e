// At load time: warn (once) when the main program carries its own static CUDA runtime and the
// libcuda.so.1 it will find is NVIDIA's: its CUDA work would then bypass funnel, on a context of
// its own.  funnel-run refuses such programs with FUNNEL_CLIENT_DRIVER=0; here the library only
// warns, since it may be loaded by anything.
#include <dlfcn.h>
#include <unistd.h>

#include "funnel/common/elf_check.hpp"
#include "log.hpp"

namespace {

// Whether the libcuda.so.1 this process finds is funnel's client driver.  Loading NVIDIA's only
// maps it (it opens the GPU at cuInit), which the program's runtime would do anyway.
bool finds_funnels_driver() noexcept {
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  const bool ours = lib != nullptr && dlsym(lib, "funnel_client_driver") != nullptr;
  if (lib != nullptr) dlclose(lib);
  return ours;
}

__attribute__((constructor)) void funnel_check_main_program() noexcept {
  try {
    if (auto info = funnel::inspect_elf("/proc/self/exe");
        info && funnel::uses_static_cudart(*info) && !finds_funnels_driver()) {
      char buf[4096];
      const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
      const std::string prog = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("the program");
      funnel::client::log_error("funnel: warning: " + funnel::static_cudart_message(prog));
    }
  } catch (...) {
  }
}

}  // namespace
