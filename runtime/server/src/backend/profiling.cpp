// Backend::profiling: the device context's profiled range as the union of its clients' ranges.
#include "funnel/server/backend.hpp"

namespace funnel::server {

Status Backend::profiling(int device, bool start) {
  if (device < 0 || device >= device_count() || static_cast<uint32_t>(device) >= ipc::kMaxDevices)
    return Status::InvalidDevice;
  const std::lock_guard lock(profiling_m_);
  uint32_t& n = profiling_[static_cast<size_t>(device)];
  if (start) {
    if (n == 0) {
      if (Status st = set_profiling(device, true); st != Status::Success) return st;
    }
    ++n;
    return Status::Success;
  }
  if (n == 0) return Status::Success;  // stopped already: cuProfilerStop says so too
  if (n == 1) {
    if (Status st = set_profiling(device, false); st != Status::Success) return st;
  }
  --n;
  return Status::Success;
}

}  // namespace funnel::server
