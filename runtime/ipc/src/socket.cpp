#include "funnel/ipc/socket.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include "funnel/ipc/syscheck.hpp"

namespace funnel::ipc {

void UniqueFd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {

bool make_address(const std::filesystem::path& path, sockaddr_un& addr) noexcept {
  const std::string s = path.string();
  if (s.size() > kMaxSocketPath) return false;
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, s.c_str(), s.size() + 1);
  return true;
}

}  // namespace

std::filesystem::path listening_name(const std::filesystem::path& path) {
  return path.parent_path() / fmt::format("{}{}", kListeningPrefix, ::getpid());
}

pid_t listening_name_pid(const std::string& file_name) noexcept {
  const std::string_view prefix(kListeningPrefix);
  if (file_name.size() <= prefix.size() || file_name.size() > prefix.size() + 9 ||
      file_name.compare(0, prefix.size(), prefix) != 0 ||
      file_name.find_first_not_of("0123456789", prefix.size()) != std::string::npos)
    return 0;
  return static_cast<pid_t>(std::stol(file_name.substr(prefix.size())));
}

UniqueFd listen_seqpacket(const std::filesystem::path& path) {
  sockaddr_un addr;
  if (!make_address(path, addr))
    throw std::system_error(ENAMETOOLONG, std::generic_category(),
                            fmt::format("socket path {} is longer than {} characters: choose a shorter FUNNEL_RUN_DIR",
                                        path.string(), kMaxSocketPath));
  // Bound and listening under a name of its own first, then linked to `path`: a client that
  // finds `path` can connect (a socket file that refuses means a dead server), and link,
  // unlike rename, fails where `path` exists, as bind would.
  const std::filesystem::path bound = listening_name(path);
  sockaddr_un bound_addr;
  const bool own_name = make_address(bound, bound_addr);
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) throw_errno("socket(AF_UNIX)");
  if (own_name) ::unlink(bound.c_str());  // left by an earlier process of this pid
  const sockaddr_un& at = own_name ? bound_addr : addr;
  const std::string at_name = own_name ? bound.string() : path.string();
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&at), sizeof at) != 0)
    throw_errno(fmt::format("bind {}", at_name));
  auto fail = [&](const std::string& what) {
    const int err = errno;
    if (own_name) ::unlink(bound.c_str());
    throw std::system_error(err, std::generic_category(), what);
  };
  if (::listen(fd.get(), 128) != 0) fail("listen");
  if (own_name) {
    if (::link(bound.c_str(), path.c_str()) != 0) fail(fmt::format("link {} to {}", bound.string(), path.string()));
    ::unlink(bound.c_str());
  }
  return fd;
}

UniqueFd connect_seqpacket(const std::filesystem::path& path, int& err) noexcept {
  sockaddr_un addr;
  if (!make_address(path, addr)) {
    err = ENAMETOOLONG;
    return {};
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) {
    err = errno;
    return {};
  }
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    err = errno;
    return {};
  }
  err = 0;
  return fd;
}

PeerCredentials peer_credentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    throw_errno("getsockopt(SO_PEERCRED)");
  return {cred.pid, cred.uid, cred.gid};
}

bool send_message(int fd, const void* data, size_t len) noexcept {
  for (;;) {
    const ssize_t n = ::send(fd, data, len, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(len)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

ssize_t recv_message(int fd, void* data, size_t cap, std::chrono::milliseconds timeout) noexcept {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    const int rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return -1;
    if (rc == 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    break;
  }
  for (;;) {
    const ssize_t n = ::recv(fd, data, cap, 0);
    if (n < 0 && errno == EINTR) continue;
    return n;
  }
}

bool peer_hung_up(int fd, std::chrono::milliseconds wait) noexcept {
  pollfd p{fd, POLLRDHUP, 0};
  if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return false;
  return (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace funnel::ipc
