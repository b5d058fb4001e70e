// funnel::fatbin::patch_managed against nvcc's cubins of tests/fatbin/managed.cu: the
// constant-bank-4 slots of the named __managed__ variables hold the given addresses, their
// relocations are gone, everything else is as it was; relocatable device code gets the address in
// its instructions; which
// variables are managed; the cubin a GPU runs (cubin_for_arch).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "funnel/fatbin/fatbin.hpp"

namespace {

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(bytes.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// The bytes at `offset` of the section named `name` (a minimal ELF64 section lookup).
uint64_t u64(const std::vector<std::byte>& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}
uint32_t u32(const std::vector<std::byte>& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
uint16_t u16(const std::vector<std::byte>& b, size_t at) {
  uint16_t v;
  std::memcpy(&v, b.data() + at, 2);
  return v;
}
struct Sec {
  uint64_t offset = 0, size = 0;
};
Sec section(const std::vector<std::byte>& elf, const std::string& name) {
  const uint64_t shoff = u64(elf, 0x28);
  const uint16_t shnum = u16(elf, 0x3c), shstrndx = u16(elf, 0x3e);
  const uint64_t strs = u64(elf, shoff + 64ull * shstrndx + 0x18);
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t h = shoff + 64ull * i;
    const char* n = reinterpret_cast<const char*>(elf.data() + strs + u32(elf, h));
    if (name == n) return {u64(elf, h + 0x18), u64(elf, h + 0x20)};
  }
  return {};
}

const std::string kDir = FUNNEL_MANAGED_CUBINS_DIR;

// The symbol flag that tells __managed__ variables from __device__ ones.
TEST(GlobalsOfCubin, SayWhichVariablesAreManaged) {
  std::map<std::string, bool> managed;
  for (const auto& g : funnel::fatbin::globals_of_cubin(read_file(kDir + "/managed.cubin"))) managed[g.name] = g.managed;
  ASSERT_EQ(managed.size(), 3u);
  EXPECT_TRUE(managed.at("counter"));
  EXPECT_TRUE(managed.at("table"));
  EXPECT_FALSE(managed.at("plain"));
}

TEST(PatchManaged, SlotsHoldTheGivenAddressesAndTheirRelocationsAreGone) {
  const auto cubin = read_file(kDir + "/managed.cubin");
  ASSERT_GT(cubin.size(), 64u);
  const auto patched = funnel::fatbin::patch_managed(cubin, {{"counter", 0x7e0000001000}, {"table", 0x7e0000002000}});
  ASSERT_EQ(patched.size(), cubin.size());
  const Sec bank = section(patched, ".nv.constant4"), rela = section(patched, ".rela.nv.constant4");
  ASSERT_GT(bank.size, 0u);
  ASSERT_GT(rela.size, 0u);
  std::vector<uint64_t> slots;
  for (uint64_t at = 0; at + 8 <= bank.size; at += 8) slots.push_back(u64(patched, bank.offset + at));
  EXPECT_NE(std::find(slots.begin(), slots.end(), 0x7e0000001000u), slots.end());
  EXPECT_NE(std::find(slots.begin(), slots.end(), 0x7e0000002000u), slots.end());
  size_t none = 0, kept = 0;
  for (uint64_t at = 0; at + 24 <= rela.size; at += 24) {
    const uint64_t info = u64(patched, rela.offset + at + 8);
    if ((info & 0xffffffffu) == 0) {
      ++none;
      EXPECT_NE(info >> 32, 0u) << "the relocation keeps its symbol (the driver refuses symbol 0)";
    } else {
      ++kept;
    }
  }
  EXPECT_EQ(none, 2u) << "the two managed variables' relocations";
  EXPECT_EQ(kept, 1u) << "the __device__ variable's relocation stays";
  // Nothing else changed.
  size_t differing = 0;
  for (size_t i = 0; i < cubin.size(); ++i) differing += cubin[i] != patched[i];
  EXPECT_LE(differing, 2u * 8 + 2u * 8);
  // The patched cubin still reads as a cubin with its kernel and variables.
  EXPECT_EQ(funnel::fatbin::kernels_of_cubin(patched).size(), 1u);
}

// Relocatable device code (-rdc) reaches a variable from the instructions: the low and high
// halves of its address in two instructions' 32-bit immediates (relocation types 0x38, 0x39).
TEST(PatchManaged, RelocatableCodeGetsTheAddressInItsInstructions) {
  const auto rdc = read_file(kDir + "/managed_rdc.cubin");
  ASSERT_GT(rdc.size(), 64u);
  const uint64_t address = 0x7e00deadb000;
  const auto patched = funnel::fatbin::patch_managed(rdc, {{"counter", address}});
  ASSERT_EQ(patched.size(), rdc.size());
  const Sec text = section(rdc, ".text._Z4stepi"), rela = section(rdc, ".rela.text._Z4stepi");
  ASSERT_GT(text.size, 0u);
  ASSERT_GT(rela.size, 0u);
  int lo = 0, hi = 0, kept = 0;
  for (uint64_t at = 0; at + 24 <= rela.size; at += 24) {
    const uint64_t offset = u64(rdc, rela.offset + at), info = u64(rdc, rela.offset + at + 8);
    const uint64_t now = u64(patched, rela.offset + at + 8);
    if ((info & 0xffffffffu) == 0x38 && (now & 0xffffffffu) == 0) {
      ++lo;
      EXPECT_EQ(u32(patched, text.offset + offset + 4), static_cast<uint32_t>(address));
    } else if ((info & 0xffffffffu) == 0x39 && (now & 0xffffffffu) == 0) {
      ++hi;
      EXPECT_EQ(u32(patched, text.offset + offset + 4), static_cast<uint32_t>(address >> 32));
    } else {
      ++kept;
      EXPECT_EQ(now, info) << "another variable's relocation stays";
    }
    if ((now & 0xffffffffu) == 0) {
      EXPECT_EQ(now >> 32, info >> 32) << "the relocation keeps its symbol";
    }
  }
  EXPECT_EQ(lo, 1);
  EXPECT_EQ(hi, 1);
  EXPECT_EQ(kept, 4) << "table's and plain's";
  // A relocation of a kind funnel does not know: refused, naming the variable.
  auto odd = rdc;
  for (uint64_t at = 0; at + 24 <= rela.size; at += 24) {
    const uint64_t info = u64(odd, rela.offset + at + 8);
    if ((info & 0xffffffffu) == 0x38) {
      const uint64_t changed = (info & ~uint64_t{0xffffffffu}) | 0x3a;
      std::memcpy(odd.data() + rela.offset + at + 8, &changed, 8);
    }
  }
  try {
    (void)funnel::fatbin::patch_managed(odd, {{"counter", address}});
    FAIL() << "an unknown relocation was applied";
  } catch (const funnel::fatbin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("counter"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("type 58"), std::string::npos) << e.what();
  }
  // A variable no kernel refers to (host code only, or removed by nvcc) needs no slot.
  const auto cubin = read_file(kDir + "/managed.cubin");
  EXPECT_EQ(funnel::fatbin::patch_managed(cubin, {{"no_such_variable", 0x1000}}), cubin);
}

// The cubin the driver would run on each GPU: its own, else the newest of its major version below
// it; none for another major version (only PTX there).
TEST(CubinForArch, PicksTheCubinTheGpuRunsWithoutCompiling) {
  const auto fat = read_file(kDir + "/managed.fatbin");
  ASSERT_GT(fat.size(), 64u);
  auto arch_of = [&](int gpu) { return funnel::fatbin::kernels_of_cubin(funnel::fatbin::cubin_for_arch(fat, gpu)).at(0).sm_arch; };
  EXPECT_EQ(arch_of(90), 90);
  EXPECT_EQ(arch_of(89), 86);
  EXPECT_EQ(arch_of(86), 86);
  EXPECT_EQ(arch_of(80), 80);
  EXPECT_THROW((void)funnel::fatbin::cubin_for_arch(fat, 75), funnel::fatbin::Error);
  EXPECT_THROW((void)funnel::fatbin::cubin_for_arch(fat, 100), funnel::fatbin::Error);
  // A cubin is its own answer.
  const auto cubin = read_file(kDir + "/managed.cubin");
  EXPECT_EQ(funnel::fatbin::cubin_for_arch(cubin, 90), cubin);
}

}  // namespace
