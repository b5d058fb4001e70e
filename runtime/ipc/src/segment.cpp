#include "funnel/ipc/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <random>
#include <system_error>

#include <fmt/format.h>

namespace funnel::ipc {
namespace bip = boost::interprocess;

namespace {

[[noreturn]] void fail(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}

}  // namespace

namespace {
// ThreadSanitizer keeps its shadow memory where the pinned zone lies and aborts a mapping there
// (found by the TSan build of the server tests): its builds map pinned buffers anywhere.
#if defined(__SANITIZE_THREAD__)
constexpr bool kPinnedZoneUsable = false;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kPinnedZoneUsable = false;
#else
constexpr bool kPinnedZoneUsable = true;
#endif
#else
constexpr bool kPinnedZoneUsable = true;
#endif

// Creates `path` (0600, must not exist) with `size` bytes reserved; throws as create() says.
void create_file(const std::filesystem::path& path, uint64_t size) {
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
}

// `file` mapped read-write: anywhere when `at` is nullptr, else at `at` with MAP_FIXED_NOREPLACE,
// and an empty region when that place is taken here (EEXIST, or a kernel before 4.17 that took
// `at` as a hint).  Throws bip::interprocess_exception for other failures.
bip::mapped_region map_region(const bip::file_mapping& file, uint64_t size, const void* at) {
  if (at == nullptr) return bip::mapped_region(file, bip::read_write, 0, size);
  try {
    return bip::mapped_region(file, bip::read_write, 0, size, at, MAP_FIXED_NOREPLACE);
  } catch (const bip::interprocess_exception&) {
    return {};
  }
}

// A fresh file (create_file) mapped: anywhere, or at a random free place of the pinned zone.
MappedFile create_mapped(const std::filesystem::path& path, uint64_t size, bool in_pinned_zone) {
  create_file(path, size);
  try {
    // The mapping outlives the file's descriptor, which closes here: a process holds no
    // descriptor per mapped file (a client's thousand pinned buffers must not exhaust the
    // server's or its own RLIMIT_NOFILE).
    const bip::file_mapping file(path.c_str(), bip::read_write);
    bip::mapped_region region;
    constexpr uint64_t kPage = 4096;
    const uint64_t span = (size + kPage - 1) / kPage * kPage;
    if (in_pinned_zone && kPinnedZoneUsable && span < kPinnedZoneEnd - kPinnedZoneBegin) {
      static thread_local std::mt19937_64 rng(std::random_device{}());
      const uint64_t places = (kPinnedZoneEnd - kPinnedZoneBegin - span) / kPage + 1;
      for (int tries = 0; tries < 8 && !region.get_address(); ++tries)
        region = map_region(file, size, reinterpret_cast<const void*>(kPinnedZoneBegin + rng() % places * kPage));
    }
    if (!region.get_address()) region = map_region(file, size, nullptr);
    return MappedFile(std::move(region));
  } catch (const bip::interprocess_exception& e) {
    ::unlink(path.c_str());
    fail(EIO, fmt::format("cannot map {}: {}", path.string(), e.what()));
  }
}

// The file at `path` checked (its size when expected_size is not 0, its owner) and mapped
// (map_region: an empty MappedFile when `at` is taken here).
MappedFile open_mapped(const std::filesystem::path& path, uint64_t expected_size, const void* at) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(errno, fmt::format("cannot open {}", path.string()));
  if (expected_size != 0 && static_cast<uint64_t>(st.st_size) != expected_size)
    fail(EINVAL, fmt::format("{} has {} bytes, expected {}", path.string(), st.st_size, expected_size));
  if (st.st_uid != ::geteuid()) fail(EPERM, fmt::format("{} is not owned by this user", path.string()));
  try {
    const bip::file_mapping file(path.c_str(), bip::read_write);
    return MappedFile(map_region(file, static_cast<uint64_t>(st.st_size), at));
  } catch (const bip::interprocess_exception& e) {
    fail(EIO, fmt::format("cannot map {}: {}", path.string(), e.what()));
  }
}
}  // namespace

MappedFile MappedFile::create(const std::filesystem::path& path, uint64_t size) {
  return create_mapped(path, size, false);
}

MappedFile MappedFile::create_in_pinned_zone(const std::filesystem::path& path, uint64_t size) {
  return create_mapped(path, size, true);
}

MappedFile MappedFile::open(const std::filesystem::path& path, uint64_t expected_size) {
  return open_mapped(path, expected_size, nullptr);
}

MappedFile MappedFile::open_at(const std::filesystem::path& path, uint64_t size, const void* at) {
  return open_mapped(path, size, at);
}

}  // namespace funnel::ipc
