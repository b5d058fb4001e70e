// Placeholder until the CUDA driver backend lands (owned by the cuda-backend work).
#include <stdexcept>

#include "funnel/server/backend.hpp"

namespace funnel::server {
std::unique_ptr<Backend> make_cuda_backend(const std::vector<int>&) {
  throw std::runtime_error("the cuda backend is not built yet: use --backend sim");
}
}  // namespace funnel::server
