#include "funnel/common/elf_check.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

namespace funnel {
namespace {

// The file, read where asked only: the ELF header, the section headers, the section names and
// the dynamic section with its strings (the whole file once cost a process start under funnel
// seconds for an executable of hundreds of megabytes).  Bounds-checked: a truncated or hostile
// ELF yields nullopt or less information, never an out-of-range read.
class ElfFile {
 public:
  explicit ElfFile(const std::filesystem::path& file) : fd_(::open(file.c_str(), O_RDONLY | O_CLOEXEC)) {
    struct stat st {};
    if (fd_ >= 0 && ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) size_ = static_cast<uint64_t>(st.st_size);
  }
  ~ElfFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;

  // Bytes [off, off + n) into `out`; false when they are not all in the file.
  bool read(uint64_t off, void* out, uint64_t n) const {
    if (off > size_ || n > size_ - off) return false;
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(off));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      p += got;
      off += static_cast<uint64_t>(got);
      n -= static_cast<uint64_t>(got);
    }
    return true;
  }
  template <class T>
  bool read(uint64_t off, T& out) const {
    return read(off, &out, sizeof(T));
  }
  // A section's bytes; empty when they are not all in the file.
  std::vector<char> section(const Elf64_Shdr& s) const {
    if (s.sh_type == SHT_NOBITS || s.sh_offset > size_ || s.sh_size > size_ - s.sh_offset) return {};
    std::vector<char> out(s.sh_size);
    if (!read(s.sh_offset, out.data(), out.size())) return {};
    return out;
  }

 private:
  int fd_;
  uint64_t size_ = 0;
};

// The NUL-terminated string at `off` of a string table (up to its end).
std::string cstr(const std::vector<char>& table, uint64_t off) {
  std::string s;
  for (uint64_t i = off; i < table.size() && table[i] != '\0'; ++i) s.push_back(table[i]);
  return s;
}

}  // namespace

std::optional<ElfInfo> inspect_elf(const std::filesystem::path& file) {
  const ElfFile f(file);
  Elf64_Ehdr eh{};
  if (!f.read(0, eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64)
    return std::nullopt;
  ElfInfo info;
  info.is_elf64 = true;
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0) return info;
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  if (!f.read(eh.e_shoff, sh.data(), uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr))) return std::nullopt;
  if (eh.e_shstrndx < sh.size()) {
    const std::vector<char> names = f.section(sh[eh.e_shstrndx]);
    for (const auto& s : sh) {
      const std::string name = cstr(names, s.sh_name);
      if (name == ".nv_fatbin" || name == ".nvFatBinSegment") info.has_device_code = true;
    }
  }
  for (const auto& s : sh) {
    if (s.sh_type != SHT_DYNAMIC || s.sh_link >= sh.size()) continue;
    const std::vector<char> dynamic = f.section(s);
    const std::vector<char> strtab = f.section(sh[s.sh_link]);
    for (uint64_t off = 0; off + sizeof(Elf64_Dyn) <= dynamic.size(); off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d{};
      std::memcpy(&d, dynamic.data() + off, sizeof d);
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag != DT_NEEDED) continue;
      std::string lib = cstr(strtab, d.d_un.d_val);
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
