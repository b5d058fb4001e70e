// ELF64 cubins: section headers, .nv.info.<kernel> sections and their EIATTR records
// (doc/design/fatbin.md).  Only what the parameter layout needs is read.
#include <algorithm>
#include <string>
#include <string_view>

#include "bytes.hpp"
#include "funnel/fatbin/fatbin.hpp"

namespace funnel::fatbin {
namespace {

using detail::read;
using detail::sub;

constexpr uint16_t kEmCuda = 190;
constexpr size_t kElfHeaderSize = 64;
constexpr size_t kSectionHeaderSize = 64;
constexpr std::string_view kInfoPrefix = ".nv.info.";

// EIATTR record formats and the attributes read here.
constexpr uint8_t kFmtNval = 1, kFmtBval = 2, kFmtHval = 3, kFmtSval = 4;
constexpr uint8_t kAttrParamCbank = 0x0a;
constexpr uint8_t kAttrKparamInfo = 0x17;
constexpr uint8_t kAttrKparamInfoV2 = 0x45;  // parameter lists over 4 KiB (CUDA 12.1+)

struct Section {
  uint32_t name;
  uint64_t offset;
  uint64_t size;
};

std::string section_name(std::span<const std::byte> strtab, uint32_t offset) {
  if (offset >= strtab.size()) throw Error("cubin: section name offset " + std::to_string(offset) + " is out of range");
  const auto tail = strtab.subspan(offset);
  const auto end = std::find(tail.begin(), tail.end(), std::byte{0});
  if (end == tail.end()) throw Error("cubin: section name at " + std::to_string(offset) + " is not terminated");
  return std::string(reinterpret_cast<const char*>(tail.data()), static_cast<size_t>(end - tail.begin()));
}

KernelInfo parse_info(std::string name, int sm_arch, std::span<const std::byte> info) {
  KernelInfo kernel;
  kernel.name = std::move(name);
  kernel.sm_arch = sm_arch;
  const auto where = "cubin: .nv.info." + kernel.name;
  uint64_t pos = 0;
  while (pos < info.size()) {
    const auto format = read<uint8_t>(info, pos, where.c_str());
    const auto attribute = read<uint8_t>(info, pos + 1, where.c_str());
    const auto value16 = read<uint16_t>(info, pos + 2, where.c_str());
    if (format == kFmtNval || format == kFmtBval || format == kFmtHval) {
      pos += 4;
      continue;
    }
    if (format != kFmtSval) {
      throw Error(where + ": unknown record format " + std::to_string(format) + " at offset " + std::to_string(pos));
    }
    const auto value = sub(info, pos + 4, value16, where.c_str());
    if (attribute == kAttrKparamInfo) {
      if (value.size() < 12) throw Error(where + ": EIATTR_KPARAM_INFO shorter than 12 bytes");
      KernelParam param;
      param.ordinal = read<uint16_t>(value, 4, where.c_str());
      param.offset = read<uint16_t>(value, 6, where.c_str());
      const auto word = read<uint32_t>(value, 8, where.c_str());
      param.log_alignment = word & 0xff;
      param.size = word >> 18;
      kernel.params.push_back(param);
    } else if (attribute == kAttrKparamInfoV2) {
      if (value.size() < 12) throw Error(where + ": EIATTR_KPARAM_INFO_V2 shorter than 12 bytes");
      KernelParam param;
      param.ordinal = read<uint16_t>(value, 4, where.c_str());
      param.offset = read<uint16_t>(value, 6, where.c_str());
      param.size = read<uint32_t>(value, 8, where.c_str());
      kernel.params.push_back(param);
    } else if (attribute == kAttrParamCbank) {
      if (value.size() < 8) throw Error(where + ": EIATTR_PARAM_CBANK shorter than 8 bytes");
      kernel.param_bytes = read<uint16_t>(value, 6, where.c_str());
    }
    pos += 4 + value.size();
  }
  std::sort(kernel.params.begin(), kernel.params.end(),
            [](const KernelParam& a, const KernelParam& b) { return a.ordinal < b.ordinal; });
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    const auto& p = kernel.params[i];
    if (p.ordinal != i) throw Error(where + ": parameter ordinals are not 0.." + std::to_string(kernel.params.size() - 1));
    if (uint64_t{p.offset} + p.size > kernel.param_bytes) {
      throw Error(where + ": parameter " + std::to_string(i) + " ends past the " + std::to_string(kernel.param_bytes) +
                  "-byte parameter buffer");
    }
  }
  return kernel;
}

}  // namespace

std::vector<KernelInfo> kernels_of_cubin(std::span<const std::byte> elf) {
  const auto header = sub(elf, 0, kElfHeaderSize, "cubin ELF header");
  static constexpr unsigned char kIdent[] = {0x7f, 'E', 'L', 'F', 2 /*ELFCLASS64*/, 1 /*little-endian*/};
  for (size_t i = 0; i < sizeof kIdent; ++i) {
    if (read<uint8_t>(header, i, "cubin ELF header") != kIdent[i]) {
      throw Error("cubin: not a little-endian ELF64 file");
    }
  }
  const auto machine = read<uint16_t>(header, 18, "cubin ELF header");
  if (machine != kEmCuda) throw Error("cubin: e_machine " + std::to_string(machine) + " is not EM_CUDA (190)");
  const int sm_arch = static_cast<int>((read<uint32_t>(header, 48, "cubin ELF header") >> 8) & 0xff);
  const auto shoff = read<uint64_t>(header, 40, "cubin ELF header");
  const auto shentsize = read<uint16_t>(header, 58, "cubin ELF header");
  const auto shnum = read<uint16_t>(header, 60, "cubin ELF header");
  const auto shstrndx = read<uint16_t>(header, 62, "cubin ELF header");
  if (shentsize < kSectionHeaderSize) throw Error("cubin: e_shentsize " + std::to_string(shentsize) + " is below 64");
  if (shstrndx >= shnum) throw Error("cubin: e_shstrndx is not a section");
  const auto table = sub(elf, shoff, uint64_t{shentsize} * shnum, "cubin section headers");

  std::vector<Section> sections;
  sections.reserve(shnum);
  for (uint64_t i = 0; i < shnum; ++i) {
    const auto at = i * shentsize;
    sections.push_back({read<uint32_t>(table, at, "cubin section header"),
                        read<uint64_t>(table, at + 24, "cubin section header"),
                        read<uint64_t>(table, at + 32, "cubin section header")});
  }
  const auto& strtab_section = sections[shstrndx];
  const auto strtab = sub(elf, strtab_section.offset, strtab_section.size, "cubin section name table");

  std::vector<KernelInfo> kernels;
  for (const auto& s : sections) {
    auto name = section_name(strtab, s.name);
    if (!name.starts_with(kInfoPrefix) || name.size() == kInfoPrefix.size()) continue;
    kernels.push_back(parse_info(name.substr(kInfoPrefix.size()), sm_arch, sub(elf, s.offset, s.size, name.c_str())));
  }
  return kernels;
}

}  // namespace funnel::fatbin
