// funnel::fatbin against real nvcc output: the .nv_fatbin sections of kernels.cu built
// three ways (tests/fatbin/CMakeLists.txt).  Expected layouts are computed here, on the
// host, from the same types (the CUDA ABI lays parameters out like struct members with
// natural alignment), and cross-checked with `cuobjdump -elf` where it is installed.
#include <elf.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "funnel/fatbin/fatbin.hpp"
#include "kernel_types.h"

namespace fb = funnel::fatbin;
using namespace fatbin_test;

namespace {

// Host twins of the CUDA vector types (alignment 16 on the device).
struct alignas(16) Double2 {
  double x, y;
};
struct alignas(16) Float4 {
  float x, y, z, w;
};

std::string object_path(const std::string& mode) {
  return std::string(FUNNEL_FATBIN_KERNELS_DIR) + "/kernels_" + mode + ".o";
}

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

// The named section of a host ELF64 object (trusted input: nvcc just wrote it).
std::vector<std::byte> host_section(const std::string& path, const std::string& name) {
  const auto file = read_file(path);
  Elf64_Ehdr eh;
  std::memcpy(&eh, file.data(), sizeof eh);
  auto shdr = [&](size_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, file.data() + eh.e_shoff + i * eh.e_shentsize, sizeof sh);
    return sh;
  };
  const auto strtab = shdr(eh.e_shstrndx);
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    const auto sh = shdr(i);
    const char* n = reinterpret_cast<const char*>(file.data() + strtab.sh_offset + sh.sh_name);
    if (name == n) {
      return {file.begin() + static_cast<std::ptrdiff_t>(sh.sh_offset),
              file.begin() + static_cast<std::ptrdiff_t>(sh.sh_offset + sh.sh_size)};
    }
  }
  throw std::runtime_error(path + " has no section " + name);
}

std::vector<std::byte> fatbin_section(const std::string& mode) { return host_section(object_path(mode), ".nv_fatbin"); }

struct Expected {
  std::vector<fb::KernelParam> params;
  uint32_t param_bytes = 0;
};

// Struct-like layout of the parameter types Ts, in order.
template <typename... Ts>
Expected layout() {
  Expected e;
  uint32_t end = 0;
  uint32_t ordinal = 0;
  auto add = [&](uint32_t size, uint32_t align) {
    const uint32_t offset = (end + align - 1) / align * align;
    e.params.push_back({ordinal++, offset, size, 0});
    end = offset + size;
  };
  (add(sizeof(Ts), alignof(Ts)), ...);
  (void)add;  // unused for a kernel without parameters
  e.param_bytes = end;
  return e;
}

std::map<std::string, Expected> expected_kernels() {
  static_assert(sizeof(Padded) == 24 && alignof(Aligned16) == 16 && sizeof(Huge) > 4096);
  return {
      {"no_params", layout<>()},
      {"scalars", layout<char, short, int, long long, float, double, int*>()},
      {"mixed_structs", layout<char, Padded, short, Aligned8, char, Aligned16, Double2, Float4, float*>()},
      {"big_struct", layout<int, Big, char, unsigned char*>()},
      {"huge_struct", layout<char, Huge, int*>()},
      {"tail_char", layout<int, char>()},
      {"many_scalars", layout<int, char, double, short, int, float, long long, char, int, double, char, short, int,
                              float, double, char, int, long long, short, int, char, int, float, double, int*>()},
      {"_Z9templatedIdEvT_cPS0_", layout<double, char, double*>()},
      {"_Z9templatedIsEvT_cPS0_", layout<short, char, short*>()},
      {"_ZN11fatbin_test12in_namespaceENS_6PaddedEPi", layout<Padded, int*>()},
      {"_Z12unused_paramiPKv", layout<int, const void*>()},
      {"uses_globals", layout<int, int*>()},
  };
}

void expect_layouts(const std::vector<fb::KernelInfo>& kernels, const std::vector<int>& archs) {
  const auto expected = expected_kernels();
  for (int arch : archs) {
    std::map<std::string, const fb::KernelInfo*> found;
    for (const auto& k : kernels) {
      if (k.sm_arch == arch) found[k.name] = &k;
    }
    EXPECT_EQ(found.size(), expected.size()) << "sm_" << arch;
    for (const auto& [name, e] : expected) {
      SCOPED_TRACE("sm_" + std::to_string(arch) + " " + name);
      auto it = found.find(name);
      ASSERT_NE(it, found.end()) << "kernel missing";
      EXPECT_EQ(it->second->params, e.params);
      EXPECT_EQ(it->second->param_bytes, e.param_bytes);
    }
  }
}

