// The one checking idiom for POSIX calls (every component above ipc uses it): a call that
// reports failure by a negative result and errno goes through FUNNEL_SYSCHECK, which returns
// its result or throws std::system_error naming the call; a failure found another way (a
// null handle, a short read) with errno set is thrown by throw_errno, which names what failed.
#pragma once
#include <cerrno>
#include <string>
#include <system_error>

namespace funnel::ipc {

[[noreturn]] inline void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

template <class T>
T check_sys(T rc, const char* call) {
  if (rc < 0) throw_errno(std::string(call) + " failed");
  return rc;
}

}  // namespace funnel::ipc

#define FUNNEL_SYSCHECK(call) ::funnel::ipc::check_sys((call), #call)
