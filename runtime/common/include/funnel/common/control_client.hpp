// The client side of the server's control connection (funnelctl, the MPI hooks).
#pragma once
#include <stdexcept>
#include <string>

#include "funnel/common/config.hpp"

namespace funnel {

// Sends `verb` (stats, shutdown) to the server of settings.run_dir and returns its JSON
// answer.  Throws std::runtime_error naming the run directory when no server answers.
std::string control_request(const Settings& settings, const std::string& verb);

}  // namespace funnel
