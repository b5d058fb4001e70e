// Streams.  Ids are chosen here (nonzero, never reused), so creation is one-way.
#include "api.hpp"
#include "host_func.hpp"

using namespace funnel::client;

namespace {

cudaError_t create_stream(cudaStream_t* out, unsigned flags, int priority) {
  if (out == nullptr) return cudaErrorInvalidValue;
  if ((flags & ~unsigned{cudaStreamNonBlocking}) != 0) return cudaErrorInvalidValue;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  // Clamp to [greatest, least] = [-5, 0], as CUDA does.
  priority = std::min(0, std::max(-5, priority));
  auto* s = new StreamObj{rt.next_stream_id.fetch_add(1), current_device(), flags, priority};
  funnel::ipc::StreamCreateCmd c{s->id, flags & funnel::ipc::kStreamNonBlocking, priority};
  if (cudaError_t e = to_cuda(rt.post(Opcode::StreamCreate, s->device, 0, &c, sizeof c)); e != cudaSuccess) {
    delete s;
    return e;
  }
  {
    std::lock_guard lk(rt.tables_mu);
    rt.streams.insert(s);
  }
  *out = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}

cudaError_t stream_sync(cudaStream_t stream, bool ptds) {
  StreamRef ref;
  if (cudaError_t e = resolve_stream(stream, ptds, ref); e != cudaSuccess) return e;
  const uint64_t uses = hf_uses();
  const cudaError_t e = to_cuda(Runtime::get().call(Opcode::StreamSynchronize, ref.device, ref.id, nullptr, 0));
  if (e == cudaSuccess) hf_synchronized(ref.device, ref.id, uses);
  return e;
}

cudaError_t stream_query(cudaStream_t stream, bool ptds) {
  StreamRef ref;
  if (cudaError_t e = resolve_stream(stream, ptds, ref); e != cudaSuccess) return e;
  return to_cuda(Runtime::get().call(Opcode::StreamQuery, ref.device, ref.id, nullptr, 0));
}

cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags, bool ptds) {
  StreamRef ref;
  if (cudaError_t e = resolve_stream(stream, ptds, ref); e != cudaSuccess) return e;
  Runtime& rt = Runtime::get();
  auto* ev = reinterpret_cast<EventObj*>(event);
  {
    std::lock_guard lk(rt.tables_mu);
    if (!rt.events.contains(ev)) return cudaErrorInvalidResourceHandle;
  }
  funnel::ipc::EventCmd c{ev->id, flags, 0};
  return to_cuda(rt.post(Opcode::StreamWaitEvent, ref.device, ref.id, &c, sizeof c));
}

}  // namespace

FUNNEL_API cudaError_t cudaStreamCreate(cudaStream_t* s) {
  return guarded(__func__, [&] { return create_stream(s, cudaStreamDefault, 0); });
}
FUNNEL_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  return guarded(__func__, [&] { return create_stream(s, flags, 0); });
}
FUNNEL_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int priority) {
  return guarded(__func__, [&] { return create_stream(s, flags, priority); });
}

FUNNEL_API cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  return guarded(__func__, [&] {
    if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
      return cudaErrorInvalidResourceHandle;
    Runtime& rt = Runtime::get();
    if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
    auto* s = reinterpret_cast<StreamObj*>(stream);
    {
      std::lock_guard lk(rt.tables_mu);
      if (rt.streams.erase(s) == 0) return cudaErrorInvalidResourceHandle;
    }
    const uint64_t id = s->id;
    const int dev = s->device;
    delete s;
    // Pending work still completes (CUDA semantics); the server sees to that.
    return to_cuda(rt.post(Opcode::StreamDestroy, dev, id, nullptr, 0));
  });
}

FUNNEL_API cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  return guarded(__func__, [&] { return stream_sync(s, false); });
}
FUNNEL_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) {
  return guarded(__func__, [&] { return stream_sync(s, true); });
}
FUNNEL_API cudaError_t cudaStreamQuery(cudaStream_t s) {
  return guarded(__func__, [&] { return stream_query(s, false); });
}
FUNNEL_API cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) {
  return guarded(__func__, [&] { return stream_query(s, true); });
}
FUNNEL_API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  return guarded(__func__, [&] { return stream_wait_event(s, e, flags, false); });
}
FUNNEL_API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  return guarded(__func__, [&] { return stream_wait_event(s, e, flags, true); });
}
