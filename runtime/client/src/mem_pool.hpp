// The devices' default memory pools as this client sees them (api_mempool.cpp): the
// stream-ordered allocations of api_memory.cpp are counted here, so that the pool's
// used/reserved attributes answer what this client holds.
#pragma once
#include <cuda_runtime_api.h>

#include "runtime.hpp"

namespace funnel::client {

// Under rt.tables_mu: a stream-ordered allocation was made or freed; every allocation of
// `device` was dropped (cudaDeviceReset).
void pool_allocated_locked(Runtime& rt, int device, uint64_t size) noexcept;
void pool_freed_locked(Runtime& rt, int device, uint64_t size) noexcept;
void pool_reset_locked(Runtime& rt, int device) noexcept;

// The device whose default pool `pool` is; cudaErrorInvalidValue for any other handle.
cudaError_t pool_device(cudaMemPool_t pool, int& device) noexcept;

}  // namespace funnel::client
