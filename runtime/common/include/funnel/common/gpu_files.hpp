// Whether a process opened the GPU itself: NVIDIA's driver opens /dev/nvidiactl, /dev/nvidia0,
// /dev/nvidia-uvm ... and maps some of them when it makes a CUDA context.  A funnel client must
// never do so (it would hold a context of its own beside the server's, which the GPU time-slices
// against every other process): the client core checks at its exit (runtime.cpp), and the GPU
// suite checks every program it runs through funnel.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace funnel::common {

// The files under `prefix` that `proc` (a /proc/<pid> folder) has mapped (maps) or open (fd/),
// sorted, each once.  Empty when there are none or `proc` cannot be read.
std::vector<std::string> gpu_device_files(const std::filesystem::path& proc = "/proc/self",
                                          std::string_view prefix = "/dev/nvidia");

}  // namespace funnel::common
