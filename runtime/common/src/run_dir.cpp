#include "funnel/common/run_dir.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "funnel/common/launcher.hpp"
#include "funnel/ipc/protocol.hpp"
#include "funnel/ipc/socket.hpp"

namespace funnel {
namespace fs = std::filesystem;

namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Whether the directory is marked as funnel's (its text may still be on its way).
bool marked(const fs::path& dir) {
  struct stat st {};
  return ::lstat((dir / kRunDirMarker).c_str(), &st) == 0;
}

// The marker's text, "" when there is none.
std::string marker_of(const fs::path& dir) {
  const int fd = ::open((dir / kRunDirMarker).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[16] = {};
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// The creator's marker replaces any other (an adopter that saw the new directory empty
// before it was marked); an adopter never replaces one.
void write_marker(const fs::path& dir, bool created) {
  const std::string_view text = created ? "created" : "adopted";
  const fs::path marker = dir / kRunDirMarker;
  const fs::path tmp = dir / fmt::format("{}.{}", kRunDirMarker, ::getpid());
  const int fd = ::open((created ? tmp : marker).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST && !created) return;  // marked meanwhile
    throw std::runtime_error(fmt::format("cannot mark the run directory {}: {}", dir.string(), std::strerror(errno)));
  }
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (created && (!written || ::rename(tmp.c_str(), marker.c_str()) != 0)) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("cannot mark the run directory {}: {}", dir.string(), std::strerror(err)));
  }
}

// A name in the directory that funnel did not make ("" when there is none).
std::string foreign_entry(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!starts_with(name, kRunDirMarker)) return name;
  }
  return "";
}

// Checks what lstat says of a directory funnel writes in; throws naming `what` and the fix.
void check_own_directory(const fs::path& dir, const char* what, const char* variable, bool exactly_0700) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    throw std::runtime_error(fmt::format("cannot inspect the {} {}: {}", what, dir.string(), std::strerror(errno)));
  if (!S_ISDIR(st.st_mode))
    throw std::runtime_error(fmt::format("the {} {} is not a directory (a symlink or a file?): remove it or set {} "
                                         "elsewhere",
                                         what, dir.string(), variable));
  if (st.st_uid != ::geteuid())
    throw std::runtime_error(fmt::format("the {} {} belongs to uid {}, not to this user (uid {}): set {} to a "
                                         "directory of your own",
                                         what, dir.string(), st.st_uid, ::geteuid(), variable));
  if (exactly_0700 && (st.st_mode & 0777) != 0700)
    throw std::runtime_error(fmt::format("the {} {} has mode {:o}; funnel needs 0700 so that no other user can "
                                         "reach the server: chmod 700 it or remove it",
                                         what, dir.string(), st.st_mode & 0777));
  if (!exactly_0700 && (st.st_mode & 022) != 0)
    throw std::runtime_error(fmt::format("the {} {} has mode {:o}: other users could plant files or links in it; "
                                         "chmod go-w it, or set {} to a directory of your own",
                                         what, dir.string(), st.st_mode & 0777, variable));
}

}  // namespace

bool no_server_listens(const fs::path& dir) noexcept {
  int err = 0;
  if (ipc::connect_seqpacket(socket_path(dir), err)) return false;
  // Only a refused connection or a missing socket is an answer; anything else (a full
  // backlog, a signal) says nothing about the server.
  return err == ECONNREFUSED || err == ENOENT;
}

std::string sanitize_for_filename(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    const bool okc = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                     c == '_' || c == '-';
    if (!okc) c = '_';
  }
  return out;
}

