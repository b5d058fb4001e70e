// Streams: streams.hpp. Ids are chosen here (nonzero, never reused), so creation is one-way.
#include "streams.hpp"

#include <mutex>
#include <unordered_map>

#include <algorithm>
#include <memory>
#include <optional>

#include "graphs.hpp"
#include "host_func.hpp"

namespace funnel::client {

cudaError_t create_stream(cudaStream_t* out, unsigned flags, int priority) {
  if (out == nullptr) return cudaErrorInvalidValue;
  if ((flags & ~unsigned{cudaStreamNonBlocking}) != 0) return cudaErrorInvalidValue;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  // Clamp to [greatest, least] = [-5, 0], as CUDA does.
  priority = std::min(0, std::max(-5, priority));
  auto s = std::make_unique<StreamObj>(StreamObj{rt.next_stream_id.fetch_add(1), current_device(), flags, priority});
  funnel::ipc::StreamCreateCmd c{s->id, flags & funnel::ipc::kStreamNonBlocking, priority};
  if (cudaError_t e = to_cuda(rt.post(Opcode::StreamCreate, s->device, 0, &c, sizeof c)); e != cudaSuccess) return e;
  *out = reinterpret_cast<cudaStream_t>(rt.tables.add_stream(std::move(s)));
  return cudaSuccess;
}

// Both are answered in the client when the stream is known idle (Runtime::call).
cudaError_t stream_sync(cudaStream_t stream, bool ptds) {
  StreamRef ref;
  if (cudaError_t e = resolve_stream(stream, ptds, ref); e != cudaSuccess) return e;
  if (ref.capturing()) return capture_refuse(ref);
  const uint64_t uses = hf_uses();
  const cudaError_t e = to_cuda(Runtime::get().call(Opcode::StreamSynchronize, ref.device, ref.id, nullptr, 0));
  if (e == cudaSuccess) hf_synchronized(ref.device, ref.id, uses);
  return e;
}

cudaError_t stream_query(cudaStream_t stream, bool ptds) {
  StreamRef ref;
  if (cudaError_t e = resolve_stream(stream, ptds, ref); e != cudaSuccess) return e;
  if (ref.capturing()) return capture_refuse(ref);
  return to_cuda(Runtime::get().call(Opcode::StreamQuery, ref.device, ref.id, nullptr, 0));
}

cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags, bool ptds) {
  StreamRef ref;
  if (cudaError_t e = resolve_stream(stream, ptds, ref); e != cudaSuccess) return e;
  Runtime& rt = Runtime::get();
  auto* ev = reinterpret_cast<EventObj*>(event);
  if (!rt.tables.has_event(ev)) return cudaErrorInvalidResourceHandle;
  if ((flags & ~unsigned{cudaEventWaitExternal}) != 0) return cudaErrorInvalidValue;
  bool handled = false;
  if (cudaError_t e = capture_wait(ref, event, flags, handled); handled || e != cudaSuccess) return e;
  funnel::ipc::EventCmd c{ev->id, 0, 0};
  return to_cuda(rt.post(Opcode::StreamWaitEvent, ref.device, ref.id, &c, sizeof c));
}

// What the client recorded of a stream at its creation.  The legacy and per-thread
// default streams are blocking streams of the current device with priority 0, as CUDA
// reports them; answering for them creates nothing.
cudaError_t stream_record(cudaStream_t stream, StreamObj& out) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    out = StreamObj{0, current_device(), cudaStreamDefault, 0};
    return cudaSuccess;
  }
  const std::optional<StreamObj> s = Runtime::get().tables.find_stream(reinterpret_cast<StreamObj*>(stream));
  if (!s) return cudaErrorInvalidResourceHandle;
  out = *s;
  return cudaSuccess;
}

cudaError_t stream_unique_id(cudaStream_t stream, bool ptds, unsigned long long* id) {
  if (id == nullptr) return cudaErrorInvalidValue;
  StreamRef ref;
  if (cudaError_t e = resolve_stream(stream, ptds, ref); e != cudaSuccess) return e;
  *id = ref.id != 0 ? ref.id : (1ULL << 63) + static_cast<unsigned>(ref.device);
  return cudaSuccess;
}

cudaError_t stream_mem_op(cudaStream_t stream, bool ptds, uint64_t address, uint64_t value, ipc::StreamMemOp op,
                          uint32_t flags) {
  StreamRef ref;
  if (cudaError_t e = resolve_stream(stream, ptds, ref); e != cudaSuccess) return e;
  if (ref.capturing()) return capture_refuse(ref, "a stream memory operation in a stream capture");
  Runtime& rt = Runtime::get();
  const bool wide = op == ipc::StreamMemOp::Write64 || op == ipc::StreamMemOp::Wait64;
  const bool wait = op == ipc::StreamMemOp::Wait32 || op == ipc::StreamMemOp::Wait64;
  // Checked here as the server checks them, so that a bad call fails at once, not at a later
  // synchronisation.
  const uint32_t allowed = wait ? (0x3u | ipc::kWaitValueFlush) : ipc::kWriteValueNoMemoryBarrier;
  if ((flags & ~allowed) != 0 || address % (wide ? 8 : 4) != 0) return cudaErrorInvalidValue;
  if (!rt.tables.device_range(address, wide ? 8 : 4)) return cudaErrorInvalidValue;
  if (wait && !ipc::wait_satisfiable(flags, value, wide)) {
    log_error(fmt::format("funnel: a stream memory wait that no value meets ({} with {:#x}) would hold its stream "
                          "for ever: refused (CUDA_ERROR_INVALID_VALUE)",
                          (flags & 0x3u) == ipc::kWaitValueAnd ? "CU_STREAM_WAIT_VALUE_AND" : "CU_STREAM_WAIT_VALUE_NOR",
                          value));
    return cudaErrorInvalidValue;
  }
  const ipc::StreamMemOpCmd c{address, value, static_cast<uint32_t>(op), flags};
  return to_cuda(rt.post(Opcode::StreamMemOp, ref.device, ref.id, &c, sizeof c));
}

