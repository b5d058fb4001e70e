// Events.  Ids are chosen here, so creation, record and destroy are one-way.
#include <bit>

#include "api.hpp"

using namespace funnel::client;
using funnel::ipc::EventCmd;

namespace {

constexpr unsigned kKnownEventFlags = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;

cudaError_t create_event(cudaEvent_t* out, unsigned flags) {
  if (out == nullptr || (flags & ~kKnownEventFlags) != 0) return cudaErrorInvalidValue;
  if ((flags & cudaEventInterprocess) != 0) return cudaErrorNotSupported;  // IPC events: out of scope
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  auto* ev = new EventObj{rt.next_event_id.fetch_add(1), current_device(), flags};
  funnel::ipc::EventCreateCmd c{ev->id, flags & (funnel::ipc::kEventBlockingSync | funnel::ipc::kEventDisableTiming),
                                0};
  if (cudaError_t e = to_cuda(rt.post(Opcode::EventCreate, ev->device, 0, &c, sizeof c)); e != cudaSuccess) {
    delete ev;
    return e;
  }
  std::lock_guard lk(rt.tables_mu);
  rt.events.insert(ev);
  *out = reinterpret_cast<cudaEvent_t>(ev);
  return cudaSuccess;
}

// The event's id and device, or false for an unknown handle.
bool lookup(cudaEvent_t event, uint64_t& id, int& device) {
  Runtime& rt = Runtime::get();
  auto* ev = reinterpret_cast<EventObj*>(event);
  std::lock_guard lk(rt.tables_mu);
  if (!rt.events.contains(ev)) return false;
  id = ev->id;
  device = ev->device;
  return true;
}

cudaError_t record_event(cudaEvent_t event, cudaStream_t stream, unsigned flags, bool ptds) {
  StreamRef ref;
  if (cudaError_t e = resolve_stream(stream, ptds, ref); e != cudaSuccess) return e;
  uint64_t id = 0;
  int dev = 0;
  if (!lookup(event, id, dev)) return cudaErrorInvalidResourceHandle;
  EventCmd c{id, flags, 0};
  return to_cuda(Runtime::get().post(Opcode::EventRecord, ref.device, ref.id, &c, sizeof c));
}

cudaError_t event_call(cudaEvent_t event, Opcode op) {
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  uint64_t id = 0;
  int dev = 0;
  if (!lookup(event, id, dev)) return cudaErrorInvalidResourceHandle;
  EventCmd c{id, 0, 0};
  return to_cuda(Runtime::get().call(op, dev, 0, &c, sizeof c));
}

}  // namespace

FUNNEL_API cudaError_t cudaEventCreate(cudaEvent_t* e) {
  return guarded(__func__, [&] { return create_event(e, cudaEventDefault); });
}
FUNNEL_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  return guarded(__func__, [&] { return create_event(e, flags); });
}
FUNNEL_API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  return guarded(__func__, [&] { return record_event(e, s, 0, false); });
}
FUNNEL_API cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) {
  return guarded(__func__, [&] { return record_event(e, s, 0, true); });
}
FUNNEL_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int flags) {
  return guarded(__func__, [&] { return record_event(e, s, flags, false); });
}
FUNNEL_API cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t e, cudaStream_t s, unsigned int flags) {
  return guarded(__func__, [&] { return record_event(e, s, flags, true); });
}
FUNNEL_API cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  return guarded(__func__, [&] { return event_call(e, Opcode::EventSynchronize); });
}
FUNNEL_API cudaError_t cudaEventQuery(cudaEvent_t e) {
  return guarded(__func__, [&] { return event_call(e, Opcode::EventQuery); });
}

FUNNEL_API cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  return guarded(__func__, [&] {
    if (ms == nullptr) return cudaErrorInvalidValue;
    if (cudaError_t e = attach(); e != cudaSuccess) return e;
    uint64_t a = 0, b = 0;
    int da = 0, db = 0;
    if (!lookup(start, a, da) || !lookup(end, b, db)) return cudaErrorInvalidResourceHandle;
    funnel::ipc::EventPairCmd c{a, b};
    Reply r;
    const cudaError_t e = to_cuda(Runtime::get().call(Opcode::EventElapsedTime, da, 0, &c, sizeof c, &r));
    if (e == cudaSuccess) *ms = std::bit_cast<float>(static_cast<uint32_t>(r.value[0]));
    return e;
  });
}

FUNNEL_API cudaError_t cudaEventDestroy(cudaEvent_t event) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
    auto* ev = reinterpret_cast<EventObj*>(event);
    {
      std::lock_guard lk(rt.tables_mu);
      if (rt.events.erase(ev) == 0) return cudaErrorInvalidResourceHandle;
    }
    EventCmd c{ev->id, 0, 0};
    const int dev = ev->device;
    delete ev;
    return to_cuda(rt.post(Opcode::EventDestroy, dev, 0, &c, sizeof c));
  });
}
