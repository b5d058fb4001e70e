// IPC memory handles of both fronts: ipc_memory.hpp.
#include "ipc_memory.hpp"

#include <cstring>
#include <memory>
#include <optional>

#include "api.hpp"

namespace funnel::client {

namespace {

// What a funnel handle holds (cudaIpcMemHandle_t's 64 bytes).
struct HandleData {
  char magic[8];     // kMagic
  uint64_t token;    // the server's export
  uint64_t base;     // the allocation
  uint64_t size;
  uint64_t offset;   // of the pointer the handle was made for, in the allocation
  int32_t device;
  uint32_t owner;    // the exporting client's id
  uint64_t reserved[2];
};
static_assert(sizeof(HandleData) == sizeof(cudaIpcMemHandle_t));
constexpr char kMagic[8] = {'f', 'u', 'n', 'n', 'e', 'l', 'M', '1'};

struct EventHandleData {
  char magic[8];  // kEventMagic
  uint64_t token;
  uint32_t owner;
  uint32_t reserved[11];
};
static_assert(sizeof(EventHandleData) == sizeof(cudaIpcEventHandle_t));
constexpr char kEventMagic[8] = {'f', 'u', 'n', 'n', 'e', 'l', 'E', '1'};

}  // namespace

cudaError_t ipc_get_mem_handle(cudaIpcMemHandle_t* handle, void* ptr) {
  if (handle == nullptr || ptr == nullptr) return cudaErrorInvalidValue;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  const Classified c = rt.tables.classify(ptr);
  if (c.kind != Classified::Device) return cudaErrorInvalidValue;
  const ipc::AddressCmd cmd{reinterpret_cast<uint64_t>(ptr)};
  Reply r;
  if (cudaError_t e = to_cuda(rt.call(Opcode::IpcExport, c.device, 0, &cmd, sizeof cmd, &r)); e != cudaSuccess)
    return e;
  HandleData d{};
  std::memcpy(d.magic, kMagic, sizeof kMagic);
  d.token = r.value[0];
  d.base = r.value[1];
  d.size = r.value[2];
  d.offset = reinterpret_cast<uint64_t>(ptr) - d.base;
  d.device = c.device;
  d.owner = rt.view().header().client_id;
  std::memcpy(handle, &d, sizeof d);
  return cudaSuccess;
}

cudaError_t ipc_open_mem_handle(void** ptr, const cudaIpcMemHandle_t& handle, unsigned flags) {
  if (ptr == nullptr || (flags & ~unsigned{cudaIpcMemLazyEnablePeerAccess}) != 0) return cudaErrorInvalidValue;
  *ptr = nullptr;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  HandleData d;
  std::memcpy(&d, &handle, sizeof d);
  if (std::memcmp(d.magic, kMagic, sizeof kMagic) != 0) {
    log_error("funnel: cudaIpcOpenMemHandle: the handle was not made by funnel (its process did not run through "
              "funnel-run or funnel's MPI hooks): refused");
    return cudaErrorInvalidResourceHandle;
  }
  if (d.owner == rt.view().header().client_id) return cudaErrorDeviceUninitialized;  // CUDA_ERROR_INVALID_CONTEXT, as CUDA in its own process
  const ipc::IpcOpenCmd cmd{d.token};
  Reply r;
  const cudaError_t e = to_cuda(rt.call(Opcode::IpcOpen, 0, 0, &cmd, sizeof cmd, &r));
  if (e == cudaErrorInvalidResourceHandle) {
    log_error("funnel: cudaIpcOpenMemHandle: the handle is not one of this funnel-server's exports (it was made by a "
              "process of another node or job, or its memory was freed since): refused");
    return e;
  }
  if (e != cudaSuccess) return e;
  const uint64_t base = r.value[0], size = r.value[1];
  // The server's ordinal of the memory's device, as this process numbers its devices.
  const int device = rt.client_device(static_cast<int>(r.value[2]));
  if (d.offset >= size || base != d.base || device < 0) {
    const ipc::AddressCmd close{base};
    (void)rt.call(Opcode::IpcClose, 0, 0, &close, sizeof close);
    if (device < 0)
      log_error("funnel: cudaIpcOpenMemHandle: the memory is on a GPU this process does not use (FUNNEL_GPU_MAP, "
                "FUNNEL_RANKS_PER_GPU): refused");
    return device < 0 ? cudaErrorInvalidDevice : cudaErrorInvalidValue;
  }
  const Classified c = rt.tables.classify(reinterpret_cast<void*>(base));
  const bool opened_before = c.kind == Classified::Device && c.base == base;
  if (!opened_before && !rt.tables.add_alloc(base, DeviceAlloc{size, device, false, false, true})) {
    log_error(fmt::format("funnel: cudaIpcOpenMemHandle: the memory's address {:#x} is in use in this process",
                          base));
    const ipc::AddressCmd close{base};
    (void)rt.call(Opcode::IpcClose, 0, 0, &close, sizeof close);
    return cudaErrorMapBufferObjectFailed;
  }
  *ptr = reinterpret_cast<void*>(base + d.offset);
  return cudaSuccess;
}

cudaError_t ipc_close_mem_handle(void* ptr) {
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  const Classified c = rt.tables.classify(ptr);
  if (c.kind != Classified::Device) return cudaErrorInvalidValue;
  const std::optional<DeviceAlloc> a = rt.tables.remove_alloc(c.base, false, true);
  if (!a) return cudaErrorInvalidValue;
  const ipc::AddressCmd cmd{c.base};
  return to_cuda(rt.call(Opcode::IpcClose, 0, 0, &cmd, sizeof cmd));
}

cudaError_t ipc_get_event_handle(cudaIpcEventHandle_t* handle, cudaEvent_t event) {
  if (handle == nullptr) return cudaErrorInvalidValue;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  const std::optional<EventRef> ev = rt.tables.use_event(reinterpret_cast<EventObj*>(event), EventUse::Plain);
  if (!ev) return cudaErrorInvalidResourceHandle;
  if ((ev->flags & cudaEventInterprocess) == 0) return cudaErrorInvalidResourceHandle;
  const ipc::EventCmd cmd{ev->id, 0, 0};
  Reply r;
  if (cudaError_t e = to_cuda(rt.call(Opcode::IpcExportEvent, ev->device, 0, &cmd, sizeof cmd, &r)); e != cudaSuccess)
    return e;
  EventHandleData d{};
  std::memcpy(d.magic, kEventMagic, sizeof kEventMagic);
  d.token = r.value[0];
  d.owner = rt.view().header().client_id;
  std::memcpy(handle, &d, sizeof d);
  return cudaSuccess;
}

cudaError_t ipc_open_event_handle(cudaEvent_t* event, const cudaIpcEventHandle_t& handle) {
  if (event == nullptr) return cudaErrorInvalidValue;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  EventHandleData d;
  std::memcpy(&d, &handle, sizeof d);
  if (std::memcmp(d.magic, kEventMagic, sizeof kEventMagic) != 0) {
    log_error("funnel: cudaIpcOpenEventHandle: the handle was not made by funnel (its process did not run through "
              "funnel-run or funnel's MPI hooks): refused");
    return cudaErrorInvalidResourceHandle;
  }
  if (d.owner == rt.view().header().client_id) return cudaErrorDeviceUninitialized;
  const uint64_t id = rt.next_event_id.fetch_add(1);
  const ipc::IpcOpenEventCmd cmd{d.token, id};
  Reply r;
  const cudaError_t e = to_cuda(rt.call(Opcode::IpcOpenEvent, 0, 0, &cmd, sizeof cmd, &r));
  if (e == cudaErrorInvalidResourceHandle)
    log_error("funnel: cudaIpcOpenEventHandle: the handle is not one of this funnel-server's (it was made by a "
              "process of another node or job, or its event was destroyed since): refused");
  if (e != cudaSuccess) return e;
  const int device = rt.client_device(static_cast<int>(r.value[0]));
  auto ev = std::make_unique<EventObj>(id, device < 0 ? 0 : device, cudaEventDisableTiming | cudaEventInterprocess);
  ev->imported = true;
  *event = reinterpret_cast<cudaEvent_t>(rt.tables.add_event(std::move(ev)));
  return cudaSuccess;
}

}  // namespace funnel::client
