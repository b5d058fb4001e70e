// A client's modules, kernels and the launches its worker holds back (doc/design/kernels.md).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "funnel/ipc/commands.hpp"
#include "funnel/server/backend.hpp"
#include "session/legacy_stream.hpp"

namespace funnel::server {

// A __managed__ variable of a module on its way in (ModuleManaged): its storage is the client's
// managed memory at `address` (checked to be the client's pinned memory).
struct ManagedVar {
  std::string name;
  uint64_t address;
  uint64_t size;
};

// A fat binary on its way in (ModuleQuery missed, ModuleData pieces, then ModuleLoad).
struct ModuleUpload {
  ipc::ModuleCmd cmd;
  std::vector<std::byte> bytes;
  std::vector<ManagedVar> managed;
};

struct KernelEntry {
  std::string name;  // mangled, for the fault log
  uint64_t module_id;
  std::shared_ptr<BackendModule> module;  // declared first: outlives the kernel
  std::shared_ptr<BackendKernel> kernel;  // shared with the executable graphs that launch it
  std::vector<ParamLayout> params;
  uint32_t param_bytes;
};

// A host function's stream wait: the stream stays held until done_slot holds generation.
struct HostFuncWait {
  uint32_t done_slot;
  uint32_t generation;
};

// Consecutive launches of a client on one stream that the worker holds back while the next
// record is already in the ring, then hands to Backend::launch_batch at once
// (FUNNEL_LAUNCH_BATCH; doc/design/overview.md, "Launch batches").  It never outlives a
// turn, and any other command flushes it first, so the driver sees the same calls in the
// same order, fewer of them.
struct LaunchBatch {
  struct Item {
    ipc::CommandHeader header;  // for a launch's own error, should the batch fail
    KernelEntry* kernel;
    LaunchDesc desc;
    uint32_t offset;  // of its parameter buffer in params
    uint32_t size;
  };
  StreamEntry* stream = nullptr;
  std::vector<Item> items;
  std::vector<std::byte> params;      // the items' parameter buffers, back to back
  std::vector<BatchedLaunch> launches;  // handed to the backend (kept for its capacity)
  bool empty() const noexcept { return items.empty(); }
};

// What a client loaded: its modules (by the client's module ids), the uploads under way and
// its kernels (by the client's kernel ids).
struct ClientKernels {
  std::unordered_map<uint64_t, std::shared_ptr<BackendModule>> modules;
  std::unordered_map<uint64_t, ModuleUpload> uploads;
  std::unordered_map<uint64_t, KernelEntry> kernels;
  KernelEntry* find(uint64_t id) {
    auto it = kernels.find(id);
    return it == kernels.end() ? nullptr : &it->second;
  }
  void clear() {
    kernels.clear();  // before their modules
    modules.clear();
    uploads.clear();
  }
};

}  // namespace funnel::server
