#include "modules.hpp"

#include <elf.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <shared_mutex>
#include <unordered_map>

#include "api.hpp"
#include "funnel/fatbin/fatbin.hpp"
#include "funnel/ipc/module_digest.hpp"
#include "launch_params.hpp"
#include "managed.hpp"

namespace funnel::client {

struct Module {
  const void* wrapper = nullptr;
  std::vector<std::byte> image;  // a module the driver front loaded: its bytes (else the wrapper's)
  std::vector<std::unique_ptr<Kernel>> kernels;
  std::vector<std::unique_ptr<Variable>> variables;
  struct Managed {
    std::string name;
    void** host;  // nvcc's host pointer to the variable (none for a module of the driver front)
    uint64_t size;
    uint64_t address = 0;  // its storage, once placed (place_managed)
  };
  std::vector<Managed> managed;  // __managed__ variables (register_managed, image_managed)
  bool managed_searched = false;  // image_managed looked for them in the image (mu)
  std::mutex mu;
  Runtime* owner = nullptr;  // the Runtime the load below was for (mu)
  Status status = Status::Success;
  uint64_t id = 0;
};

namespace {

// Never destroyed: kernels may be launched from atexit handlers and other threads
// while static destructors run.  Records of an unregistered module are unhooked from
// the maps but kept, so that a racing launch never touches freed memory.
struct Registry {
  std::shared_mutex mu;
  std::unordered_map<const void*, Kernel*> kernels;      // host stub -> kernel
  std::unordered_map<const void*, Variable*> variables;  // host shadow -> variable
  std::atomic<uint64_t> next_module_id{1};
  std::atomic<uint64_t> next_kernel_id{1};
};
Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

// nvcc's __fatBinC_Wrapper_t (fatbinary_section.h).
struct FatbinWrapper {
  uint32_t magic;
  uint32_t version;
  const std::byte* data;
  const void* filename_or_fatbins;
};
// The fat binary header the wrapper's data starts with (doc/design/fatbin.md).
struct FatbinHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t header_size;
  uint64_t payload_size;
};

// The fat binary's bytes, or an empty span when the wrapper is not one nvcc makes.
std::span<const std::byte> fatbin_bytes(const void* wrapper) {
  FatbinWrapper w;
  std::memcpy(&w, wrapper, sizeof w);
  if (w.magic != fatbin::kWrapperMagic || w.data == nullptr) return {};
  FatbinHeader h;
  std::memcpy(&h, w.data, sizeof h);
  if (h.magic != fatbin::kFatbinMagic || h.header_size < sizeof h) return {};
  const uint64_t size = uint64_t{h.header_size} + h.payload_size;
  if (size > ipc::kMaxModuleBytes) return {};
  return {w.data, size};
}

// Sends the module's bytes through staging slots (in order: one thread, one ring).
Status upload(Runtime& rt, int device, uint64_t id, std::span<const std::byte> bytes) {
  const uint64_t chunk = rt.view().header().staging_slot_size;
  for (uint64_t off = 0; off < bytes.size(); off += chunk) {
    const uint64_t n = std::min(chunk, bytes.size() - off);
    const int slot = rt.acquire_free_staging();
    if (slot < 0) return Status::DevicesUnavailable;
    const auto s = static_cast<uint32_t>(slot);
    std::memcpy(rt.view().staging(s), bytes.data() + off, n);
    rt.view().staging_state(s).store(static_cast<uint32_t>(ipc::StagingState::InFlight), std::memory_order_release);
    const ipc::ModuleDataCmd d{id, off, n, s, 0};
    const Status st = rt.post(Opcode::ModuleData, device, 0, &d, sizeof d);
    rt.release_staging(slot);  // the server frees the state word once it consumed the bytes
    if (st != Status::Success) return st;
  }
  return Status::Success;
}

std::span<const std::byte> name_bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), std::min<size_t>(s.size(), ipc::kMaxNameBytes)));
}

