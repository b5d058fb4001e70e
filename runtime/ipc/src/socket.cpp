#include "funnel/ipc/socket.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

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

UniqueFd listen_seqpacket(const std::filesystem::path& path) {
  sockaddr_un addr;
  if (!make_address(path, addr))
    throw std::system_error(ENAMETOOLONG, std::generic_category(),
                            fmt::format("socket path {} is longer than {} characters: choose a shorter FUNNEL_RUN_DIR",
                                        path.string(), kMaxSocketPath));
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) throw std::system_error(errno, std::generic_category(), "socket(AF_UNIX)");
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw std::system_error(errno, std::generic_category(), fmt::format("bind {}", path.string()));
  if (::listen(fd.get(), 128) != 0) throw std::system_error(errno, std::generic_category(), "listen");
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
    throw std::system_error(errno, std::generic_category(), "getsockopt(SO_PEERCRED)");
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
