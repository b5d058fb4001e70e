// gpu_device_files: what the client core's exit check and the GPU suite look for, on a fake
// /proc/<pid> folder (this machine has no /dev/nvidia*), and on this very process.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "funnel/common/gpu_files.hpp"

namespace fs = std::filesystem;

TEST(GpuFiles, FindsMappedAndOpenDeviceFilesOnce) {
  const fs::path root = fs::temp_directory_path() / ("funnel-gpu-files-" + std::to_string(::getpid()));
  fs::remove_all(root);
  const fs::path proc = root / "proc", dev = root / "dev";
  fs::create_directories(proc / "fd");
  fs::create_directories(dev);
  for (const char* f : {"nvidiactl", "nvidia0", "nvidia-uvm", "null"}) std::ofstream(dev / f) << "";
  const std::string p = dev.string();
  std::ofstream(proc / "maps") << "7f0000000000-7f0000001000 rw-s 00000000 00:05 11   " << p << "/nvidiactl\n"
                               << "7f0000001000-7f0000002000 rw-s 00000000 00:05 12   " << p << "/nvidia0\n"
                               << "7f0000002000-7f0000003000 r-xp 00000000 08:01 13   /usr/lib/libc.so.6\n"
                               << "7f0000003000-7f0000004000 rw-p 00000000 00:00 0    [heap]\n"
                               << "7f0000004000-7f0000005000 rw-p 00000000 08:01 14   /home/x" << p << "/nvidia0\n";
  fs::create_symlink(dev / "nvidiactl", proc / "fd" / "3");
  fs::create_symlink(dev / "nvidia-uvm", proc / "fd" / "4");
  fs::create_symlink(dev / "null", proc / "fd" / "5");
  fs::create_symlink("socket:[1234]", proc / "fd" / "6");
  const std::string prefix = p + "/nvidia";
  EXPECT_EQ(funnel::common::gpu_device_files(proc, prefix),
            (std::vector<std::string>{p + "/nvidia-uvm", p + "/nvidia0", p + "/nvidiactl"}));
  // Nothing of the kind, or a folder that cannot be read: none.
  EXPECT_TRUE(funnel::common::gpu_device_files(proc, "/dev/nvidia").empty());
  EXPECT_TRUE(funnel::common::gpu_device_files(root / "missing", prefix).empty());

  // This process: a descriptor it opens is found through the real /proc/self, and goes with it.
  const int fd = ::open((dev / "nvidia0").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(funnel::common::gpu_device_files("/proc/self", prefix), std::vector<std::string>{p + "/nvidia0"});
  ::close(fd);
  EXPECT_TRUE(funnel::common::gpu_device_files("/proc/self", prefix).empty());
  fs::remove_all(root);
}