// Makes a registration findable by its host address; the module owns it.
template <class T>
void enlist(std::unordered_map<const void*, T*>& index, std::vector<std::unique_ptr<T>>& owned,
            std::unique_ptr<T> record) {
  std::unique_lock lk(registry().mu);
  index[record->host] = record.get();
  owned.push_back(std::move(record));
}

std::string managed_names(const Module& m) {
  std::string names;
  for (const auto& v : m.managed) names += (names.empty() ? "" : ", ") + v.name;
  return names;
}

// The storage of the module's __managed__ variables (doc/design/managed.md): one managed buffer
// of funnel's (the same address here and in the server, which the GPU reads), each variable at a
// 256-byte boundary; nvcc's host pointers set to it, and each variable findable by that address
// (the symbol the program passes).  The server writes the initial values when it loads the module.
Status place_managed(Module& m) {
  uint64_t total = 0;
  for (const auto& v : m.managed) total += (v.size + 255) / 256 * 256;
  void* base = nullptr;
  if (managed_alloc(&base, total, cudaMemAttachGlobal) != cudaSuccess) {
    log_error(fmt::format("funnel: no managed memory for the __managed__ variables {} ({} bytes)", managed_names(m),
                          total));
    return Status::MemoryAllocation;
  }
  uint64_t at = reinterpret_cast<uint64_t>(base);
  for (auto& v : m.managed) {
    v.address = at;
    if (v.host != nullptr) *v.host = reinterpret_cast<void*>(at);
    auto record = std::make_unique<Variable>();
    record->module = &m;
    record->host = reinterpret_cast<const void*>(at);
    record->name = v.name;
    record->size = v.size;
    record->managed = at;
    enlist(registry().variables, m.variables, std::move(record));
    at += (v.size + 255) / 256 * 256;
  }
  return Status::Success;
}

// The module's __managed__ variables, told to the server before it loads the module.
Status send_managed(const Module& m, Runtime& rt, int device, uint64_t module_id) {
  for (const auto& v : m.managed) {
    ipc::ModuleManagedCmd c{module_id, v.address, v.size, static_cast<uint32_t>(name_bytes(v.name).size()), 0};
    Reply r;
    if (Status s = rt.ask(Opcode::ModuleManaged, device, &c, sizeof c, name_bytes(v.name), &r); s != Status::Success)
      return s;
  }
  return Status::Success;
}

Status load(Module& m, Runtime& rt, int device) {
  if (!m.managed.empty() && m.owner == nullptr) {
    if (Status s = place_managed(m); s != Status::Success) return s;
  }
  const auto bytes = !m.image.empty() ? std::span<const std::byte>(m.image) : fatbin_bytes(m.wrapper);
  if (bytes.empty()) {
    log_error(
        "funnel: a registered fat binary has an unknown format; its kernels fail with "
        "cudaErrorInvalidKernelImage");
    return Status::InvalidKernelImage;
  }
  const ipc::ModuleDigest digest = ipc::module_digest(bytes);
  ipc::ModuleCmd c{};
  c.module_id = registry().next_module_id.fetch_add(1);
  std::memcpy(c.digest, digest.data(), sizeof c.digest);
  // An image module's globals are its own (each cuModuleLoadData is a module of its own).
  c.flags = m.variables.empty() && m.image.empty() ? 0 : ipc::kModuleHasVariables;
  if (!m.managed.empty()) c.flags |= ipc::kModuleHasManaged;
  c.size = bytes.size();
  Reply r;
  if (Status s = rt.ask(Opcode::ModuleQuery, device, &c, sizeof c, {}, &r); s != Status::Success) return s;
  if (r.value[0] == 0) {
    if (Status s = upload(rt, device, c.module_id, bytes); s != Status::Success) return s;
    if (Status s = send_managed(m, rt, device, c.module_id); s != Status::Success) return s;
    if (Status s = rt.ask(Opcode::ModuleLoad, device, &c, sizeof c, {}, &r); s != Status::Success) {
      if (s == Status::NotSupported && !m.managed.empty())
        log_error(fmt::format(
            "funnel: the fat binary with the __managed__ variables {} cannot be served: funnel serves them in code "
            "with a cubin for this GPU, not in PTX-only fat binaries, which the driver compiles (the server's log "
            "says why; doc/not-supported.md); its kernels and variables fail with cudaErrorNotSupported",
            managed_names(m)));
      return s;
    }
  }
  m.id = c.module_id;
  return Status::Success;
}

