// The sim backend's kernels: modules read with funnel::fatbin; a launch is checked as the
// driver would, then recorded (kernel, shape, parameter buffer) in stream order, not run;
// attributes and occupancy from the cubin and the device model.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/sim/sim_backend.hpp"
#include "funnel/fatbin/fatbin.hpp"

namespace funnel::server::sim {

namespace {

constexpr size_t kMaxLaunchRecords = 65536;

// The best cubin architecture of a fat binary: sm_90 where present, else the highest.
int best_arch(const std::vector<fatbin::FatbinImage>& images) {
  int best = 0;
  for (const auto& im : images) {
    if (im.kind != fatbin::ImageKind::cubin) continue;
    if (im.sm_arch == 90) return 90;
    best = std::max(best, im.sm_arch);
  }
  return best;
}

// Registers allocated to one warp of a kernel using `regs` registers per thread.
uint32_t registers_per_warp(uint32_t regs) {
  return (std::max(regs, 1u) * 32 + kRegisterAllocation - 1) / kRegisterAllocation * kRegisterAllocation;
}

std::string hex(std::span<const std::byte> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::byte b : bytes) {
    out.push_back(digits[static_cast<uint8_t>(b) >> 4]);
    out.push_back(digits[static_cast<uint8_t>(b) & 0xf]);
  }
  return out;
}

}  // namespace

// ---- kernels ----------------------------------------------------------------
Status SimBackend::module_load(std::span<const std::byte> image, std::unique_ptr<BackendModule>& out) {
  if (Status st = any_device(); st != Status::Success) return st;
  auto m = std::make_unique<SimModule>();
  try {
    const auto format = fatbin::module_format(image);
    if (format == fatbin::ModuleFormat::ptx) return Status::NoKernelImageForDevice;  // nothing the sim can read
    if (format == fatbin::ModuleFormat::cubin) {  // one cubin, as cuModuleLoadData takes it
      for (auto& k : fatbin::kernels_of_cubin(image)) m->kernels.emplace(k.name, std::move(k));
      for (auto& g : fatbin::globals_of_cubin(image)) {
        if (g.constant) m->const_bytes += g.size;
        m->globals.emplace(g.name, std::move(g));
      }
      m->sm_arch = m->kernels.empty() ? 90 : m->kernels.begin()->second.sm_arch;
      out = std::move(m);
      return Status::Success;
    }
    if (format != fatbin::ModuleFormat::fatbin) return Status::InvalidKernelImage;
    const auto images = fatbin::parse_fatbin(image);
    m->sm_arch = best_arch(images);
    if (m->sm_arch == 0) return Status::NoKernelImageForDevice;  // PTX only: nothing the sim can read
    for (const auto& im : images) {
      if (im.kind != fatbin::ImageKind::cubin || im.sm_arch != m->sm_arch) continue;
      const auto cubin = fatbin::decompressed_payload(im);
      for (auto& k : fatbin::kernels_of_cubin(cubin)) m->kernels.emplace(k.name, std::move(k));
      for (auto& g : fatbin::globals_of_cubin(cubin)) {
        if (g.constant) m->const_bytes += g.size;
        m->globals.emplace(g.name, std::move(g));
      }
    }
  } catch (const fatbin::Error&) {
    return Status::InvalidKernelImage;
  } catch (const std::bad_alloc&) {
    return Status::MemoryAllocation;
  }
  out = std::move(m);
  return Status::Success;
}

Status SimBackend::kernel_get(BackendModule& mod, const std::string& name, std::unique_ptr<BackendKernel>& out,
                              std::vector<ParamLayout>& params, uint32_t& param_bytes) {
  if (Status st = any_device(); st != Status::Success) return st;
  auto& m = module(mod);
  auto it = m.kernels.find(name);
  if (it == m.kernels.end()) return Status::InvalidDeviceFunction;
  const auto& k = it->second;
  params.clear();
  param_bytes = k.param_bytes;
  for (const auto& p : k.params) {
    params.push_back({p.offset, p.size});
    param_bytes = std::max(param_bytes, p.offset + p.size);
  }
  out = std::make_unique<SimKernel>(m, k, m.settings(name));
  return Status::Success;
}

Status SimBackend::global_get(BackendModule& mod, int device, const std::string& name, DeviceAddress& address,
                              uint64_t& size, bool& managed) {
  if (Status st = usable(device); st != Status::Success) return st;
  return module(mod).variable(device, name, address, size, managed);
}

