// Files in the run directory (a tmpfs) mapped by both sides: the channel segments and
// the pinned-host allocations.  Creation reserves every byte up front (posix_fallocate)
// so that a full /dev/shm is a clear error now rather than a SIGBUS later.
#pragma once
#include <boost/interprocess/file_mapping.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace funnel::ipc {

// Where the server maps pinned buffers, so that clients can map them at the same address: far
// below the mmap area (libraries, threads, segments near the top of the address space) and above
// the zone where clients place device allocations (16-64 TiB, runtime/client/src/tables.cpp).
inline constexpr uint64_t kPinnedZoneBegin = uint64_t{72} << 40, kPinnedZoneEnd = uint64_t{104} << 40;

class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&&) noexcept = default;
  MappedFile& operator=(MappedFile&&) noexcept = default;

  // Creates `path` (0600, must not exist), reserves `size` bytes and maps it.
  // Throws std::system_error whose what() names the file, the size and the fix.
  static MappedFile create(const std::filesystem::path& path, uint64_t size);
  // The same, mapped at a random page of [kPinnedZoneBegin, kPinnedZoneEnd) that nothing of this
  // process uses (a few tries), else anywhere: the server's pinned buffers, which each client
  // maps at the same address (pinned.cpp), where the client's own mappings are unlikely to be.
  static MappedFile create_in_pinned_zone(const std::filesystem::path& path, uint64_t size);
  // Maps an existing file read-write; `expected_size` 0 means whatever it has.
  static MappedFile open(const std::filesystem::path& path, uint64_t expected_size = 0);
  // The same, mapped at `at` (page aligned) if nothing of this process is there (else an empty
  // MappedFile: nothing is replaced); throws as open() for the file itself.
  static MappedFile open_at(const std::filesystem::path& path, uint64_t size, const void* at);

  void* data() const noexcept { return region_.get_address(); }
  uint64_t size() const noexcept { return region_.get_size(); }
  explicit operator bool() const noexcept { return data() != nullptr; }
  // A mapped region (segment.cpp's helpers); empty: no mapping.
  explicit MappedFile(boost::interprocess::mapped_region region) noexcept : region_(std::move(region)) {}

 private:
  boost::interprocess::mapped_region region_;  // no descriptor stays open behind it
};

}  // namespace funnel::ipc
