// MappedFile: create/open of channel and pinned files, and a full tmpfs that must be
// a clear error (naming FUNNEL_RUN_DIR) at creation, never a SIGBUS later.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>

#include "funnel/ipc/segment.hpp"
#include "watchdog.hpp"

namespace funnel::ipc {
namespace {

namespace fs = std::filesystem;

// A fresh directory, removed with everything in it at the end.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "funnel-ipc-test-XXXXXX").string();
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

int error_of(const std::function<void()>& f, std::string* what = nullptr) {
  try {
    f();
  } catch (const std::system_error& e) {
    if (what != nullptr) *what = e.what();
    return e.code().value();
  }
  return 0;
}

WATCHED_TEST(MappedFile, CreateReservesAndMapsPrivately) {
  TempDir dir;
  const auto path = dir.path() / "channel.1";
  const uint64_t size = (1u << 20) + 4096;
  ::umask(022);
  MappedFile m = MappedFile::create(path, size);
  ASSERT_TRUE(m);
  EXPECT_EQ(m.size(), size);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), size);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, size) << "every byte must be reserved up front";
  std::memset(m.data(), 0xab, size);

  MappedFile other = MappedFile::open(path, size);
  ASSERT_TRUE(other);
  EXPECT_EQ(other.size(), size);
  EXPECT_EQ(static_cast<unsigned char*>(other.data())[size - 1], 0xab);
  static_cast<unsigned char*>(other.data())[0] = 0x11;
  EXPECT_EQ(static_cast<unsigned char*>(m.data())[0], 0x11) << "both mappings must share the bytes";

  MappedFile any_size = MappedFile::open(path);
  EXPECT_EQ(any_size.size(), size);
}

WATCHED_TEST(MappedFile, CreateRefusesAnExistingFile) {
  TempDir dir;
  const auto path = dir.path() / "channel.2";
  MappedFile first = MappedFile::create(path, 4096);
  std::string what;
  EXPECT_EQ(error_of([&] { MappedFile::create(path, 4096); }, &what), EEXIST);
  EXPECT_NE(what.find(path.string()), std::string::npos) << what;
}

WATCHED_TEST(MappedFile, OpenChecksExistenceAndSize) {
  TempDir dir;
  const auto path = dir.path() / "pinned.1.1";
  std::string what;
  EXPECT_EQ(error_of([&] { MappedFile::open(path); }, &what), ENOENT);
  EXPECT_NE(what.find(path.string()), std::string::npos) << what;
  MappedFile m = MappedFile::create(path, 8192);
  EXPECT_EQ(error_of([&] { MappedFile::open(path, 4096); }, &what), EINVAL);
  EXPECT_NE(what.find("expected 4096"), std::string::npos) << what;
}

WATCHED_TEST(MappedFile, MovedFromIsEmpty) {
  TempDir dir;
  MappedFile a = MappedFile::create(dir.path() / "x", 4096);
  MappedFile b = std::move(a);
  EXPECT_TRUE(b);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): checking the moved-from state
}

WATCHED_TEST(MappedFile, FullTmpfsIsAClearErrorAtCreation) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a 1 MiB tmpfs (run the tests as root to cover ENOSPC)";
  TempDir dir;
  if (::mount("funnel-test", dir.path().c_str(), "tmpfs", 0, "size=1m,mode=0700") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "): no CAP_SYS_ADMIN in this container?";
  const auto path = dir.path() / "channel.3";
  std::string what;
  EXPECT_EQ(error_of([&] { MappedFile::create(path, 8u << 20); }, &what), ENOSPC);
  EXPECT_NE(what.find("FUNNEL_RUN_DIR"), std::string::npos) << what;
  EXPECT_NE(what.find(path.string()), std::string::npos) << what;
  EXPECT_FALSE(fs::exists(path)) << "a failed create must not leave its file behind";
  // A file that fits still works on the same file system.
  EXPECT_EQ(error_of([&] { MappedFile::create(dir.path() / "small", 64u << 10); }), 0);
  ::umount2(dir.path().c_str(), MNT_DETACH);
}

}  // namespace
}  // namespace funnel::ipc