Status SimBackend::launch(BackendStream& s, BackendKernel& kernel, const LaunchDesc& d,
                          std::span<const std::byte> params) {
  return launch_one(s, kernel, d, params, 0);
}

// As the cuda backend: not on a partition's stream (there each launch goes alone).
Status SimBackend::launch_batch(BackendStream& s, std::span<const BatchedLaunch> launches, size_t& launched) {
  launched = 0;
  if (stream(s).partition() != nullptr) return Status::NotSupported;
  for (const BatchedLaunch& l : launches) {
    if (Status st = launch_one(s, *l.kernel, l.desc, l.params, static_cast<uint32_t>(launches.size()));
        st != Status::Success)
      return st;
    ++launched;
  }
  return Status::Success;
}

Status SimBackend::launch_one(BackendStream& s, BackendKernel& kernel, const LaunchDesc& d,
                              std::span<const std::byte> params, uint32_t batch) {
  if (Status st = usable(s.device()); st != Status::Success) return st;
  auto& k = static_cast<SimKernel&>(kernel);
  const uint64_t threads = uint64_t{d.block[0]} * d.block[1] * d.block[2];
  if (d.grid[0] == 0 || d.grid[1] == 0 || d.grid[2] == 0 || threads == 0 || threads > kMaxThreadsPerBlock ||
      d.block[0] > 1024 || d.block[1] > 1024 || d.block[2] > 64 || d.grid[0] > 2147483647u || d.grid[1] > 65535 ||
      d.grid[2] > 65535)
    return Status::InvalidConfiguration;
  uint64_t max_dynamic = 0;
  {
    std::lock_guard lk(k.settings->m);
    max_dynamic = k.settings->max_dynamic_shared;
  }
  if (d.shared_bytes > max_dynamic) return Status::InvalidValue;
  const SimPartition* part = stream(s).partition();
  const uint32_t sms = part != nullptr ? part->sm_count() : kMultiprocessors;
  if (d.cooperative) {
    int per_sm = 0;
    occupancy(kernel, s.device(), static_cast<uint32_t>(threads), d.shared_bytes, 0, per_sm);
    if (uint64_t{d.grid[0]} * d.grid[1] * d.grid[2] > uint64_t(per_sm) * sms) return Status::CooperativeLaunchTooLarge;
  }
  SimLaunchRecord r;
  r.kernel = k.info.name;
  r.sms = sms;
  r.priority = d.priority != 0 ? std::clamp(d.priority, kGreatestPriority, kLeastPriority) : stream(s).priority();
  if (part != nullptr) r.sm_groups = part->groups();
  std::copy(std::begin(d.grid), std::end(d.grid), r.grid);
  std::copy(std::begin(d.block), std::end(d.block), r.block);
  r.shared_bytes = d.shared_bytes;
  r.batch = batch;
  r.params.resize(params.size());
  if (!params.empty()) std::memcpy(r.params.data(), params.data(), params.size());
  const bool faults = !options_.fault_kernel.empty() && r.kernel == options_.fault_kernel;
  stream(s).enqueue([this, r = std::move(r), faults, device = s.device()]() mutable {
    record_launch(std::move(r));
    // FUNNEL_SIM_FAULT_KERNEL: the "kernel" touched an illegal address; the device is
    // poisoned before anything later in this stream completes.
    if (faults) faulted_[static_cast<size_t>(device)].store(true, std::memory_order_release);
  });
  return Status::Success;
}

// Runs on the stream thread, in stream order.
void SimBackend::record_launch(SimLaunchRecord r) {
  if (log_.is_open()) {
    const nlohmann::json line = {{"kernel", r.kernel},
                                 {"grid", {r.grid[0], r.grid[1], r.grid[2]}},
                                 {"block", {r.block[0], r.block[1], r.block[2]}},
                                 {"shared", r.shared_bytes},
                                 {"sms", r.sms},
                                 {"priority", r.priority},
                                 {"sm_groups", r.sm_groups},
                                 {"batch", r.batch},
                                 {"params", hex(std::as_bytes(std::span(r.params)))}};
    std::lock_guard lk(log_m_);
    log_ << line.dump() << '\n';
    log_.flush();
  }
  std::lock_guard lk(launch_m_);
  launches_.push_back(std::move(r));
  if (launches_.size() > kMaxLaunchRecords) launches_.pop_front();
}

