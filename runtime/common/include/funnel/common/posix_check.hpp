// The one checking macro for POSIX calls that report failure as -1 + errno:
// throws std::system_error naming the call, so no failure goes unnoticed.
#pragma once
#include <cerrno>
#include <system_error>

#define FUNNEL_POSIX(call)                                                          \
  ([&]() {                                                                          \
    auto funnel_rc_ = (call);                                                       \
    if (funnel_rc_ == -1) throw std::system_error(errno, std::generic_category(), #call); \
    return funnel_rc_;                                                              \
  }())
