// ELF64 cubins: section headers, the symbol table, .nv.info sections and their EIATTR
// records (doc/design/fatbin.md).  Only what kernel layouts, kernel resources and
// variables need is read.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
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
constexpr size_t kSymbolSize = 24;  // Elf64_Sym
constexpr uint32_t kShtSymtab = 2;
constexpr uint32_t kShtNobits = 8;
constexpr uint8_t kSttObject = 1;
constexpr uint8_t kSttCudaObject = 13;  // a variable of relocatable device code (-rdc objects)
constexpr uint8_t kStoManaged = 0x04;  // st_other of a __managed__ variable (nvcc 13, whole-program and -rdc cubins)
constexpr std::string_view kInfoPrefix = ".nv.info.";
constexpr std::string_view kSharedPrefix = ".nv.shared.";

// EIATTR record formats and the attributes read here.
constexpr uint8_t kFmtNval = 1, kFmtBval = 2, kFmtHval = 3, kFmtSval = 4;
constexpr uint8_t kAttrParamCbank = 0x0a;
constexpr uint8_t kAttrFrameSize = 0x11;
constexpr uint8_t kAttrKparamInfo = 0x17;
constexpr uint8_t kAttrRegcount = 0x2f;
constexpr uint8_t kAttrKparamInfoV2 = 0x45;  // parameter lists over 4 KiB (CUDA 12.1+)

struct Section {
  std::string name;
  uint32_t type;
  uint64_t offset;
  uint64_t size;
  uint32_t link;
  uint64_t entsize;
};

struct Symbol {
  std::string name;
  uint8_t type;
  uint16_t section;
  uint64_t value;
  uint64_t size;
  uint8_t other;  // st_other: visibility and CUDA's flags (kStoManaged)
};

struct Cubin {
  std::span<const std::byte> elf;
  int sm_arch = 0;
  std::vector<Section> sections;

  std::span<const std::byte> bytes(const Section& s) const { return sub(elf, s.offset, s.size, s.name.c_str()); }
};

std::string string_at(std::span<const std::byte> strtab, uint32_t offset, const char* what) {
  if (offset >= strtab.size())
    throw Error(std::string("cubin: ") + what + " offset " + std::to_string(offset) + " is out of range");
  const auto tail = strtab.subspan(offset);
  const auto end = std::find(tail.begin(), tail.end(), std::byte{0});
  if (end == tail.end())
    throw Error(std::string("cubin: ") + what + " at " + std::to_string(offset) + " is not terminated");
  return std::string(reinterpret_cast<const char*>(tail.data()), static_cast<size_t>(end - tail.begin()));
}

Cubin read_cubin(std::span<const std::byte> elf) {
  const auto header = sub(elf, 0, kElfHeaderSize, "cubin ELF header");
  static constexpr unsigned char kIdent[] = {0x7f, 'E', 'L', 'F', 2 /*ELFCLASS64*/, 1 /*little-endian*/};
  for (size_t i = 0; i < sizeof kIdent; ++i) {
    if (read<uint8_t>(header, i, "cubin ELF header") != kIdent[i]) {
      throw Error("cubin: not a little-endian ELF64 file");
    }
  }
  const auto machine = read<uint16_t>(header, 18, "cubin ELF header");
  if (machine != kEmCuda) throw Error("cubin: e_machine " + std::to_string(machine) + " is not EM_CUDA (190)");
  Cubin c;
  c.elf = elf;
  c.sm_arch = static_cast<int>((read<uint32_t>(header, 48, "cubin ELF header") >> 8) & 0xff);
  const auto shoff = read<uint64_t>(header, 40, "cubin ELF header");
  const auto shentsize = read<uint16_t>(header, 58, "cubin ELF header");
  const auto shnum = read<uint16_t>(header, 60, "cubin ELF header");
  const auto shstrndx = read<uint16_t>(header, 62, "cubin ELF header");
  if (shentsize < kSectionHeaderSize) throw Error("cubin: e_shentsize " + std::to_string(shentsize) + " is below 64");
  if (shstrndx >= shnum) throw Error("cubin: e_shstrndx is not a section");
  const auto table = sub(elf, shoff, uint64_t{shentsize} * shnum, "cubin section headers");

  std::vector<uint32_t> names;
  c.sections.reserve(shnum);
  for (uint64_t i = 0; i < shnum; ++i) {
    const auto at = i * shentsize;
    names.push_back(read<uint32_t>(table, at, "cubin section header"));
    c.sections.push_back({{},
                          read<uint32_t>(table, at + 4, "cubin section header"),
                          read<uint64_t>(table, at + 24, "cubin section header"),
                          read<uint64_t>(table, at + 32, "cubin section header"),
                          read<uint32_t>(table, at + 40, "cubin section header"),
                          read<uint64_t>(table, at + 56, "cubin section header")});
  }
  const auto& strtab_section = c.sections[shstrndx];
  const auto strtab = sub(elf, strtab_section.offset, strtab_section.size, "cubin section name table");
  for (size_t i = 0; i < c.sections.size(); ++i) c.sections[i].name = string_at(strtab, names[i], "section name");
  return c;
}

