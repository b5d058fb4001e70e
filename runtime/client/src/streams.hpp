// Streams of both fronts (cudaStream_t and CUstream are the same handles: a StreamObj* of the
// client's tables, or the legacy/per-thread default stream).
#pragma once
#include "api.hpp"

namespace funnel::client {

// cudaStreamCreateWithPriority: `flags` 0 or cudaStreamNonBlocking, priority clamped to [-5, 0].
cudaError_t create_stream(cudaStream_t* out, unsigned flags, int priority);
cudaError_t destroy_stream(cudaStream_t stream);
// Both are answered in the client when the stream is known idle (Runtime::call). `ptds`:
// stream 0 is the calling thread's default stream.
cudaError_t stream_sync(cudaStream_t stream, bool ptds);
cudaError_t stream_query(cudaStream_t stream, bool ptds);
cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags, bool ptds);
// What the client recorded of a stream at its creation (the default streams: blocking, of the
// current device, priority 0).
cudaError_t stream_record(cudaStream_t stream, StreamObj& out);
// cudaStreamGetId / cuStreamGetId: a stream's id, unique in the process and never reused: a
// created or per-thread stream's own (nonzero) id; the legacy default stream of each device one
// above every id funnel hands out (2^63 + device).
cudaError_t stream_unique_id(cudaStream_t stream, bool ptds, unsigned long long* id);
// cuStreamWriteValue32/64, cuStreamWaitValue32/64: a write to, or a wait on, a word of this
// client's device memory, in stream order (the server checks the flags; they are the driver's).
// cudaErrorInvalidValue for a word that is not device memory of this client, and for a wait no
// value meets (AND with 0, NOR with every bit set), named on stderr.
cudaError_t stream_mem_op(cudaStream_t stream, bool ptds, uint64_t address, uint64_t value, ipc::StreamMemOp op,
                          uint32_t flags);

// cudaStreamSetAttribute/GetAttribute/CopyAttributes and the driver's (their attribute ids and
// value union are the driver's too): the access-policy window (set on the server's stream, its
// memory checked to be the client's), the synchronisation policy (kept; the scheduling of waits
// follows the device flags) and the priority (read only); other attributes are refused by name.
cudaError_t stream_set_attribute(cudaStream_t stream, bool ptds, int attr, const cudaLaunchAttributeValue* value);
cudaError_t stream_get_attribute(cudaStream_t stream, bool ptds, int attr, cudaLaunchAttributeValue* value);
cudaError_t stream_copy_attributes(cudaStream_t dst, cudaStream_t src, bool ptds);

}  // namespace funnel::client