cudaError_t destroy_stream(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return cudaErrorInvalidResourceHandle;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  const std::unique_ptr<StreamObj> s = rt.tables.remove_stream(reinterpret_cast<StreamObj*>(stream));
  if (!s) return cudaErrorInvalidResourceHandle;
  const uint64_t id = s->id;
  const int dev = s->device;
  // Pending work still completes (CUDA semantics); the server sees to that.
  return to_cuda(rt.post(Opcode::StreamDestroy, dev, id, nullptr, 0));
}

// ---- stream attributes ---------------------------------------------------------------------------

namespace {

struct StreamAttrs {
  cudaAccessPolicyWindow window{};
  int sync_policy = cudaSyncPolicyAuto;
};

// By stream id (0: the legacy stream of each device is keyed by 2^63 + device, as stream_unique_id).
std::mutex g_attrs_mu;
std::unordered_map<unsigned long long, StreamAttrs>& attrs() {
  static auto* m = new std::unordered_map<unsigned long long, StreamAttrs>;  // never destroyed
  return *m;
}

cudaError_t set_window(const StreamRef& s, const cudaAccessPolicyWindow& w) {
  if (w.num_bytes != 0 && w.base_ptr == nullptr) return cudaErrorInvalidValue;
  const ipc::StreamAttributeCmd c{reinterpret_cast<uint64_t>(w.base_ptr), w.num_bytes, w.hitRatio,
                                  static_cast<uint32_t>(w.hitProp), static_cast<uint32_t>(w.missProp), 0};
  return to_cuda(Runtime::get().call(Opcode::StreamAttribute, s.device, s.id, &c, sizeof c));
}

}  // namespace

cudaError_t stream_set_attribute(cudaStream_t stream, bool ptds, int attr, const cudaLaunchAttributeValue* value) {
  if (value == nullptr) return cudaErrorInvalidValue;
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  StreamRef s;
  if (cudaError_t e = resolve_stream(stream, ptds, s); e != cudaSuccess) return e;
  unsigned long long key = 0;
  if (cudaError_t e = stream_unique_id(stream, ptds, &key); e != cudaSuccess) return e;
  switch (attr) {
    case cudaLaunchAttributeAccessPolicyWindow: {
      if (cudaError_t e = set_window(s, value->accessPolicyWindow); e != cudaSuccess) return e;
      std::lock_guard lk(g_attrs_mu);
      attrs()[key].window = value->accessPolicyWindow;
      return cudaSuccess;
    }
    case cudaLaunchAttributeSynchronizationPolicy: {
      const int p = static_cast<int>(value->syncPolicy);
      if (p < cudaSyncPolicyAuto || p > cudaSyncPolicyBlockingSync) return cudaErrorInvalidValue;
      std::lock_guard lk(g_attrs_mu);
      attrs()[key].sync_policy = p;
      return cudaSuccess;
    }
    default:
      report_unsupported(fmt::format("setting stream attribute {}", attr).c_str());
      return cudaErrorNotSupported;
  }
}

cudaError_t stream_get_attribute(cudaStream_t stream, bool ptds, int attr, cudaLaunchAttributeValue* value) {
  if (value == nullptr) return cudaErrorInvalidValue;
  StreamRef s;
  if (cudaError_t e = resolve_stream(stream, ptds, s); e != cudaSuccess) return e;
  unsigned long long key = 0;
  if (cudaError_t e = stream_unique_id(stream, ptds, &key); e != cudaSuccess) return e;
  StreamAttrs a;
  {
    std::lock_guard lk(g_attrs_mu);
    if (auto it = attrs().find(key); it != attrs().end()) a = it->second;
  }
  switch (attr) {
    case cudaLaunchAttributeAccessPolicyWindow:
      value->accessPolicyWindow = a.window;
      return cudaSuccess;
    case cudaLaunchAttributeSynchronizationPolicy:
      value->syncPolicy = static_cast<cudaSynchronizationPolicy>(a.sync_policy);
      return cudaSuccess;
    case cudaLaunchAttributePriority: {
      StreamObj rec{};
      if (cudaError_t e = stream_record(stream, rec); e != cudaSuccess) return e;
      value->priority = rec.priority;
      return cudaSuccess;
    }
    default:
      report_unsupported(fmt::format("stream attribute {}", attr).c_str());
      return cudaErrorNotSupported;
  }
}

cudaError_t stream_copy_attributes(cudaStream_t dst, cudaStream_t src, bool ptds) {
  cudaLaunchAttributeValue v{};
  for (int attr : {static_cast<int>(cudaLaunchAttributeAccessPolicyWindow),
                   static_cast<int>(cudaLaunchAttributeSynchronizationPolicy)}) {
    if (cudaError_t e = stream_get_attribute(src, ptds, attr, &v); e != cudaSuccess) return e;
    // An empty window need not reach the server unless the destination has one.
    if (cudaError_t e = stream_set_attribute(dst, ptds, attr, &v); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace funnel::client