fs::path default_run_dir(const std::string& job_id) {
  fs::path base = "/dev/shm";
  struct stat st {};
  if (::stat(base.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    const char* tmp = std::getenv("TMPDIR");
    base = (tmp != nullptr && tmp[0] == '/') ? tmp : "/tmp";
  }
  return base / fmt::format("funnel-{}-{}", ::geteuid(), sanitize_for_filename(job_id));
}

void ensure_run_dir(const fs::path& dir) {
  const bool created = ::mkdir(dir.c_str(), 0700) == 0;
  if (!created && errno != EEXIST)
    throw std::runtime_error(fmt::format("cannot create the run directory {}: {}. Set FUNNEL_RUN_DIR to a "
                                         "writable directory on a tmpfs",
                                         dir.string(), std::strerror(errno)));
  check_own_directory(dir, "run directory", "FUNNEL_RUN_DIR", true);
  if (created) {
    write_marker(dir, true);
    return;
  }
  if (marked(dir)) return;
  // funnel marks a directory before it makes anything in it: a file seen here while the
  // marker is there by now was funnel's (another process adopted the directory meanwhile).
  if (const std::string other = foreign_entry(dir); !other.empty() && !marked(dir))
    throw std::runtime_error(fmt::format("the run directory {} holds files funnel did not make (e.g. '{}'); funnel "
                                         "removes the files it makes there and the directory when the server stops, "
                                         "so it needs one of its own: set FUNNEL_RUN_DIR to a new or empty directory",
                                         dir.string(), other));
  write_marker(dir, false);
}

void remove_run_dir_files(const fs::path& dir, bool socket_too) {
  if (!marked(dir)) return;  // not funnel's: nothing in it is
  const bool created = marker_of(dir) == "created";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    // A listening_name whose server is gone: killed between its bind and its link.
    const pid_t bound_by = ipc::listening_name_pid(name);
    const bool unlinked_socket = bound_by != 0 && ::kill(bound_by, 0) != 0 && errno == ESRCH;
    const bool ours = starts_with(name, ipc::kChannelFilePrefix) || starts_with(name, ipc::kPinnedFilePrefix) ||
                      unlinked_socket || (socket_too && (name == ipc::kSocketName || name == ipc::kStartLockName));
    if (ours) {
      std::error_code rm;
      fs::remove(e.path(), rm);
    }
  }
  if (!socket_too) return;
  // The marker last: a process starting meanwhile sees funnel's files only beside it.
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (starts_with(e.path().filename().string(), kRunDirMarker)) {
      std::error_code rm;
      fs::remove(e.path(), rm);
    }
  // rmdir fails where anything else is left: that stays, and so does the directory.
  if (created) ::rmdir(dir.c_str());
}

bool reclaim_dead_run_dir(const fs::path& dir, pid_t server_pid) noexcept {
  try {
    // The connection's hang-up can come before the dying server's listening socket is
    // closed (the kernel closes a killed process's descriptors one by one): a connect then
    // still succeeds.  A zombie or a vanished process has closed them all.
    for (int i = 0; i < 500 && server_pid > 0; ++i) {  // 5 s at most
      const char state = process_state(server_pid);
      if (state == '\0' || state == 'Z' || state == 'X') break;
      ::usleep(10'000);
    }
    if (!marked(dir) || !no_server_listens(dir)) return false;
    // The start lock keeps us from removing the files of a server being started now.
    const int lock = ::open(start_lock_path(dir).c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (lock < 0) return false;
    const bool locked = ::flock(lock, LOCK_EX | LOCK_NB) == 0;
    bool removed = false;
    if (locked && no_server_listens(dir)) {
      remove_run_dir_files(dir, true);
      removed = true;
    }
    ::close(lock);
    return removed;
  } catch (...) {
    return false;
  }
}

fs::path socket_path(const fs::path& run_dir) { return run_dir / ipc::kSocketName; }
fs::path start_lock_path(const fs::path& run_dir) { return run_dir / ipc::kStartLockName; }

fs::path default_log_dir() { return fmt::format("/tmp/funnel-{}-logs", ::geteuid()); }

fs::path ensure_log_dir(const fs::path& dir, std::string* fallback_from) {
  std::error_code ec;
  if (dir.has_parent_path()) fs::create_directories(dir.parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error(fmt::format("cannot create the log directory {}: {}. Set FUNNEL_LOG_DIR to a writable "
                                         "directory",
                                         dir.string(), std::strerror(errno)));
  try {
    check_own_directory(dir, "log directory", "FUNNEL_LOG_DIR", false);
    return dir;
  } catch (const std::runtime_error& e) {
    if (dir != default_log_dir()) throw;
    // The default name is predictable: someone else may have made it first.  A directory
    // of our own beside it instead, never theirs.
    std::string tmpl = dir.string() + ".XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error(fmt::format("{}; and cannot create a private one beside it: {}", e.what(),
                                           std::strerror(errno)));
    if (fallback_from != nullptr) *fallback_from = e.what();
    return tmpl;
  }
}

int open_private_file(const fs::path& dir, const std::string& name, bool exclusive, bool append) noexcept {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return -1;
  int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC;
  if (exclusive) flags |= O_EXCL;
  if (append) flags |= O_APPEND;
  const int fd = ::openat(dfd, name.c_str(), flags, 0600);
  const int err = errno;
  ::close(dfd);
  errno = err;
  return fd;
}

}  // namespace funnel
