// Host functions (host_func.cpp): what cudaDeviceSynchronize tells them.
#pragma once
#include <cstdint>

namespace funnel::client {

// A count of host functions enqueued so far; take it before a device synchronisation.
uint64_t hf_uses() noexcept;
// `device` completed everything enqueued before hf_uses() said `uses_before`: the event
// state words of its idle streams' host functions may be reused.
void hf_device_synchronized(int device, uint64_t uses_before) noexcept;

}  // namespace funnel::client