Status module_ready(Module& m, Runtime& rt, int device) {
  std::lock_guard lk(m.mu);
  if (m.owner != &rt) {
    m.status = load(m, rt, device);
    m.owner = &rt;
  }
  return m.status;
}

Status look_up(Kernel& k, Runtime& rt, int device) {
  if (Status s = module_ready(*k.module, rt, device); s != Status::Success) return s;
  ipc::KernelGetCmd c{registry().next_kernel_id.fetch_add(1), k.module->id,
                      static_cast<uint32_t>(name_bytes(k.name).size()), 0};
  Reply r;
  if (Status s = rt.ask(Opcode::KernelGet, device, &c, sizeof c, name_bytes(k.name), &r); s != Status::Success)
    return s;
  const uint64_t count = r.value[0];
  const uint64_t param_bytes = r.value[1];
  if (count > ipc::kMaxParamBytes || param_bytes > ipc::kMaxParamBytes) return Status::InvalidKernelImage;
  std::vector<uint64_t> layout;
  for (uint64_t i = 0; i < std::min<uint64_t>(count, 3); ++i) layout.push_back(r.value[2 + i]);
  for (uint32_t first = 3; first < count; first += 5) {
    ipc::KernelParamsCmd p{c.kernel_id, first, 0};
    if (Status s = rt.ask(Opcode::KernelParams, device, &p, sizeof p, {}, &r); s != Status::Success) return s;
    for (uint64_t i = 0; i < std::min<uint64_t>(count - first, 5); ++i) layout.push_back(r.value[i]);
  }
  if (!layout_fits(layout, static_cast<uint32_t>(param_bytes))) return Status::InvalidKernelImage;
  k.id = c.kernel_id;
  k.param_bytes = static_cast<uint32_t>(param_bytes);
  k.layout = std::move(layout);
  return Status::Success;
}

}  // namespace

Module* register_module(const void* wrapper) noexcept {
  try {
    auto* m = new Module();
    m->wrapper = wrapper;
    return m;
  } catch (...) {
    return nullptr;
  }
}

void register_kernel(Module* m, const void* host, const char* device_name) noexcept {
  if (m == nullptr || device_name == nullptr) return;
  try {
    auto k = std::make_unique<Kernel>();
    k->module = m;
    k->host = host;
    k->name = device_name;
    Kernel* object = k.get();
    enlist(registry().kernels, m->kernels, std::move(k));
    // The Kernel itself is a handle too: cudaGetFuncBySymbol's cudaFunction_t, which the driver
    // front takes as a CUfunction.
    std::unique_lock lk(registry().mu);
    registry().kernels[object] = object;
  } catch (...) {
  }
}

void register_variable(Module* m, const void* host, const char* name, uint64_t size, bool constant) noexcept {
  if (m == nullptr || name == nullptr) return;
  try {
    auto v = std::make_unique<Variable>();
    v->module = m;
    v->host = host;
    v->name = name;
    v->size = size;
    v->constant = constant;
    enlist(registry().variables, m->variables, std::move(v));
  } catch (...) {
  }
}

void register_managed(Module* m, void** host, const char* name, uint64_t size) noexcept {
  if (m == nullptr || host == nullptr || name == nullptr || size == 0) return;
  try {
    std::lock_guard lk(m->mu);
    m->managed.push_back(Module::Managed{name, host, size, 0});
  } catch (...) {
  }
}

