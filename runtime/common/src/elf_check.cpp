#include "funnel/common/elf_check.hpp"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

namespace funnel {
namespace {

// Bounds-checked view of the whole file: a truncated or hostile ELF yields nullopt,
// never an out-of-range read.
struct Bytes {
  std::vector<char> data;
  template <class T>
  bool read(uint64_t off, T& out) const {
    if (off > data.size() || sizeof(T) > data.size() - off) return false;
    std::memcpy(&out, data.data() + off, sizeof(T));
    return true;
  }
  std::string cstr(uint64_t off, uint64_t limit) const {
    std::string s;
    for (uint64_t i = off; i < limit && i < data.size() && data[i] != '\0'; ++i) s.push_back(data[i]);
    return s;
  }
};

}  // namespace

std::optional<ElfInfo> inspect_elf(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  Bytes b{std::vector<char>(std::istreambuf_iterator<char>(in), {})};
  Elf64_Ehdr eh{};
  if (!b.read(0, eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64)
    return std::nullopt;
  ElfInfo info;
  info.is_elf64 = true;
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0) return info;
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  for (uint16_t i = 0; i < eh.e_shnum; ++i)
    if (!b.read(eh.e_shoff + uint64_t{i} * sizeof(Elf64_Shdr), sh[i])) return std::nullopt;
  if (eh.e_shstrndx < sh.size()) {
    const auto& names = sh[eh.e_shstrndx];
    for (const auto& s : sh) {
      const std::string name = b.cstr(names.sh_offset + s.sh_name, names.sh_offset + names.sh_size);
      if (name == ".nv_fatbin" || name == ".nvFatBinSegment") info.has_device_code = true;
    }
  }
  for (const auto& s : sh) {
    if (s.sh_type != SHT_DYNAMIC || s.sh_link >= sh.size()) continue;
    const auto& strtab = sh[s.sh_link];
    for (uint64_t off = s.sh_offset; off + sizeof(Elf64_Dyn) <= s.sh_offset + s.sh_size; off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d{};
      if (!b.read(off, d) || d.d_tag == DT_NULL) break;
      if (d.d_tag != DT_NEEDED) continue;
      std::string lib = b.cstr(strtab.sh_offset + d.d_un.d_val, strtab.sh_offset + strtab.sh_size);
      if (lib.rfind("libcudart.so", 0) == 0) info.needs_shared_cudart = true;
      info.needed.push_back(std::move(lib));
    }
  }
  return info;
}

bool uses_static_cudart(const ElfInfo& info) noexcept { return info.has_device_code && !info.needs_shared_cudart; }

std::string static_cudart_message(const std::string& program) {
  return fmt::format("{} is linked with the static CUDA runtime, which reaches the GPU through the libcuda.so.1 it "
                     "finds, and that is NVIDIA's driver (FUNNEL_CLIENT_DRIVER=0): its CUDA work would run on a "
                     "context of its own, not on funnel's. Run it with FUNNEL_CLIENT_DRIVER=1 (the default), or "
                     "rebuild it with `nvcc -cudart shared` (CMake: set CUDA_RUNTIME_LIBRARY Shared)",
                     program);
}

}  // namespace funnel
