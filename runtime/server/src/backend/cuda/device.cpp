// The lifetime of what the cuda backend's objects share: the answer kernel loaded with the
// backend, the pooled events, the retained primary contexts released last.
// As in driver.cpp: GCC 12/13's false -Warray-bounds in fmt 9 (spdlog), before the includes.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
#include <shared_mutex>

#include <spdlog/spdlog.h>

#include "backend/cuda/device.hpp"

namespace funnel::server::cuda {

Shared::~Shared() {
  if (answer_library != nullptr) FUNNEL_CU(drv, cuLibraryUnload, answer_library);
  for (size_t i = 0; i < pool.size(); ++i) {
    if (pool[i].empty() || !ok(bind(static_cast<int>(i)))) continue;
    for (CUevent e : pool[i]) FUNNEL_CU(drv, cuEventDestroy, e);
  }
  for (const Device& dev : devices) {
    if (dev.context.load() != nullptr) FUNNEL_CU(drv, cuDevicePrimaryCtxRelease, dev.handle);
  }
}

void log_context_faulted(size_t device, Status st) {
  spdlog::warn("cuda: device {}'s context answers status {} (a GPU fault): host registrations and module loads "
               "use another device's context from now on",
               device, static_cast<int>(st));
}

namespace {

// store_word's kernel: one thread stores `value` into the word (registered host memory,
// addressed as is: host_word_op checks that the device can).  PTX, so that the driver
// compiles it for whatever GPU it finds; written by nvcc -ptx -arch=compute_75 from
//   extern "C" __global__ void funnel_store_word(unsigned* w, unsigned v) { *(volatile unsigned*)w = v; }
// with the PTX ISA version lowered to 7.0 (CUDA 11.0) so that older drivers take it too.
constexpr char kAnswerPtx[] = R"(.version 7.0
.target sm_75
.address_size 64
.visible .entry funnel_store_word(.param .u64 word, .param .u32 value)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [word];
  ld.param.u32 %r1, [value];
  cvta.to.global.u64 %rd2, %rd1;
  st.volatile.global.u32 [%rd2], %r1;
  ret;
}
)";

}  // namespace

void load_answer_kernel(Shared& shared) {
  const Driver& d = shared.drv;
  std::shared_lock lk(shared.reset_mu);
  const Status st = shared.on_any_device([&] {
    Status s = FUNNEL_CU(d, cuLibraryLoadData, &shared.answer_library, kAnswerPtx, nullptr, nullptr, 0u, nullptr,
                         nullptr, 0u);
    if (ok(s)) s = FUNNEL_CU(d, cuLibraryGetKernel, &shared.answer_kernel, shared.answer_library, "funnel_store_word");
    return s;
  });
  if (ok(st)) return;
  spdlog::warn("cuda: the reply kernel did not load (status {}): calls made while others are on the GPU are answered "
               "by the stream write alone",
               static_cast<int>(st));
  shared.answer_kernel = nullptr;
}

}  // namespace funnel::server::cuda