// The symbol table (empty when the cubin has none).
std::vector<Symbol> symbols(const Cubin& c) {
  const auto symtab = std::find_if(c.sections.begin(), c.sections.end(), [](const Section& s) { return s.type == kShtSymtab; });
  if (symtab == c.sections.end()) return {};
  if (symtab->entsize < kSymbolSize) throw Error("cubin: .symtab entry size " + std::to_string(symtab->entsize) + " is below 24");
  if (symtab->link >= c.sections.size()) throw Error("cubin: .symtab names no string table");
  const auto table = c.bytes(*symtab);
  const auto names = c.bytes(c.sections[symtab->link]);
  std::vector<Symbol> out;
  for (uint64_t at = 0; at + kSymbolSize <= table.size(); at += symtab->entsize) {
    out.push_back({string_at(names, read<uint32_t>(table, at, "cubin symbol"), "symbol name"),
                   static_cast<uint8_t>(read<uint8_t>(table, at + 4, "cubin symbol") & 0xf),
                   read<uint16_t>(table, at + 6, "cubin symbol"), read<uint64_t>(table, at + 8, "cubin symbol"),
                   read<uint64_t>(table, at + 16, "cubin symbol"), read<uint8_t>(table, at + 5, "cubin symbol")});
  }
  return out;
}

// Calls fn(attribute, value) for every SVAL record of an .nv.info section.
void for_each_sval(std::span<const std::byte> info, const std::string& where,
                   const std::function<void(uint8_t, std::span<const std::byte>)>& fn) {
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
    fn(attribute, value);
    pos += 4 + value.size();
  }
}

KernelInfo parse_info(std::string name, int sm_arch, std::span<const std::byte> info) {
  KernelInfo kernel;
  kernel.name = std::move(name);
  kernel.sm_arch = sm_arch;
  const auto where = "cubin: .nv.info." + kernel.name;
  for_each_sval(info, where, [&](uint8_t attribute, std::span<const std::byte> value) {
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
  });
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

struct Resources {
  uint32_t num_regs = 0;
  uint32_t frame_bytes = 0;
};

// Per-function resources of the cubin-wide .nv.info section, by function name: its
// records name the function by symbol index.
std::map<std::string, Resources> resources(const Cubin& c) {
  const auto info = std::find_if(c.sections.begin(), c.sections.end(), [](const Section& s) { return s.name == ".nv.info"; });
  if (info == c.sections.end()) return {};
  const auto syms = symbols(c);
  std::map<std::string, Resources> out;
  for_each_sval(c.bytes(*info), "cubin: .nv.info", [&](uint8_t attribute, std::span<const std::byte> value) {
    if (attribute != kAttrRegcount && attribute != kAttrFrameSize) return;
    const auto symbol = read<uint32_t>(value, 0, "cubin: .nv.info resource record");
    const auto v = read<uint32_t>(value, 4, "cubin: .nv.info resource record");
    if (symbol >= syms.size()) throw Error("cubin: .nv.info names symbol " + std::to_string(symbol) + " of " + std::to_string(syms.size()));
    auto& r = out[syms[symbol].name];
    (attribute == kAttrRegcount ? r.num_regs : r.frame_bytes) = v;
  });
  return out;
}

}  // namespace

std::vector<KernelInfo> kernels_of_cubin(std::span<const std::byte> elf) {
  const Cubin c = read_cubin(elf);
  std::vector<KernelInfo> kernels;
  for (const auto& s : c.sections) {
    if (!s.name.starts_with(kInfoPrefix) || s.name.size() == kInfoPrefix.size()) continue;
    kernels.push_back(parse_info(s.name.substr(kInfoPrefix.size()), c.sm_arch, c.bytes(s)));
  }
  const auto res = resources(c);
  for (auto& k : kernels) {
    if (auto it = res.find(k.name); it != res.end()) {
      k.num_regs = it->second.num_regs;
      k.local_bytes = it->second.frame_bytes;
    }
    const auto shared = std::string(kSharedPrefix) + k.name;
    for (const auto& s : c.sections)
      if (s.name == shared) k.shared_bytes = s.size;
  }
  return kernels;
}