// From the cubin: registers, static shared and local memory; the rest as the sim
// device defines it.  preferred_shmem_carveout is -1 (as CUDA's default) until set,
// which the 7-bit packing carries as 127.
Status SimBackend::func_attributes(BackendKernel& kernel, int device, ipc::FuncAttributes& out) {
  if (!valid(device)) return Status::InvalidDevice;
  auto& k = static_cast<SimKernel&>(kernel);
  out = ipc::FuncAttributes{};
  out.shared_size_bytes = k.info.shared_bytes;
  out.const_size_bytes = k.module.const_bytes;
  out.local_size_bytes = k.info.local_bytes;
  out.num_regs = k.info.num_regs;
  const uint32_t warps = kRegistersPerSm / registers_per_warp(k.info.num_regs);
  out.max_threads_per_block = std::min(kMaxThreadsPerBlock, warps * 32);
  out.ptx_version = static_cast<uint32_t>(k.module.sm_arch);
  out.binary_version = static_cast<uint32_t>(k.module.sm_arch);
  std::lock_guard lk(k.settings->m);
  out.max_dynamic_shared_size_bytes = static_cast<uint32_t>(k.settings->max_dynamic_shared);
  out.preferred_shmem_carveout = static_cast<uint32_t>(k.settings->carveout);
  out.non_portable_cluster_size_allowed = k.settings->non_portable_cluster ? 1 : 0;
  out.cluster_scheduling_policy_preference = k.settings->scheduling_policy;
  return Status::Success;
}

Status SimBackend::func_set_attribute(BackendKernel& kernel, int device, uint32_t attribute, int32_t value) {
  if (!valid(device)) return Status::InvalidDevice;
  auto& k = static_cast<SimKernel&>(kernel);
  std::lock_guard lk(k.settings->m);
  switch (attribute) {
    case 8:  // cudaFuncAttributeMaxDynamicSharedMemorySize
      if (value < 0 || static_cast<uint64_t>(value) + k.info.shared_bytes > kSharedPerBlockOptin) return Status::InvalidValue;
      k.settings->max_dynamic_shared = static_cast<uint64_t>(value);
      return Status::Success;
    case 9:  // cudaFuncAttributePreferredSharedMemoryCarveout
      if (value < -1 || value > 100) return Status::InvalidValue;
      k.settings->carveout = value;
      return Status::Success;
    case 14:  // cudaFuncAttributeNonPortableClusterSizeAllowed
      k.settings->non_portable_cluster = value != 0;
      return Status::Success;
    case 15:  // cudaFuncAttributeClusterSchedulingPolicyPreference
      if (value < 0 || value > 2) return Status::InvalidValue;
      k.settings->scheduling_policy = static_cast<uint32_t>(value);
      return Status::Success;
    case ipc::kFuncCacheConfig:
      if (value < 0 || value > 3) return Status::InvalidValue;
      k.settings->cache_config = value;
      return Status::Success;
    default:
      return Status::InvalidValue;
  }
}

// Blocks per multiprocessor: the least of the thread, block, register and shared
// memory limits of the sim device (registers per warp in units of 256, 1 KiB of
// shared memory reserved per block), as the CUDA occupancy calculator computes them.
Status SimBackend::occupancy(BackendKernel& kernel, int device, uint32_t block_size, uint64_t dynamic_shared_bytes,
                             uint32_t, int& blocks_per_sm) {
  if (!valid(device)) return Status::InvalidDevice;
  if (block_size == 0) return Status::InvalidValue;
  auto& k = static_cast<SimKernel&>(kernel);
  blocks_per_sm = 0;
  const uint64_t shared = k.info.shared_bytes + dynamic_shared_bytes;
  if (block_size > kMaxThreadsPerBlock || shared > kSharedPerBlockOptin) return Status::Success;
  const uint32_t warps = (block_size + 31) / 32;
  uint64_t blocks = std::min(kMaxThreadsPerSm / (warps * 32), kMaxBlocksPerSm);
  blocks = std::min<uint64_t>(blocks, kRegistersPerSm / registers_per_warp(k.info.num_regs) / warps);
  if (shared > 0) blocks = std::min<uint64_t>(blocks, kSharedPerSm / (shared + kReservedSharedPerBlock));
  blocks_per_sm = static_cast<int>(blocks);
  return Status::Success;
}

