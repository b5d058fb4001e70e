// The job's run directory: a directory on a tmpfs, mode 0700, owned by the job's user,
// holding the server's socket, its start lock and the channel files; and the server's log
// directory.  funnel removes only what it made: a run directory carries a marker file
// (kRunDirMarker) that says whether funnel created it or adopted it empty.
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <string>

namespace funnel {

// Marks a run directory as funnel's; its text is "created" or "adopted".
inline constexpr const char* kRunDirMarker = ".funnel-run-dir";

// The default: /dev/shm/funnel-<uid>-<job id> (or $TMPDIR/... when /dev/shm is absent).
std::filesystem::path default_run_dir(const std::string& job_id);

// Creates `dir` (0700) if needed and checks that it is a real directory (not a symlink)
// owned by this user with mode 0700 that funnel made or found empty (a directory holding
// files funnel did not make is refused: funnel removes files there).  Throws
// std::runtime_error naming the directory, the problem and the fix.
void ensure_run_dir(const std::filesystem::path& dir);

// Removes what funnel made in `dir`: channel and pinned files, the socket (its file and a
// dead server's half-bound name), the start lock and the marker, and the directory itself
// when funnel created it and nothing else is left.  Files of other names stay, and so does
// everything in a directory without the marker.
void remove_run_dir_files(const std::filesystem::path& dir, bool socket_too);

// True when connecting to the run directory's socket is refused or finds no socket: no
// server listens there (a full backlog or any other error is no such answer).
bool no_server_listens(const std::filesystem::path& dir) noexcept;

// After a server died without cleaning up (SIGKILL): when no server listens in `dir` and
// nobody holds its start lock (a client starting a new one), removes the dead server's
// files as remove_run_dir_files does.  True when it removed them.  With `server_pid`, first
// waits (5 s at most) until that process has exited, its listening socket closed with it.
bool reclaim_dead_run_dir(const std::filesystem::path& dir, pid_t server_pid = 0) noexcept;

std::filesystem::path socket_path(const std::filesystem::path& run_dir);
std::filesystem::path start_lock_path(const std::filesystem::path& run_dir);

// The default FUNNEL_LOG_DIR: /tmp/funnel-<uid>-logs.
std::filesystem::path default_log_dir();

// Creates the log directory (0700, parents as needed) and checks it: a real directory (not
// a symlink), owned by this user, writable by no one else, so that no other user can plant
// a file or a link where the server writes.  Returns the directory to use: `dir`, or, when
// `dir` is the default and fails the checks (planted by someone else), a new private
// directory beside it (`fallback_from` then names the refused one).  Throws
// std::runtime_error naming the directory, the problem and the fix.
std::filesystem::path ensure_log_dir(const std::filesystem::path& dir, std::string* fallback_from = nullptr);

// Opens `name` in the checked directory `dir` for writing without following a link
// (O_NOFOLLOW), creating it 0600; `exclusive`: it must not exist yet.  Returns the
// descriptor, or -1 with errno set.
int open_private_file(const std::filesystem::path& dir, const std::string& name, bool exclusive, bool append) noexcept;

// Replaces characters that cannot appear in a file name.
std::string sanitize_for_filename(const std::string& s);

}  // namespace funnel
