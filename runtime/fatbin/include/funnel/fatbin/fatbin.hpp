// funnel::fatbin — parameter layouts of every kernel in an nvcc fat binary, read from
// the bytes alone (no GPU, no driver).  Formats: doc/design/fatbin.md.
//
// Every parser is bounds-checked: malformed input throws funnel::fatbin::Error and
// never reads outside the span or the max_bytes it was given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace funnel::fatbin {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// __cudaRegisterFatBinary's argument (the "wrapper") and the fat binary it points at.
inline constexpr uint32_t kWrapperMagic = 0x466243b1;
inline constexpr uint32_t kFatbinMagic = 0xBA55ED50;

enum class ImageKind : uint16_t { ptx = 1, cubin = 2 };

// Entry flags (fatbin entry header, offset 40).
inline constexpr uint64_t kFlag64Bit = 0x1;
inline constexpr uint64_t kFlagCompressedLz4 = 0x2000;
inline constexpr uint64_t kFlagCompressedZstd = 0x8000;

enum class Compression { none, lz4, zstd };

struct FatbinImage {
  ImageKind kind = ImageKind::cubin;
  int sm_arch = 0;            // 90 for sm_90 / compute_90
  uint32_t version = 0;       // (major << 16) | minor: PTX ISA for PTX, ELF ABI for cubins
  uint64_t flags = 0;
  Compression compression = Compression::none;
  uint64_t uncompressed_size = 0;     // 0 when not compressed
  std::span<const std::byte> payload;  // as stored (compressed bytes when compressed)

  bool compressed() const { return compression != Compression::none; }
};

// What a module image is, as cuModuleLoadData takes them: a fat binary (its header or nvcc's
// wrapper), an ELF cubin, or PTX text (a 0-terminated text that declares a .version).
enum class ModuleFormat { fatbin, cubin, ptx, unknown };
ModuleFormat module_format(std::span<const std::byte> image);

// Every entry of every fat binary found at `fatbin_or_wrapper` (a fatbin header or the
// 0x466243b1 wrapper).  nvcc may place several fatbins back to back in one section;
// they are all read while within max_bytes.  With a wrapper, max_bytes bounds the
// fatbin it points at.  Throws Error on malformed input.
std::vector<FatbinImage> parse_fatbin(const void* fatbin_or_wrapper, size_t max_bytes);
// The same for a buffer holding fatbins (e.g. the .nv_fatbin section of an object).
std::vector<FatbinImage> parse_fatbin(std::span<const std::byte> bytes);

// The image's payload, decompressed.  zstd needs libzstd.so.1 at run time (opened with
// dlopen; Debian's libzstd1); lz4 is not supported.  Throws Error when the payload
// cannot be decompressed.
std::vector<std::byte> decompressed_payload(const FatbinImage& image);
// Whether decompressed_payload() can handle this compression on this machine.
bool can_decompress(Compression c);

struct KernelParam {
  uint32_t ordinal = 0;  // position in the parameter list
  uint32_t offset = 0;   // byte offset in the parameter buffer
  uint32_t size = 0;     // bytes
  uint32_t log_alignment = 0;  // "pointee's logAlignment" field of EIATTR_KPARAM_INFO
  bool operator==(const KernelParam&) const = default;
};

struct KernelInfo {
  std::string name;  // mangled (or plain for extern "C")
  int sm_arch = 0;
  std::vector<KernelParam> params;  // sorted by ordinal
  uint32_t param_bytes = 0;         // EIATTR_PARAM_CBANK size; 0 without parameters
  // Resources (0 when the cubin does not record them): registers per thread
  // (EIATTR_REGCOUNT of .nv.info), static shared memory (size of .nv.shared.<name>),
  // local memory per thread (EIATTR_FRAME_SIZE).
  uint32_t num_regs = 0;
  uint64_t shared_bytes = 0;
  uint64_t local_bytes = 0;
};

// Kernels of one ELF cubin (uncompressed payload of an ImageKind::cubin entry).
std::vector<KernelInfo> kernels_of_cubin(std::span<const std::byte> elf);

// A __device__ (.nv.global*) or __constant__ (.nv.constant<bank>) variable of a cubin:
// an STT_OBJECT symbol of .symtab defined in one of those sections.
struct GlobalInfo {
  std::string name;  // mangled (or plain for extern "C")
  uint64_t size = 0;
  bool constant = false;
  bool managed = false;  // a __managed__ variable (in .nv.global, flagged in the symbol's st_other)
  std::vector<std::byte> init;  // initial bytes (size of them); empty: zero-initialised (NOBITS)
};

// Variables of one ELF cubin, in symbol table order.  Throws Error on malformed input.
std::vector<GlobalInfo> globals_of_cubin(std::span<const std::byte> elf);

// __managed__ variables (doc/design/managed.md, "the way to serve them"): a copy of `elf` in which
// every reference to each named variable holds `addresses` (+ the relocation's addend) instead of
// the driver's storage: the constant-bank-4 slots and data words (R_CUDA_64) of whole-program
// code, the 32-bit instruction immediates (types 0x38/0x39, sm_70 and later) of relocatable device
// code (-rdc); those relocations made R_CUDA_NONE (against the same symbol: the driver refuses
// symbol 0).  A variable no relocation names is left alone (no kernel reads its address).
// Throws Error naming the variable when a reference is of another kind.
std::vector<std::byte> patch_managed(std::span<const std::byte> elf,
                                     const std::vector<std::pair<std::string, uint64_t>>& addresses);

// The cubin of a module image (a fat binary, or a cubin itself) the driver runs on an sm_`sm_arch`
// GPU without compiling: the one for that GPU, else the newest of its major version below it;
// decompressed.  Throws Error when there is none (PTX only, or cubins for other GPUs only).
std::vector<std::byte> cubin_for_arch(std::span<const std::byte> image, int sm_arch);

struct FatbinKernels {
  std::vector<KernelInfo> kernels;  // of every cubin, in entry order
  std::vector<std::string> skipped;  // one line per cubin that could not be read, and why
};

// parse_fatbin + decompression + kernels_of_cubin over every cubin entry.  A cubin
// whose compression cannot be decoded is listed in `skipped`; malformed input throws.
FatbinKernels kernels_of_fatbin(const void* fatbin_or_wrapper, size_t max_bytes);
FatbinKernels kernels_of_fatbin(std::span<const std::byte> bytes);

// The entry functions (kernels) a PTX text declares (".entry NAME"), in order.
std::vector<std::string> entries_of_ptx(std::string_view ptx);
// The kernels a module image declares, as cuModuleLoadData takes it (a fat binary, an ELF
// cubin, or PTX text; not nvcc's wrapper): each name once, in the order first seen.  A
// fat binary's cubins and PTX are all read: they name the same kernels for different GPUs.
// Throws Error on malformed input, an unknown format, or an entry this machine cannot
// decompress (the list would be incomplete).
std::vector<std::string> kernel_names(std::span<const std::byte> image);

}  // namespace funnel::fatbin
