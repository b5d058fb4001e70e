// The run directory, the listening socket, and the attach handshake.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "funnel/affinity/binding.hpp"
#include "funnel/common/run_dir.hpp"
#include "funnel/ipc/protocol.hpp"
#include "funnel/ipc/socket.hpp"
#include "funnel/ipc/status.hpp"
#include "funnel/ipc/syscheck.hpp"
#include "loop/server_impl.hpp"

namespace funnel::server {
namespace {

template <size_t N>
void copy_text(char (&dst)[N], const std::string& s) {
  const size_t n = std::min(N - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// A hello's fields come from another process: the ones with a fixed range are checked
// before anything uses them.  Empty when all are valid, else what is wrong.
std::string invalid_hello_field(const ipc::HelloMsg& h) {
  if (h.gpu_share_bp > ipc::kGpuShareWhole)
    return fmt::format("the GPU fraction {} (in 1/10000) is above the whole GPU", h.gpu_share_bp);
  if (h.gpu_placement > static_cast<uint32_t>(ipc::GpuPlacement::Disjoint))
    return fmt::format("unknown GPU placement {}", h.gpu_placement);
  if (h.client_priority > static_cast<uint32_t>(ipc::ClientPriority::BelowNormal))
    return fmt::format("unknown client priority {}", h.client_priority);
  return {};
}

void send_attach_reply(int fd, Status st, const std::string& message, uint32_t id = 0, uint64_t size = 0,
                       const std::string& file = {}) {
  ipc::AttachReply r{};
  r.magic = ipc::kSocketMagic;
  r.version = ipc::kProtocolVersion;
  r.status = static_cast<int32_t>(st);
  r.client_id = id;
  r.segment_size = size;
  copy_text(r.channel_file, file);
  copy_text(r.message, message);
  if (!ipc::send_message(fd, &r, sizeof r)) spdlog::warn("cannot send the attach reply: {}", std::strerror(errno));
}

// Clients wait in the backlog while a restart after a GPU fault is due (possibly all the
// ranks of a job at once), and a full backlog blocks connect() without a timeout: as long
// as the system allows (net.core.somaxconn).
void deepen_backlog(int fd) { FUNNEL_SYSCHECK(::listen(fd, SOMAXCONN)); }

void make_nonblocking(int fd) {
  const int flags = FUNNEL_SYSCHECK(::fcntl(fd, F_GETFL));
  FUNNEL_SYSCHECK(::fcntl(fd, F_SETFL, flags | O_NONBLOCK));
}

int socket_option(int fd, int option) {
  int v = 0;
  socklen_t len = sizeof v;
  FUNNEL_SYSCHECK(::getsockopt(fd, SOL_SOCKET, option, &v, &len));
  return v;
}

}  // namespace

void Server::Impl::remove_stale_files() { remove_run_dir_files(options.run_dir, false); }

void Server::Impl::prepare_run_dir() {
  ensure_run_dir(options.run_dir);
  const auto sock = socket_path(options.run_dir);
  struct stat st {};
  if (::lstat(sock.c_str(), &st) == 0) {
    int err = 0;
    ipc::UniqueFd probe = ipc::connect_seqpacket(sock, err);
    if (probe) {
      const auto peer = ipc::peer_credentials(probe.get());
      throw AlreadyRunning(
          fmt::format("a funnel-server already serves {} (pid {})", options.run_dir.string(), peer.pid));
    }
    if (err != ECONNREFUSED)
      throw std::runtime_error(fmt::format("cannot tell whether a server owns {}: connect: {}", sock.string(),
                                           std::strerror(err)));
    remove_stale_files();
    FUNNEL_SYSCHECK(::unlink(sock.c_str()));
    spdlog::warn("removed the files of a dead server in {}", options.run_dir.string());
  }
  listen_fd = ipc::listen_seqpacket(sock);
  listening = true;
  deepen_backlog(listen_fd.get());
  make_nonblocking(listen_fd.get());
}

void Server::Impl::adopt_listener() {
  const int fd = options.inherited_listen_fd;
  ipc::UniqueFd owned(fd);  // closed if refused
  ensure_run_dir(options.run_dir);
  const auto sock = socket_path(options.run_dir);
  auto refuse = [&](const std::string& why) {
    throw std::runtime_error(
        fmt::format("--listen-fd {}: {}; it must be the listening socket {} inherited from the "
                    "funnel-server that restarted",
                    fd, why, sock.string()));
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) refuse(std::strerror(errno));
  if (!S_ISSOCK(st.st_mode)) refuse("not a socket");
  if (socket_option(fd, SO_DOMAIN) != AF_UNIX || socket_option(fd, SO_TYPE) != SOCK_SEQPACKET)
    refuse("not a Unix seqpacket socket");
  if (socket_option(fd, SO_ACCEPTCONN) == 0) refuse("not listening");
  sockaddr_un addr{};
  socklen_t len = sizeof addr;
  FUNNEL_SYSCHECK(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len));
  const size_t path_len = len > offsetof(sockaddr_un, sun_path) ? len - offsetof(sockaddr_un, sun_path) : 0;
  const std::string bound(addr.sun_path, ::strnlen(addr.sun_path, path_len));
  // listen_seqpacket bound it as a listening_name beside the socket file, then linked it.
  const std::filesystem::path bound_path(bound);
  const bool beside =
      bound_path.parent_path() == sock.parent_path() && ipc::listening_name_pid(bound_path.filename().string()) != 0;
  if (bound != sock.string() && !beside) refuse(fmt::format("bound to '{}'", bound));
  // Its file is how clients find it: without it they would start another server.
  if (::lstat(sock.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) refuse("its socket file is gone");
  listen_fd = std::move(owned);
  listening = true;
  FUNNEL_SYSCHECK(::fcntl(fd, F_SETFD, FD_CLOEXEC));
  deepen_backlog(fd);
  make_nonblocking(fd);
  // The previous image's clients all left; whatever files they left behind are stale.
  remove_stale_files();
}

void Server::Impl::accept_connections() {
  for (;;) {
    const int fd = ::accept4(listen_fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: answer the waiting peer through the spare one, or stop
        // accepting a while (a listening socket stays readable: retrying at once would spin).
        const int err = errno;  // shedding makes calls of its own
        if (!shed_one_connection(err)) pause_accepting(err);
        if (!accept_paused_until) continue;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        spdlog::warn("accept: {}", std::strerror(errno));
      }
      return;
    }
    if (refused_for_descriptors != 0) {
      spdlog::info("file descriptors are available again ({} connection(s) were refused meanwhile)",
                   refused_for_descriptors);
      refused_for_descriptors = 0;
    }
    Connection c;
    c.fd = ipc::UniqueFd(fd);
    c.accepted_at = Clock::now();
    try {
      c.peer = ipc::peer_credentials(fd);
    } catch (const std::exception& e) {
      spdlog::warn("dropping a connection: {}", e.what());
      continue;
    }
    watch(fd);
    connections.emplace(fd, std::move(c));
  }
}

std::string Server::Impl::descriptor_shortage(int err) const {
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  if (err == ENFILE)
    return "the system is out of open files (ENFILE, fs.file-max): close programs or raise fs.file-max";
  return fmt::format("funnel-server {} has no file descriptor left (RLIMIT_NOFILE {}; it raised its soft limit to "
                     "the hard one at start): raise the hard limit (ulimit -Hn, limits.conf, Slurm's "
                     "PropagateResourceLimits) or run fewer clients per server",
                     ::getpid(), lim.rlim_cur);
}

bool Server::Impl::shed_one_connection(int err) {
  if (!spare_fd) return false;
  spare_fd.reset();
  ipc::UniqueFd fd(::accept4(listen_fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  const std::string why = descriptor_shortage(err);
  if (fd) {
    if (refused_for_descriptors++ == 0) spdlog::error("refusing new connections: {}", why);
    // The hello is usually there already: a control peer gets its JSON answer, anyone else
    // (a client, or one that said nothing yet) the attach reply.
    ipc::HelloMsg hello{};
    const ssize_t n = ::recv(fd.get(), &hello, sizeof hello, MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(sizeof hello) && hello.magic == ipc::kSocketMagic && hello.role == ipc::Role::Control) {
      const std::string text = nlohmann::json{{"error", why}}.dump();
      ipc::send_message(fd.get(), text.data(), text.size());
    } else {
      send_attach_reply(fd.get(), Status::MemoryAllocation, why);
    }
  }
  spare_fd = ipc::UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  return static_cast<bool>(fd);
}

void Server::Impl::pause_accepting(int err) {
  if (accept_paused_until) return;
  spdlog::error("accept: {}; accepting again in {} ms", descriptor_shortage(err), kAcceptPause.count());
  unwatch(listen_fd.get());
  accept_paused_until = Clock::now() + kAcceptPause;
}

void Server::Impl::resume_accepting() {
  if (!accept_paused_until || Clock::now() < *accept_paused_until) return;
  accept_paused_until.reset();
  if (listening && restart_device < 0) watch(listen_fd.get());
}

void Server::Impl::expire_connections() {
  const auto now = Clock::now();
  size_t closed = 0;
  pid_t last_pid = 0;
  for (auto it = connections.begin(); it != connections.end();) {
    if (now - it->second.accepted_at < options.hello_timeout) {
      ++it;
      continue;
    }
    ++closed;
    last_pid = it->second.peer.pid;
    unwatch(it->first);
    it = connections.erase(it);
  }
  if (closed != 0)
    spdlog::warn("closed {} connection(s) (the last of pid {}) that did not attach or ask within {} ms", closed,
                 last_pid, std::chrono::duration_cast<std::chrono::milliseconds>(options.hello_timeout).count());
}

std::optional<Clock::time_point> Server::Impl::next_connection_deadline() const {
  std::optional<Clock::time_point> next = accept_paused_until;
  for (const auto& [fd, c] : connections) {
    const auto at = c.accepted_at + options.hello_timeout;
    if (!next || at < *next) next = at;
  }
  return next;
}

size_t Server::Impl::descriptors_in_use() {
  std::error_code ec;
  size_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    ++n;
  return n;
}

void Server::Impl::on_connection(int fd) {
  auto it = connections.find(fd);
  if (it == connections.end()) return;
  Connection& c = it->second;
  alignas(8) char buf[512];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  bool keep = false;
  if (n > 0) {
    if (c.phase == Connection::Phase::AwaitHello && static_cast<size_t>(n) == sizeof(ipc::HelloMsg)) {
      ipc::HelloMsg hello;
      std::memcpy(&hello, buf, sizeof hello);
      hello.command[sizeof hello.command - 1] = '\0';
      if (hello.magic == ipc::kSocketMagic) {
        on_hello(c, hello);
        // attach() moves a client's fd into its session; a control connection stays here.
        keep = c.fd && c.phase == Connection::Phase::AwaitRequest;
        if (!c.fd) {
          connections.erase(it);
          return;
        }
      } else {
        spdlog::warn("pid {}: a hello without funnel's magic; dropping the connection", c.peer.pid);
      }
    } else if (c.phase == Connection::Phase::AwaitHello && static_cast<size_t>(n) >= offsetof(ipc::HelloMsg, pid)) {
      // A hello of another size: a client of another protocol version (the hello grew in
      // 4). Its magic, version and role lie where they always did: tell it why.
      ipc::HelloMsg hello{};
      std::memcpy(&hello, buf, offsetof(ipc::HelloMsg, pid));
      if (hello.magic == ipc::kSocketMagic && hello.role == ipc::Role::Client && hello.version != ipc::kProtocolVersion)
        on_hello(c, hello);
      else
        spdlog::warn("pid {}: a hello of {} bytes; dropping the connection", c.peer.pid, n);
      if (!c.fd) {
        connections.erase(it);
        return;
      }
    } else if (c.phase == Connection::Phase::AwaitRequest && static_cast<size_t>(n) == sizeof(ipc::ControlRequest)) {
      ipc::ControlRequest req;
      std::memcpy(&req, buf, sizeof req);
      req.verb[sizeof req.verb - 1] = '\0';
      req.arg[sizeof req.arg - 1] = '\0';
      on_control(c, req);
    } else {
      spdlog::warn("pid {}: unexpected message of {} bytes; dropping the connection", c.peer.pid, n);
    }
  }
  if (!keep) {
    unwatch(fd);
    connections.erase(it);
  }
}

void Server::Impl::on_hello(Connection& c, const ipc::HelloMsg& hello) {
  if (c.peer.uid == 0 && c.peer.uid != ::geteuid() && hello.role == ipc::Role::Control) {
    // An admin (funnelctl status --job): root may look at a user's server, never attach to it.
    spdlog::info("control connection of pid {} of uid 0 (root) accepted", c.peer.pid);
    c.phase = Connection::Phase::AwaitRequest;
    return;
  }
  if (c.peer.uid != ::geteuid()) {
    spdlog::warn("pid {} of uid {} tried to attach; only uid {} may", c.peer.pid, c.peer.uid, ::geteuid());
    if (hello.role == ipc::Role::Client)
      send_attach_reply(c.fd.get(), Status::NotPermitted,
                        fmt::format("this funnel-server serves uid {} only", ::geteuid()));
    return;
  }
  if (hello.role == ipc::Role::Control) {
    c.phase = Connection::Phase::AwaitRequest;
    return;
  }
  if (hello.role != ipc::Role::Client) {
    spdlog::warn("pid {}: unknown role {}", c.peer.pid, static_cast<uint32_t>(hello.role));
    return;
  }
  if (hello.version != ipc::kProtocolVersion) {
    send_attach_reply(c.fd.get(), Status::InitializationError,
                      fmt::format("the client speaks protocol {} and this funnel-server {}: use the client runtime "
                                  "and funnel-server of one installation",
                                  hello.version, ipc::kProtocolVersion));
    spdlog::warn("pid {}: protocol version {} rejected", c.peer.pid, hello.version);
    return;
  }
  if (const std::string bad = invalid_hello_field(hello); !bad.empty()) {
    send_attach_reply(c.fd.get(), Status::InvalidValue, bad);
    spdlog::warn("pid {}: refused: {}", c.peer.pid, bad);
    return;
  }
  if (stopping || drain_deadline) {
    send_attach_reply(c.fd.get(), Status::DevicesUnavailable,
                      stopping ? "the funnel-server is shutting down"
                               : "the funnel-server is shutting down (funnelctl shutdown): it waits for its clients to "
                                 "leave and takes no new ones");
    if (drain_deadline) spdlog::warn("pid {}: refused, a graceful shutdown is under way", c.peer.pid);
    return;
  }
  if (restart_device >= 0) {
    // Connected before the fault, so not in the backlog the restarted server accepts from.
    send_attach_reply(c.fd.get(), Status::DevicesUnavailable,
                      fmt::format("the funnel-server is restarting to recover device {} from a GPU fault: run the "
                                  "program again",
                                  restart_device));
    spdlog::warn("pid {}: refused, a restart to recover device {} is due", c.peer.pid, restart_device);
    return;
  }
  if (clients.size() >= options.max_clients) {
    send_attach_reply(c.fd.get(), Status::MpsMaxClientsReached,
                      fmt::format("the funnel-server serves {} clients already, its limit: raise FUNNEL_MAX_CLIENTS "
                                  "(funnel-server --max-clients) for the server's next start",
                                  clients.size()));
    spdlog::warn("pid {}: refused, {} clients attached (FUNNEL_MAX_CLIENTS, --max-clients)", c.peer.pid,
                 clients.size());
    return;
  }
  // A client costs the server a descriptor or two (its socket; its channel and pinned
  // buffers are mapped without one), and the driver needs some: keep a reserve.
  if (rlimit lim{}; ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
                    descriptors_in_use() + std::min<size_t>(kDescriptorReserve, lim.rlim_cur / 8) > lim.rlim_cur) {
    const std::string why = descriptor_shortage(EMFILE);
    send_attach_reply(c.fd.get(), Status::MemoryAllocation, why);
    spdlog::error("pid {}: refused: {}", c.peer.pid, why);
    return;
  }
  attach(c, with_defaults(hello));
}

void Server::Impl::attach(Connection& c, const ipc::HelloMsg& hello) {
  const uint32_t id = next_client_id++;
  auto s = std::make_unique<ClientSession>(id, std::move(c.fd), hello, c.peer.pid);
  ChannelSpec spec;
  spec.geometry.ring_capacity = options.ring_capacity;
  spec.geometry.reply_slots = options.reply_slots;
  spec.geometry.staging_slots = options.staging_slots;
  spec.geometry.staging_slot_size = options.staging_slot_bytes;
  spec.geometry.device_count = static_cast<uint32_t>(backend->device_count());
  spec.run_dir = options.run_dir;
  spec.backend = backend.get();
  spec.totals = &totals;
  spec.tuning = WorkerTuning{options.pending_spin, options.idle_spin, options.spin_backoff, options.gpu_replies,
                             options.launch_batch};
  spec.modules = modules.get();
  spec.ipc = ipc.get();
  spec.mailbox = mailbox.get();
  spec.health = &health;
  spec.submit_order = options.submit_order ? &submit_order : nullptr;
  spec.calls_in_flight = &calls_in_flight;
  spec.partitions = partitions.get();
  spec.devices = device_records;
  spec.notify_fd = notify_fd.get();
  spec.hangups = hangups.get();
  spec.workers = worker_pool.get();
  try {
    s->create_channel(spec);
  } catch (const std::system_error& e) {
    const Status st = e.code().value() == ENOSPC ? Status::MemoryAllocation : Status::OperatingSystem;
    spdlog::error("client {} (pid {}): cannot create its channel: {}", id, c.peer.pid, e.what());
    send_attach_reply(s->fd(), st, e.what());
    unwatch(s->fd());
    return;
  } catch (const std::exception& e) {
    spdlog::error("client {} (pid {}): cannot create its channel: {}", id, c.peer.pid, e.what());
    send_attach_reply(s->fd(), Status::OperatingSystem, e.what());
    unwatch(s->fd());
    return;
  }
  send_attach_reply(s->fd(), Status::Success, "", id, s->segment_size(), s->channel_file());
  client_by_fd[s->fd()] = id;
  clients.emplace(id, std::move(s));
}

void Server::Impl::on_client_message(ClientSession& s) {
  alignas(8) char buf[512];
  const ssize_t n = ::recv(s.fd(), buf, sizeof buf, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n > 0 && s.phase() == ClientSession::Phase::AwaitMapped && static_cast<size_t>(n) == sizeof(ipc::MappedMsg)) {
    ipc::MappedMsg m;
    std::memcpy(&m, buf, sizeof m);
    if (m.client_id == s.id()) {
      int home = m.home_device;
      if (home < 0 || home >= backend->device_count()) {
        spdlog::warn("client {}: home device {} out of range; its worker runs near device 0", s.id(), home);
        home = 0;
      }
      s.start_worker(home);
      add(totals.clients_attached, 1);
      using Ms = std::chrono::duration<double, std::milli>;
      spdlog::info("client {} attached: pid {} rank {} command '{}' ({:.1f} ms after its hello; channel made in "
                   "{:.1f} ms, of which pinning {:.1f} ms)",
                   s.id(), s.pid(), s.mpi_rank(), s.command(),
                   Ms(std::chrono::steady_clock::now() - s.attached_at()).count(), Ms(s.channel_time()).count(),
                   Ms(s.pin_time()).count());
      ThreadPlacement::Client pc;
      pc.pid = s.pid();
      pc.mpi_rank = s.mpi_rank();
      pc.device = home;
      pc.share_bp = s.stream_placement().share_bp;
      pc.disjoint = s.stream_placement().placement == ipc::GpuPlacement::Disjoint;
      try {
        pc.binding = affinity::process_binding(s.pid());
      } catch (const std::exception& e) {
        spdlog::debug("client {}: {}", s.id(), e.what());  // gone already: it binds nothing
      }
      placement->add_client(s.id(), std::move(pc));
      place_threads();
      return;
    }
  }
  if (n > 0 && s.phase() == ClientSession::Phase::Running) {
    spdlog::warn("client {}: unexpected message of {} bytes on its socket; ignored", s.id(), n);
    return;
  }
  // Hang-up (or a broken handshake): the client is gone.
  unwatch(s.fd());
  if (s.phase() == ClientSession::Phase::AwaitMapped) {
    spdlog::warn("client {} (pid {}) left before it mapped its channel", s.id(), s.pid());
    drop_client(s.id());
    return;
  }
  s.request_stop(false);
}

}  // namespace funnel::server
