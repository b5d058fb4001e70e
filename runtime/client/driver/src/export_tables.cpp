// The private tables NVIDIA's runtime asks the driver for (cuGetExportTable): the runtime inside
// every NVIDIA library, nvcc's default static-runtime binaries, PyTorch, CuPy and JAX runs only
// once the driver answers them (doc/design/driver-surface.md: what each table is, which slots
// are called).  Each table is an array of words; most begin with their size in bytes.
//
// The runtime checks the driver it talks to: INTEGRITY_CHECK's slot 1 returns a keyed hash
// (HMAC-MD2, RFC 2104 over RFC 1319) of the driver's version, the runtime's, the process and
// thread, the addresses of the CUDART_INTERFACE and INTEGRITY_CHECK tables and of the hash
// function itself, the time the runtime passes, and each device's UUID and PCI location; the
// runtime computes the same over what it was given and refuses a driver whose answer differs
// (cudaErrorSoftwareValidityNotEstablished).  The key and the layout are those public
// driver-level projects (LUPINE/SCUDA, ZLUDA) found; the code is ours.
#include <pthread.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "md2.hpp"
#include "front.hpp"

namespace funnel::driver {

namespace {

using Uuid = std::array<uint8_t, 16>;

// 16 bytes from 32 hex digits, in order (a table id as the tracer prints it).
consteval Uuid hex16(const char (&hex)[33]) {
  auto digit = [](char c) { return static_cast<uint8_t>(c <= '9' ? c - '0' : c - 'a' + 10); };
  Uuid id{};
  for (size_t i = 0; i < 16; ++i) id[i] = static_cast<uint8_t>(digit(hex[2 * i]) << 4 | digit(hex[2 * i + 1]));
  return id;
}

std::string text(const CUuuid* id) {
  char b[40];
  for (int i = 0; i < 16; ++i) std::snprintf(b + 2 * i, 3, "%02x", static_cast<unsigned char>(id->bytes[i]));
  return std::string(b, 32);
}

// ---- CUDART_INTERFACE: the runtime's way to load its fat binaries and reach primary contexts ---

// Slot 1: the module of a registered fat binary (the __fatBinC_Wrapper_t the runtime was given).
CUresult rt_module_from_fatbin(CUmodule* module, const void* fatbin) { return cuModuleLoadData(module, fatbin); }
CUresult rt_primary_context(CUcontext* ctx, CUdevice d) { return cuDevicePrimaryCtxRetain(ctx, d); }
// Slots 6 and 8: as slot 1, with arguments that are null and 0 in every runtime traced (JIT
// options, we believe); anything else is refused, naming the slot.
CUresult rt_module_from_fatbin_ext(CUmodule* module, const void* fatbin, void* a, void* b, unsigned c) {
  if (a != nullptr || b != nullptr || c != 0) return not_supported_detail("cuGetExportTable(CUDART_INTERFACE)", 6);
  return cuModuleLoadData(module, fatbin);
}
CUresult rt_module_from_fatbin_ext2(const void* fatbin, CUmodule* module, void* a, void* b, unsigned c) {
  if (a != nullptr || b != nullptr || c != 0) return not_supported_detail("cuGetExportTable(CUDART_INTERFACE)", 8);
  return cuModuleLoadData(module, fatbin);
}
void rt_ignore_size(size_t) {}
CUresult rt_success() { return CUDA_SUCCESS; }

// ---- INTEGRITY_CHECK ----------------------------------------------------------------------------

constexpr Uuid kIntegrityKey = hex16("146addae53a9a752aa0841360bf55a9f");

const void* const* cudart_interface_table() noexcept;
const void* const* integrity_table() noexcept;

#pragma pack(push, 1)
struct IntegrityInput {
  uint32_t driver_version;
  uint32_t runtime_version;
  uint32_t pid;
  uint32_t thread;
  const void* cudart_table;
  const void* integrity_table;
  const void* function;
  uint64_t seconds;
};
struct IntegrityDevice {
  CUuuid uuid;
  int32_t pci_domain;
  int32_t pci_bus;
  int32_t pci_device;
};
#pragma pack(pop)
static_assert(sizeof(IntegrityInput) == 48 && sizeof(IntegrityDevice) == 28);

CUresult integrity_check(unsigned int runtime_version, uint64_t seconds, uint64_t (*result)[2]) {
  if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The runtime asks three times, with its version + 0, 1 and 2 (13000, 13001, 13002 for CUDA
  // 13.0's): the first two expect fixed answers, the third the hash.
  if (runtime_version % 10 < 2) {
    (*result)[0] = runtime_version % 10 == 0 ? 0x3341181c03cb675cULL : 0x1841181c03cb675cULL;
    (*result)[1] = 0x8ed383aa1f4cd1e8ULL;
    return CUDA_SUCCESS;
  }
  IntegrityInput in{CUDA_VERSION,
                    runtime_version,
                    static_cast<uint32_t>(::getpid()),
                    static_cast<uint32_t>(reinterpret_cast<uintptr_t>(reinterpret_cast<void*>(::pthread_self()))),
                    cudart_interface_table(),
                    integrity_table(),
                    reinterpret_cast<const void*>(&integrity_check),
                    seconds};
  std::string message(reinterpret_cast<const char*>(&in), sizeof in);
  int count = 0;
  if (CUresult r = cuDeviceGetCount(&count); r != CUDA_SUCCESS) return r;
  for (int d = 0; d < count; ++d) {
    IntegrityDevice dev{};
    if (CUresult r = cuDeviceGetUuid_v2(&dev.uuid, d); r != CUDA_SUCCESS) return r;
    if (CUresult r = cuDeviceGetAttribute(&dev.pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d); r != CUDA_SUCCESS)
      return r;
    if (CUresult r = cuDeviceGetAttribute(&dev.pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d); r != CUDA_SUCCESS) return r;
    if (CUresult r = cuDeviceGetAttribute(&dev.pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d); r != CUDA_SUCCESS)
      return r;
    message.append(reinterpret_cast<const char*>(&dev), sizeof dev);
  }
  const auto mac = hmac_md2(kIntegrityKey, message.data(), message.size());
  std::memcpy(&(*result)[0], mac.data(), 8);
  std::memcpy(&(*result)[1], mac.data() + 8, 8);
  return CUDA_SUCCESS;
}

// ---- CONTEXT_LOCAL_STORAGE: values the runtime keeps per context -------------------------------
// funnel's contexts (one per GPU) live until the process exits, so the destructors the runtime
// registers are never due.
using StorageDtor = void (*)(CUcontext, void*, void*);
std::mutex g_storage_mu;
std::map<std::pair<CUcontext, void*>, std::pair<void*, StorageDtor>>* g_storage =
    new std::map<std::pair<CUcontext, void*>, std::pair<void*, StorageDtor>>();  // never destroyed

CUresult storage_context(CUcontext& ctx) {
  if (ctx != nullptr) return CUDA_SUCCESS;
  if (CUresult r = cuCtxGetCurrent(&ctx); r != CUDA_SUCCESS) return r;
  return ctx != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}
CUresult storage_put(CUcontext ctx, void* key, void* value, StorageDtor dtor) {
  if (CUresult r = storage_context(ctx); r != CUDA_SUCCESS) return r;
  std::lock_guard lk(g_storage_mu);
  (*g_storage)[{ctx, key}] = {value, dtor};
  return CUDA_SUCCESS;
}
CUresult storage_delete(CUcontext ctx, void* key) {
  if (CUresult r = storage_context(ctx); r != CUDA_SUCCESS) return r;
  std::lock_guard lk(g_storage_mu);
  return g_storage->erase({ctx, key}) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult storage_get(void** value, CUcontext ctx, void* key) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = storage_context(ctx); r != CUDA_SUCCESS) return r;
  std::lock_guard lk(g_storage_mu);
  const auto it = g_storage->find({ctx, key});
  if (it == g_storage->end()) return CUDA_ERROR_INVALID_HANDLE;  // "not yet": the runtime then puts one
  *value = it->second.first;
  return CUDA_SUCCESS;
}

// ---- CONTEXT_CHECKS, TOOLS_TLS, TOOLS_RUNTIME_CALLBACK_HOOKS: tool (profiler) support ----------
// funnel runs no CUDA tools in the client: no context is special, no tool is attached, no
// callback is registered.
CUresult context_check(CUcontext, unsigned int* kind, const void** detail) {
  if (kind != nullptr) *kind = 0;
  if (detail != nullptr) *detail = nullptr;
  return CUDA_SUCCESS;
}
unsigned int no_value() { return 0; }
// TOOLS_TLS slot 2: the calling thread's current context.  cuBLASLt keys its kernel registry by
// it (and by the context's id, below): an answer without a context makes every GEMM candidate
// unusable (CUBLAS_STATUS_NOT_SUPPORTED).
CUresult current_context(CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return cuCtxGetCurrent(ctx);
}
// 21318c60... (the tools' context table; cuBLAS, cuBLASLt, cuFFT, cuSOLVER, cuDNN, PyTorch ask for
// it): slot 4 is a context's unique id, as cuCtxGetId (context, &id).
CUresult context_id(CUcontext ctx, unsigned long long* id) { return cuCtxGetId(ctx, id); }
// Slots 51 and 39 (measured on the H100 with the driver tracer's spy: cuBLAS and cuSOLVER call
// them before their work on a stream, to key their per-stream state): slot 51 (ctx, stream,
// &object) gives the driver's object for a stream (null: the legacy default stream), slot 39
// (ctx, object, &id) that object's unique id, 64 bits (NVIDIA's driver answered 13 for a
// created stream and 7 for the legacy one: the stream ids cuStreamGetId gives).  funnel's object
// is the stream's own handle (a created stream's is the client's record of it), or one of the
// two words below for the default streams; its id is cuStreamGetId's.
const CUstream kDefaultStreamObjects[2] = {CU_STREAM_LEGACY, CU_STREAM_PER_THREAD};
// The context named must be the calling thread's current one (so that the default streams are
// that context's); it always was in the programs traced.
CUresult check_current_context(CUcontext ctx, int slot) {
  CUcontext current = nullptr;
  if (CUresult r = cuCtxGetCurrent(&current); r != CUDA_SUCCESS) return r;
  if (current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx != nullptr && ctx != current)
    return not_supported_detail("cuGetExportTable(21318c60... or 6e163fbe...) with a context not current, slot", slot);
  return CUDA_SUCCESS;
}
CUresult stream_object(CUcontext ctx, CUstream stream, const void** object) {
  if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_current_context(ctx, 51); r != CUDA_SUCCESS) return r;
  unsigned long long id = 0;
  if (CUresult r = cuStreamGetId(stream, &id); r != CUDA_SUCCESS) return r;  // a valid stream
  if (stream == nullptr || stream == CU_STREAM_LEGACY)
    *object = &kDefaultStreamObjects[0];
  else if (stream == CU_STREAM_PER_THREAD)
    *object = &kDefaultStreamObjects[1];
  else
    *object = stream;
  return CUDA_SUCCESS;
}
CUresult stream_object_id(CUcontext ctx, const void* object, unsigned long long* id) {
  if (object == nullptr || id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_current_context(ctx, 39); r != CUDA_SUCCESS) return r;
  CUstream stream = static_cast<CUstream>(const_cast<void*>(object));
  if (object == &kDefaultStreamObjects[0] || object == &kDefaultStreamObjects[1])
    stream = *static_cast<const CUstream*>(object);
  return cuStreamGetId(stream, id);
}
// 6e163fbe... (public notes: the tools' module table; cuFFT, PyTorch and CuPy ask for it) slot 7
// (ctx, module, callback, user): calls callback(user, function) for each kernel of the module
// and returns how many (measured: NVIDIA's driver called it once for each of cuFFT's one-kernel
// modules and returned 1, not a CUresult; cuFFT finds its kernels so).  0 when the module or
// the context is not one of ours.
uintptr_t each_function(CUcontext ctx, CUmodule module, void (*callback)(void*, CUfunction), void* user) {
  if (callback == nullptr || check_current_context(ctx, 7) != CUDA_SUCCESS) return 0;
  unsigned n = 0;
  if (cuModuleGetFunctionCount(&n, module) != CUDA_SUCCESS) return 0;
  std::vector<CUfunction> functions(n);
  if (n != 0 && cuModuleEnumerateFunctions(functions.data(), n, module) != CUDA_SUCCESS) return 0;
  for (CUfunction f : functions) callback(user, f);
  return n;
}

// The tools' tables funnel serves in part: each as long as the driver's (libraries call slots
// past the ones known without reading the size), the slots not served loud stubs.
// 69a28e9f... (PyTorch, JAX; 34 words) and 1734dc26... (PyTorch; 17 words) are not known yet
// (doc/design/driver-surface.md: what the tracer saw called): every slot a loud stub.
enum class Tools { Context, Module, Pytorch34, Pytorch17 };
constexpr const char* tools_table_id(Tools t) {
  switch (t) {
    case Tools::Context: return "21318c60971432488ca641ff7324c8f2";
    case Tools::Module: return "6e163fbeb958444d835ce182aff1991e";
    case Tools::Pytorch34: return "69a28e9f24498b47b030c5da330ea4e9";
    case Tools::Pytorch17: return "1734dc26800d47458726c0f1e7dd8bca";
  }
  return "";
}
template <Tools T, size_t Slot>
CUresult slot_not_served() {
  char what[96];
  std::snprintf(what, sizeof what, "cuGetExportTable(%s) slot %zu", tools_table_id(T), Slot);
  return static_cast<CUresult>(not_supported(what));
}
uintptr_t zero0() { return 0; }
uintptr_t zero1(const void*) { return 0; }
uintptr_t zero2(const void*, const void*) { return 0; }
// Buffers the hooks table hands out (the runtime's callback state); zeroed: no hook installed.
template <size_t N>
void hook_buffer(void** p, size_t* size) {
  static unsigned char buffer[N] = {};
  if (p != nullptr) *p = buffer;
  if (size != nullptr) *size = N;
}

template <typename F>
const void* word(F* f) {
  return reinterpret_cast<const void*>(f);
}
constexpr const void* size_word(size_t words) { return reinterpret_cast<const void*>(words * sizeof(void*)); }

const void* const kCudartInterface[] = {size_word(13),
                                        word(rt_module_from_fatbin),
                                        word(rt_primary_context),
                                        nullptr,
                                        nullptr,
                                        nullptr,
                                        word(rt_module_from_fatbin_ext),
                                        word(rt_ignore_size),
                                        word(rt_module_from_fatbin_ext2),
                                        nullptr,
                                        nullptr,
                                        nullptr,
                                        word(rt_success)};
const void* const kIntegrity[] = {size_word(3), word(integrity_check), nullptr};
const void* const kContextStorage[] = {word(storage_put), word(storage_delete), word(storage_get), nullptr};
const void* const kContextChecks[] = {size_word(4), nullptr, word(context_check), word(no_value)};
const void* const kToolsTls[] = {size_word(4), word(zero0), word(current_context), word(zero1)};
// The context table: 95 words (the size and 94 slots), slots 4, 39 and 51 served; the module
// table: 99 words, slot 7 served (sizes as NVIDIA's driver 580 has them).
template <Tools T, size_t Slot>
const void* tools_slot() {
  if constexpr (T == Tools::Context && Slot == 4) return word(context_id);
  if constexpr (T == Tools::Context && Slot == 39) return word(stream_object_id);
  if constexpr (T == Tools::Context && Slot == 51) return word(stream_object);
  if constexpr (T == Tools::Module && Slot == 7) return word(each_function);
  return word(slot_not_served<T, Slot>);
}
template <Tools T, size_t Words, size_t... I>
std::array<const void*, Words> tools_table(std::index_sequence<I...>) {
  return {size_word(Words), tools_slot<T, I + 1>()...};
}
const auto kToolsContext = tools_table<Tools::Context, 95>(std::make_index_sequence<94>{});
const auto kToolsModule = tools_table<Tools::Module, 99>(std::make_index_sequence<98>{});
const auto kPytorch34 = tools_table<Tools::Pytorch34, 34>(std::make_index_sequence<33>{});
const auto kPytorch17 = tools_table<Tools::Pytorch17, 17>(std::make_index_sequence<16>{});
const void* const kToolsHooks[] = {size_word(7),  word(zero2), word(hook_buffer<1024>), word(zero2),
                                   word(zero2),   word(zero2), word(hook_buffer<14>)};

const void* const* cudart_interface_table() noexcept { return kCudartInterface; }
const void* const* integrity_table() noexcept { return kIntegrity; }

// The tables served, by id (names as public projects use them).
struct Table {
  Uuid id;
  const void* const* words;
};
const Table kTables[] = {
    {hex16("6bd5fb6c5bf4e74a8987d93912fd9df9"), kCudartInterface},         // CUDART_INTERFACE
    {hex16("d4082055bde6704b8d34ba123c66e1f2"), kIntegrity},               // INTEGRITY_CHECK
    {hex16("c693336e1121df11a8c368f355d89593"), kContextStorage},          // CONTEXT_LOCAL_STORAGE
    {hex16("263e88607cd2614392f6bbd5006dfa7e"), kContextChecks},           // CONTEXT_CHECKS
    {hex16("42d85a8123f6cb478298f6e78a3aecdc"), kToolsTls},                // TOOLS_TLS
    {hex16("21318c60971432488ca641ff7324c8f2"), kToolsContext.data()},     // the tools' context table
    {hex16("6e163fbeb958444d835ce182aff1991e"), kToolsModule.data()},      // the tools' module table
    {hex16("a094798c2e742e7493f20800200c0a66"), kToolsHooks},              // TOOLS_RUNTIME_CALLBACK_HOOKS
    {hex16("69a28e9f24498b47b030c5da330ea4e9"), kPytorch34.data()},        // not known yet: loud stubs
    {hex16("1734dc26800d47458726c0f1e7dd8bca"), kPytorch17.data()},        // not known yet: loud stubs
};

// Tables the runtimes ask for and cope without, measured (doc/design/driver-client.md): refused
// without a notice, since every program that carries the runtime asks for them.
//   f8cff951...: every runtime asks, none calls a slot; static-runtime programs run without it.
//   da9151d3...: NVRTC asks; its programs compile and run without it.
const Uuid kOptionalTables[] = {
    hex16("f8cff95121468b4eb9e2fb469e7c0dd9"),
    hex16("da9151d33ae6cc41a5c04f26d533e328"),
};

}  // namespace

}  // namespace funnel::driver

// A table funnel does not serve is refused, naming its id once on stderr, unless it is one the
// runtimes are measured to cope without (kOptionalTables).
FUNNEL_DRIVER_API CUresult cuGetExportTable(const void** table, const CUuuid* id) {
  if (table == nullptr || id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *table = nullptr;
  for (const auto& t : funnel::driver::kTables) {
    if (std::memcmp(t.id.data(), id->bytes, 16) == 0) {
      *table = t.words;
      return CUDA_SUCCESS;
    }
  }
  for (const auto& optional : funnel::driver::kOptionalTables)
    if (std::memcmp(optional.data(), id->bytes, 16) == 0) return CUDA_ERROR_NOT_SUPPORTED;
  return static_cast<CUresult>(
      funnel::driver::not_supported(("cuGetExportTable(" + funnel::driver::text(id) + ")").c_str()));
}
