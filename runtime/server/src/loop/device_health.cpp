#include "loop/device_health.hpp"

namespace funnel::server {

DeviceHealth::State DeviceHealth::state(int device) const noexcept {
  if (!valid(device)) return {};
  const Entry& e = devices_[static_cast<size_t>(device)];
  State s;
  s.fault = static_cast<ipc::Status>(e.fault.load(std::memory_order_acquire));
  s.generation = e.generation.load(std::memory_order_acquire);
  s.first_observer = e.first_observer.load(std::memory_order_acquire);
  return s;
}

bool DeviceHealth::report(int device, ipc::Status status, uint32_t client) noexcept {
  if (!valid(device) || !ipc::is_sticky(status)) return false;
  Entry& e = devices_[static_cast<size_t>(device)];
  int32_t healthy = 0;
  if (!e.fault.compare_exchange_strong(healthy, static_cast<int32_t>(status), std::memory_order_acq_rel)) return false;
  // A reader that sees the fault before the generation re-reads both at the epoch bump below.
  e.first_observer.store(client, std::memory_order_release);
  e.generation.fetch_add(1, std::memory_order_acq_rel);
  epoch_.fetch_add(1, std::memory_order_acq_rel);
  return true;
}

void DeviceHealth::recovered(int device) noexcept {
  if (!valid(device)) return;
  Entry& e = devices_[static_cast<size_t>(device)];
  e.fault.store(0, std::memory_order_release);
  epoch_.fetch_add(1, std::memory_order_acq_rel);
  // Last: whoever sees the recovery counted (the stats verb) sees the epoch moved too.
  e.recoveries.fetch_add(1, std::memory_order_release);
}

uint64_t DeviceHealth::recoveries(int device) const noexcept {
  return valid(device) ? devices_[static_cast<size_t>(device)].recoveries.load(std::memory_order_acquire) : 0;
}

}  // namespace funnel::server
