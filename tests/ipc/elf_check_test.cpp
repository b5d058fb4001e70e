// funnel::inspect_elf (runtime/common/src/elf_check.cpp): what funnel-run and the client runtime
// read of an executable to tell a static CUDA runtime, on real and synthetic ELF files, broken
// ones, and one whose parts lie far apart in a large (sparse) file.
#include <elf.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "funnel/common/elf_check.hpp"

namespace fs = std::filesystem;
using funnel::inspect_elf;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/funnel-elf-test.XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write_at(const fs::path& file, uint64_t off, const void* p, size_t n) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  if (!f) f.open(file, std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(off));
  f.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
}

// A minimal ELF64 with sections: null, .shstrtab, .nv_fatbin (when `device_code`), .dynstr,
// .dynamic (DT_NEEDED of each of `needed`, then DT_NULL).  The section headers go at `shoff`
// (anywhere past the data: a large value makes a large, sparse file).
void write_elf(const fs::path& file, bool device_code, const std::vector<std::string>& needed, uint64_t shoff,
               uint64_t dynamic_size_extra = 0) {
  std::string shstr("\0.shstrtab\0.nv_fatbin\0.dynstr\0.dynamic\0", 39);
  std::string dynstr(1, '\0');
  std::vector<Elf64_Dyn> dyn;
  for (const auto& n : needed) {
    dyn.push_back(Elf64_Dyn{DT_NEEDED, {dynstr.size()}});
    dynstr += n;
    dynstr.push_back('\0');
  }
  dyn.push_back(Elf64_Dyn{DT_NULL, {0}});
  const uint64_t shstr_off = sizeof(Elf64_Ehdr), fat_off = shstr_off + shstr.size(), dynstr_off = fat_off + 16,
                 dyn_off = (dynstr_off + dynstr.size() + 7) & ~uint64_t{7};
  std::vector<Elf64_Shdr> sh(5);
  sh[1] = Elf64_Shdr{1, SHT_STRTAB, 0, 0, shstr_off, shstr.size(), 0, 0, 1, 0};
  sh[2] = Elf64_Shdr{11, device_code ? uint32_t{SHT_PROGBITS} : uint32_t{SHT_NULL}, 0, 0, fat_off, 16, 0, 0, 8, 0};
  if (!device_code) sh[2].sh_name = 0;
  sh[3] = Elf64_Shdr{22, SHT_STRTAB, 0, 0, dynstr_off, dynstr.size(), 0, 0, 1, 0};
  sh[4] = Elf64_Shdr{30, SHT_DYNAMIC, 0, 0, dyn_off, dyn.size() * sizeof(Elf64_Dyn) + dynamic_size_extra, 3, 0, 8,
                     sizeof(Elf64_Dyn)};
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_EXEC;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_ehsize = sizeof eh;
  eh.e_shoff = shoff;
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = static_cast<uint16_t>(sh.size());
  eh.e_shstrndx = 1;
  const char fat[16] = "fatbin bytes";
  fs::remove(file);
  write_at(file, 0, &eh, sizeof eh);
  write_at(file, shstr_off, shstr.data(), shstr.size());
  write_at(file, fat_off, fat, sizeof fat);
  write_at(file, dynstr_off, dynstr.data(), dynstr.size());
  write_at(file, dyn_off, dyn.data(), dyn.size() * sizeof(Elf64_Dyn));
  write_at(file, shoff, sh.data(), sh.size() * sizeof(Elf64_Shdr));
}

}  // namespace

TEST(ElfCheck, ThisTestProgram) {
  const auto info = inspect_elf("/proc/self/exe");
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->is_elf64);
  EXPECT_FALSE(info->has_device_code);
  EXPECT_FALSE(info->needs_shared_cudart);
  EXPECT_FALSE(funnel::uses_static_cudart(*info));
  bool libc = false;
  for (const auto& n : info->needed) libc = libc || n.rfind("libc.so", 0) == 0;
  EXPECT_TRUE(libc) << "no libc.so.* among the " << info->needed.size() << " DT_NEEDED entries";
}

TEST(ElfCheck, StaticAndSharedCudart) {
  TempDir d;
  const auto f = d.path / "prog";
  write_elf(f, true, {"libm.so.6", "libc.so.6"}, 4096);
  auto info = inspect_elf(f);
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->has_device_code);
  EXPECT_FALSE(info->needs_shared_cudart);
  EXPECT_TRUE(funnel::uses_static_cudart(*info));
  EXPECT_EQ(info->needed, (std::vector<std::string>{"libm.so.6", "libc.so.6"}));

  write_elf(f, true, {"libcudart.so.13", "libc.so.6"}, 4096);
  info = inspect_elf(f);
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->needs_shared_cudart);
  EXPECT_FALSE(funnel::uses_static_cudart(*info));

  write_elf(f, false, {"libc.so.6"}, 4096);
  info = inspect_elf(f);
  ASSERT_TRUE(info);
  EXPECT_FALSE(info->has_device_code);
}

// The section headers 256 MiB into a sparse file: only the parts it needs are read.
TEST(ElfCheck, PartsFarApartInALargeFile) {
  TempDir d;
  const auto f = d.path / "big";
  write_elf(f, true, {"libcudart.so.13"}, uint64_t{256} << 20);
  ASSERT_GT(fs::file_size(f), uint64_t{256} << 20);
  const auto info = inspect_elf(f);
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->has_device_code);
  EXPECT_TRUE(info->needs_shared_cudart);
}

TEST(ElfCheck, BrokenFilesGiveNothingOrLess) {
  TempDir d;
  EXPECT_FALSE(inspect_elf(d.path / "missing"));
  EXPECT_FALSE(inspect_elf(d.path));  // a directory
  const auto script = d.path / "script";
  std::ofstream(script) << "#!/bin/sh\necho hi\n";
  EXPECT_FALSE(inspect_elf(script));
  // Truncated inside the section headers: not readable as ELF.
  const auto f = d.path / "prog";
  write_elf(f, true, {"libc.so.6"}, 4096);
  fs::resize_file(f, 4096 + 100);
  EXPECT_FALSE(inspect_elf(f));
  // A dynamic section that claims more bytes than the file has: no DT_NEEDED read, no crash.
  write_elf(f, true, {"libcudart.so.13"}, 4096, uint64_t{1} << 40);
  auto info = inspect_elf(f);
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->has_device_code);
  EXPECT_TRUE(info->needed.empty());
  // Only the ELF header.
  write_elf(f, true, {"libc.so.6"}, 4096);
  fs::resize_file(f, sizeof(Elf64_Ehdr));
  EXPECT_FALSE(inspect_elf(f));
}
