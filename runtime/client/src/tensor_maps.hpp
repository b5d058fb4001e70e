// Tensor-memory-accelerator descriptors (cuTensorMapEncodeTiled) for the driver front: only
// NVIDIA's driver knows their format, so the server encodes them (ipc::TensorMapCmd).
#pragma once
#include <cuda_runtime_api.h>

#include "funnel/ipc/commands.hpp"

namespace funnel::client {

// The 128-byte map of `args` (part ignored) for `device` into `map`.  Each argument set is
// encoded once (four round trips) and then answered from the client: libraries encode the
// maps of a kernel before each of its launches.
cudaError_t encode_tensor_map(int device, ipc::TensorMapCmd args, void* map) noexcept;

}  // namespace funnel::client
