#include "funnel/common/run_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "funnel/ipc/protocol.hpp"

namespace funnel {

std::string sanitize_for_filename(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    const bool okc = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                     c == '_' || c == '-';
    if (!okc) c = '_';
  }
  return out;
}

std::filesystem::path default_run_dir(const std::string& job_id) {
  std::filesystem::path base = "/dev/shm";
  struct stat st {};
  if (::stat(base.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    const char* tmp = std::getenv("TMPDIR");
    base = (tmp != nullptr && tmp[0] == '/') ? tmp : "/tmp";
  }
  return base / fmt::format("funnel-{}-{}", ::geteuid(), sanitize_for_filename(job_id));
}

void ensure_run_dir(const std::filesystem::path& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error(fmt::format("cannot create the run directory {}: {}. Set FUNNEL_RUN_DIR to a "
                                         "writable directory on a tmpfs",
                                         dir.string(), std::strerror(errno)));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    throw std::runtime_error(fmt::format("cannot inspect the run directory {}: {}", dir.string(), std::strerror(errno)));
  if (!S_ISDIR(st.st_mode))
    throw std::runtime_error(fmt::format("the run directory {} is not a directory (a symlink or a file?): remove it "
                                         "or set FUNNEL_RUN_DIR elsewhere",
                                         dir.string()));
  if (st.st_uid != ::geteuid())
    throw std::runtime_error(fmt::format("the run directory {} belongs to uid {}, not to this user (uid {}): set "
                                         "FUNNEL_RUN_DIR to a directory of your own",
                                         dir.string(), st.st_uid, ::geteuid()));
  if ((st.st_mode & 0777) != 0700)
    throw std::runtime_error(fmt::format("the run directory {} has mode {:o}; funnel needs 0700 so that no other "
                                         "user can reach the server: chmod 700 it or remove it",
                                         dir.string(), st.st_mode & 0777));
}

std::filesystem::path socket_path(const std::filesystem::path& run_dir) { return run_dir / ipc::kSocketName; }
std::filesystem::path start_lock_path(const std::filesystem::path& run_dir) { return run_dir / ipc::kStartLockName; }

}  // namespace funnel
