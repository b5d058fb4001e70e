// The client side of the server's control connection (funnelctl, the MPI hooks).
#pragma once
#include <stdexcept>
#include <string>

#include "funnel/common/config.hpp"

namespace funnel {

// Sends `verb` (stats, status, clients, plan, terminate, defaults, shutdown) with `arg`
// ("key=value ...", doc/funnelctl.md) to the server of settings.run_dir and returns its JSON
// answer.  Throws std::runtime_error naming the run directory when no server answers.
std::string control_request(const Settings& settings, const std::string& verb, const std::string& arg = {});

// The server's placement plan as text (`funnelctl plan`, FUNNEL_PRINT_PLAN), once at least
// `min_clients` clients are in it (an attach the server has not handled yet shows up within
// a few milliseconds) or after two seconds.  Throws as control_request does, or with the
// server's error.
std::string server_plan_text(const Settings& settings, size_t min_clients = 0);

}  // namespace funnel
