// Messages to the application's stderr.  One write(2) per line, so that lines of
// several threads or ranks do not interleave.
#pragma once
#include <string>

#include <fmt/format.h>

namespace funnel::client {

void log_error(const std::string& line) noexcept;

// Prints "funnel: <name> is not supported yet" the first time `name` is reported.
void report_unsupported(const char* name) noexcept;

}  // namespace funnel::client
