// Fat binary container: the __cudaRegisterFatBinary wrapper, fatbin headers and
// entry headers (doc/design/fatbin.md has the layouts).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <string_view>

#include "bytes.hpp"
#include "funnel/fatbin/fatbin.hpp"

namespace funnel::fatbin {
namespace {

using detail::read;
using detail::sub;

constexpr size_t kFatbinHeaderSize = 16;      // magic, version, header_size, fat_size
constexpr size_t kEntryHeaderMinSize = 64;    // through uncompressed_size
constexpr size_t kWrapperSize = 8 + 2 * sizeof(void*);

std::string hex(uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  do {
    s.insert(s.begin(), digits[v & 0xf]);
    v >>= 4;
  } while (v != 0);
  return "0x" + s;
}

Compression compression_of(uint64_t flags) {
  if (flags & kFlagCompressedZstd) return Compression::zstd;
  if (flags & kFlagCompressedLz4) return Compression::lz4;
  return Compression::none;
}

// One fatbin (header and entries) at the start of `bytes`; returns its total size.
size_t parse_one(std::span<const std::byte> bytes, std::vector<FatbinImage>& out) {
  const auto magic = read<uint32_t>(bytes, 0, "fatbin header");
  if (magic != kFatbinMagic) {
    throw Error("fatbin: bad magic " + hex(magic) + " (expected " + hex(kFatbinMagic) + ")");
  }
  const auto header_size = read<uint16_t>(bytes, 6, "fatbin header");
  const auto fat_size = read<uint64_t>(bytes, 8, "fatbin header");
  if (header_size < kFatbinHeaderSize) {
    throw Error("fatbin: header size " + std::to_string(header_size) + " is below 16");
  }
  const auto body = sub(bytes, header_size, fat_size, "fatbin body (header fat_size)");
  uint64_t pos = 0;
  while (pos < body.size()) {
    const auto where = "fatbin entry header at body offset " + std::to_string(pos);
    const auto kind = read<uint16_t>(body, pos, where.c_str());
    const auto entry_header_size = read<uint32_t>(body, pos + 4, where.c_str());
    const auto padded_size = read<uint64_t>(body, pos + 8, where.c_str());
    if (entry_header_size < kEntryHeaderMinSize) {
      throw Error(where + ": header size " + std::to_string(entry_header_size) + " is below 64");
    }
    const auto header = sub(body, pos, entry_header_size, where.c_str());
    if (kind != static_cast<uint16_t>(ImageKind::ptx) && kind != static_cast<uint16_t>(ImageKind::cubin)) {
      throw Error(where + ": unknown kind " + std::to_string(kind));
    }
    FatbinImage image;
    image.kind = static_cast<ImageKind>(kind);
    const auto stored_size = read<uint32_t>(header, 16, where.c_str());
    const auto minor = read<uint16_t>(header, 24, where.c_str());
    const auto major = read<uint16_t>(header, 26, where.c_str());
    image.version = (uint32_t{major} << 16) | minor;
    image.sm_arch = static_cast<int>(read<uint32_t>(header, 28, where.c_str()));
    image.flags = read<uint64_t>(header, 40, where.c_str());
    image.compression = compression_of(image.flags);
    const auto payload = sub(body, pos + entry_header_size, padded_size, (where + ": payload").c_str());
    if (image.compressed()) {
      // Compressed entries record the real compressed size; the rest is padding.
      if (stored_size > padded_size) {
        throw Error(where + ": compressed size " + std::to_string(stored_size) + " exceeds the padded size " +
                    std::to_string(padded_size));
      }
      image.payload = payload.first(stored_size);
      image.uncompressed_size = read<uint64_t>(header, 56, where.c_str());
    } else {
      image.payload = payload;
    }
    out.push_back(image);
    pos += entry_header_size + padded_size;  // in range: both checked above
  }
  return header_size + static_cast<size_t>(fat_size);
}

bool all_zero(std::span<const std::byte> bytes) {
  for (auto b : bytes) {
    if (b != std::byte{0}) return false;
  }
  return true;
}

// The one fatbin at `p` (a fatbin header or the 0x466243b1 wrapper pointing at one),
// bounded by both its header's fat_size and max_bytes.  Its neighbours in the section
// belong to other registrations and are not read.
std::span<const std::byte> one_fatbin(const void* p, size_t max_bytes) {
  if (p == nullptr) throw Error("fatbin: null pointer");
  std::span<const std::byte> bytes(static_cast<const std::byte*>(p), max_bytes);
  if (read<uint32_t>(bytes, 0, "fatbin or wrapper magic") == kWrapperMagic) {
    const auto wrapper = sub(bytes, 0, kWrapperSize, "fatbin wrapper");
    const auto data = read<const std::byte*>(wrapper, 8, "fatbin wrapper");
    if (data == nullptr) throw Error("fatbin wrapper: null data pointer");
    bytes = std::span<const std::byte>(data, max_bytes);
  }
  const auto magic = read<uint32_t>(bytes, 0, "fatbin header");
  if (magic != kFatbinMagic) {
    throw Error("fatbin: bad magic " + hex(magic) + " (expected " + hex(kFatbinMagic) + ")");
  }
  const auto header_size = read<uint16_t>(bytes, 6, "fatbin header");
  const auto fat_size = read<uint64_t>(bytes, 8, "fatbin header");
  if (fat_size > bytes.size()) throw Error("fatbin: fat_size " + std::to_string(fat_size) + " exceeds max_bytes");
  return sub(bytes, 0, header_size + fat_size, "fatbin (header_size + fat_size)");
}

}  // namespace

ModuleFormat module_format(std::span<const std::byte> image) {
  if (image.size() >= 4) {
    uint32_t magic = 0;
    std::memcpy(&magic, image.data(), sizeof magic);
    if (magic == kFatbinMagic || magic == kWrapperMagic) return ModuleFormat::fatbin;
    if (std::to_integer<unsigned char>(image[0]) == 0x7f && std::to_integer<char>(image[1]) == 'E' &&
        std::to_integer<char>(image[2]) == 'L' && std::to_integer<char>(image[3]) == 'F')
      return ModuleFormat::cubin;
  }
  const std::string_view text(reinterpret_cast<const char*>(image.data()), image.size());
  if (!text.empty() && text.back() == '\0' && text.find(".version") != std::string_view::npos &&
      text.find('\0') == text.size() - 1)
    return ModuleFormat::ptx;
  return ModuleFormat::unknown;
}

std::vector<FatbinImage> parse_fatbin(std::span<const std::byte> bytes) {
  std::vector<FatbinImage> images;
  if (bytes.empty()) throw Error("fatbin: empty buffer");
  size_t pos = 0;
  while (pos < bytes.size()) {
    pos += parse_one(bytes.subspan(pos), images);
    pos = (pos + 7) & ~size_t{7};  // linked sections align each fatbin to 8 bytes
    if (pos >= bytes.size() || all_zero(bytes.subspan(pos))) break;
  }
  return images;
}

FatbinKernels kernels_of_fatbin(std::span<const std::byte> bytes) {
  FatbinKernels result;
  for (const auto& image : parse_fatbin(bytes)) {
    if (image.kind != ImageKind::cubin) continue;
    const auto label = "cubin sm_" + std::to_string(image.sm_arch);
    if (!image.compressed()) {
      auto kernels = kernels_of_cubin(image.payload);
      result.kernels.insert(result.kernels.end(), kernels.begin(), kernels.end());
    } else if (!can_decompress(image.compression)) {
      result.skipped.push_back(label + ": " + (image.compression == Compression::lz4 ? "lz4" : "zstd") +
                               "-compressed, which this build cannot decode (build with nvcc "
                               "-compress-mode=none or --no-compress)");
    } else {
      const auto elf = decompressed_payload(image);
      auto kernels = kernels_of_cubin(elf);
      result.kernels.insert(result.kernels.end(), kernels.begin(), kernels.end());
    }
  }
  return result;
}

std::vector<std::byte> cubin_for_arch(std::span<const std::byte> image, int sm_arch) {
  const ModuleFormat format = module_format(image);
  if (format == ModuleFormat::cubin) return {image.begin(), image.end()};
  if (format != ModuleFormat::fatbin) throw Error("module: neither a fat binary nor a cubin");
  const auto images = parse_fatbin(image);
  const FatbinImage* best = nullptr;
  for (const auto& im : images) {
    // A cubin runs on GPUs of its major version from its minor version on.
    if (im.kind != ImageKind::cubin || im.sm_arch / 10 != sm_arch / 10 || im.sm_arch > sm_arch) continue;
    if (best == nullptr || im.sm_arch > best->sm_arch) best = &im;
  }
  if (best == nullptr)
    throw Error("the fat binary has no cubin for sm_" + std::to_string(sm_arch) +
                " (only PTX or code for other GPUs, which the driver would compile)");
  return decompressed_payload(*best);
}

std::vector<std::string> entries_of_ptx(std::string_view ptx) {
  std::vector<std::string> names;
  constexpr std::string_view kEntry = ".entry";
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '$' || c == '.' || c == '%';
  };
  for (size_t at = ptx.find(kEntry); at != std::string_view::npos; at = ptx.find(kEntry, at + kEntry.size())) {
    const size_t after = at + kEntry.size();
    if ((at > 0 && !blank(ptx[at - 1])) || after >= ptx.size() || !blank(ptx[after])) continue;
    size_t b = after;
    while (b < ptx.size() && blank(ptx[b])) ++b;
    size_t e = b;
    while (e < ptx.size() && name_char(ptx[e])) ++e;
    if (e > b) names.emplace_back(ptx.substr(b, e - b));
  }
  return names;
}

