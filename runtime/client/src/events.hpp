// Events of both fronts (cudaEvent_t and CUevent are the same handles: an EventObj* of the
// client's tables; the flags are the same numbers under both APIs).
#pragma once
#include "api.hpp"

namespace funnel::client {

// cudaEventCreateWithFlags (interprocess events: cudaErrorNotSupported).
cudaError_t create_event(cudaEvent_t* out, unsigned flags);
// cudaEventRecordWithFlags; `ptds`: stream 0 is the calling thread's default stream.
cudaError_t record_event(cudaEvent_t event, cudaStream_t stream, unsigned flags, bool ptds);
// cudaEventSynchronize (op EventSynchronize) or cudaEventQuery (op EventQuery).
cudaError_t event_call(cudaEvent_t event, Opcode op);
cudaError_t elapsed_time(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t destroy_event(cudaEvent_t event);

}  // namespace funnel::client
