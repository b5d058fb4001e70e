// Events of the driver front: the core's events (a CUevent is a cudaEvent_t, and CU_EVENT_* are
// the runtime's cudaEvent* flags).
#include "events.hpp"
#include "front.hpp"
#include "streams.hpp"

namespace {

cudaEvent_t rt(CUevent e) { return reinterpret_cast<cudaEvent_t>(e); }
cudaStream_t rt(CUstream s) { return reinterpret_cast<cudaStream_t>(s); }

CUresult in_context(cudaError_t e) { return funnel::driver::to_cu(e); }

CUresult have_context() {
  int d = 0;
  return funnel::driver::current(d);
}

}  // namespace

static_assert(CU_EVENT_BLOCKING_SYNC == cudaEventBlockingSync && CU_EVENT_DISABLE_TIMING == cudaEventDisableTiming &&
              CU_EVENT_INTERPROCESS == cudaEventInterprocess);

FUNNEL_DRIVER_API CUresult cuEventCreate(CUevent* e, unsigned int flags) {
  if (CUresult r = have_context(); r != CUDA_SUCCESS) return r;
  return in_context(funnel::client::create_event(reinterpret_cast<cudaEvent_t*>(e), flags));
}
FUNNEL_DRIVER_API CUresult cuEventRecord(CUevent e, CUstream s) {
  return in_context(funnel::client::record_event(rt(e), rt(s), 0, false));
}
FUNNEL_DRIVER_API CUresult cuEventRecord_ptsz(CUevent e, CUstream s) {
  return in_context(funnel::client::record_event(rt(e), rt(s), 0, true));
}
FUNNEL_DRIVER_API CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags) {
  return in_context(funnel::client::record_event(rt(e), rt(s), flags, false));
}
FUNNEL_DRIVER_API CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int flags) {
  return in_context(funnel::client::record_event(rt(e), rt(s), flags, true));
}
FUNNEL_DRIVER_API CUresult cuEventQuery(CUevent e) {
  return in_context(funnel::client::event_call(rt(e), funnel::ipc::Opcode::EventQuery));
}
FUNNEL_DRIVER_API CUresult cuEventSynchronize(CUevent e) {
  return in_context(funnel::client::event_call(rt(e), funnel::ipc::Opcode::EventSynchronize));
}
FUNNEL_DRIVER_API CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  return in_context(funnel::client::elapsed_time(ms, rt(start), rt(end)));
}
FUNNEL_DRIVER_API CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  return cuEventElapsedTime_v2(ms, start, end);
}
FUNNEL_DRIVER_API CUresult cuEventDestroy_v2(CUevent e) { return in_context(funnel::client::destroy_event(rt(e))); }
FUNNEL_DRIVER_API CUresult cuEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }

FUNNEL_DRIVER_API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  return in_context(funnel::client::stream_wait_event(rt(s), rt(e), flags, false));
}
FUNNEL_DRIVER_API CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags) {
  return in_context(funnel::client::stream_wait_event(rt(s), rt(e), flags, true));
}
