// The fat binaries, kernels and variables nvcc's static constructors register, and
// their lazy life on the server (doc/design/kernels.md): a fat binary is uploaded (or
// found in the server's cache by digest) the first time one of its kernels or
// variables is used; a kernel's parameter layout is asked for once.  Everything is
// per Runtime: a forked child, which gets a fresh Runtime, loads again.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "runtime.hpp"

namespace funnel::client {

struct Module;

struct Kernel {
  Module* module = nullptr;
  const void* host = nullptr;  // the host stub nvcc registered
  std::string name;            // device (mangled) name
  // Valid once ready_for is the current Runtime (kernel_ready).
  std::atomic<Runtime*> ready_for{nullptr};
  uint64_t id = 0;
  uint32_t param_bytes = 0;
  std::vector<uint64_t> layout;  // ipc::pack_param per parameter
  std::mutex mu;
  Runtime* failed_for = nullptr;  // the look-up failed for this Runtime with `error` (mu)
  Status error = Status::Success;
  // What the launch checks need (api_kernel.cpp), asked for once and kept until
  // cudaFuncSetAttribute or cudaFuncSetCacheConfig; for the Runtime `limits_for` (mu).
  Runtime* limits_for = nullptr;
  std::map<int, ipc::FuncAttributes> attributes;                     // by device
  // (device, threads, dynamic smem, occupancy flags)
  std::map<std::tuple<int, uint32_t, uint64_t, uint32_t>, int> blocks_per_sm;
};

struct Variable {
  Module* module = nullptr;
  const void* host = nullptr;  // the host shadow
  std::string name;
  uint64_t size = 0;
  bool constant = false;
  std::mutex mu;
  Runtime* owner = nullptr;         // the Runtime the addresses below belong to (mu)
  std::map<int, uint64_t> address;  // device -> address (mu)
  // A __managed__ variable: its storage, funnel's managed memory (the same address on every
  // device; the host shadow is this address too, which is what the program passes as the symbol).
  uint64_t managed = 0;
};

// Registration (nvcc's static constructors; no server contact).
Module* register_module(const void* wrapper) noexcept;
void register_kernel(Module* m, const void* host, const char* device_name) noexcept;
void register_variable(Module* m, const void* host, const char* name, uint64_t size, bool constant) noexcept;
// A __managed__ variable: `host` is the pointer nvcc's host code reaches it through, set to its
// storage when the module loads (doc/design/managed.md).
void register_managed(Module* m, void** host, const char* name, uint64_t size) noexcept;
// __cudaInitModule: the module loaded (its __managed__ variables' storage placed) on the current
// device; false, said on stderr, when it cannot be.
bool init_module(Module* m) noexcept;
void unregister_module(Module* m) noexcept;

// The registered kernel of a host stub (or of a handle cudaGetKernel or cudaGetFuncBySymbol
// gave out); nullptr when unknown.
Kernel* find_kernel(const void* func) noexcept;
// The registered kernel whose record `handle` is (cudaGetFuncBySymbol's cudaFunction_t, which the
// driver front takes as a CUfunction); nullptr for anything else, a host stub included.
Kernel* registered_kernel(const void* handle) noexcept;
Variable* find_variable(const void* symbol) noexcept;

// Loads the kernel's module on the server if needed and learns its parameter layout
// (KernelGet, KernelParams).  `device`: header.device of the round trips.
Status kernel_ready(Kernel& k, Runtime& rt, int device) noexcept;
// The variable's device address on `device` (SymbolGet, once per device); the range is
// entered into rt.globals so that copies treat it as device memory.
Status variable_address(Variable& v, Runtime& rt, int device, uint64_t& address) noexcept;

// Modules the driver front loads (cuModuleLoadData(Ex), cuModuleLoadFatBinary): the image (a fat
// binary, its wrapper, an ELF cubin or PTX text) is copied and loaded on the server at once, so
// a bad one fails the call. The Module is the CUmodule handle; never freed (as registered ones).
Status load_image_module(const void* image, Runtime& rt, int device, Module*& out) noexcept;
// The module's kernel `name`, looked up on the server at once (cuModuleGetFunction): the
// Kernel is the CUfunction handle, the same one for the same name.
Status image_kernel(Module& m, const char* name, Runtime& rt, int device, Kernel*& out) noexcept;
// The names of the module's kernels, as its image declares them (cuModuleGetFunctionCount,
// cuModuleEnumerateFunctions): each once.  InvalidKernelImage, with a line on stderr naming the
// reason, when the image cannot be read here (e.g. a compression this machine cannot decode).
Status image_kernel_names(const Module& m, std::vector<std::string>& out) noexcept;
// The module's variable `name` (cuModuleGetGlobal, cuLibraryGetGlobal): its device address and
// size, entered in the tables as device memory.
Status image_global(Module& m, const char* name, Runtime& rt, int device, uint64_t& address, uint64_t& size) noexcept;
// cuLibraryGetManaged: the storage of the module's __managed__ variable `name`.  The first call
// on a module finds its __managed__ variables in the cubin for `device`'s GPU, places them as
// registration does (funnel managed memory) and loads the module again with them (its kernels
// are looked up again on their next use).  NotFound when there is no such variable (or it is in
// code funnel cannot patch: PTX only; said once on stderr).
Status image_managed(Module& m, const char* name, Runtime& rt, int device, uint64_t& address, uint64_t& size) noexcept;
void unload_image_module(Module* m) noexcept;

}  // namespace funnel::client
