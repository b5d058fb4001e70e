// Unix SOCK_SEQPACKET helpers with the peer's credentials checked.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

namespace funnel::ipc {

// A file descriptor that closes itself.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept { reset(o.release()); return *this; }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const noexcept { return fd_; }
  int release() noexcept { int f = fd_; fd_ = -1; return f; }
  void reset(int fd = -1) noexcept;
  explicit operator bool() const noexcept { return fd_ >= 0; }
 private:
  int fd_ = -1;
};

struct PeerCredentials { pid_t pid; uid_t uid; gid_t gid; };

// Binds and listens on `path` (the caller removed any stale file first).  Throws std::system_error.
// The file appears only once the socket listens: it is bound as listening_name(path) and
// linked to `path` (getsockname names listening_name(path), which is gone by then).
UniqueFd listen_seqpacket(const std::filesystem::path& path);
// `path`'s directory / ".s<pid>": where listen_seqpacket binds before it links.
inline constexpr const char* kListeningPrefix = ".s";
std::filesystem::path listening_name(const std::filesystem::path& path);
// The pid in a listening_name's file name ("" / 0 for any other name).
pid_t listening_name_pid(const std::string& file_name) noexcept;
// Connects to `path`; returns an empty fd and sets `err` (errno) on failure.
UniqueFd connect_seqpacket(const std::filesystem::path& path, int& err) noexcept;
PeerCredentials peer_credentials(int fd);

// Sends/receives one whole message.  recv returns the message length, 0 on hang-up,
// -1 on error or timeout (errno set; ETIMEDOUT for a timeout).
bool send_message(int fd, const void* data, size_t len) noexcept;
ssize_t recv_message(int fd, void* data, size_t cap, std::chrono::milliseconds timeout) noexcept;

// True once the peer has hung up (POLLHUP/POLLRDHUP or EOF pending), without consuming data;
// waits up to `wait` for it (0: just looks).
bool peer_hung_up(int fd, std::chrono::milliseconds wait = std::chrono::milliseconds(0)) noexcept;

// The longest path a Unix socket address can hold.
inline constexpr size_t kMaxSocketPath = 107;

}  // namespace funnel::ipc
