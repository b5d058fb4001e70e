// The cuda backend's SM partitions: the split of each device's SMs into groups, and green
// contexts over some of them (partitions.hpp).
// As in driver.cpp: GCC 12/13's false -Warray-bounds in fmt 9 (spdlog), before the includes.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
#include <algorithm>
#include <mutex>
#include <vector>

#include <spdlog/spdlog.h>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/partitions.hpp"

namespace funnel::server::cuda {

// The split at the hardware's granularity (minSmPartitionSize: 8 SMs on an H100), with
// the SM co-scheduling guarantees kept (thread block clusters still fit).
Status CudaBackend::sm_groups(int device, SmGroups& out) {
  if (device < 0 || device >= device_count()) return Status::InvalidDevice;
  Device& dev = s_->devices[static_cast<size_t>(device)];
  std::call_once(dev.split_once, [&] {
    const Driver& d = s_->drv;
    CUdevResource all{};
    dev.split_status = FUNNEL_CU(d, cuDeviceGetDevResource, dev.handle, &all, CU_DEV_RESOURCE_TYPE_SM);
    if (!ok(dev.split_status)) return;
    const unsigned granularity = std::max(1u, all.sm.minSmPartitionSize);
    unsigned n = 0;
    dev.split_status = FUNNEL_CU(d, cuDevSmResourceSplitByCount, nullptr, &n, &all, nullptr, 0u, granularity);
    if (!ok(dev.split_status)) return;
    dev.groups.resize(n);
    CUdevResource rest{};
    dev.split_status =
        FUNNEL_CU(d, cuDevSmResourceSplitByCount, dev.groups.data(), &n, &all, &rest, 0u, granularity);
    if (!ok(dev.split_status)) return;
    dev.groups.resize(n);
    dev.layout.device_sms = all.sm.smCount;
    dev.layout.group_sms = n > 0 ? dev.groups[0].sm.smCount : granularity;
    dev.layout.groups = n;
    spdlog::info("cuda: device {} has {} SMs: {} groups of {} for partitions, {} left over", dev.ordinal,
                 all.sm.smCount, n, dev.layout.group_sms, rest.sm.smCount);
  });
  if (ok(dev.split_status)) out = dev.layout;
  return dev.split_status;
}

Status CudaBackend::create_partition(int device, std::span<const uint32_t> groups,
                                     std::shared_ptr<BackendPartition>& out) {
  SmGroups layout;
  if (Status st = sm_groups(device, layout); !ok(st)) return st;
  if (groups.empty()) return Status::InvalidValue;
  Device& dev = s_->devices[static_cast<size_t>(device)];
  std::vector<CUdevResource> picked;
  uint32_t sms = 0;
  for (uint32_t g : groups) {
    if (g >= dev.groups.size()) return Status::InvalidValue;
    picked.push_back(dev.groups[g]);
    sms += dev.groups[g].sm.smCount;
  }
  if (Status st = s_->bind(device); !ok(st)) return st;  // green contexts retain the primary one
  CUdevResourceDesc desc{};
  if (Status st = FUNNEL_CU(s_->drv, cuDevResourceGenerateDesc, &desc, picked.data(),
                            static_cast<unsigned>(picked.size()));
      !ok(st))
    return st;
  CUgreenCtx gc = nullptr;
  if (Status st = FUNNEL_CU(s_->drv, cuGreenCtxCreate, &gc, desc, dev.handle, CU_GREEN_CTX_DEFAULT_STREAM); !ok(st))
    return st;
  out = std::make_shared<CudaPartition>(s_, device, gc, sms);
  return Status::Success;
}

}  // namespace funnel::server::cuda
