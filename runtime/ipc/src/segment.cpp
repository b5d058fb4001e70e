#include "funnel/ipc/segment.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include <fmt/format.h>

namespace funnel::ipc {
namespace bip = boost::interprocess;

namespace {

[[noreturn]] void fail(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}

}  // namespace

MappedFile MappedFile::create(const std::filesystem::path& path, uint64_t size) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) fail(errno, fmt::format("cannot create {}", path.string()));
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
  ::close(fd);
  if (rc != 0) {
    ::unlink(path.c_str());
    if (rc == ENOSPC)
      fail(rc, fmt::format("cannot reserve {} MiB for {}: the file system is full (/dev/shm by default). "
                           "Free space there, raise its size, or point FUNNEL_RUN_DIR at a larger tmpfs",
                           (size + (1u << 20) - 1) >> 20, path.string()));
    fail(rc, fmt::format("cannot reserve {} bytes for {}", size, path.string()));
  }
  try {
    // The mapping outlives the file's descriptor, which closes here: a process holds no
    // descriptor per mapped file (a client's thousand pinned buffers must not exhaust the
    // server's or its own RLIMIT_NOFILE).
    const bip::file_mapping file(path.c_str(), bip::read_write);
    MappedFile m;
    m.region_ = bip::mapped_region(file, bip::read_write, 0, size);
    return m;
  } catch (const bip::interprocess_exception& e) {
    ::unlink(path.c_str());
    fail(EIO, fmt::format("cannot map {}: {}", path.string(), e.what()));
  }
}

MappedFile MappedFile::open(const std::filesystem::path& path, uint64_t expected_size) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(errno, fmt::format("cannot open {}", path.string()));
  if (expected_size != 0 && static_cast<uint64_t>(st.st_size) != expected_size)
    fail(EINVAL, fmt::format("{} has {} bytes, expected {}", path.string(), st.st_size, expected_size));
  if (st.st_uid != ::geteuid()) fail(EPERM, fmt::format("{} is not owned by this user", path.string()));
  try {
    const bip::file_mapping file(path.c_str(), bip::read_write);
    MappedFile m;
    m.region_ = bip::mapped_region(file, bip::read_write, 0, static_cast<size_t>(st.st_size));
    return m;
  } catch (const bip::interprocess_exception& e) {
    fail(EIO, fmt::format("cannot map {}: {}", path.string(), e.what()));
  }
}

}  // namespace funnel::ipc
