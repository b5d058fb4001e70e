#include "funnel/common/gpu_files.hpp"

#include <algorithm>
#include <fstream>
#include <system_error>

namespace funnel::common {

std::vector<std::string> gpu_device_files(const std::filesystem::path& proc, std::string_view prefix) {
  std::vector<std::string> found;
  // maps: "address perms offset dev inode   path"; the path is all that follows the inode.
  std::ifstream maps(proc / "maps");
  for (std::string line; std::getline(maps, line);) {
    const auto at = line.find(prefix);
    if (at != std::string::npos && at > 0 && line[at - 1] == ' ')
      found.push_back(line.substr(at));
  }
  std::error_code ec;
  for (std::filesystem::directory_iterator it(proc / "fd", ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code link_ec;
    const auto target = std::filesystem::read_symlink(it->path(), link_ec).string();
    if (!link_ec && target.starts_with(prefix)) found.push_back(target);
  }
  std::sort(found.begin(), found.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());
  return found;
}

}  // namespace funnel::common
