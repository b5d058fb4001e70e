// One checking helper for POSIX calls: a failure becomes a std::system_error whose
// message names the call, so logs say which call failed and with which errno.
#pragma once
#include <cerrno>
#include <string>
#include <system_error>

namespace funnel::server {

template <class T>
T check_sys(T rc, const char* call) {
  if (rc < 0) throw std::system_error(errno, std::generic_category(), std::string(call) + " failed");
  return rc;
}

}  // namespace funnel::server

#define FUNNEL_SYSCHECK(expr) ::funnel::server::check_sys((expr), #expr)
