// Compressed fatbin entries.  nvcc 13 compresses PTX with zstd by default and cubins
// with -compress-mode=size (or -Xfatbin -compress-all); -compress-mode=speed uses lz4 (LZ4
// blocks, as NVIDIA's own libraries ship some entries, cuFFT's among them).  zstd frames are
// decoded with libzstd.so.1, lz4 blocks with liblz4.so.1, both opened at run time so that the
// build needs neither library's headers.
#include <dlfcn.h>

#include <string>

#include "funnel/fatbin/fatbin.hpp"

namespace funnel::fatbin {
namespace {

using ZstdDecompress = size_t (*)(void* dst, size_t dst_capacity, const void* src, size_t src_size);
using ZstdIsError = unsigned (*)(size_t code);
using ZstdGetErrorName = const char* (*)(size_t code);
using ZstdGetFrameContentSize = unsigned long long (*)(const void* src, size_t src_size);

struct Zstd {
  ZstdDecompress decompress = nullptr;
  ZstdIsError is_error = nullptr;
  ZstdGetErrorName error_name = nullptr;
  ZstdGetFrameContentSize frame_content_size = nullptr;

  Zstd() {
    void* lib = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;  // kept open for the life of the process
    decompress = reinterpret_cast<ZstdDecompress>(dlsym(lib, "ZSTD_decompress"));
    is_error = reinterpret_cast<ZstdIsError>(dlsym(lib, "ZSTD_isError"));
    error_name = reinterpret_cast<ZstdGetErrorName>(dlsym(lib, "ZSTD_getErrorName"));
    frame_content_size = reinterpret_cast<ZstdGetFrameContentSize>(dlsym(lib, "ZSTD_getFrameContentSize"));
    if (is_error == nullptr || error_name == nullptr || frame_content_size == nullptr) decompress = nullptr;
  }
  bool usable() const { return decompress != nullptr; }
};

const Zstd& zstd() {
  static const Zstd instance;
  return instance;
}

// LZ4_decompress_safe_partial: stops once `target` bytes are out, so the zero padding that
// follows a block in its entry is never read as data.
using Lz4DecompressPartial = int (*)(const char* src, char* dst, int src_size, int target, int dst_capacity);

struct Lz4 {
  Lz4DecompressPartial decompress = nullptr;
  Lz4() {
    void* lib = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;  // kept open for the life of the process
    decompress = reinterpret_cast<Lz4DecompressPartial>(dlsym(lib, "LZ4_decompress_safe_partial"));
  }
  bool usable() const { return decompress != nullptr; }
};

const Lz4& lz4() {
  static const Lz4 instance;
  return instance;
}

// A cubin or PTX image is far below this; a larger claim is corrupt input.
constexpr uint64_t kMaxUncompressed = uint64_t{1} << 28;

}  // namespace

bool can_decompress(Compression c) {
  switch (c) {
    case Compression::none: return true;
    case Compression::zstd: return zstd().usable();
    case Compression::lz4: return lz4().usable();
  }
  return false;
}

std::vector<std::byte> decompressed_payload(const FatbinImage& image) {
  if (!image.compressed()) return {image.payload.begin(), image.payload.end()};
  if (image.uncompressed_size == 0 || image.uncompressed_size > kMaxUncompressed) {
    throw Error("fatbin: implausible uncompressed size " + std::to_string(image.uncompressed_size));
  }
  if (image.compression == Compression::lz4) {
    if (!lz4().usable()) throw Error("fatbin: lz4-compressed entry, but liblz4.so.1 cannot be opened");
    if (image.payload.size() > kMaxUncompressed) throw Error("fatbin: implausible lz4 payload size");
    std::vector<std::byte> out(static_cast<size_t>(image.uncompressed_size));
    const int want = static_cast<int>(out.size());
    const int n = lz4().decompress(reinterpret_cast<const char*>(image.payload.data()), reinterpret_cast<char*>(out.data()),
                                   static_cast<int>(image.payload.size()), want, want);
    if (n != want) {
      throw Error("fatbin: lz4 block " + (n < 0 ? std::string("is malformed") : "gave " + std::to_string(n) + " bytes") +
                  ", the header says " + std::to_string(want));
    }
    return out;
  }
  if (!zstd().usable()) throw Error("fatbin: zstd-compressed entry, but libzstd.so.1 cannot be opened");
  // The frame must declare the same size as the entry header before anything is allocated.
  const auto declared = zstd().frame_content_size(image.payload.data(), image.payload.size());
  if (declared != image.uncompressed_size) {
    throw Error("fatbin: zstd frame declares " + std::to_string(declared) + " bytes, the entry header " +
                std::to_string(image.uncompressed_size));
  }
  std::vector<std::byte> out(static_cast<size_t>(image.uncompressed_size));
  const size_t n = zstd().decompress(out.data(), out.size(), image.payload.data(), image.payload.size());
  if (zstd().is_error(n) != 0) throw Error(std::string("fatbin: zstd: ") + zstd().error_name(n));
  if (n != out.size()) {
    throw Error("fatbin: zstd produced " + std::to_string(n) + " bytes, the header says " +
                std::to_string(out.size()));
  }
  return out;
}

}  // namespace funnel::fatbin
