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
// started it.  `locked` (if given) is called once a server answered or this call holds the
// start lock, before it starts one: funnel-run's background start (below) waits for it.
ipc::UniqueFd connect_or_start_server(const Settings& settings, bool* started = nullptr,
                                      void (*locked)(void*) = nullptr, void* locked_arg = nullptr);

// funnel-run's start of a server that does not answer yet (doc/user-guide.md, "funnel-run"):
// a detached process (not the program's child) takes the start lock and starts the server
// while the program starts; this returns once that process holds the lock or found a server
// (so a program's first CUDA call waits for that start rather than making its own), or
// throws LaunchError when it failed before (run directory refused, no fork).  The error of a
// start that fails later is printed by that process ("funnel-run: ...") and met again by the
// program's first CUDA call.  Sets FUNNEL_RUN_STARTING=1 for the program
// (wait_for_background_start).
void start_server_in_background(const Settings& settings);

// Whether funnel-run started the server in the background for this process (FUNNEL_RUN_STARTING=1).
bool started_in_background() noexcept;

// For a process that never attached, at its exit: when funnel-run started the server in the
// background (FUNNEL_RUN_STARTING=1), waits (at most settings.attach_timeout) until that start
// is over, so that `funnel-run true` still returns with the server up.  Never throws.
void wait_for_background_start(const Settings& settings) noexcept;

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