TEST(Fatbin, EntriesOfDefaultBuild) {
  const auto section = fatbin_section("default");
  const auto images = fb::parse_fatbin(section);
  int cubins = 0, ptx = 0;
  for (const auto& im : images) {
    if (im.kind == fb::ImageKind::cubin) {
      ++cubins;
      EXPECT_FALSE(im.compressed()) << "nvcc 13 stores cubins uncompressed by default";
      EXPECT_TRUE(im.sm_arch == 90 || im.sm_arch == 80) << im.sm_arch;
      ASSERT_GE(im.payload.size(), 4u);
      EXPECT_EQ(std::memcmp(im.payload.data(), "\x7f" "ELF", 4), 0);
    } else {
      ++ptx;
      EXPECT_EQ(im.sm_arch, 80);
      EXPECT_EQ(im.version >> 16, 9u) << "PTX ISA 9.x";
    }
  }
  EXPECT_EQ(cubins, 2);
  EXPECT_EQ(ptx, 1);
}

TEST(Fatbin, LayoutsMatchHostLayout) {
  for (const char* mode : {"default", "none"}) {
    SCOPED_TRACE(mode);
    const auto result = fb::kernels_of_fatbin(fatbin_section(mode));
    EXPECT_TRUE(result.skipped.empty());
    expect_layouts(result.kernels, {90, 80});
  }
}

TEST(Fatbin, ZstdCompressedCubins) {
  const auto section = fatbin_section("size");
  const auto images = fb::parse_fatbin(section);
  bool any_zstd_cubin = false;
  for (const auto& im : images) {
    if (im.kind == fb::ImageKind::cubin && im.compression == fb::Compression::zstd) any_zstd_cubin = true;
  }
  ASSERT_TRUE(any_zstd_cubin) << "-compress-mode=size should compress the cubins";
  const auto result = fb::kernels_of_fatbin(section);
  if (!fb::can_decompress(fb::Compression::zstd)) {
    EXPECT_EQ(result.skipped.size(), 2u);
    GTEST_SKIP() << "libzstd.so.1 is not installed: zstd-compressed cubins are skipped";
  }
  EXPECT_TRUE(result.skipped.empty());
  expect_layouts(result.kernels, {90, 80});
}

// -compress-mode=speed: every entry lz4-compressed (NVIDIA's libraries ship such entries: cuFFT).
TEST(Fatbin, Lz4CompressedEntries) {
  const auto section = fatbin_section("speed");
  int lz4_cubins = 0, lz4_ptx = 0;
  for (const auto& im : fb::parse_fatbin(section)) {
    if (im.compression != fb::Compression::lz4) continue;
    ++(im.kind == fb::ImageKind::cubin ? lz4_cubins : lz4_ptx);
  }
  ASSERT_EQ(lz4_cubins, 2) << "-compress-mode=speed -Xfatbin=-compress-all should lz4-compress the cubins";
  EXPECT_EQ(lz4_ptx, 1);
  if (!fb::can_decompress(fb::Compression::lz4)) GTEST_SKIP() << "liblz4.so.1 is not installed";
  const auto result = fb::kernels_of_fatbin(section);
  EXPECT_TRUE(result.skipped.empty());
  expect_layouts(result.kernels, {90, 80});
  // A damaged block is refused, never read past.
  for (const auto& im : fb::parse_fatbin(section)) {
    if (im.compression != fb::Compression::lz4) continue;
    std::vector<std::byte> bad(im.payload.begin(), im.payload.end());
    bad.resize(bad.size() / 3);
    fb::FatbinImage cut = im;
    cut.payload = bad;
    EXPECT_THROW((void)fb::decompressed_payload(cut), fb::Error);
  }
}

TEST(Fatbin, WrapperEntryPoint) {
  const auto section = fatbin_section("default");
  struct Wrapper {
    int magic;
    int version;
    const void* data;
    void* filename_or_fatbins;
  } wrapper{static_cast<int>(fb::kWrapperMagic), 1, section.data(), nullptr};
  const auto via_wrapper = fb::kernels_of_fatbin(&wrapper, section.size());
  expect_layouts(via_wrapper.kernels, {90, 80});
  EXPECT_EQ(fb::parse_fatbin(&wrapper, section.size()).size(), fb::parse_fatbin(section).size());
  // The bare pointer too, with an unknown (large) bound: the header's fat_size bounds it.
  const auto direct = fb::parse_fatbin(section.data(), section.size());
  EXPECT_EQ(direct.size(), 3u);
  // A bound below the fatbin's size is refused.
  EXPECT_THROW(fb::parse_fatbin(&wrapper, section.size() - 1), fb::Error);
}

