// Events of both fronts: events.hpp. Ids are chosen here, so creation, record and destroy are
// one-way.
#include "events.hpp"

#include "graphs.hpp"

#include <bit>
#include <memory>
#include <optional>

namespace funnel::client {

using ipc::EventCmd;

constexpr unsigned kKnownEventFlags = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;

cudaError_t create_event(cudaEvent_t* out, unsigned flags) {
  if (out == nullptr || (flags & ~kKnownEventFlags) != 0) return cudaErrorInvalidValue;
  // An interprocess event (ipc_memory.hpp) has no timing, as CUDA requires.
  if ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0) return cudaErrorInvalidValue;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  auto ev = std::make_unique<EventObj>(rt.next_event_id.fetch_add(1), current_device(), flags);
  ev->state_slot = rt.tables.acquire_event_slot(rt.view().header().event_slots);
  funnel::ipc::EventCreateCmd c{
      ev->id, flags & (funnel::ipc::kEventBlockingSync | funnel::ipc::kEventDisableTiming | funnel::ipc::kEventInterprocess),
      0};
  if (cudaError_t e = to_cuda(rt.post(Opcode::EventCreate, ev->device, 0, &c, sizeof c)); e != cudaSuccess) {
    rt.tables.release_event_slot(ev->state_slot);
    return e;
  }
  *out = reinterpret_cast<cudaEvent_t>(rt.tables.add_event(std::move(ev)));
  return cudaSuccess;
}

// What a call needs of an event, copied under the tables' lock (ClientTables::use_event);
// false for an unknown handle.
static bool lookup(cudaEvent_t event, EventRef& out, EventUse use = EventUse::Plain) {
  const std::optional<EventRef> ref = Runtime::get().tables.use_event(reinterpret_cast<EventObj*>(event), use);
  if (!ref) return false;
  out = *ref;
  return true;
}

cudaError_t record_event(cudaEvent_t event, cudaStream_t stream, unsigned flags, bool ptds) {
  StreamRef ref;
  if (cudaError_t e = resolve_stream(stream, ptds, ref); e != cudaSuccess) return e;
  if (ref.capturing()) return capture_record(ref, event, flags);
  if ((flags & ~unsigned{cudaEventRecordExternal}) != 0) return cudaErrorInvalidValue;
  EventRef ev;
  if (!lookup(event, ev, EventUse::Record)) return cudaErrorInvalidResourceHandle;
  forget_event_mark(event);  // recorded anew: no longer a place in a capture
  flags = 0;                 // cudaEventRecordExternal means something only in a capture
  funnel::ipc::EventRecordCmd c{ev.id, flags, ev.slot, ev.generation, 0};
  // Without timing, nothing tells a record on an idle stream of a complete event from none
  // (doc/design/channel.md, "Records on idle streams"); the server still checks the rest.
  // (Another process can tell for an interprocess event.)
  const bool quiet = flags == 0 && (ev.flags & cudaEventDisableTiming) != 0 && (ev.flags & cudaEventInterprocess) == 0 &&
                     ev.device == ref.device && ref.id != 0;
  return to_cuda(Runtime::get().record_event(*reinterpret_cast<EventObj*>(event), ref.device, ref.id, ref.blocking,
                                             quiet, &c, sizeof c));
}

// Whether the GPU already stored the event's last record generation (wrapping compare:
// a late store of an older record, even of an earlier event of the slot, is not newer).
static bool completed_locally(const EventRef& ev) {
  if (ev.slot == funnel::ipc::kNoEventSlot || ev.generation == 0) return false;
  const uint32_t seen = Runtime::get().view().event_state(ev.slot).load(std::memory_order_acquire);
  return funnel::ipc::generation_reached(seen, ev.generation);
}

// cudaEventSynchronize / cudaEventQuery.  A completed event is seen in the channel's
// event state word without a round trip; otherwise the server answers (it also reports
// a failed stream, whose store never comes).  Synchronize does not poll the word: the
// server sees the event complete sooner than the GPU's store lands (tests/gpu/backend_smoke
// prints both latencies).
cudaError_t event_call(cudaEvent_t event, Opcode op) {
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  EventRef ev;
  if (!lookup(event, ev, op == Opcode::EventQuery ? EventUse::Query : EventUse::Plain))
    return cudaErrorInvalidResourceHandle;
  Runtime& rt = Runtime::get();
  auto& obj = *reinterpret_cast<EventObj*>(event);
  if (!obj.imported && (obj.known_complete() || completed_locally(ev))) {
    if (cudaError_t e = attach(); e != cudaSuccess) return e;  // sticky error or server gone
    return to_cuda(rt.take_deferred());
  }
  // What was recorded before this call, the server's Success covers.
  const uint64_t written = obj.written.load(std::memory_order_acquire);
  EventCmd c{ev.id, 0, 0};
  const Status s = rt.call(op, ev.device, 0, &c, sizeof c);
  if (s == Status::Success) obj.mark_completed(written);
  return to_cuda(s);
}

cudaError_t elapsed_time(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return cudaErrorInvalidValue;
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  EventRef a, b;
  if (!lookup(start, a) || !lookup(end, b)) return cudaErrorInvalidResourceHandle;
  ipc::EventPairCmd c{a.id, b.id};
  Reply r;
  const cudaError_t e = to_cuda(Runtime::get().call(Opcode::EventElapsedTime, a.device, 0, &c, sizeof c, &r));
  if (e == cudaSuccess) *ms = std::bit_cast<float>(static_cast<uint32_t>(r.value[0]));
  return e;
}

cudaError_t destroy_event(cudaEvent_t event) {
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  const std::unique_ptr<EventObj> ev = rt.tables.remove_event(reinterpret_cast<EventObj*>(event));
  if (!ev) return cudaErrorInvalidResourceHandle;
  forget_event_mark(event);
  EventCmd c{ev->id, 0, 0};
  const int dev = ev->device;
  return to_cuda(rt.post(Opcode::EventDestroy, dev, 0, &c, sizeof c));
}

}  // namespace funnel::client
