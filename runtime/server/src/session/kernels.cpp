// The kernel commands (doc/design/kernels.md): modules uploaded once per content into
// the server's ModuleCache, kernel layouts, launches, symbols, function attributes,
// occupancy and host functions.  As in commands.cpp, every field was copied out of the
// ring and is validated here before anything happens.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "funnel/fatbin/fatbin.hpp"
#include "funnel/ipc/futex.hpp"
#include "session/module_cache.hpp"
#include "session/validation.hpp"
#include "session/worker.hpp"
#include "session/validation.hpp"

namespace funnel::server {
namespace {

ModuleKey key_of(const ipc::ModuleCmd& c) noexcept {
  ModuleKey k{};
  std::memcpy(k.digest.data(), c.digest, sizeof c.digest);
  k.size = c.size;
  return k;
}

bool own_copy(const ipc::ModuleCmd& c) noexcept { return (c.flags & ipc::kModuleHasVariables) != 0; }
bool has_managed(const ipc::ModuleCmd& c) noexcept { return (c.flags & ipc::kModuleHasManaged) != 0; }

Status check_module_cmd(const ipc::ModuleCmd& c) noexcept {
  if (c.size == 0 || c.size > ipc::kMaxModuleBytes) return Status::InvalidValue;
  if ((c.flags & ~(ipc::kModuleHasVariables | ipc::kModuleHasManaged)) != 0) return Status::InvalidValue;
  return Status::Success;
}

std::string name_of(const std::byte* p, uint32_t n) { return std::string(reinterpret_cast<const char*>(p), n); }

// Copy-on-write of kernel attributes (doc/design/kernels.md, "Function attributes and
// occupancy"): when `module_id` is a module shared with other clients, the client gets
// its own instance, loaded from the cached bytes, and every kernel it holds of that
// module is looked up again there.  All or nothing: on any error the client keeps the shared one.
Status make_module_own(Backend& backend, ModuleCache& cache, ClientKernels& client, uint64_t module_id) {
  auto& modules = client.modules;
  auto& kernels = client.kernels;
  auto m = modules.find(module_id);
  if (m == modules.end()) return Status::InvalidResourceHandle;  // a kernel never outlives its module id
  std::shared_ptr<BackendModule> own;
  if (Status st = cache.copy_if_shared(*m->second, own); st != Status::Success || !own) return st;
  std::vector<std::pair<KernelEntry*, std::unique_ptr<BackendKernel>>> moved;
  for (auto& [id, k] : kernels) {
    if (k.module_id != module_id) continue;
    std::unique_ptr<BackendKernel> kernel;
    std::vector<ParamLayout> params;
    uint32_t param_bytes = 0;
    if (Status st = backend.kernel_get(*own, k.name, kernel, params, param_bytes); st != Status::Success) return st;
    // The same bytes give the same layouts; anything else would make the client's packing wrong.
    if (params != k.params || param_bytes != k.param_bytes) return Status::Unknown;
    moved.emplace_back(&k, std::move(kernel));
  }
  // The shared module stays in the cache, so work already queued on its kernels is safe.
  for (auto& [k, kernel] : moved) {
    k->kernel = std::move(kernel);  // before the module: a kernel never outlives its module
    k->module = own;
  }
  m->second = std::move(own);
  return Status::Success;
}

}  // namespace

// ---- modules ----------------------------------------------------------------

Status Worker::add_module(const ipc::CommandHeader& h, uint64_t module_id, std::shared_ptr<BackendModule> m) {
  kernels_.modules[module_id] = std::move(m);
  answers_.answer(h, {1});
  return Status::Success;
}

Status Worker::module_query(const ipc::CommandHeader& h, const ipc::ModuleCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  if (Status st = check_module_cmd(c); st != Status::Success) return st;
  if (kernels_.modules.contains(c.module_id)) return Status::InvalidResourceHandle;
  std::shared_ptr<BackendModule> m;
  // A module with __managed__ variables is loaded patched for this client alone: always uploaded.
  const Status st = has_managed(c) ? Status::NotReady : shared_.modules->acquire(key_of(c), own_copy(c), m);
  if (st == Status::Success) {
    kernels_.uploads.erase(c.module_id);
    return add_module(h, c.module_id, std::move(m));
  }
  if (st != Status::NotReady) return st;
  // Not cached: the client sends the bytes (a new query restarts an upload).
  kernels_.uploads[c.module_id] = ModuleUpload{c, {}, {}};
  answers_.answer(h, {0});
  return Status::Success;
}

Status Worker::module_data(const ipc::CommandHeader& h, const ipc::ModuleDataCmd& c) {
  const auto& hd = view_.header();
  if (c.staging_slot >= hd.staging_slots) return Status::InvalidValue;
  auto& state = view_.staging_state(c.staging_slot);
  if (state.load(std::memory_order_acquire) != static_cast<uint32_t>(ipc::StagingState::InFlight))
    return Status::InvalidValue;  // not handed to the server: leave it alone
  // The slot goes back to the client whatever happens to its bytes.
  const auto release = [&] {
    state.store(static_cast<uint32_t>(ipc::StagingState::Free), std::memory_order_release);
    ipc::futex_wake_all(state);
  };
  auto it = kernels_.uploads.find(c.module_id);
  if (it == kernels_.uploads.end() || c.bytes > hd.staging_slot_size || c.offset != it->second.bytes.size() ||
      c.bytes > it->second.cmd.size - c.offset) {
    release();
    // A broken upload cannot be finished: ModuleLoad fails and the client starts over.
    if (it != kernels_.uploads.end()) kernels_.uploads.erase(it);
    return Status::InvalidValue;
  }
  try {
    auto& bytes = it->second.bytes;
    if (bytes.empty()) bytes.reserve(it->second.cmd.size);
    const auto* src = static_cast<const std::byte*>(view_.staging(c.staging_slot));
    bytes.insert(bytes.end(), src, src + c.bytes);
  } catch (const std::bad_alloc&) {
    release();
    kernels_.uploads.erase(it);
    return Status::MemoryAllocation;
  }
  release();
  answers_.answer(h);
  return Status::Success;
}

Status Worker::module_load(const ipc::CommandHeader& h, const ipc::ModuleCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  if (Status st = check_module_cmd(c); st != Status::Success) return st;
  auto it = kernels_.uploads.find(c.module_id);
  if (it == kernels_.uploads.end()) return Status::InvalidResourceHandle;
  ModuleUpload up = std::move(it->second);
  kernels_.uploads.erase(it);
  if (kernels_.modules.contains(c.module_id)) return Status::InvalidResourceHandle;
  if (std::memcmp(up.cmd.digest, c.digest, sizeof c.digest) != 0 || up.cmd.size != c.size ||
      up.cmd.flags != c.flags || up.bytes.size() != c.size)
    return Status::InvalidValue;
  const ModuleKey key = key_of(c);
  if (ipc::module_digest(up.bytes) != key.digest) {
    spdlog::warn("client {}: module {} ({} bytes) does not match its digest", shared_.id, c.module_id, c.size);
    return Status::InvalidValue;
  }
  std::shared_ptr<BackendModule> m;
  if (has_managed(c)) {
    if (Status st = load_managed(h, up, m); st != Status::Success) return st;
  } else if (Status st = shared_.modules->insert(key, std::move(up.bytes), own_copy(c), m); st != Status::Success) {
    return st;
  }
  return add_module(h, c.module_id, std::move(m));
}

Status Worker::module_managed(const ipc::CommandHeader& h, const ipc::ModuleManagedCmd& c, const std::byte* name) {
  if (one_way(h)) return Status::InvalidValue;
  auto it = kernels_.uploads.find(c.module_id);
  if (it == kernels_.uploads.end() || !has_managed(it->second.cmd)) return Status::InvalidResourceHandle;
  auto& vars = it->second.managed;
  std::string n = name_of(name, c.name_bytes);
  if (n.empty() || c.size == 0 || vars.size() >= ipc::kMaxManagedPerModule) return Status::InvalidValue;
  // The storage must be the client's own pinned (managed) memory, which the server maps too.
  if (!res_.pinned_range_ok(c.address, c.size)) return Status::InvalidValue;
  for (const auto& v : vars)
    if (v.name == n) return Status::InvalidValue;
  vars.push_back(ManagedVar{std::move(n), c.address, c.size});
  answers_.answer(h);
  return Status::Success;
}

Status Worker::load_managed(const ipc::CommandHeader& h, const ModuleUpload& up, std::shared_ptr<BackendModule>& out) {
  if (Status st = check_device(h.device); st != Status::Success) return st;
  const ipc::DeviceRecord& d = view_.devices()[h.device];
  const int arch = d.attributes[ipc::kAttrComputeCapabilityMajor] * 10 + d.attributes[ipc::kAttrComputeCapabilityMinor];
  std::vector<std::pair<std::string, uint64_t>> addresses;
  for (const auto& v : up.managed) addresses.emplace_back(v.name, v.address);
  std::vector<std::byte> cubin;
  std::vector<fatbin::GlobalInfo> globals;
  try {
    cubin = fatbin::patch_managed(fatbin::cubin_for_arch(up.bytes, arch), addresses);
    globals = fatbin::globals_of_cubin(cubin);
  } catch (const fatbin::Error& e) {
    spdlog::warn("client {}: module {} with __managed__ variables not served: {}", shared_.id, up.cmd.module_id,
                 e.what());
    return Status::NotSupported;
  }
  // Each variable's storage starts as the module's initial value (zeros where it has none).
  for (const auto& v : up.managed) {
    if (!res_.pinned_range_ok(v.address, v.size)) return Status::InvalidValue;  // freed since ModuleManaged
    auto g = std::find_if(globals.begin(), globals.end(), [&](const auto& x) { return x.name == v.name; });
    if (g != globals.end() && g->size != v.size) {
      spdlog::warn("client {}: __managed__ variable {} has {} bytes in the cubin, {} registered", shared_.id, v.name,
                   g->size, v.size);
      return Status::InvalidValue;
    }
    auto* storage = reinterpret_cast<std::byte*>(v.address);
    std::memset(storage, 0, v.size);
    if (g != globals.end()) std::memcpy(storage, g->init.data(), std::min<size_t>(g->init.size(), v.size));
  }
  std::unique_ptr<BackendModule> m;
  if (Status st = backend_.module_load(cubin, m); st != Status::Success) return st;
  out = std::move(m);
  return Status::Success;
}

Status Worker::module_unload(const ipc::CommandHeader& h, const ipc::ModuleCmd& c) {
  kernels_.uploads.erase(c.module_id);
  auto it = kernels_.modules.find(c.module_id);
  if (it == kernels_.modules.end()) return Status::InvalidResourceHandle;
  auto module = std::move(it->second);
  kernels_.modules.erase(it);
  std::erase_if(kernels_.kernels, [&](const auto& k) { return k.second.module_id == c.module_id; });
  std::erase_if(res_.symbols, [&](const auto& s) { return s.second.module_id == c.module_id; });
  // Launches and symbol copies already queued still use it: it goes once they are done.
  completions_.when_drained(-1, h.reply_slot, h.seq, [module](Status) mutable {
    module.reset();
    return Status::Success;
  });
  return Status::Success;
}

// ---- kernels ----------------------------------------------------------------

Status Worker::kernel_get(const ipc::CommandHeader& h, const ipc::KernelGetCmd& c, const std::byte* name) {
  if (one_way(h)) return Status::InvalidValue;
  if (c.name_bytes == 0) return Status::InvalidValue;
  if (kernels_.kernels.contains(c.kernel_id)) return Status::InvalidResourceHandle;
  auto m = kernels_.modules.find(c.module_id);
  if (m == kernels_.modules.end()) return Status::InvalidResourceHandle;
  KernelEntry k{name_of(name, c.name_bytes), c.module_id, m->second, nullptr, {}, 0};
  std::unique_ptr<BackendKernel> kernel;
  if (Status st = backend_.kernel_get(*m->second, k.name, kernel, k.params, k.param_bytes); st != Status::Success)
    return st;
  k.kernel = std::move(kernel);
  if (k.param_bytes > ipc::kMaxParamBytes) return Status::NotSupported;  // no client could launch it
  std::array<uint64_t, 5> v{k.params.size(), k.param_bytes};
  for (size_t i = 0; i < 3 && i < k.params.size(); ++i) v[2 + i] = ipc::pack_param(k.params[i].offset, k.params[i].size);
  kernels_.kernels.emplace(c.kernel_id, std::move(k));
  answers_.answer(h, v);
  return Status::Success;
}

Status Worker::kernel_params(const ipc::CommandHeader& h, const ipc::KernelParamsCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  KernelEntry* k = kernels_.find(c.kernel_id);
  if (k == nullptr) return Status::InvalidResourceHandle;
  if (c.first > k->params.size()) return Status::InvalidValue;
  std::array<uint64_t, 5> v{};
  for (size_t i = 0; i < v.size() && c.first + i < k->params.size(); ++i)
    v[i] = ipc::pack_param(k->params[c.first + i].offset, k->params[c.first + i].size);
  answers_.answer(h, v);
  return Status::Success;
}

namespace {
// A cluster dimension past this is invalid on every GPU (16 is the non-portable maximum of a
// whole cluster); checked before a backend multiplies the dimensions.
constexpr uint32_t kMaxClusterDim = 16;

bool cluster_shape_ok(const ipc::LaunchCmd& c) noexcept {
  for (uint32_t d : c.cluster)
    if (d > kMaxClusterDim) return false;
  return true;
}

}  // namespace

LaunchDesc launch_desc(const ipc::LaunchCmd& c) noexcept {
  LaunchDesc d{};
  std::memcpy(d.grid, c.grid, sizeof d.grid);
  std::memcpy(d.block, c.block, sizeof d.block);
  std::memcpy(d.cluster, c.cluster, sizeof d.cluster);
  d.shared_bytes = c.shared_bytes;
  d.cooperative = (c.flags & ipc::kLaunchCooperative) != 0;
  d.priority = c.priority;  // 0: the stream's (the worker shifts others, see StreamPlacement)
  return d;
}

Status Worker::check_launch(const ipc::LaunchCmd& c, const KernelEntry& k) {
  if (c.param_bytes != k.param_bytes) return Status::InvalidValue;
  if ((c.flags & ~ipc::kLaunchCooperative) != 0) return Status::InvalidValue;
  for (int i = 0; i < 3; ++i)
    if (c.grid[i] == 0 || c.block[i] == 0) return Status::InvalidConfiguration;
  if (!cluster_shape_ok(c)) return Status::InvalidClusterSize;
  return Status::Success;
}

Status Worker::launch(const ipc::CommandHeader& h, const ipc::LaunchCmd& c, const std::byte* params) {
  KernelEntry* k = kernels_.find(c.kernel_id);
  if (k == nullptr) return Status::InvalidResourceHandle;
  if (Status st = check_launch(c, *k); st != Status::Success) return st;
  LaunchDesc d = launch_desc(c);
  if (d.priority != 0) d.priority = shared_.placement.shifted(d.priority);
  Status st;
  StreamEntry* s = find_stream(h, st);
  if (s == nullptr) return st;
  // Held back (LaunchBatch): a one-way plain launch, while launches of the same stream are
  // held or the next record is already in the ring.  Cooperative, cluster and per-launch
  // priority launches go alone.
  const bool plain = !d.cooperative && d.cluster[0] == 0 && d.cluster[1] == 0 && d.cluster[2] == 0 && d.priority == 0;
  const bool may_hold = shared_.tuning.launch_batch >= 2 && plain && h.reply_slot == ipc::kNoReply;
  if (!batch_.empty() && (!may_hold || batch_.stream != s)) flush_launches();
  const bool hold = may_hold && (!batch_.empty() || !reader_.empty());
  // Nothing ran since the batch's first launch, so for a later one this enqueues nothing.
  if (st = streams_.before_work(*s); st != Status::Success) return st;
  if (hold) {
    batch_.stream = s;
    const auto offset = static_cast<uint32_t>(batch_.params.size());
    batch_.params.insert(batch_.params.end(), params, params + c.param_bytes);
    batch_.items.push_back({h, k, d, offset, c.param_bytes});
  } else if (st = backend_.launch(*s->stream, *k->kernel, d, {params, c.param_bytes}); st != Status::Success) {
    return st;
  }
  streams_.after_work(*s);
  add(counters_.launches, 1);
  // For the fault log (assign reuses the string's storage: no allocation per launch).
  last_kernel_.assign(k->name);
  ++launches_since_sync_;
  answers_.answer(h);
  if (batch_.items.size() >= shared_.tuning.launch_batch) flush_launches();
  return Status::Success;
}

void Worker::flush_launches() {
  if (batch_.empty() || flushing_) return;
  flushing_ = true;  // a launch's failure reported below must not flush again
  LaunchBatch& b = batch_;
  BackendStream& stream = *b.stream->stream;
  size_t launched = 0;
  Status st = Status::NotSupported;
  if (b.items.size() >= 2) {
    b.launches.clear();
    for (const auto& i : b.items)
      b.launches.push_back({i.kernel->kernel.get(), i.desc, {b.params.data() + i.offset, i.size}});
    st = backend_.launch_batch(stream, b.launches, launched);
  }
  // The rest one by one, each with its own error, as if never held; past a sticky error
  // (the device faulted) every later one gets it, as refuse_poisoned would answer it.
  Status sticky = Status::Success;
  for (size_t n = launched; st != Status::Success && n < b.items.size(); ++n) {
    const auto& i = b.items[n];
    Status r = sticky;
    if (r == Status::Success) r = backend_.launch(stream, *i.kernel->kernel, i.desc, {b.params.data() + i.offset, i.size});
    if (r == Status::Success) continue;
    if (ipc::is_sticky(r) && sticky == Status::Success) {
      sticky = r;
      observe(b.stream->device, r);
    }
    failed(i.header, r);
  }
  b.items.clear();
  b.params.clear();
  b.stream = nullptr;
  flushing_ = false;
}

// ---- symbols, attributes, occupancy -------------------------------------------

Status Worker::symbol_get(const ipc::CommandHeader& h, const ipc::SymbolGetCmd& c, const std::byte* name) {
  if (one_way(h)) return Status::InvalidValue;
  if (c.name_bytes == 0) return Status::InvalidValue;
  if (Status st = check_device(h.device); st != Status::Success) return st;
  auto m = kernels_.modules.find(c.module_id);
  if (m == kernels_.modules.end()) return Status::InvalidResourceHandle;
  DeviceAddress address = 0;
  uint64_t size = 0;
  bool managed = false;
  if (Status st = backend_.global_get(*m->second, h.device, name_of(name, c.name_bytes), address, size, managed);
      st != Status::Success)
    return st;
  // Copies may now reach the variable (never freed as an allocation; dropped on unload).  A
  // __managed__ one's storage here is not what the client uses (it places its own and loads the
  // module again: doc/design/managed.md).
  if (size != 0 && !managed) res_.symbols[address] = SymbolRange{size, c.module_id};
  answers_.answer(h, {address, size, managed ? 1u : 0u});
  return Status::Success;
}

Status Worker::kernel_on_device(const ipc::CommandHeader& h, uint64_t kernel_id, KernelEntry*& out) {
  if (Status st = check_device(h.device); st != Status::Success) return st;
  out = kernels_.find(kernel_id);
  return out == nullptr ? Status::InvalidResourceHandle : Status::Success;
}

Status Worker::func_get_attributes(const ipc::CommandHeader& h, const ipc::KernelCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  KernelEntry* k = nullptr;
  if (Status st = kernel_on_device(h, c.kernel_id, k); st != Status::Success) return st;
  ipc::FuncAttributes a;
  if (Status st = backend_.func_attributes(*k->kernel, h.device, a); st != Status::Success) return st;
  uint64_t packed[5];
  ipc::pack_func_attributes(a, packed);
  answers_.answer(h, {packed[0], packed[1], packed[2], packed[3], packed[4]});
  return Status::Success;
}

Status Worker::func_set_attribute(const ipc::CommandHeader& h, const ipc::FuncSetAttributeCmd& c) {
  KernelEntry* k = nullptr;
  if (Status st = kernel_on_device(h, c.kernel_id, k); st != Status::Success) return st;
  // Never on a kernel other clients share: the first change makes the module this client's.
  if (Status st = make_module_own(backend_, *shared_.modules, kernels_, k->module_id); st != Status::Success) return st;
  if (Status st = backend_.func_set_attribute(*k->kernel, h.device, c.attribute, c.value); st != Status::Success)
    return st;
  answers_.answer(h);
  return Status::Success;
}

Status Worker::occupancy(const ipc::CommandHeader& h, const ipc::OccupancyCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  KernelEntry* k = nullptr;
  if (Status st = kernel_on_device(h, c.kernel_id, k); st != Status::Success) return st;
  int blocks = 0;
  if (Status st = backend_.occupancy(*k->kernel, h.device, c.block_size, c.dynamic_shared_bytes, c.flags, blocks);
      st != Status::Success)
    return st;
  answers_.answer(h, {static_cast<uint64_t>(blocks)});
  return Status::Success;
}

Status Worker::occupancy_dynamic_smem(const ipc::CommandHeader& h, const ipc::OccupancyCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  KernelEntry* k = nullptr;
  if (Status st = kernel_on_device(h, c.kernel_id, k); st != Status::Success) return st;
  if (c.block_size == 0 || c.dynamic_shared_bytes == 0 || c.dynamic_shared_bytes > 1024) return Status::InvalidValue;
  uint64_t bytes = 0;
  if (Status st = backend_.available_dynamic_smem(*k->kernel, h.device, static_cast<uint32_t>(c.dynamic_shared_bytes),
                                                  c.block_size, bytes);
      st != Status::Success)
    return st;
  answers_.answer(h, {bytes});
  return Status::Success;
}

// MaxActiveClusters (the launch's cluster shape checked) and MaxClusterSize (its cluster
// dimensions not used): one answer from the backend.
Status Worker::cluster_query(const ipc::CommandHeader& h, const ipc::LaunchCmd& c, bool size) {
  if (one_way(h)) return Status::InvalidValue;
  KernelEntry* k = nullptr;
  if (Status st = kernel_on_device(h, c.kernel_id, k); st != Status::Success) return st;
  if (c.param_bytes != 0 || c.flags != 0) return Status::InvalidValue;
  for (int i = 0; i < 3; ++i)
    if (c.grid[i] == 0 || c.block[i] == 0) return Status::InvalidValue;
  LaunchDesc d = launch_desc(c);
  if (size) d.cluster[0] = d.cluster[1] = d.cluster[2] = 0;
  else if (!cluster_shape_ok(c)) return Status::InvalidClusterSize;
  int value = 0;
  const Status st = size ? backend_.max_cluster_size(*k->kernel, h.device, d, value)
                         : backend_.max_active_clusters(*k->kernel, h.device, d, value);
  if (st != Status::Success) return st;
  answers_.answer(h, {static_cast<uint64_t>(value)});
  return Status::Success;
}

// One part of a tensor map: the whole map is encoded for each part (a host-side call of the
// driver's, microseconds), so the server keeps nothing between the parts.
Status Worker::tensor_map_encode(const ipc::CommandHeader& h, const ipc::TensorMapCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  if (Status st = check_device(h.device); st != Status::Success) return st;
  if (c.part >= ipc::kTensorMapParts || c.rank == 0 || c.rank > ipc::kTensorMapMaxRank || c.reserved != 0)
    return Status::InvalidValue;
  std::array<std::byte, ipc::kTensorMapBytes> map{};
  if (Status st = backend_.tensor_map_encode(h.device, c, map); st != Status::Success) return st;
  std::array<uint64_t, 5> v{};
  static_assert(sizeof v == ipc::kTensorMapPartBytes);
  const ipc::TensorMapPart part = ipc::tensor_map_part(c.part);
  std::memcpy(v.data(), map.data() + part.first, part.bytes);
  answers_.answer(h, v);
  return Status::Success;
}

// ---- host functions -----------------------------------------------------------

Status Worker::host_func(const ipc::CommandHeader& h, const ipc::HostFuncCmd& c) {
  const uint32_t slots = view_.header().event_slots;
  if (c.reached_slot >= slots || c.done_slot >= slots) return Status::InvalidValue;
  Status st;
  StreamEntry* s = find_stream(h, st);
  if (s == nullptr) return st;
  if (st = streams_.before_work(*s); st != Status::Success) return st;
  // Remembered before the wait is queued: from there on the stream may block on the client.
  // A hang-up that released the waits before this push leaves the flag set, and this wait
  // is released below; one that comes after the push releases it with the others.
  bool released = false;
  {
    const std::lock_guard lock(host_funcs_mutex_);
    // Waits the client already released need no store at teardown.
    std::erase_if(host_funcs_, [&](const HostFuncWait& w) {
      return view_.event_state(w.done_slot).load(std::memory_order_acquire) == w.generation;
    });
    host_funcs_.push_back({c.done_slot, c.generation});
    released = host_funcs_released_;
  }
  if (st = backend_.write_value(*s->stream, view_.event_state(c.reached_slot), c.generation); st != Status::Success)
    return st;
  if (st = backend_.wait_value(*s->stream, view_.event_state(c.done_slot), c.generation); st != Status::Success)
    return st;
  if (released) release_host_funcs();
  streams_.after_work(*s);
  answers_.answer(h);
  return Status::Success;
}

void Worker::release_host_funcs() noexcept {
  const std::lock_guard lock(host_funcs_mutex_);
  host_funcs_released_ = true;
  // In submission order, so a slot ends at its newest generation.
  for (const HostFuncWait& w : host_funcs_) {
    auto& word = view_.event_state(w.done_slot);
    word.store(w.generation, std::memory_order_release);
  }
  host_funcs_.clear();
}

}  // namespace funnel::server
