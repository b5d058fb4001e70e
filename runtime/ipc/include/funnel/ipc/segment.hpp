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

class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&&) noexcept = default;
  MappedFile& operator=(MappedFile&&) noexcept = default;

  // Creates `path` (0600, must not exist), reserves `size` bytes and maps it.
  // Throws std::system_error whose what() names the file, the size and the fix.
  static MappedFile create(const std::filesystem::path& path, uint64_t size);
  // Maps an existing file read-write; `expected_size` 0 means whatever it has.
  static MappedFile open(const std::filesystem::path& path, uint64_t expected_size = 0);

  void* data() const noexcept { return region_.get_address(); }
  uint64_t size() const noexcept { return region_.get_size(); }
  explicit operator bool() const noexcept { return data() != nullptr; }

 private:
  boost::interprocess::mapped_region region_;  // no descriptor stays open behind it
};

}  // namespace funnel::ipc
