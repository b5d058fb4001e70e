// The devices' default memory pools as this client sees them (api_mempool.cpp): the
// stream-ordered allocations of api_memory.cpp are counted in them (ClientTables), so
// that the pool's used/reserved attributes answer what this client holds.
#pragma once
#include <cuda_runtime_api.h>

#include "runtime.hpp"

namespace funnel::client {

// The device whose default pool `pool` is; cudaErrorInvalidValue for any other handle.
cudaError_t pool_device(cudaMemPool_t pool, int& device) noexcept;

}  // namespace funnel::client
