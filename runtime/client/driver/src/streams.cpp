// Streams of the driver front: the core's streams (a CUstream is a cudaStream_t; CU_STREAM_LEGACY
// and CU_STREAM_PER_THREAD are, as the headers define them, the runtime's cudaStreamLegacy and
// cudaStreamPerThread, 0x1 and 0x2) and host functions on them.
#include "streams.hpp"
#include "front.hpp"
#include "graphs.hpp"
#include "host_func.hpp"

namespace {

cudaStream_t rt(CUstream s) { return reinterpret_cast<cudaStream_t>(s); }

CUresult with_context(cudaError_t (*op)(cudaStream_t, bool), CUstream s, bool per_thread) {
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(op(rt(s), per_thread));
}

}  // namespace

static_assert(CU_STREAM_NON_BLOCKING == cudaStreamNonBlocking);

FUNNEL_DRIVER_API CUresult cuStreamCreateWithPriority(CUstream* s, unsigned int flags, int priority) {
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::create_stream(reinterpret_cast<cudaStream_t*>(s), flags, priority));
}
FUNNEL_DRIVER_API CUresult cuStreamCreate(CUstream* s, unsigned int flags) {
  return cuStreamCreateWithPriority(s, flags, 0);
}
FUNNEL_DRIVER_API CUresult cuStreamDestroy_v2(CUstream s) {
  return funnel::driver::to_cu(funnel::client::destroy_stream(rt(s)));
}
FUNNEL_DRIVER_API CUresult cuStreamDestroy(CUstream s) { return cuStreamDestroy_v2(s); }
FUNNEL_DRIVER_API CUresult cuStreamSynchronize(CUstream s) {
  return with_context(funnel::client::stream_sync, s, false);
}
FUNNEL_DRIVER_API CUresult cuStreamSynchronize_ptsz(CUstream s) {
  return with_context(funnel::client::stream_sync, s, true);
}
FUNNEL_DRIVER_API CUresult cuStreamQuery(CUstream s) { return with_context(funnel::client::stream_query, s, false); }
FUNNEL_DRIVER_API CUresult cuStreamQuery_ptsz(CUstream s) {
  return with_context(funnel::client::stream_query, s, true);
}

static_assert(sizeof(CUstreamAttrValue) == sizeof(cudaStreamAttrValue));
FUNNEL_DRIVER_API CUresult cuStreamSetAttribute(CUstream s, CUstreamAttrID attr, const CUstreamAttrValue* v) {
  return funnel::driver::to_cu(funnel::client::stream_set_attribute(
      rt(s), false, static_cast<int>(attr), reinterpret_cast<const cudaLaunchAttributeValue*>(v)));
}
FUNNEL_DRIVER_API CUresult cuStreamSetAttribute_ptsz(CUstream s, CUstreamAttrID attr, const CUstreamAttrValue* v) {
  return funnel::driver::to_cu(funnel::client::stream_set_attribute(
      rt(s), true, static_cast<int>(attr), reinterpret_cast<const cudaLaunchAttributeValue*>(v)));
}
FUNNEL_DRIVER_API CUresult cuStreamGetAttribute(CUstream s, CUstreamAttrID attr, CUstreamAttrValue* v) {
  return funnel::driver::to_cu(funnel::client::stream_get_attribute(rt(s), false, static_cast<int>(attr),
                                                                    reinterpret_cast<cudaLaunchAttributeValue*>(v)));
}
FUNNEL_DRIVER_API CUresult cuStreamGetAttribute_ptsz(CUstream s, CUstreamAttrID attr, CUstreamAttrValue* v) {
  return funnel::driver::to_cu(funnel::client::stream_get_attribute(rt(s), true, static_cast<int>(attr),
                                                                    reinterpret_cast<cudaLaunchAttributeValue*>(v)));
}
FUNNEL_DRIVER_API CUresult cuStreamCopyAttributes(CUstream dst, CUstream src) {
  return funnel::driver::to_cu(funnel::client::stream_copy_attributes(rt(dst), rt(src), false));
}
FUNNEL_DRIVER_API CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src) {
  return funnel::driver::to_cu(funnel::client::stream_copy_attributes(rt(dst), rt(src), true));
}

