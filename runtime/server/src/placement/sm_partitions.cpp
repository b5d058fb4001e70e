#include "placement/sm_partitions.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>

namespace funnel::server {

namespace {
// A group a disjoint client holds weighs this much for the shared placement: shared
// clients overlap it only when every group is held.
constexpr uint64_t kHeldWeight = uint64_t{1} << 32;
}  // namespace

struct SmPartitions::State {
  struct Device {
    bool known = false;
    SmGroups layout;
    std::vector<uint32_t> shared;  // shared clients per group
    std::vector<bool> held;        // held by a disjoint client
    uint32_t next = 0;             // where the next window search starts
    std::map<std::vector<uint32_t>, std::weak_ptr<BackendPartition>> made;
  };
  explicit State(Backend& b) : backend(b) {}
  Backend& backend;
  std::mutex m;
  std::array<Device, ipc::kMaxDevices> devices;
};

// A lease: the partition plus its groups, given back when the last holder lets go.
struct SmPartitions::Lease {
  std::weak_ptr<State> state;  // the manager may be gone first (server shutdown)
  std::shared_ptr<BackendPartition> partition;
  int device = 0;
  std::vector<uint32_t> groups;
  bool disjoint = false;
  ~Lease() {
    const auto st = state.lock();
    if (!st) return;
    std::lock_guard lk(st->m);
    auto& dev = st->devices[static_cast<size_t>(device)];
    for (uint32_t g : groups) {
      if (disjoint) {
        dev.held[g] = false;
      } else if (dev.shared[g] > 0) {
        --dev.shared[g];
      }
    }
  }
};

uint32_t groups_for_share(const SmGroups& layout, uint32_t share_bp) noexcept {
  if (layout.groups == 0 || layout.group_sms == 0) return 0;
  const uint64_t sms = uint64_t{layout.device_sms} * share_bp / ipc::kGpuShareWhole;
  const uint64_t n = sms / layout.group_sms;
  return static_cast<uint32_t>(std::clamp<uint64_t>(n, 1, layout.groups));
}

SmPartitions::SmPartitions(Backend& backend) : state_(std::make_shared<State>(backend)) {}
SmPartitions::~SmPartitions() = default;

std::vector<int> SmPartitions::group_use(int device) {
  std::lock_guard lk(state_->m);
  layout_locked(device);
  const auto& d = state_->devices[static_cast<size_t>(device)];
  std::vector<int> out(d.shared.size());
  for (size_t g = 0; g < out.size(); ++g) out[g] = d.held[g] ? -1 : static_cast<int>(d.shared[g]);
  return out;
}

const SmGroups& SmPartitions::layout_locked(int device) {
  if (device < 0 || static_cast<size_t>(device) >= ipc::kMaxDevices)
    throw std::runtime_error(fmt::format("no device {}", device));
  auto& d = state_->devices[static_cast<size_t>(device)];
  if (!d.known) {
    if (Status st = state_->backend.sm_groups(device, d.layout); st != Status::Success || d.layout.groups == 0)
      throw std::runtime_error(fmt::format(
          "GPU {} cannot be partitioned (status {}): unset FUNNEL_GPU_FRACTION / CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
          device, static_cast<int>(st)));
    d.shared.assign(d.layout.groups, 0);
    d.held.assign(d.layout.groups, false);
    d.known = true;
  }
  return d.layout;
}

uint32_t SmPartitions::sms_for_share(int device, uint32_t share_bp) {
  if (share_bp == 0 || share_bp >= ipc::kGpuShareWhole) return 0;
  std::lock_guard lk(state_->m);
  const SmGroups& l = layout_locked(device);
  const uint32_t sms = groups_for_share(l, share_bp) * l.group_sms;
  return sms >= l.device_sms ? 0 : sms;
}

std::shared_ptr<BackendPartition> SmPartitions::acquire(int device, uint32_t share_bp, ipc::GpuPlacement placement) {
  if (share_bp == 0 || share_bp >= ipc::kGpuShareWhole) return nullptr;
  std::lock_guard lk(state_->m);
  layout_locked(device);
  auto& d = state_->devices[static_cast<size_t>(device)];
  const uint32_t n = d.layout.groups;
  const uint32_t k = groups_for_share(d.layout, share_bp);
  if (k * d.layout.group_sms >= d.layout.device_sms) return nullptr;
  const bool disjoint = placement == ipc::GpuPlacement::Disjoint;
  auto eligible = [&](uint32_t g) { return !disjoint || !d.held[g]; };
  auto weight = [&](uint32_t g) { return d.shared[g] + (d.held[g] ? kHeldWeight : 0); };

  // The window of k consecutive groups (cyclic) of least weight, the first from `next`
  // on ties; if no window is all eligible, the k eligible groups of least weight.
  std::vector<uint32_t> pick;
  uint64_t best = UINT64_MAX;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t start = (d.next + i) % n;
    uint64_t w = 0;
    bool all = true;
    for (uint32_t j = 0; j < k && all; ++j) {
      all = eligible((start + j) % n);
      w += weight((start + j) % n);
    }
    if (all && w < best) {
      best = w;
      pick.clear();
      for (uint32_t j = 0; j < k; ++j) pick.push_back((start + j) % n);
    }
  }
  if (pick.empty()) {
    std::vector<uint32_t> order;
    for (uint32_t i = 0; i < n; ++i)
      if (eligible((d.next + i) % n)) order.push_back((d.next + i) % n);
    if (order.size() < k) {
      const auto held = static_cast<uint32_t>(std::count(d.held.begin(), d.held.end(), true));
      throw PartitionUnavailable(fmt::format(
          "FUNNEL_GPU_PLACEMENT=disjoint: this client asks {} SMs of GPU {} ({} groups of {}), but other disjoint "
          "clients hold {} of its {} groups and {} are free; lower FUNNEL_GPU_FRACTION (or "
          "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), run fewer ranks per GPU, or use FUNNEL_GPU_PLACEMENT=shared",
          k * d.layout.group_sms, device, k, d.layout.group_sms, held, n, order.size()));
    }
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return weight(a) < weight(b); });
    pick.assign(order.begin(), order.begin() + k);
  }
  std::vector<uint32_t> key = pick;
  std::sort(key.begin(), key.end());

  std::shared_ptr<BackendPartition> part = d.made[key].lock();
  if (!part) {
    if (Status st = state_->backend.create_partition(device, key, part); st != Status::Success || !part)
      throw std::runtime_error(fmt::format("cannot make a partition of {} SMs on GPU {} (status {})",
                                           k * d.layout.group_sms, device, static_cast<int>(st)));
    d.made[key] = part;
  }
  for (uint32_t g : key) {
    if (disjoint) {
      d.held[g] = true;
    } else {
      ++d.shared[g];
    }
  }
  d.next = (pick.back() + 1) % n;

  auto lease = std::make_shared<Lease>();
  lease->state = state_;
  lease->partition = part;
  lease->device = device;
  lease->groups = std::move(key);
  lease->disjoint = disjoint;
  BackendPartition* raw = part.get();
  return std::shared_ptr<BackendPartition>(std::move(lease), raw);
}

}  // namespace funnel::server