TEST(Fatbin, ErrorsAreDescriptive) {
  std::vector<std::byte> junk(64, std::byte{0x11});
  try {
    fb::parse_fatbin(junk);
    FAIL() << "no exception";
  } catch (const fb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad magic"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fb::parse_fatbin(std::span<const std::byte>{}), fb::Error);
  EXPECT_THROW(fb::parse_fatbin(nullptr, 100), fb::Error);
  EXPECT_THROW(fb::kernels_of_cubin(junk), fb::Error);
}

// Every prefix and many corrupted copies of the section: each parse either succeeds
// or throws fb::Error; it never crashes or reads out of range (ASan builds check that).
void parse_everything(std::span<const std::byte> bytes) {
  try {
    (void)fb::kernels_of_fatbin(bytes);
  } catch (const fb::Error&) {
  }
  try {
    (void)fb::kernels_of_fatbin(bytes.data(), bytes.size());
  } catch (const fb::Error&) {
  }
}

TEST(Fatbin, TruncatedInputThrows) {
  for (const char* mode : {"default", "size"}) {
    const auto section = fatbin_section(mode);
    for (size_t n = 0; n < section.size(); n += (n < 256 ? 1 : 7)) {
      std::vector<std::byte> copy(section.begin(), section.begin() + static_cast<std::ptrdiff_t>(n));
      if (n == 0) {
        EXPECT_THROW(fb::parse_fatbin(copy), fb::Error);
        continue;
      }
      EXPECT_THROW(fb::kernels_of_fatbin(copy.data(), copy.size()), fb::Error) << mode << " truncated to " << n;
    }
  }
}

TEST(Fatbin, TruncatedCubinThrows) {
  const auto section = fatbin_section("none");
  for (const auto& im : fb::parse_fatbin(section)) {
    if (im.kind != fb::ImageKind::cubin) continue;
    for (size_t n = 0; n < im.payload.size(); n += 13) {
      std::vector<std::byte> copy(im.payload.begin(), im.payload.begin() + static_cast<std::ptrdiff_t>(n));
      try {
        (void)fb::kernels_of_cubin(copy);  // a cut in trailing sections may still parse
      } catch (const fb::Error&) {
      }
    }
  }
}

TEST(Fatbin, CorruptedInputNeverCrashes) {
  std::mt19937 rng(12345);
  for (const char* mode : {"default", "size"}) {
    const auto section = fatbin_section(mode);
    std::uniform_int_distribution<size_t> pos(0, section.size() - 1);
    std::uniform_int_distribution<int> byte(0, 255);
    for (int round = 0; round < 3000; ++round) {
      auto copy = section;
      const int flips = 1 + round % 4;
      for (int f = 0; f < flips; ++f) {
        // Half the rounds aim at the headers, where a flip changes sizes and offsets.
        const size_t at = round % 2 == 0 ? pos(rng) % std::min<size_t>(section.size(), 160) : pos(rng);
        copy[at] = static_cast<std::byte>(byte(rng));
      }
      parse_everything(copy);
    }
  }
}

TEST(Fatbin, CorruptedCubinNeverCrashes) {
  const auto section = fatbin_section("none");
  std::mt19937 rng(777);
  for (const auto& im : fb::parse_fatbin(section)) {
    if (im.kind != fb::ImageKind::cubin) continue;
    const std::vector<std::byte> cubin(im.payload.begin(), im.payload.end());
    std::uniform_int_distribution<size_t> pos(0, cubin.size() - 1);
    std::uniform_int_distribution<int> byte(0, 255);
    for (int round = 0; round < 2000; ++round) {
      auto copy = cubin;
      const size_t at = round % 2 == 0 ? pos(rng) % 64 : pos(rng);  // ELF header or anywhere
      copy[at] = static_cast<std::byte>(byte(rng));
      try {
        (void)fb::kernels_of_cubin(copy);
      } catch (const fb::Error&) {
      }
      try {
        (void)fb::globals_of_cubin(copy);
      } catch (const fb::Error&) {
      }
    }
  }
}

// The cubins of the sm_90 and sm_80 entries (uncompressed build).
std::vector<std::vector<std::byte>> cubins_of(const std::string& mode) {
  std::vector<std::vector<std::byte>> out;
  const auto section = fatbin_section(mode);
  for (const auto& im : fb::parse_fatbin(section))
    if (im.kind == fb::ImageKind::cubin) out.push_back(fb::decompressed_payload(im));
  return out;
}

TEST(Fatbin, GlobalsOfCubin) {
  const auto cubins = cubins_of("none");
  ASSERT_EQ(cubins.size(), 2u);
  for (const auto& cubin : cubins) {
    std::map<std::string, fb::GlobalInfo> found;
    for (auto& g : fb::globals_of_cubin(cubin)) found[g.name] = g;
    ASSERT_EQ(found.size(), 3u);
    ASSERT_TRUE(found.contains("fatbin_counter"));
    EXPECT_EQ(found["fatbin_counter"].size, 16 * sizeof(int));
    EXPECT_FALSE(found["fatbin_counter"].constant);
    EXPECT_TRUE(found["fatbin_counter"].init.empty()) << "zero-initialised: .nv.global is NOBITS";
    ASSERT_TRUE(found.contains("fatbin_table"));
    EXPECT_TRUE(found["fatbin_table"].constant);
    ASSERT_EQ(found["fatbin_table"].init.size(), 8 * sizeof(float));
    float table[8];
    std::memcpy(table, found["fatbin_table"].init.data(), sizeof table);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(table[i], static_cast<float>(i + 1));
    const std::string ns = "_ZN11fatbin_test8ns_valueE";
    ASSERT_TRUE(found.contains(ns));
    EXPECT_EQ(found[ns].size, sizeof(double));
    ASSERT_EQ(found[ns].init.size(), sizeof(double));
    double v = 0;
    std::memcpy(&v, found[ns].init.data(), sizeof v);
    EXPECT_EQ(v, 2.5);
  }
  // Not an ELF file: an error, not an empty list.
  EXPECT_THROW((void)fb::globals_of_cubin(std::vector<std::byte>(10)), fb::Error);
}

TEST(Fatbin, KernelResources) {
  for (const auto& cubin : cubins_of("none")) {
    for (const auto& k : fb::kernels_of_cubin(cubin)) {
      SCOPED_TRACE(k.name + " sm_" + std::to_string(k.sm_arch));
      EXPECT_GT(k.num_regs, 0u);
      EXPECT_LE(k.num_regs, 255u);
      // sm_90 cubins put the 1 KiB the compiler reserves in front of a kernel's own
      // shared variables (nvcc 13: 1280 bytes here); sm_80 ones hold the variables alone.
      if (k.name != "uses_globals") EXPECT_EQ(k.shared_bytes, 0u);
      else if (k.sm_arch == 80) EXPECT_EQ(k.shared_bytes, 64 * sizeof(int));
      else EXPECT_GE(k.shared_bytes, 64 * sizeof(int));
      EXPECT_EQ(k.local_bytes, 0u);
    }
  }
}

// `cuobjdump -elf` prints, per cubin, "arch = sm_NN", each ".nv.info.<kernel>" section
// and its EIATTR_KPARAM_INFO records as "Ordinal : 0x.. Offset : 0x.. Size : 0x..".
TEST(Fatbin, MatchesCuobjdump) {
  const std::string cuobjdump = FUNNEL_CUOBJDUMP;
  if (cuobjdump.empty()) GTEST_SKIP() << "cuobjdump is not installed (it ships with the full CUDA toolkit)";
  const std::string command = "'" + cuobjdump + "' -elf '" + object_path("none") + "' 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  ASSERT_TRUE(pipe) << command;
  std::string text;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe.get())) text.append(buf, n);

  std::map<std::pair<int, std::string>, std::vector<fb::KernelParam>> dumped;
  const std::regex arch_re(R"(arch = sm_(\d+))");
  const std::regex section_re(R"(^\s*\.nv\.info\.(\S+))");
  const std::regex param_re(R"(Ordinal\s*:\s*0x([0-9a-fA-F]+)\s+Offset\s*:\s*0x([0-9a-fA-F]+)\s+Size\s*:\s*0x([0-9a-fA-F]+))");
  int arch = 0;
  std::string kernel;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    std::smatch m;
    if (std::regex_search(line, m, arch_re)) {
      arch = std::stoi(m[1]);
    } else if (std::regex_search(line, m, section_re)) {
      kernel = m[1];
      dumped[{arch, kernel}];
    } else if (std::regex_search(line, m, param_re) && !kernel.empty()) {
      dumped[{arch, kernel}].push_back({static_cast<uint32_t>(std::stoul(m[1], nullptr, 16)),
                                        static_cast<uint32_t>(std::stoul(m[2], nullptr, 16)),
                                        static_cast<uint32_t>(std::stoul(m[3], nullptr, 16)), 0});
    }
  }
  ASSERT_FALSE(dumped.empty()) << "could not read cuobjdump's output:\n" << text.substr(0, 2000);

  const auto ours = fb::kernels_of_fatbin(fatbin_section("none"));
  for (const auto& k : ours.kernels) {
    SCOPED_TRACE("sm_" + std::to_string(k.sm_arch) + " " + k.name);
    auto it = dumped.find({k.sm_arch, k.name});
    ASSERT_NE(it, dumped.end()) << "cuobjdump does not list this kernel";
    auto theirs = it->second;
    std::sort(theirs.begin(), theirs.end(), [](auto& a, auto& b) { return a.ordinal < b.ordinal; });
    ASSERT_EQ(theirs.size(), k.params.size());
    for (size_t i = 0; i < theirs.size(); ++i) {
      EXPECT_EQ(theirs[i].ordinal, k.params[i].ordinal);
      EXPECT_EQ(theirs[i].offset, k.params[i].offset);
      EXPECT_EQ(theirs[i].size, k.params[i].size);
    }
  }
}

}  // namespace