std::vector<GlobalInfo> globals_of_cubin(std::span<const std::byte> elf) {
  const Cubin c = read_cubin(elf);
  std::vector<GlobalInfo> out;
  for (const auto& sym : symbols(c)) {
    if ((sym.type != kSttObject && sym.type != kSttCudaObject) || sym.section == 0 || sym.section >= c.sections.size())
      continue;
    const Section& s = c.sections[sym.section];
    const bool global = s.name.starts_with(".nv.global");
    const bool constant = s.name.starts_with(".nv.constant") && !s.name.starts_with(".nv.constant0");
    if (!global && !constant) continue;
    if (!detail::in_range(sym.value, sym.size, s.size))
      throw Error("cubin: variable " + sym.name + " lies outside its section " + s.name);
    GlobalInfo g;
    g.name = sym.name;
    g.size = sym.size;
    g.constant = constant;
    g.managed = global && (sym.other & kStoManaged) != 0;
    if (s.type != kShtNobits) {
      const auto bytes = sub(c.bytes(s), sym.value, sym.size, sym.name.c_str());
      g.init.assign(bytes.begin(), bytes.end());
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<std::byte> patch_managed(std::span<const std::byte> elf,
                                     const std::vector<std::pair<std::string, uint64_t>>& addresses) {
  constexpr uint32_t kShtRela = 4;
  constexpr size_t kRelaSize = 24;  // Elf64_Rela
  // R_CUDA_64: the whole address in a data word; R_CUDA_ABS32_LO_32/HI_32: its low/high half in
  // an instruction's 32-bit immediate (bytes 4..7 of the 128-bit instructions of sm_70 and later).
  constexpr uint32_t kRCuda64 = 2, kRCudaAbs32Lo = 0x38, kRCudaAbs32Hi = 0x39, kRCudaNone = 0;
  const Cubin c = read_cubin(elf);
  const std::vector<Symbol> syms = symbols(c);
  std::vector<std::byte> out(elf.begin(), elf.end());
  auto wanted = [&](uint64_t sym) -> int {
    if (sym >= syms.size()) return -1;
    for (size_t i = 0; i < addresses.size(); ++i)
      if (syms[sym].name == addresses[i].first) return static_cast<int>(i);
    return -1;
  };
  for (const Section& rel : c.sections) {
    if (rel.type != kShtRela || rel.name.starts_with(".rela.debug")) continue;
    if (rel.entsize < kRelaSize) throw Error("cubin: " + rel.name + " entry size below 24");
    const std::string target_name = rel.name.substr(std::string_view(".rela").size());
    const auto target =
        std::find_if(c.sections.begin(), c.sections.end(), [&](const Section& x) { return x.name == target_name; });
    const auto table = c.bytes(rel);
    for (uint64_t at = 0; at + kRelaSize <= table.size(); at += rel.entsize) {
      const auto offset = read<uint64_t>(table, at, "cubin relocation");
      const auto info = read<uint64_t>(table, at + 8, "cubin relocation");
      const auto addend = read<int64_t>(table, at + 16, "cubin relocation");
      const int i = wanted(info >> 32);
      if (i < 0) continue;
      const std::string& name = addresses[static_cast<size_t>(i)].first;
      const auto type = static_cast<uint32_t>(info & 0xffffffffu);
      auto refuse = [&](const std::string& why) {
        throw Error("cubin: __managed__ variable " + name + " is referenced from " + rel.name + " by a relocation of type " +
                    std::to_string(type) + " that funnel cannot apply (" + why + ")");
      };
      if (target == c.sections.end() || target->type == kShtNobits) refuse("no section holds its bytes");
      const uint64_t value = addresses[static_cast<size_t>(i)].second + static_cast<uint64_t>(addend);
      if (type == kRCuda64) {
        if (!detail::in_range(offset, 8, target->size)) refuse("outside its section");
        std::memcpy(out.data() + target->offset + offset, &value, sizeof value);
      } else if (type == kRCudaAbs32Lo || type == kRCudaAbs32Hi) {
        if (!target->name.starts_with(".text.")) refuse("not in code");
        if (c.sm_arch < 70) refuse("code of sm_" + std::to_string(c.sm_arch) + ", before sm_70");
        if (offset > target->size || !detail::in_range(offset + 4, 4, target->size)) refuse("outside its section");
        const auto half = static_cast<uint32_t>(type == kRCudaAbs32Lo ? value : value >> 32);
        std::memcpy(out.data() + target->offset + offset + 4, &half, sizeof half);
      } else {
        refuse("an unknown kind");
      }
      // R_CUDA_NONE against the same symbol: the H100's driver refuses a relocation of symbol 0
      // (CUDA_ERROR_INVALID_IMAGE) and takes this one (measured, session 34).
      const uint64_t none = (info & ~uint64_t{0xffffffffu}) | kRCudaNone;
      std::memcpy(out.data() + rel.offset + at + 8, &none, sizeof none);
    }
  }
  return out;
}

}  // namespace funnel::fatbin
