// Host functions (host_func.cpp): what cudaDeviceSynchronize tells them.
#pragma once
#include <cstdint>
#include <optional>

namespace funnel::client {

// A count of host functions enqueued so far; take it before a device synchronisation.
uint64_t hf_uses() noexcept;
// `device` (or only its stream `stream`, when given; 0: the legacy stream) completed
// everything enqueued before hf_uses() said `uses_before`: the event state words of
// those streams' host functions may be reused.
void hf_synchronized(int device, std::optional<uint64_t> stream, uint64_t uses_before) noexcept;

}  // namespace funnel::client