FUNNEL_DRIVER_API CUresult cuStreamGetPriority(CUstream s, int* priority) {
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  funnel::client::StreamObj o{};
  if (CUresult r = funnel::driver::to_cu(funnel::client::stream_record(rt(s), o)); r != CUDA_SUCCESS) return r;
  *priority = o.priority;
  return CUDA_SUCCESS;
}
FUNNEL_DRIVER_API CUresult cuStreamGetPriority_ptsz(CUstream s, int* priority) {
  return cuStreamGetPriority(s, priority);
}
FUNNEL_DRIVER_API CUresult cuStreamGetFlags(CUstream s, unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  funnel::client::StreamObj o{};
  if (CUresult r = funnel::driver::to_cu(funnel::client::stream_record(rt(s), o)); r != CUDA_SUCCESS) return r;
  *flags = o.flags;
  return CUDA_SUCCESS;
}
FUNNEL_DRIVER_API CUresult cuStreamGetFlags_ptsz(CUstream s, unsigned int* flags) { return cuStreamGetFlags(s, flags); }

// A stream's id, unique in the process (the core's stream_unique_id).
FUNNEL_DRIVER_API CUresult cuStreamGetId(CUstream s, unsigned long long* id) {
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::stream_unique_id(rt(s), false, id));
}
FUNNEL_DRIVER_API CUresult cuStreamGetId_ptsz(CUstream s, unsigned long long* id) {
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::stream_unique_id(rt(s), true, id));
}

// Stream memory operations on the program's device memory, executed by the server's driver on the
// stream: writes and waits (the server meets a gone client's waits: session/stream_waits.hpp).  The v1 and v2 names are one function each (CUDA 12
// made the v2 behaviour the only one).
static_assert(funnel::ipc::kWaitValueGeq == CU_STREAM_WAIT_VALUE_GEQ &&
              funnel::ipc::kWaitValueEq == CU_STREAM_WAIT_VALUE_EQ &&
              funnel::ipc::kWaitValueAnd == CU_STREAM_WAIT_VALUE_AND &&
              funnel::ipc::kWaitValueNor == CU_STREAM_WAIT_VALUE_NOR &&
              funnel::ipc::kWaitValueFlush == CU_STREAM_WAIT_VALUE_FLUSH &&
              funnel::ipc::kWriteValueNoMemoryBarrier == CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
namespace {
CUresult mem_op(CUstream s, CUdeviceptr address, uint64_t value, funnel::ipc::StreamMemOp op, unsigned flags,
                bool per_thread) {
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::stream_mem_op(rt(s), per_thread, address, value, op, flags));
}
}  // namespace

#define FUNNEL_MEM_OP(name, type, op)                                                                       \
  FUNNEL_DRIVER_API CUresult name(CUstream s, CUdeviceptr a, type v, unsigned int flags) {                  \
    return mem_op(s, a, v, funnel::ipc::StreamMemOp::op, flags, false);                                     \
  }                                                                                                         \
  FUNNEL_DRIVER_API CUresult name##_ptsz(CUstream s, CUdeviceptr a, type v, unsigned int flags) {           \
    return mem_op(s, a, v, funnel::ipc::StreamMemOp::op, flags, true);                                      \
  }                                                                                                         \
  FUNNEL_DRIVER_API CUresult name##_v2(CUstream s, CUdeviceptr a, type v, unsigned int flags) {             \
    return mem_op(s, a, v, funnel::ipc::StreamMemOp::op, flags, false);                                     \
  }                                                                                                         \
  FUNNEL_DRIVER_API CUresult name##_v2_ptsz(CUstream s, CUdeviceptr a, type v, unsigned int flags) {        \
    return mem_op(s, a, v, funnel::ipc::StreamMemOp::op, flags, true);                                      \
  }
FUNNEL_MEM_OP(cuStreamWriteValue32, cuuint32_t, Write32)
FUNNEL_MEM_OP(cuStreamWriteValue64, cuuint64_t, Write64)
FUNNEL_MEM_OP(cuStreamWaitValue32, cuuint32_t, Wait32)
FUNNEL_MEM_OP(cuStreamWaitValue64, cuuint64_t, Wait64)
#undef FUNNEL_MEM_OP

