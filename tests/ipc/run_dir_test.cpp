// The run directory: created 0700, and refused — with the fix in the message —
// when it is a symlink, a file, has the wrong mode or belongs to someone else.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "funnel/common/run_dir.hpp"
#include "funnel/ipc/protocol.hpp"
#include "funnel/ipc/socket.hpp"
#include "watchdog.hpp"

namespace funnel {
namespace {

namespace fs = std::filesystem;

class TempBase {
 public:
  TempBase() {
    std::string tmpl = (fs::temp_directory_path() / "funnel-rundir-test-XXXXXX").string();
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempBase() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string error_of(const fs::path& dir) {
  try {
    ensure_run_dir(dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0);
  return st.st_mode & 07777;
}

WATCHED_TEST(RunDir, CreatesA0700Directory) {
  TempBase base;
  const fs::path dir = base.path() / "run";
  EXPECT_EQ(error_of(dir), "");
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_EQ(mode_of(dir), 0700u);
  EXPECT_EQ(error_of(dir), "") << "an existing good run directory is fine";
}

WATCHED_TEST(RunDir, RefusesAWrongMode) {
  TempBase base;
  const fs::path dir = base.path() / "run";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  const std::string msg = error_of(dir);
  EXPECT_NE(msg.find(dir.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("755"), std::string::npos) << msg;
  EXPECT_NE(msg.find("chmod 700"), std::string::npos) << msg;
}

WATCHED_TEST(RunDir, RefusesASymlink) {
  TempBase base;
  const fs::path target = base.path() / "elsewhere";
  ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);
  const fs::path dir = base.path() / "run";
  fs::create_directory_symlink(target, dir);
  const std::string msg = error_of(dir);
  EXPECT_NE(msg.find(dir.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("symlink"), std::string::npos) << msg;
  EXPECT_NE(msg.find("FUNNEL_RUN_DIR"), std::string::npos) << msg;
}

WATCHED_TEST(RunDir, RefusesAFile) {
  TempBase base;
  const fs::path dir = base.path() / "run";
  std::ofstream(dir) << "not a directory";
  const std::string msg = error_of(dir);
  EXPECT_NE(msg.find("not a directory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("remove it"), std::string::npos) << msg;
}

WATCHED_TEST(RunDir, RefusesAMissingParentWithTheFix) {
  TempBase base;
  const std::string msg = error_of(base.path() / "missing" / "run");
  EXPECT_NE(msg.find("cannot create"), std::string::npos) << msg;
  EXPECT_NE(msg.find("FUNNEL_RUN_DIR"), std::string::npos) << msg;
}

WATCHED_TEST(RunDir, RefusesADirectoryOfAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown a directory to another user";
  TempBase base;
  const fs::path dir = base.path() / "run";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  const std::string msg = error_of(dir);
  EXPECT_NE(msg.find("65534"), std::string::npos) << msg;
  EXPECT_NE(msg.find("FUNNEL_RUN_DIR"), std::string::npos) << msg;
}

// Ranks of a job start at once: whoever makes the directory, the others must accept it while
// its maker marks it and the first of them already put files in it (start.lock).
WATCHED_TEST(RunDir, ManyProcessesMakingItAtOnceAllAcceptIt) {
  TempBase base;
  for (int round = 0; round < 20; ++round) {
    const fs::path dir = base.path() / ("run" + std::to_string(round));
    int go[2];
    ASSERT_EQ(::pipe(go), 0);
    std::vector<pid_t> kids;
    for (int k = 0; k < 12; ++k) {
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::close(go[1]);
        char c;
        if (::read(go[0], &c, 1) != 0) ::_exit(3);  // released together when the pipe closes
        try {
          ensure_run_dir(dir);
          std::ofstream(dir / ("file." + std::to_string(::getpid()))) << "x";
        } catch (...) {
          ::_exit(1);
        }
        ::_exit(0);
      }
      kids.push_back(pid);
    }
    ::close(go[0]);
    ::close(go[1]);
    for (const pid_t pid : kids) {
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round << ": a process refused it";
    }
    std::string text;
    std::getline(std::ifstream(dir / kRunDirMarker), text);
    EXPECT_EQ(text, "created") << "round " << round;
  }
}

// A directory funnel did not make and that holds files is refused; nothing in it is removed.
WATCHED_TEST(RunDir, RefusesADirectoryOfOtherFiles) {
  TempBase base;
  const fs::path dir = base.path() / "project";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  std::ofstream(dir / "channel.notes") << "mine";
  const std::string msg = error_of(dir);
  EXPECT_NE(msg.find("funnel did not make"), std::string::npos) << msg;
  EXPECT_NE(msg.find("FUNNEL_RUN_DIR"), std::string::npos) << msg;
  remove_run_dir_files(dir, true);  // what a stopping server would do: it is not funnel's
  EXPECT_TRUE(fs::exists(dir / "channel.notes"));
}

// A client that saw its server's connection hang up reclaims the run directory; the
// listening socket of a server being killed can still take connections for a moment,
// so the client first waits for the server process to have exited.
WATCHED_TEST(RunDir, ReclaimingWaitsForTheDyingServersListeningSocket) {
  TempBase base;
  const fs::path dir = base.path() / "run";
  ensure_run_dir(dir);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t server = ::fork();
  ASSERT_GE(server, 0);
  if (server == 0) {
    ipc::UniqueFd sock = ipc::listen_seqpacket(socket_path(dir));
    if (::write(ready[1], "r", 1) != 1) ::_exit(2);
    ::usleep(300'000);
    ::_exit(0);
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  EXPECT_FALSE(reclaim_dead_run_dir(dir)) << "a listening server's files were removed";
  EXPECT_TRUE(fs::exists(dir / ipc::kSocketName));
  EXPECT_TRUE(reclaim_dead_run_dir(dir, server)) << "the exited server's files stay";
  EXPECT_FALSE(fs::exists(dir));
  int status = 0;
  ASSERT_EQ(::waitpid(server, &status, 0), server);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

WATCHED_TEST(RunDir, DefaultNamesAndPaths) {
  const fs::path d = default_run_dir("a/b c");
  EXPECT_EQ(d.filename(), "funnel-" + std::to_string(::geteuid()) + "-a_b_c");
  EXPECT_TRUE(d.is_absolute());
  EXPECT_EQ(socket_path("/x"), fs::path("/x") / ipc::kSocketName);
  EXPECT_EQ(start_lock_path("/x"), fs::path("/x") / ipc::kStartLockName);
  EXPECT_EQ(sanitize_for_filename("Ab-9_.x/y:z"), "Ab-9_.x_y_z");
}

}  // namespace
}  // namespace funnel