bool init_module(Module* m) noexcept {
  if (m == nullptr) return false;
  try {
    Runtime& rt = Runtime::get();
    Status s = rt.ready();
    if (s == Status::Success) s = module_ready(*m, rt, current_device());
    if (s == Status::Success) return true;
    if (!m->managed.empty())
      log_error(fmt::format("funnel: the __managed__ variables {} have no storage (CUDA error {}): the program cannot use them",
                            managed_names(*m), static_cast<int>(s)));
    return false;
  } catch (const std::exception& e) {
    log_error(fmt::format("funnel: internal error initialising a module: {}", e.what()));
    return false;
  }
}

void unregister_module(Module* m) noexcept {
  if (m == nullptr) return;
  Registry& r = registry();
  {
    std::unique_lock lk(r.mu);
    for (const auto& k : m->kernels) {
      if (auto it = r.kernels.find(k->host); it != r.kernels.end() && it->second == k.get()) r.kernels.erase(it);
      r.kernels.erase(k.get());
    }
    for (const auto& v : m->variables)
      if (auto it = r.variables.find(v->host); it != r.variables.end() && it->second == v.get()) r.variables.erase(it);
  }
  // A module loaded by this process's Runtime is unloaded there (dlclose of a library
  // with kernels); a process that never attached sends nothing.
  std::lock_guard lk(m->mu);
  Runtime& rt = Runtime::get();
  if (m->owner == &rt && m->status == Status::Success) {
    ipc::ModuleCmd c{};
    c.module_id = m->id;
    (void)rt.post(Opcode::ModuleUnload, current_device(), 0, &c, sizeof c);
    m->owner = nullptr;
  }
}

Kernel* find_kernel(const void* func) noexcept {
  Registry& r = registry();
  std::shared_lock lk(r.mu);
  auto it = r.kernels.find(func);
  return it != r.kernels.end() ? it->second : nullptr;
}

Kernel* registered_kernel(const void* handle) noexcept {
  Kernel* k = find_kernel(handle);
  return k == handle ? k : nullptr;
}

Variable* find_variable(const void* symbol) noexcept {
  Registry& r = registry();
  std::shared_lock lk(r.mu);
  auto it = r.variables.find(symbol);
  return it != r.variables.end() ? it->second : nullptr;
}

Status kernel_ready(Kernel& k, Runtime& rt, int device) noexcept {
  if (k.ready_for.load(std::memory_order_acquire) == &rt) return Status::Success;
  try {
    std::lock_guard lk(k.mu);
    if (k.ready_for.load(std::memory_order_relaxed) == &rt) return Status::Success;
    if (k.failed_for == &rt) return k.error;
    const Status s = look_up(k, rt, device);
    if (s == Status::Success) {
      k.ready_for.store(&rt, std::memory_order_release);
    } else if (s != Status::DevicesUnavailable) {
      k.failed_for = &rt;
      k.error = s;
    }
    return s;
  } catch (const std::exception& e) {
    log_error(fmt::format("funnel: internal error looking up kernel {}: {}", k.name, e.what()));
    return Status::Unknown;
  }
}

Status variable_address(Variable& v, Runtime& rt, int device, uint64_t& address) noexcept {
  try {
    std::lock_guard lk(v.mu);
    if (v.owner != &rt) {
      v.address.clear();
      v.owner = &rt;
    }
    if (auto it = v.address.find(device); it != v.address.end()) {
      address = it->second;
      return Status::Success;
    }
    if (Status s = module_ready(*v.module, rt, device); s != Status::Success) return s;
    if (v.managed != 0) {  // funnel's managed memory, which copies already know
      address = v.managed;
      v.address.emplace(device, address);
      return Status::Success;
    }
    ipc::SymbolGetCmd c{v.module->id, static_cast<uint32_t>(name_bytes(v.name).size()), 0};
    Reply r;
    if (Status s = rt.ask(Opcode::SymbolGet, device, &c, sizeof c, name_bytes(v.name), &r); s != Status::Success)
      return s;
    if (r.value[2] != 0) return Status::NotSupported;  // __managed__: the driver's storage, not the client's
    address = r.value[0];
    v.size = r.value[1];
    rt.tables.add_global(address, DeviceAlloc{v.size, device});
    v.address.emplace(device, address);
    return Status::Success;
  } catch (const std::exception& e) {
    log_error(fmt::format("funnel: internal error looking up variable {}: {}", v.name, e.what()));
    return Status::Unknown;
  }
}