// A batch: its value operations in order; the others (flushing remote writes, barriers, memory
// atomics) are refused by name.
namespace {
CUresult batch(CUstream s, unsigned count, CUstreamBatchMemOpParams* ops, unsigned flags, bool per_thread) {
  if (flags != 0 || (count != 0 && ops == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i) {
    const CUstreamBatchMemOpParams& o = ops[i];
    CUresult r = CUDA_SUCCESS;
    switch (o.operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        r = mem_op(s, o.waitValue.address, o.waitValue.value, funnel::ipc::StreamMemOp::Wait32, o.waitValue.flags,
                   per_thread);
        break;
      case CU_STREAM_MEM_OP_WAIT_VALUE_64:
        r = mem_op(s, o.waitValue.address, o.waitValue.value64, funnel::ipc::StreamMemOp::Wait64, o.waitValue.flags,
                   per_thread);
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        r = mem_op(s, o.writeValue.address, o.writeValue.value, funnel::ipc::StreamMemOp::Write32,
                   o.writeValue.flags, per_thread);
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        r = mem_op(s, o.writeValue.address, o.writeValue.value64, funnel::ipc::StreamMemOp::Write64,
                   o.writeValue.flags, per_thread);
        break;
      default:
        return funnel::driver::not_supported_detail("cuStreamBatchMemOp with operation", static_cast<int>(o.operation));
    }
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}
}  // namespace
FUNNEL_DRIVER_API CUresult cuStreamBatchMemOp(CUstream s, unsigned int n, CUstreamBatchMemOpParams* ops, unsigned f) {
  return batch(s, n, ops, f, false);
}
FUNNEL_DRIVER_API CUresult cuStreamBatchMemOp_ptsz(CUstream s, unsigned int n, CUstreamBatchMemOpParams* ops,
                                                   unsigned f) {
  return batch(s, n, ops, f, true);
}
FUNNEL_DRIVER_API CUresult cuStreamBatchMemOp_v2(CUstream s, unsigned int n, CUstreamBatchMemOpParams* ops,
                                                 unsigned f) {
  return batch(s, n, ops, f, false);
}
FUNNEL_DRIVER_API CUresult cuStreamBatchMemOp_v2_ptsz(CUstream s, unsigned int n, CUstreamBatchMemOpParams* ops,
                                                      unsigned f) {
  return batch(s, n, ops, f, true);
}

FUNNEL_DRIVER_API CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void* data) {
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::launch_host_func(rt(s), fn, data, false));
}
FUNNEL_DRIVER_API CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void* data) {
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(funnel::client::launch_host_func(rt(s), fn, data, true));
}

// A stream callback gets its stream and the stream's status: the runtime's callback, whose
// parameters are the same types under their runtime names.
FUNNEL_DRIVER_API CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void* data, unsigned int flags) {
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(
      funnel::client::add_callback(rt(s), reinterpret_cast<cudaStreamCallback_t>(cb), data, flags, false));
}
FUNNEL_DRIVER_API CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void* data, unsigned int flags) {
  int d = 0;
  if (CUresult r = funnel::driver::current(d); r != CUDA_SUCCESS) return r;
  return funnel::driver::to_cu(
      funnel::client::add_callback(rt(s), reinterpret_cast<cudaStreamCallback_t>(cb), data, flags, true));
}

// Captures are recorded in the client core (graphs.hpp); cuBLAS and
// cuSOLVER ask before their work, and capture into the program's graph when it captures.
namespace {
CUresult capture_info(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                      const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* count, bool per_thread) {
  static_assert(sizeof(cuuint64_t) == sizeof(unsigned long long));
  cudaStreamCaptureStatus st{};
  const CUresult r = funnel::driver::to_cu(funnel::client::capture_info(
      rt(s), per_thread, status ? &st : nullptr, reinterpret_cast<unsigned long long*>(id), graph, deps,
      reinterpret_cast<const void**>(edges), count));
  if (r == CUDA_SUCCESS) *status = static_cast<CUstreamCaptureStatus>(st);
  return r;
}
}  // namespace

FUNNEL_DRIVER_API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  return capture_info(s, status, nullptr, nullptr, nullptr, nullptr, nullptr, false);
}
FUNNEL_DRIVER_API CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* status) {
  return capture_info(s, status, nullptr, nullptr, nullptr, nullptr, nullptr, true);
}
FUNNEL_DRIVER_API CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return capture_info(s, status, id, nullptr, nullptr, nullptr, nullptr, false);
}
FUNNEL_DRIVER_API CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return capture_info(s, status, id, nullptr, nullptr, nullptr, nullptr, true);
}
FUNNEL_DRIVER_API CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                     CUgraph* graph, const CUgraphNode** deps, size_t* count) {
  return capture_info(s, status, id, graph, deps, nullptr, count, false);
}
FUNNEL_DRIVER_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                          CUgraph* graph, const CUgraphNode** deps, size_t* count) {
  return capture_info(s, status, id, graph, deps, nullptr, count, true);
}
FUNNEL_DRIVER_API CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                     CUgraph* graph, const CUgraphNode** deps,
                                                     const CUgraphEdgeData** edges, size_t* count) {
  return capture_info(s, status, id, graph, deps, edges, count, false);
}
FUNNEL_DRIVER_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                          CUgraph* graph, const CUgraphNode** deps,
                                                          const CUgraphEdgeData** edges, size_t* count) {
  return capture_info(s, status, id, graph, deps, edges, count, true);
}
