// The cuda backend's streams and events, and the stream memory operations on words of
// registered host memory (write_value, store_word, wait_value).
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/launch.hpp"
#include "backend/cuda/partitions.hpp"

namespace funnel::server::cuda {

// Non-blocking: never synchronises with the context's NULL stream (the core emulates the
// legacy stream per client with events).  The driver clamps the priority into range.
Status CudaBackend::create_stream(int device, int priority, const std::shared_ptr<BackendPartition>& partition,
                                  std::unique_ptr<BackendStream>& out) {
  if (Status st = s_->bind(device); !ok(st)) return st;
  CUstream h = nullptr;
  if (partition) {
    if (partition->device() != device) return Status::InvalidDevice;
    const auto& p = static_cast<const CudaPartition&>(*partition);
    const Status st = FUNNEL_CU(s_->drv, cuGreenCtxStreamCreate, &h, p.handle(), CU_STREAM_NON_BLOCKING, priority);
    if (ok(st)) out = std::make_unique<CudaStream>(s_, device, h, partition);
    return st;
  }
  const Status st = FUNNEL_CU(s_->drv, cuStreamCreateWithPriority, &h, CU_STREAM_NON_BLOCKING, priority);
  if (ok(st)) out = std::make_unique<CudaStream>(s_, device, h);
  return st;
}

Status CudaBackend::create_event(int device, bool timing, std::unique_ptr<BackendEvent>& out) {
  if (Status st = s_->bind(device); !ok(st)) return st;
  if (!timing) {
    std::lock_guard lk(s_->pool_mu);
    auto& free = s_->pool[static_cast<size_t>(device)];
    if (!free.empty()) {
      out = std::make_unique<CudaEvent>(s_, device, free.back(), true);
      free.pop_back();
      return Status::Success;
    }
  }
  CUevent h = nullptr;
  const unsigned flags = timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING;
  const Status st = FUNNEL_CU(s_->drv, cuEventCreate, &h, flags);
  if (ok(st)) out = std::make_unique<CudaEvent>(s_, device, h, !timing);
  return st;
}

Status CudaBackend::record(BackendEvent& be, BackendStream& bs) {
  CudaStream& s = enqueue_on(bs);
  CudaEvent& e = as_cuda(be);
  // cuEventRecord needs the event and the stream in one context.
  if (e.device() != s.device()) return Status::InvalidResourceHandle;
  if (Status st = s_->bind(s.device()); !ok(st)) return st;
  return FUNNEL_CU(s_->drv, cuEventRecord, e.handle(), s.handle());
}

Status CudaBackend::write_value(BackendStream& bs, std::atomic<uint32_t>& word, uint32_t value) {
  CudaStream* s = nullptr;
  if (Status st = host_word_op(bs, s); !ok(st)) return st;
  // CU_STREAM_WRITE_VALUE_DEFAULT: a fence orders the earlier work's writes before it.
  return FUNNEL_CU(s_->drv, cuStreamWriteValue32, s->handle(), reinterpret_cast<CUdeviceptr>(&word), value,
                   CU_STREAM_WRITE_VALUE_DEFAULT);
}

Status CudaBackend::write_values(BackendStream& bs, std::span<std::atomic<uint32_t>* const> words,
                                 std::span<const uint32_t> values) {
  CudaStream* s = nullptr;
  if (Status st = host_word_op(bs, s); !ok(st)) return st;
  std::array<CUstreamBatchMemOpParams, 4> ops{};
  const size_t n = std::min(words.size(), values.size());
  if (n > ops.size()) return Status::InvalidValue;
  for (size_t i = 0; i < n; ++i) {
    ops[i].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[i].writeValue.address = reinterpret_cast<CUdeviceptr>(words[i]);
    ops[i].writeValue.value = values[i];
    ops[i].writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;  // each after a fence, as write_value's
  }
  return FUNNEL_CU(s_->drv, cuStreamBatchMemOp, s->handle(), static_cast<unsigned>(n), ops.data(), 0);
}

static_assert(ipc::kWaitValueGeq == CU_STREAM_WAIT_VALUE_GEQ && ipc::kWaitValueEq == CU_STREAM_WAIT_VALUE_EQ &&
              ipc::kWaitValueAnd == CU_STREAM_WAIT_VALUE_AND && ipc::kWaitValueNor == CU_STREAM_WAIT_VALUE_NOR &&
              ipc::kWaitValueFlush == CU_STREAM_WAIT_VALUE_FLUSH &&
              ipc::kWriteValueNoMemoryBarrier == CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);

Status CudaBackend::stream_mem_op(BackendStream& bs, DeviceAddress address, ipc::StreamMemOp op, uint64_t value,
                                  uint32_t flags) {
  CudaStream& s = enqueue_on(bs);
  if (Status st = s_->bind(s.device()); !ok(st)) return st;
  const auto a = static_cast<CUdeviceptr>(address);
  switch (op) {
    case ipc::StreamMemOp::Write32:
      return FUNNEL_CU(s_->drv, cuStreamWriteValue32, s.handle(), a, static_cast<cuuint32_t>(value), flags);
    case ipc::StreamMemOp::Write64:
      return FUNNEL_CU(s_->drv, cuStreamWriteValue64, s.handle(), a, value, flags);
    case ipc::StreamMemOp::Wait32:
      return FUNNEL_CU(s_->drv, cuStreamWaitValue32, s.handle(), a, static_cast<cuuint32_t>(value), flags);
    case ipc::StreamMemOp::Wait64:
      return FUNNEL_CU(s_->drv, cuStreamWaitValue64, s.handle(), a, value, flags);
  }
  return Status::InvalidValue;
}

Status CudaBackend::store_word(BackendStream& bs, std::atomic<uint32_t>& word, uint32_t value) {
  if (s_->answer_kernel == nullptr) return Status::NotSupported;
  CudaStream* s = nullptr;
  if (Status st = host_word_op(bs, s); !ok(st)) return st;
  CUdeviceptr address = reinterpret_cast<CUdeviceptr>(&word);
  void* args[] = {&address, &value};
  const LaunchConfig c(LaunchDesc{{1, 1, 1}, {1, 1, 1}, 0}, s->handle());
  return FUNNEL_CU(s_->drv, cuLaunchKernelEx, &c.config, reinterpret_cast<CUfunction>(s_->answer_kernel), args,
                   nullptr);
}

// The event may belong to another device: cuStreamWaitEvent allows that.
Status CudaBackend::wait(BackendStream& bs, BackendEvent& be) {
  CudaStream& s = enqueue_on(bs);
  if (Status st = s_->bind(s.device()); !ok(st)) return st;
  return FUNNEL_CU(s_->drv, cuStreamWaitEvent, s.handle(), as_cuda(be).handle(), CU_EVENT_WAIT_DEFAULT);
}

Status CudaBackend::query(BackendEvent& be) {
  CudaEvent& e = as_cuda(be);
  if (Status st = s_->bind(e.device()); !ok(st)) return st;
  return FUNNEL_CU(s_->drv, cuEventQuery, e.handle());
}

Status CudaBackend::query(BackendStream& bs) {
  CudaStream& s = as_cuda(bs);
  if (s.known_idle()) return Status::Success;
  if (Status st = s_->bind(s.device()); !ok(st)) return st;
  const Status st = FUNNEL_CU(s_->drv, cuStreamQuery, s.handle());
  if (st == Status::Success) s.set_idle(true);
  return st;
}

Status CudaBackend::elapsed_ms(BackendEvent& start, BackendEvent& end, float& ms) {
  CudaEvent& a = as_cuda(start);
  if (Status st = s_->bind(a.device()); !ok(st)) return st;
  float v = 0.0f;
  const Status st = FUNNEL_CU(s_->drv, cuEventElapsedTime, &v, a.handle(), as_cuda(end).handle());
  if (ok(st)) ms = v;
  return st;
}

Status CudaBackend::synchronize(BackendStream& bs) {
  CudaStream& s = as_cuda(bs);
  if (Status st = s_->bind(s.device()); !ok(st)) return st;
  return FUNNEL_CU(s_->drv, cuStreamSynchronize, s.handle());
}

Status CudaBackend::wait_value(BackendStream& bs, std::atomic<uint32_t>& word, uint32_t value) {
  CudaStream* s = nullptr;
  if (Status st = host_word_op(bs, s); !ok(st)) return st;
  // GEQ ((int32_t)(*word - value) >= 0), not EQ: a slot's generations only grow, and when
  // the server releases several waits of a gone client at once (release_host_funcs) the
  // word jumps past all but the last of them.
  return FUNNEL_CU(s_->drv, cuStreamWaitValue32, s->handle(), reinterpret_cast<CUdeviceptr>(&word), value,
                   CU_STREAM_WAIT_VALUE_GEQ);
}

// The prologue of a stream memory operation on a word of registered host memory: the
// stream (marked as enqueued on), its device's context current, and the device able to
// use the host address as is (else NotSupported: clients then ask the server instead).
Status CudaBackend::host_word_op(BackendStream& bs, CudaStream*& out) {
  CudaStream& s = enqueue_on(bs);
  const auto dev = static_cast<size_t>(s.device());
  if (dev >= s_->devices.size()) return Status::InvalidDevice;
  if (!s_->devices[dev].host_pointer_is_device_pointer) return Status::NotSupported;
  if (Status st = s_->bind(s.device()); !ok(st)) return st;
  out = &s;
  return Status::Success;
}

}  // namespace funnel::server::cuda