std::vector<std::string> kernel_names(std::span<const std::byte> image) {
  std::vector<std::string> names;
  auto add = [&](std::string name) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(std::move(name));
  };
  auto add_ptx = [&](std::span<const std::byte> text) {
    for (auto& n : entries_of_ptx(std::string_view(reinterpret_cast<const char*>(text.data()), text.size())))
      add(std::move(n));
  };
  switch (module_format(image)) {
    case ModuleFormat::cubin:
      for (auto& k : kernels_of_cubin(image)) add(std::move(k.name));
      return names;
    case ModuleFormat::ptx:
      add_ptx(image);
      return names;
    case ModuleFormat::unknown:
      throw Error("module image: neither a fat binary, an ELF cubin nor PTX text");
    case ModuleFormat::fatbin:
      break;
  }
  uint32_t magic = 0;
  std::memcpy(&magic, image.data(), sizeof magic);
  if (magic == kWrapperMagic) throw Error("module image: a fat binary wrapper (pass the fat binary it points at)");
  for (const auto& entry : parse_fatbin(image)) {
    if (entry.compressed() && !can_decompress(entry.compression))
      throw Error("fatbin: an entry for sm_" + std::to_string(entry.sm_arch) + " is " +
                  (entry.compression == Compression::lz4 ? "lz4" : "zstd") + "-compressed, which this machine cannot decode");
    const std::vector<std::byte> inflated = entry.compressed() ? decompressed_payload(entry) : std::vector<std::byte>{};
    const std::span<const std::byte> payload = entry.compressed() ? std::span<const std::byte>(inflated) : entry.payload;
    if (entry.kind == ImageKind::cubin)
      for (auto& k : kernels_of_cubin(payload)) add(std::move(k.name));
    else
      add_ptx(payload);
  }
  return names;
}

std::vector<FatbinImage> parse_fatbin(const void* fatbin_or_wrapper, size_t max_bytes) {
  return parse_fatbin(one_fatbin(fatbin_or_wrapper, max_bytes));
}

FatbinKernels kernels_of_fatbin(const void* fatbin_or_wrapper, size_t max_bytes) {
  return kernels_of_fatbin(one_fatbin(fatbin_or_wrapper, max_bytes));
}

}  // namespace funnel::fatbin
