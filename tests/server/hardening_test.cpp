// What no client or control peer may do to the node's server (doc/reliability.md,
// "Hostile and careless peers"): stop it with odd bytes, hold its descriptors with idle
// connections or pinned buffers, or run it out of threads with streams.
#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fixture.hpp"
#include "funnel/common/run_dir.hpp"
#include "funnel/common/text.hpp"
#include "funnel/server/sim_backend.hpp"
#include "test_client.hpp"

namespace funnel::test {
namespace {

size_t open_descriptors() {
  size_t n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

// "é" 64 times: 128 bytes, so the hello's 127 cuts the last character in two.
std::string long_utf8_command() {
  std::string s;
  for (int i = 0; i < 64; ++i) s += "\xC3\xA9";
  return s;
}

TEST(Text, SanitizeKeepsValidUtf8AndReplacesTheRest) {
  EXPECT_EQ(sanitize_text("mpirun ./a.out -n 4"), "mpirun ./a.out -n 4");
  EXPECT_EQ(sanitize_text("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(sanitize_text("x\xff\xfey"), "x\xEF\xBF\xBD\xEF\xBF\xBDy");
  EXPECT_EQ(sanitize_text("\xC3"), "\xEF\xBF\xBD");                  // cut in two
  EXPECT_EQ(sanitize_text("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/'
  EXPECT_EQ(sanitize_text("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(sanitize_text("a\nb\tc\x1b[31m\x7f\xC2\x85"), "a?b?c?[31m??");
  EXPECT_NO_THROW((void)nlohmann::json(sanitize_text("\xff\xfe\xfd\x80")).dump());
}

TEST(Text, Utf8PrefixNeverCutsACharacter) {
  const std::string s = long_utf8_command();
  EXPECT_EQ(utf8_prefix(s, 127).size(), 126u);
  EXPECT_EQ(utf8_prefix(s, 128).size(), 128u);
  EXPECT_EQ(utf8_prefix("abc", 2), "ab");
  EXPECT_EQ(utf8_prefix("a\xF0\x9F\x98\x80", 4), "a");
  EXPECT_EQ(sanitize_text(utf8_prefix(s, 127)), utf8_prefix(s, 127)) << "a clean cut is valid UTF-8";
}

// A client's command line is whatever bytes its argv held: the status query that lists it
// must answer, and the server must go on serving (it used to exit on the JSON dump's throw).
TEST_F(ServerTest, StatusAnswersWhateverBytesTheClientsCommandLinesHold) {
  start_server();
  TestClient odd(run_dir_, "long_running x\xff\xfe\xff\xfe\xff\xfe");
  const std::string long_name = long_utf8_command();
  TestClient cut(run_dir_, long_name.c_str());  // the hello keeps 127 bytes: half an "é" last
  ASSERT_TRUE(odd.ok());
  ASSERT_TRUE(cut.ok());
  const std::string text = control(run_dir_, "status");
  ASSERT_FALSE(text.empty()) << "the server did not answer";
  const auto j = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "not JSON: " << text.substr(0, 200);
  ASSERT_EQ(j["clients"].size(), 2u);
  std::vector<std::string> commands;
  for (const auto& c : j["clients"]) commands.push_back(c["command"].get<std::string>());
  EXPECT_NE(std::find(commands.begin(), commands.end(), "long_running x\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                                                        "\xEF\xBF\xBD\xEF\xBF\xBD"),
            commands.end());
  EXPECT_NE(std::find(commands.begin(), commands.end(), long_name.substr(0, 126) + "\xEF\xBF\xBD"), commands.end());
  EXPECT_EQ(odd.call(Opcode::Fence).status, Status::Success) << "the server stopped serving";
  EXPECT_EQ(cut.call(Opcode::Fence).status, Status::Success);
  EXPECT_FALSE(finished_.load());
}

// Raw control requests with bytes no funnelctl sends: each gets an error answer in JSON, and
// the server keeps its clients.
TEST_F(ServerTest, ControlRequestsWithBadBytesGetErrorsAndTheServerStays) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  const std::vector<std::pair<std::string, std::string>> requests = {
      {"\xff", ""},
      {"\x01\x02\x1b[2J", "x"},
      {"defaults", "priority=\xff"},
      {"defaults", "\xff\xfe=1"},
      {"defaults", "mem_limit=\xc3"},
      {"terminate", "pid=\xff\xfe"},
      {"terminate", "client=\xed\xa0\x80"},
      {"shutdown", "timeout_s=\xff"},
      {std::string(31, '\xfe'), std::string(223, '\xff')},
  };
  for (const auto& [verb, arg] : requests) {
    const std::string text = control(run_dir_, verb, arg);
    ASSERT_FALSE(text.empty()) << "no answer to a request of verb size " << verb.size();
    const auto j = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "not JSON: " << text;
    EXPECT_TRUE(j.contains("error")) << text;
  }
  EXPECT_EQ(c.call(Opcode::Fence).status, Status::Success);
  const auto s = stats(run_dir_);
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(s["server"]["clients"], 1);
  EXPECT_FALSE(finished_.load());
}

// Connections that never say hello (or never ask their question) are closed after the hello
// timeout, and clients attach meanwhile.
TEST_F(ServerTest, IdleConnectionsAreClosedAfterTheHelloTimeout) {
  auto o = options();
  o.hello_timeout = std::chrono::milliseconds(300);
  start_server(o);
  std::vector<ipc::UniqueFd> idle;
  for (int i = 0; i < 40; ++i) {
    int err = 0;
    idle.push_back(ipc::connect_seqpacket(run_dir_ / ipc::kSocketName, err));
    ASSERT_TRUE(idle.back()) << std::strerror(err);
  }
  {
    // A control peer that says hello and then nothing.
    int err = 0;
    idle.push_back(ipc::connect_seqpacket(run_dir_ / ipc::kSocketName, err));
    ipc::HelloMsg h{};
    h.magic = ipc::kSocketMagic;
    h.version = ipc::kProtocolVersion;
    h.role = ipc::Role::Control;
    ASSERT_TRUE(ipc::send_message(idle.back().get(), &h, sizeof h));
  }
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok()) << "a client must attach beside idle connections";
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& fd : idle) {
    char b[16];
    EXPECT_EQ(ipc::recv_message(fd.get(), b, sizeof b, std::chrono::seconds(10)), 0) << "not closed";
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(c.call(Opcode::Fence).status, Status::Success);
}

// A pinned buffer is a mapping, not a descriptor, in the server (and in a client's
// MappedFile): a thousand of them must not use up RLIMIT_NOFILE.
TEST_F(ServerTest, PinnedBuffersHoldNoDescriptors) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  const size_t before = open_descriptors();
  std::vector<ipc::MappedFile> mine;
  for (int i = 0; i < 300; ++i) {
    const Reply r = c.call(Opcode::PinnedAlloc, ipc::PinnedAllocCmd{4096, 0, 0});
    ASSERT_EQ(r.status, Status::Success) << "allocation " << i;
    if (i % 10 == 0) {
      const auto path = run_dir_ / fmt::format("{}{}.{}", ipc::kPinnedFilePrefix, c.attach_reply().client_id, r.value[0]);
      mine.push_back(ipc::MappedFile::open(path, r.value[1]));
    }
  }
  EXPECT_LT(open_descriptors(), before + 10) << "300 pinned buffers (30 mapped here too) took descriptors";
  EXPECT_EQ(stats(run_dir_)["totals"]["pinned_allocations"], 300);
}

// Each sim stream is a server thread: a client gets its share, then an error, and the
// server logs the cause.
TEST_F(ServerTest, TheSimBackendCapsAClientsStreams) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  const uint32_t kCap = server::SimOptions{}.max_streams_per_client;
  for (uint64_t id = 1; id <= kCap; ++id) c.create_stream(id);
  EXPECT_EQ(c.call(Opcode::Fence).status, Status::Success);
  const Reply over = c.call(Opcode::StreamCreate, ipc::StreamCreateCmd{kCap + 1, 0, 0});
  EXPECT_EQ(over.status, Status::MemoryAllocation);
  EXPECT_EQ(stats(run_dir_)["totals"]["streams"], kCap);
  TestClient other(run_dir_);
  ASSERT_TRUE(other.ok());
  other.create_stream(1);
  EXPECT_EQ(other.call(Opcode::Fence).status, Status::Success) << "the cap is per client";
}

// A run directory that holds the user's files is refused, never emptied; one that funnel
// adopted empty stays (empty) when the server stops; one it created goes.
TEST_F(ServerTest, ARunDirectoryOfTheUsersFilesIsRefusedAndNothingIsRemoved) {
  std::filesystem::create_directory(run_dir_);
  ::chmod(run_dir_.c_str(), 0700);
  for (const char* name : {"channel.notes", "pinned.txt", "start.lock", "results.dat"})
    std::ofstream(run_dir_ / name) << "the user's";
  server::SimOptions so;
  server::Server s(options(), server::make_sim_backend(so));
  try {
    s.start();
    ADD_FAILURE() << "a server started in a directory of the user's files";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("funnel did not make"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("FUNNEL_RUN_DIR"), std::string::npos) << e.what();
  }
  for (const char* name : {"channel.notes", "pinned.txt", "start.lock", "results.dat"})
    EXPECT_TRUE(std::filesystem::exists(run_dir_ / name)) << name;
}

TEST_F(ServerTest, AnAdoptedEmptyRunDirectoryStaysAndACreatedOneGoes) {
  std::filesystem::create_directory(run_dir_);
  ::chmod(run_dir_.c_str(), 0700);
  start_server();
  {
    TestClient c(run_dir_);
    ASSERT_TRUE(c.ok());
    ASSERT_EQ(c.call(Opcode::PinnedAlloc, ipc::PinnedAllocCmd{4096, 0, 0}).status, Status::Success);
  }
  stop_server();
  ASSERT_TRUE(std::filesystem::is_directory(run_dir_)) << "funnel did not make it: it stays";
  EXPECT_TRUE(std::filesystem::is_empty(run_dir_)) << "but everything funnel made in it goes";
  std::filesystem::remove(run_dir_);
  start_server();
  EXPECT_TRUE(std::filesystem::exists(run_dir_ / kRunDirMarker));
  stop_server();
  EXPECT_FALSE(std::filesystem::exists(run_dir_)) << "funnel made it: it goes";
}

// Another user plants the predictable default log directory (here: root plants it for
// uid 65534, the victim): the victim's server must neither write through the planted links
// nor fail to start; it logs to a private directory beside it.
TEST(LogDir, APlantedDefaultDirectoryIsNeverUsed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as two users";
  Watchdog watchdog;
  // The attacker (root here) plants the victim's default directory first: world-writable,
  // with the log file's name a link to a file of the victim's.
  const std::filesystem::path planted = "/tmp/funnel-65534-logs";
  const std::filesystem::path victim_file = "/tmp/funnel-hardening-victim-file";
  std::error_code ec;
  std::filesystem::remove_all(planted, ec);
  ASSERT_EQ(::mkdir(planted.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(planted.c_str(), 0777), 0);
  std::ofstream(victim_file) << "precious";
  ASSERT_EQ(::chown(victim_file.c_str(), 65534, 65534), 0);
  std::filesystem::create_symlink(victim_file, planted / "funnel-server-x-1.log");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The victim, uid 65534, whose default is the planted directory.
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(10);
    try {
      std::string refused;
      const auto used = ensure_log_dir(default_log_dir(), &refused);
      if (used == default_log_dir() || refused.find(default_log_dir().string()) == std::string::npos) ::_exit(11);
      struct stat st {};
      if (::lstat(used.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || (st.st_mode & 0777) != 0700) ::_exit(12);
      const int fd = open_private_file(used, "funnel-server-x-1.log", true, true);
      if (fd < 0 || ::write(fd, "log\n", 4) != 4) ::_exit(13);
      ::close(fd);
      // Even in the planted directory itself no write follows the link.
      if (open_private_file(default_log_dir(), "funnel-server-x-1.log", false, true) >= 0) ::_exit(14);
      std::filesystem::remove_all(used);
    } catch (...) {
      ::_exit(15);
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the victim's check failed: " << status;
  std::string content;
  std::getline(std::ifstream(victim_file), content);
  EXPECT_EQ(content, "precious");
  std::filesystem::remove_all(planted, ec);
  std::filesystem::remove(victim_file, ec);
}

// A log directory the user names is refused, with the fix, when another user could write in
// it; the user's own directory (0755 is fine) is used.
TEST(LogDir, ANamedDirectoryOthersCanWriteIsRefused) {
  const auto base = make_temp_dir();
  const auto open_dir = base / "shared";
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  try {
    ensure_log_dir(open_dir);
    ADD_FAILURE() << "a world-writable log directory was used";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(open_dir.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("FUNNEL_LOG_DIR"), std::string::npos) << e.what();
  }
  const auto link = base / "link";
  std::filesystem::create_directory_symlink(base, link);
  EXPECT_THROW(ensure_log_dir(link), std::runtime_error) << "a symlink is not a directory of one's own";
  const auto mine = base / "mine" / "logs";
  EXPECT_EQ(ensure_log_dir(mine), mine);
  ASSERT_EQ(::chmod(mine.c_str(), 0755), 0);
  EXPECT_EQ(ensure_log_dir(mine), mine);
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace funnel::test
