// Streams.  Ids are chosen here (nonzero, never reused), so creation is one-way.
#include <memory>
#include <optional>

#include "api.hpp"
#include "graphs.hpp"
#include "streams.hpp"

using namespace funnel::client;

namespace {

// cudaStreamGetPriority/Flags/Device: one field of the stream's record.
template <class T, class Field>
cudaError_t stream_field(cudaStream_t stream, T* value, Field field) {
  if (value == nullptr) return cudaErrorInvalidValue;
  StreamObj s{};
  if (cudaError_t e = stream_record(stream, s); e != cudaSuccess) return e;
  *value = static_cast<T>(field(s));
  return cudaSuccess;
}
constexpr auto kPriority = [](const StreamObj& s) { return s.priority; };
constexpr auto kFlags = [](const StreamObj& s) { return s.flags; };
constexpr auto kDevice = [](const StreamObj& s) { return s.device; };

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
  return guarded(__func__, [&] { return destroy_stream(stream); });
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

// The _ptsz variants differ only in what stream 0 means, and both default streams answer
// alike.
FUNNEL_API cudaError_t cudaStreamSetAttribute(cudaStream_t s, cudaStreamAttrID attr, const cudaStreamAttrValue* v) {
  return guarded(__func__, [&] { return stream_set_attribute(s, false, static_cast<int>(attr), v); });
}
FUNNEL_API cudaError_t cudaStreamSetAttribute_ptsz(cudaStream_t s, cudaStreamAttrID attr, const cudaStreamAttrValue* v) {
  return guarded(__func__, [&] { return stream_set_attribute(s, true, static_cast<int>(attr), v); });
}
FUNNEL_API cudaError_t cudaStreamGetAttribute(cudaStream_t s, cudaStreamAttrID attr, cudaStreamAttrValue* v) {
  return guarded(__func__, [&] { return stream_get_attribute(s, false, static_cast<int>(attr), v); });
}
FUNNEL_API cudaError_t cudaStreamGetAttribute_ptsz(cudaStream_t s, cudaStreamAttrID attr, cudaStreamAttrValue* v) {
  return guarded(__func__, [&] { return stream_get_attribute(s, true, static_cast<int>(attr), v); });
}
FUNNEL_API cudaError_t cudaStreamCopyAttributes(cudaStream_t dst, cudaStream_t src) {
  return guarded(__func__, [&] { return stream_copy_attributes(dst, src, false); });
}
FUNNEL_API cudaError_t cudaStreamCopyAttributes_ptsz(cudaStream_t dst, cudaStream_t src) {
  return guarded(__func__, [&] { return stream_copy_attributes(dst, src, true); });
}

FUNNEL_API cudaError_t cudaStreamGetPriority(cudaStream_t s, int* priority) {
  return guarded(__func__, [&] { return stream_field(s, priority, kPriority); });
}
FUNNEL_API cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t s, int* priority) {
  return guarded(__func__, [&] { return stream_field(s, priority, kPriority); });
}
FUNNEL_API cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned int* flags) {
  return guarded(__func__, [&] { return stream_field(s, flags, kFlags); });
}
FUNNEL_API cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t s, unsigned int* flags) {
  return guarded(__func__, [&] { return stream_field(s, flags, kFlags); });
}
FUNNEL_API cudaError_t cudaStreamGetId(cudaStream_t s, unsigned long long* id) {
  return guarded(__func__, [&] { return stream_unique_id(s, false, id); });
}
FUNNEL_API cudaError_t cudaStreamGetId_ptsz(cudaStream_t s, unsigned long long* id) {
  return guarded(__func__, [&] { return stream_unique_id(s, true, id); });
}
FUNNEL_API cudaError_t cudaStreamGetDevice(cudaStream_t s, int* device) {
  return guarded(__func__, [&] { return stream_field(s, device, kDevice); });
}
FUNNEL_API cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t s, int* device) {
  return guarded(__func__, [&] { return stream_field(s, device, kDevice); });
}

// Captures are recorded in the client (graphs.hpp); libraries ask before their work (cuBLAS,
// cuSOLVER, PyTorch) and capture into the program's graph when it captures.

FUNNEL_API cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  return guarded(__func__, [&] { return capture_status(s, false, status); });
}
FUNNEL_API cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t s, cudaStreamCaptureStatus* status) {
  return guarded(__func__, [&] { return capture_status(s, true, status); });
}
FUNNEL_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, cudaStreamCaptureStatus* status, unsigned long long* id,
                                                cudaGraph_t* graph, const cudaGraphNode_t** deps,
                                                const cudaGraphEdgeData** edges, size_t* count) {
  return guarded(__func__, [&] { return capture_info(s, false, status, id, graph, deps, reinterpret_cast<const void**>(edges), count); });
}
FUNNEL_API cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t s, cudaStreamCaptureStatus* status,
                                                     unsigned long long* id, cudaGraph_t* graph,
                                                     const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges,
                                                     size_t* count) {
  return guarded(__func__, [&] { return capture_info(s, true, status, id, graph, deps, reinterpret_cast<const void**>(edges), count); });
}