// What cuModuleLoadData takes, told apart (the driver front and both server backends use it).
TEST(Fatbin, ModuleFormatOfEachKindOfImage) {
  const auto section = fatbin_section("default");
  EXPECT_EQ(fb::module_format(section), fb::ModuleFormat::fatbin);
  for (const auto& im : fb::parse_fatbin(section)) {
    if (im.kind == fb::ImageKind::cubin) {
      EXPECT_EQ(fb::module_format(im.payload), fb::ModuleFormat::cubin);
    } else {
      // A fat binary's PTX entry has no terminating 0 of its own: add one, as a caller's string has.
      if (im.compressed() && !fb::can_decompress(im.compression)) continue;
      std::vector<std::byte> text = fb::decompressed_payload(im);
      while (!text.empty() && text.back() == std::byte{0}) text.pop_back();
      EXPECT_EQ(fb::module_format(text), fb::ModuleFormat::unknown) << "PTX without its 0";
      text.push_back(std::byte{0});
      EXPECT_EQ(fb::module_format(text), fb::ModuleFormat::ptx);
    }
  }
  const std::string junk = "\x01\x02 not a module";
  EXPECT_EQ(fb::module_format(std::as_bytes(std::span(junk.data(), junk.size() + 1))), fb::ModuleFormat::unknown);
  const std::string no_version = "// a comment, but no PTX";
  EXPECT_EQ(fb::module_format(std::as_bytes(std::span(no_version.data(), no_version.size() + 1))),
            fb::ModuleFormat::unknown);
  EXPECT_EQ(fb::module_format({}), fb::ModuleFormat::unknown);
}

