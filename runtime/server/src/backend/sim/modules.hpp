// The sim backend's modules and kernels: a fat binary read with funnel::fatbin stands in for
// a CUlibrary; kernels are not executed (SimBackend::launch records them).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "backend/sim/device_model.hpp"
#include "funnel/fatbin/fatbin.hpp"
#include "funnel/server/backend.hpp"

namespace funnel::server::sim {

// What cudaFuncSetAttribute changed for one kernel of one module: every SimKernel of
// that name shares it, as every client of a shared CUlibrary shares its CUkernel.
struct KernelSettings {
  std::mutex m;
  uint64_t max_dynamic_shared = 0;
  int32_t carveout = -1;
  int32_t cache_config = 0;
  bool non_portable_cluster = false;
  uint32_t scheduling_policy = 0;
};

struct HostBlock {
  void operator()(void* p) const noexcept { std::free(p); }
};

// A fat binary read with funnel::fatbin: the kernels and variables of its best cubin
// (sm_90 if present, else the highest), and host memory for each variable per device.
class SimModule final : public BackendModule {
 public:
  int sm_arch = 0;
  std::map<std::string, fatbin::KernelInfo> kernels;
  std::map<std::string, fatbin::GlobalInfo> globals;
  uint64_t const_bytes = 0;  // all __constant__ variables

  std::shared_ptr<KernelSettings> settings(const std::string& kernel) {
    std::lock_guard lk(m_);
    auto& s = settings_[kernel];
    if (!s) {
      s = std::make_shared<KernelSettings>();
      s->max_dynamic_shared = kSharedPerBlockDefault - std::min(kSharedPerBlockDefault, kernels.at(kernel).shared_bytes);
    }
    return s;
  }

  // The variable's memory on `device`, created (with its initial bytes) on first use.
  Status variable(int device, const std::string& name, DeviceAddress& address, uint64_t& size, bool& managed) {
    auto g = globals.find(name);
    if (g == globals.end()) return Status::SymbolNotFound;
    managed = g->second.managed;
    std::lock_guard lk(m_);
    auto& block = memory_[{device, name}];
    if (!block) {
      const uint64_t bytes = std::max<uint64_t>(1, (g->second.size + kAlign - 1) / kAlign * kAlign);
      block.reset(std::aligned_alloc(kAlign, bytes));
      if (!block) return Status::MemoryAllocation;
      std::memset(block.get(), 0, bytes);
      if (!g->second.init.empty()) std::memcpy(block.get(), g->second.init.data(), g->second.init.size());
    }
    address = reinterpret_cast<uint64_t>(block.get());
    size = g->second.size;
    return Status::Success;
  }

 private:
  std::mutex m_;
  std::map<std::string, std::shared_ptr<KernelSettings>> settings_;
  std::map<std::pair<int, std::string>, std::unique_ptr<void, HostBlock>> memory_;
};

class SimKernel final : public BackendKernel {
 public:
  SimKernel(const SimModule& m, const fatbin::KernelInfo& k, std::shared_ptr<KernelSettings> s)
      : module(m), info(k), settings(std::move(s)) {}
  const SimModule& module;
  const fatbin::KernelInfo& info;
  std::shared_ptr<KernelSettings> settings;
};

}  // namespace funnel::server::sim
