// Finding or starting the job's funnel-server.  Used by funnel-run (so that the
// program's first CUDA call is fast) and by the client runtime (a program started
// without funnel-run still gets a server).
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "funnel/common/config.hpp"
#include "funnel/ipc/socket.hpp"

namespace funnel {

class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A connected socket to <run_dir>/server.sock.  If no server answers, takes the run
// directory's start lock and starts one (exactly one, however many processes race),
// waiting at most settings.attach_timeout.  Throws LaunchError whose message names
// the run directory (FUNNEL_RUN_DIR) and the fix.  *started (if given): whether this call
// started it.
ipc::UniqueFd connect_or_start_server(const Settings& settings, bool* started = nullptr);

// The environment a started server gets (`ours`: NAME=value strings): ours without funnel's
// libcudart and MPI hooks in LD_PRELOAD and without funnel's client driver folder
// (".../funnel-driver") in LD_LIBRARY_PATH, which funnel-run gives programs.
std::vector<std::string> server_environment(const std::vector<std::string>& ours);

// Connects to a running server only; an empty fd if none answers.
ipc::UniqueFd connect_server(const Settings& settings) noexcept;

// The funnel-server binary a client would start: settings.server_binary, else
// funnel-server in ../bin or in the same directory as the file that contains this code
// (the client library or funnel-run).
std::filesystem::path server_binary(const Settings& settings);

// The file (shared library or executable) that contains this code.
std::filesystem::path own_file();

// The state letter of process `pid` in /proc/<pid>/stat ('R', 'S', 'T' stopped, 'Z' zombie,
// ...); '\0' when it cannot be read.  The client's watcher and funnelctl shutdown look at
// the server's.
char process_state(pid_t pid) noexcept;

}  // namespace funnel