// The kernel names of an image, whatever its format (cuModuleEnumerateFunctions and the tools'
// module table list them): the same names from the fat binary, each cubin and the PTX.
TEST(Fatbin, KernelNamesOfEachKindOfImage) {
  std::vector<std::string> expected;
  for (const auto& [name, layout] : expected_kernels()) expected.push_back(name);
  std::sort(expected.begin(), expected.end());
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  for (const char* mode : {"default", "none", "speed"}) {
    SCOPED_TRACE(mode);
    const auto section = fatbin_section(mode);
    const auto names = fb::kernel_names(section);
    EXPECT_EQ(sorted(names), expected) << "each name once";
    for (const auto& im : fb::parse_fatbin(section)) {
      if (im.compressed() && !fb::can_decompress(im.compression)) continue;
      std::vector<std::byte> payload = fb::decompressed_payload(im);
      if (im.kind == fb::ImageKind::ptx) {
        while (!payload.empty() && payload.back() == std::byte{0}) payload.pop_back();
        payload.push_back(std::byte{0});
      }
      EXPECT_EQ(sorted(fb::kernel_names(payload)), expected) << (im.kind == fb::ImageKind::ptx ? "ptx" : "cubin");
    }
  }
  const std::string ptx = ".version 9.0\n.target sm_90\n.visible .entry first(\n.param .u64 p)\n{ ret; }\n"
                          ".entry\tsecond\n()\n{ ret; }\n.func not_an_entry()\n{ ret; }\n";
  EXPECT_EQ(fb::entries_of_ptx(ptx), (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(fb::kernel_names(std::as_bytes(std::span(ptx.data(), ptx.size() + 1))),
            (std::vector<std::string>{"first", "second"}));
  const std::string junk = "\x01\x02 not a module";
  EXPECT_THROW(fb::kernel_names(std::as_bytes(std::span(junk.data(), junk.size() + 1))), fb::Error);
}
