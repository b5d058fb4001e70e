// Host functions (host_func.cpp): enqueuing them, and what a device synchronisation tells them.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

namespace funnel::client {

// Enqueue `fn(data)` (cudaLaunchHostFunc) or `cb(stream, status, data)` (cudaStreamAddCallback,
// flags must be 0) on `stream`; `per_thread`: stream 0 is the thread's default stream.
cudaError_t launch_host_func(cudaStream_t stream, cudaHostFn_t fn, void* data, bool per_thread);
cudaError_t add_callback(cudaStream_t stream, cudaStreamCallback_t cb, void* data, unsigned flags, bool per_thread);

// Host nodes of executable graphs (graphs.cpp; doc/design/graphs.md, "Host nodes"): one pair of
// event state words each (zero when added), the function this process runs for it, and each
// launch of its graph announced before it is sent.  Retired when its graph is destroyed: the words
// go back to the pool once every launch ran.
uint64_t graph_host_add(uint32_t reached, uint32_t done, cudaHostFn_t fn, void* data);
void graph_host_set(uint64_t key, cudaHostFn_t fn, void* data);
void graph_host_launched(uint64_t key);
void graph_host_retire(uint64_t key);

// A count of host functions enqueued so far; take it before a device synchronisation.
uint64_t hf_uses() noexcept;
// `device` (or only its stream `stream`, when given; 0: the legacy stream) completed
// everything enqueued before hf_uses() said `uses_before`: the event state words of
// those streams' host functions may be reused.
void hf_synchronized(int device, std::optional<uint64_t> stream, uint64_t uses_before) noexcept;

}  // namespace funnel::client
