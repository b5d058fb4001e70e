// Events: the runtime front of the core's events (events.cpp).
#include "api.hpp"
#include "events.hpp"

using namespace funnel::client;

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
  return guarded(__func__, [&] { return elapsed_time(ms, start, end); });
}

FUNNEL_API cudaError_t cudaEventDestroy(cudaEvent_t event) {
  return guarded(__func__, [&] { return destroy_event(event); });
}