// ---- modules the driver front loads from an image -------------------------------------------

namespace {

// The bytes of a module image as cuModuleLoadData takes it (no size given): nvcc's fat binary
// wrapper (the fat binary it points to), a fat binary (its header says how long), an ELF cubin
// (its headers and sections say), or PTX text (up to its terminating 0); empty when it is none
// of these or too large.
uint64_t image_size(const void* image);

std::span<const std::byte> image_bytes(const void* image) {
  uint32_t magic = 0;
  std::memcpy(&magic, image, sizeof magic);
  if (magic == fatbin::kWrapperMagic) return fatbin_bytes(image);
  return {static_cast<const std::byte*>(image), image_size(image)};
}

// image_bytes' size of the images that hold themselves (all but the wrapper).
uint64_t image_size(const void* image) {
  uint32_t magic = 0;
  std::memcpy(&magic, image, sizeof magic);
  if (magic == fatbin::kFatbinMagic) {
    FatbinHeader h;
    std::memcpy(&h, image, sizeof h);
    const uint64_t size = uint64_t{h.header_size} + h.payload_size;
    return h.header_size >= sizeof h && size <= ipc::kMaxModuleBytes ? size : 0;
  }
  const auto* b = static_cast<const unsigned char*>(image);
  if (b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F') {
    Elf64_Ehdr e;
    std::memcpy(&e, image, sizeof e);
    if (e.e_ident[EI_CLASS] != ELFCLASS64) return 0;
    uint64_t end = std::max<uint64_t>(sizeof e, e.e_shoff + uint64_t{e.e_shnum} * e.e_shentsize);
    end = std::max<uint64_t>(end, e.e_phoff + uint64_t{e.e_phnum} * e.e_phentsize);
    if (end > ipc::kMaxModuleBytes) return 0;
    for (uint16_t i = 0; i < e.e_shnum && e.e_shoff != 0; ++i) {
      Elf64_Shdr sh;
      std::memcpy(&sh, static_cast<const std::byte*>(image) + e.e_shoff + uint64_t{i} * e.e_shentsize, sizeof sh);
      if (sh.sh_type != SHT_NOBITS) end = std::max<uint64_t>(end, sh.sh_offset + sh.sh_size);
    }
    return end <= ipc::kMaxModuleBytes ? end : 0;
  }
  const size_t n = strnlen(static_cast<const char*>(image), ipc::kMaxModuleBytes);
  return n < ipc::kMaxModuleBytes && n > 0 ? n + 1 : 0;
}

// The kernel or variable of a module's list named `name`, made the first time it is asked for.
template <typename T>
T& named(Module& m, std::vector<std::unique_ptr<T>>& list, const char* name) {
  std::lock_guard lk(m.mu);
  for (const auto& have : list)
    if (have->name == name) return *have;
  auto made = std::make_unique<T>();
  made->module = &m;
  made->name = name;
  list.push_back(std::move(made));
  return *list.back();
}

}  // namespace

Status load_image_module(const void* image, Runtime& rt, int device, Module*& out) noexcept {
  out = nullptr;
  if (image == nullptr) return Status::InvalidValue;
  try {
    const std::span<const std::byte> bytes = image_bytes(image);
    if (bytes.empty()) return Status::InvalidKernelImage;
    auto m = std::make_unique<Module>();
    m->image.assign(bytes.begin(), bytes.end());
    if (Status s = module_ready(*m, rt, device); s != Status::Success) return s;
    out = m.release();  // kept, as registered modules are (unload_image_module)
    return Status::Success;
  } catch (const std::bad_alloc&) {
    return Status::MemoryAllocation;
  }
}

