// The job's run directory: a directory on a tmpfs, mode 0700, owned by the job's
// user, holding the server's socket, its start lock and the channel files.
#pragma once
#include <filesystem>
#include <string>

namespace funnel {

// The default: /dev/shm/funnel-<uid>-<job id> (or $TMPDIR/... when /dev/shm is absent).
std::filesystem::path default_run_dir(const std::string& job_id);

// Creates `dir` (0700) if needed and checks that it is a real directory (not a
// symlink) owned by this user with mode 0700.  Throws std::runtime_error naming
// the directory, the problem and the fix.
void ensure_run_dir(const std::filesystem::path& dir);

std::filesystem::path socket_path(const std::filesystem::path& run_dir);
std::filesystem::path start_lock_path(const std::filesystem::path& run_dir);

// Replaces characters that cannot appear in a file name.
std::string sanitize_for_filename(const std::string& s);

}  // namespace funnel
