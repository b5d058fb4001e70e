// The server socket: SOCK_SEQPACKET message boundaries, SO_PEERCRED, receive
// timeouts, and the hang-up that tells each side the other died.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "funnel/ipc/protocol.hpp"
#include "funnel/ipc/socket.hpp"
#include "watchdog.hpp"

namespace funnel::ipc {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

struct Pair {
  UniqueFd a, b;
};

Pair seqpacket_pair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

WATCHED_TEST(Socket, PeerCredentialsOfASocketPair) {
  Pair p = seqpacket_pair();
  const PeerCredentials c = peer_credentials(p.a.get());
  EXPECT_EQ(c.pid, ::getpid());
  EXPECT_EQ(c.uid, ::getuid());
  EXPECT_EQ(c.gid, ::getgid());
}

WATCHED_TEST(Socket, PeerCredentialsOfAFdThatIsNoSocketThrow) {
  EXPECT_THROW(peer_credentials(-1), std::system_error);
}

WATCHED_TEST(Socket, ListenConnectAcceptKeepsMessageBoundaries) {
  std::string tmpl = (fs::temp_directory_path() / "funnel-sock-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const fs::path dir = tmpl;
  const fs::path path = dir / kSocketName;
  {
    UniqueFd listener = listen_seqpacket(path);
    int err = -1;
    UniqueFd client = connect_seqpacket(path, err);
    ASSERT_TRUE(client) << std::strerror(err);
    EXPECT_EQ(err, 0);
    UniqueFd server(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    ASSERT_TRUE(server);

    const PeerCredentials c = peer_credentials(server.get());
    EXPECT_EQ(c.pid, ::getpid());
    EXPECT_EQ(c.uid, ::geteuid());

    HelloMsg hello{};
    hello.magic = kSocketMagic;
    hello.role = Role::Client;
    hello.pid = 42;
    ASSERT_TRUE(send_message(client.get(), &hello, sizeof hello));
    const char second[] = "second";
    ASSERT_TRUE(send_message(client.get(), second, sizeof second));

    HelloMsg got{};
    char buf[1024];
    ASSERT_EQ(recv_message(server.get(), buf, sizeof buf, 1000ms), static_cast<ssize_t>(sizeof hello));
    std::memcpy(&got, buf, sizeof got);
    EXPECT_EQ(got.magic, kSocketMagic);
    EXPECT_EQ(got.pid, 42);
    EXPECT_EQ(recv_message(server.get(), buf, sizeof buf, 1000ms), static_cast<ssize_t>(sizeof second));
    EXPECT_STREQ(buf, "second");
  }
  fs::remove_all(dir);
}

// A client that finds the socket file must be able to connect: the file appears only once
// the socket listens (else it takes a live server for a dead one, doc/design/channel.md).
// A watcher connects the moment the file appears, over many listens (before the fix: more
// than half of the connects were refused).
WATCHED_TEST(Socket, TheFileAppearsOnlyOnceTheSocketListens) {
  std::string tmpl = (fs::temp_directory_path() / "funnel-sock-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const fs::path dir = tmpl;
  const fs::path path = dir / kSocketName;
  std::atomic<bool> stop{false};
  std::atomic<int> connected{0}, refused{0};
  std::thread watcher([&] {
    ino_t last = 0;
    while (!stop.load()) {
      struct stat st {};
      // Once per file: the listeners never accept, and a full backlog would block connect.
      if (::lstat(path.c_str(), &st) != 0 || st.st_ino == last) continue;
      last = st.st_ino;
      int err = 0;
      if (UniqueFd fd = connect_seqpacket(path, err)) {
        ++connected;
      } else if (err == ECONNREFUSED) {
        ++refused;
      }
    }
  });
  // Every listener stays open to the end: a connect that found a file must not meet a socket
  // closed meanwhile (that refusal would be the test's, not the file's).
  std::vector<UniqueFd> listeners;
  for (int i = 0; i < 500; ++i) {
    listeners.push_back(listen_seqpacket(path));
    ASSERT_EQ(::unlink(path.c_str()), 0);
  }
  stop = true;
  watcher.join();
  EXPECT_EQ(refused.load(), 0) << connected.load() << " connects succeeded";
  EXPECT_EQ(listening_name(path), dir / (".s" + std::to_string(::getpid())));
  EXPECT_EQ(listening_name_pid(listening_name(path).filename().string()), ::getpid());
  for (const char* other : {".s", ".sx1", ".s12a", "server.sock", ".s1234567890", "s123"})
    EXPECT_EQ(listening_name_pid(other), 0) << other;
  // Nothing but the socket file (removed above) was left in the directory.
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

WATCHED_TEST(Socket, ConnectFailuresSetErrno) {
  int err = 0;
  EXPECT_FALSE(connect_seqpacket("/nonexistent-funnel-dir/server.sock", err));
  EXPECT_EQ(err, ENOENT);
  EXPECT_FALSE(connect_seqpacket("/" + std::string(kMaxSocketPath + 10, 'a'), err));
  EXPECT_EQ(err, ENAMETOOLONG);
}

WATCHED_TEST(Socket, ListenOnATooLongPathNamesTheFix) {
  const fs::path path = "/" + std::string(kMaxSocketPath + 10, 'a') + "/server.sock";
  try {
    listen_seqpacket(path);
    FAIL() << "expected an error";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ENAMETOOLONG);
    EXPECT_NE(std::string(e.what()).find("FUNNEL_RUN_DIR"), std::string::npos) << e.what();
  }
}

WATCHED_TEST(Socket, ReceiveTimesOut) {
  Pair p = seqpacket_pair();
  char buf[16];
  const auto t0 = std::chrono::steady_clock::now();
  errno = 0;
  EXPECT_EQ(recv_message(p.a.get(), buf, sizeof buf, 50ms), -1);
  EXPECT_EQ(errno, ETIMEDOUT);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 45ms);
}

WATCHED_TEST(Socket, HangUpIsSeenWithoutConsumingData) {
  Pair p = seqpacket_pair();
  EXPECT_FALSE(peer_hung_up(p.a.get()));
  ASSERT_TRUE(send_message(p.b.get(), "x", 1));
  EXPECT_FALSE(peer_hung_up(p.a.get())) << "pending data is no hang-up";
  p.b.reset();
  EXPECT_TRUE(peer_hung_up(p.a.get()));
  char buf[4];
  EXPECT_EQ(recv_message(p.a.get(), buf, sizeof buf, 1000ms), 1) << "the message sent before the hang-up is kept";
  EXPECT_EQ(recv_message(p.a.get(), buf, sizeof buf, 1000ms), 0) << "then EOF";
  EXPECT_FALSE(send_message(p.a.get(), "y", 1)) << "sending to a closed peer fails without SIGPIPE";
}

WATCHED_TEST(Socket, HangUpOfAChildProcessThatDies) {
  Pair p = seqpacket_pair();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    p.a.reset();
    ::pause();  // until SIGKILLed
    ::_exit(0);
  }
  p.b.reset();
  EXPECT_FALSE(peer_hung_up(p.a.get()));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_TRUE(peer_hung_up(p.a.get()));
}

WATCHED_TEST(Socket, UniqueFdClosesAndReleases) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  {
    UniqueFd a(fds[0]);
    UniqueFd b = std::move(a);
    EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(b.get(), fds[0]);
  }
  EXPECT_EQ(::fcntl(fds[0], F_GETFD), -1) << "closed when its owner went away";
  UniqueFd c(fds[1]);
  EXPECT_EQ(c.release(), fds[1]);
  EXPECT_FALSE(c);
  EXPECT_EQ(::close(fds[1]), 0);
}

}  // namespace
}  // namespace funnel::ipc