Status image_kernel(Module& m, const char* name, Runtime& rt, int device, Kernel*& out) noexcept {
  out = nullptr;
  if (name == nullptr) return Status::InvalidValue;
  try {
    Kernel& k = named(m, m.kernels, name);
    if (Status s = kernel_ready(k, rt, device); s != Status::Success) return s;
    out = &k;
    return Status::Success;
  } catch (const std::bad_alloc&) {
    return Status::MemoryAllocation;
  }
}

Status image_kernel_names(const Module& m, std::vector<std::string>& out) noexcept {
  try {
    out = fatbin::kernel_names(m.image);
    return Status::Success;
  } catch (const fatbin::Error& e) {
    log_error(fmt::format("funnel: cannot list the kernels of a module: {}", e.what()));
    return Status::InvalidKernelImage;
  } catch (const std::bad_alloc&) {
    return Status::MemoryAllocation;
  }
}

Status image_global(Module& m, const char* name, Runtime& rt, int device, uint64_t& address, uint64_t& size) noexcept {
  if (name == nullptr) return Status::InvalidValue;
  try {
    Variable& v = named(m, m.variables, name);
    const Status s = variable_address(v, rt, device, address);
    // A __managed__ variable: placed in funnel's managed memory (cuModuleGetGlobal gives it too).
    if (s == Status::NotSupported) return image_managed(m, name, rt, device, address, size);
    if (s != Status::Success) return s;
    size = v.size;
    return Status::Success;
  } catch (const std::bad_alloc&) {
    return Status::MemoryAllocation;
  }
}

namespace {

// The __managed__ variables of an image module's cubin for `device`'s GPU (none when the image
// has no cubin for it).
std::vector<Module::Managed> managed_of_image(const Module& m, Runtime& rt, int device) {
  const ipc::DeviceRecord& d = rt.device(device);
  const int arch = d.attributes[ipc::kAttrComputeCapabilityMajor] * 10 + d.attributes[ipc::kAttrComputeCapabilityMinor];
  std::vector<Module::Managed> out;
  try {
    for (const auto& g : fatbin::globals_of_cubin(fatbin::cubin_for_arch(m.image, arch)))
      if (g.managed) out.push_back(Module::Managed{g.name, nullptr, g.size, 0});
  } catch (const fatbin::Error&) {
  }
  return out;
}

}  // namespace

Status image_managed(Module& m, const char* name, Runtime& rt, int device, uint64_t& address, uint64_t& size) noexcept {
  if (name == nullptr) return Status::InvalidValue;
  try {
    {
      std::lock_guard lk(m.mu);
      if (!m.managed_searched && m.owner == &rt && m.status == Status::Success) {
        m.managed_searched = true;
        m.managed = managed_of_image(m, rt, device);
        if (!m.managed.empty()) {
          // Loaded again with the variables in place; the first load goes once its work is done.
          ipc::ModuleCmd old{};
          old.module_id = m.id;
          if (Status s = place_managed(m); s != Status::Success) return s;
          m.status = load(m, rt, device);
          if (m.status != Status::Success) return m.status;
          (void)rt.post(Opcode::ModuleUnload, device, 0, &old, sizeof old);
          for (auto& k : m.kernels) {
            std::lock_guard klk(k->mu);
            k->ready_for.store(nullptr, std::memory_order_release);
            k->failed_for = nullptr;
          }
        }
      }
      for (const auto& v : m.managed) {
        if (v.address != 0 && v.name == name) {
          address = v.address;
          size = v.size;
          return Status::Success;
        }
      }
    }
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      log_error(fmt::format("funnel: __managed__ variable {}: the module has none of that name that funnel placed "
                            "(funnel serves them in code with a cubin for this GPU, not in PTX-only code; "
                            "doc/not-supported.md)",
                            name));
    return Status::SymbolNotFound;
  } catch (const std::bad_alloc&) {
    return Status::MemoryAllocation;
  }
}

void unload_image_module(Module* m) noexcept { unregister_module(m); }

}  // namespace funnel::client