// The shared memory left per block when blocks_per_sm blocks share a multiprocessor,
// within the per-block opt-in limit, less the kernel's static shared memory.
Status SimBackend::available_dynamic_smem(BackendKernel& kernel, int device, uint32_t blocks_per_sm,
                                          uint32_t block_size, uint64_t& bytes) {
  if (!valid(device)) return Status::InvalidDevice;
  if (blocks_per_sm == 0 || block_size == 0 || block_size > kMaxThreadsPerBlock) return Status::InvalidValue;
  auto& k = static_cast<SimKernel&>(kernel);
  bytes = 0;
  const uint64_t per_block = kSharedPerSm / blocks_per_sm;
  if (per_block <= kReservedSharedPerBlock + k.info.shared_bytes) return Status::Success;
  bytes = std::min(per_block - kReservedSharedPerBlock, kSharedPerBlockOptin) - k.info.shared_bytes;
  return Status::Success;
}

// Blocks of a launch's shape per multiprocessor (occupancy of its block and shared memory).
Status SimBackend::launch_occupancy(BackendKernel& kernel, int device, const LaunchDesc& d, int& per_sm) {
  const uint64_t threads = uint64_t{d.block[0]} * d.block[1] * d.block[2];
  return occupancy(kernel, device, static_cast<uint32_t>(std::min<uint64_t>(threads, 0xffffffffu)), d.shared_bytes, 0,
                   per_sm);
}

// Clusters of the launch's cluster shape that fit at once: the blocks per multiprocessor
// over the whole sim device, in whole clusters (the sim has no GPC structure).
Status SimBackend::max_active_clusters(BackendKernel& kernel, int device, const LaunchDesc& d, int& clusters) {
  if (!valid(device)) return Status::InvalidDevice;
  const uint64_t cluster = uint64_t{std::max(d.cluster[0], 1u)} * std::max(d.cluster[1], 1u) * std::max(d.cluster[2], 1u);
  if (cluster > 16) return Status::InvalidValue;
  int per_sm = 0;
  if (Status st = launch_occupancy(kernel, device, d, per_sm); st != Status::Success) return st;
  clusters = static_cast<int>(uint64_t(per_sm) * kMultiprocessors / cluster);
  return Status::Success;
}

// The portable cluster size (8 blocks) when the kernel has room for a cluster of its blocks on one
// multiprocessor's worth of the device; the sim has no GPC structure to say more.
Status SimBackend::max_cluster_size(BackendKernel& kernel, int device, const LaunchDesc& d, int& size) {
  if (!valid(device)) return Status::InvalidDevice;
  int per_sm = 0;
  if (Status st = launch_occupancy(kernel, device, d, per_sm); st != Status::Success) return st;
  size = per_sm > 0 ? 8 : 0;
  return Status::Success;
}

// A stand-in for the driver's encoding (its format is NVIDIA's): the arguments packed as they
// come, so that a test sees every one of them reach the server.  Rejects what the driver's
// documentation says it rejects among the simple cases: a global address not 16-byte aligned,
// a dimension or box of 0, a box over 256.
Status SimBackend::tensor_map_encode(int device, const ipc::TensorMapCmd& c,
                                     std::array<std::byte, ipc::kTensorMapBytes>& map) {
  if (!valid(device)) return Status::InvalidDevice;
  if (c.global_address % 16 != 0) return Status::InvalidValue;
  for (uint32_t i = 0; i < c.rank; ++i)
    if (c.global_dim[i] == 0 || c.box_dim[i] == 0 || c.box_dim[i] > 256 || c.element_strides[i] == 0)
      return Status::InvalidValue;
  std::byte* p = map.data();
  const auto put = [&p](const void* v, size_t n) {
    std::memcpy(p, v, n);
    p += n;
  };
  put(&c.global_address, sizeof c.global_address);
  put(c.global_dim, sizeof c.global_dim);
  put(c.global_strides, sizeof c.global_strides);
  put(c.box_dim, sizeof c.box_dim);
  put(c.element_strides, sizeof c.element_strides);
  for (uint32_t v : {c.data_type, c.rank, c.interleave, c.swizzle, c.l2_promotion, c.oob_fill}) {
    const auto b = static_cast<uint8_t>(v);
    put(&b, 1);
  }
  return Status::Success;
}

}  // namespace funnel::server::sim
