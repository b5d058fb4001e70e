// Inspects an executable before funnel-run starts it: a program linked with the static CUDA
// runtime carries its own libcudart, which reaches the GPU through the libcuda.so.1 it finds:
// funnel's client driver serves it, NVIDIA's would open a context of its own.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace funnel {

struct ElfInfo {
  bool is_elf64 = false;
  bool has_device_code = false;     // a .nv_fatbin or .nvFatBinSegment section
  bool needs_shared_cudart = false; // DT_NEEDED has libcudart.so.*
  std::vector<std::string> needed;  // every DT_NEEDED entry
};

// Reads the parts of `file` it needs (headers, section names, the dynamic section); std::nullopt
// if it cannot be read or is not ELF64 (a script, ...).
std::optional<ElfInfo> inspect_elf(const std::filesystem::path& file);

// True when `info` says: device code, but no shared libcudart.
bool uses_static_cudart(const ElfInfo& info) noexcept;

// The one-line explanation and fix for a statically linked program that would get NVIDIA's driver.
std::string static_cudart_message(const std::string& program);

}  // namespace funnel
