// Error strings, names and the per-thread last error.  No server needed.
#include "api.hpp"
#include "error_table.hpp"

using namespace funnel::client;

namespace {
const ErrorText* find_error(cudaError_t e) noexcept {
  for (const auto& t : kErrorTexts)
    if (t.code == e) return &t;
  return nullptr;
}
}  // namespace

FUNNEL_API const char* cudaGetErrorString(cudaError_t error) {
  const ErrorText* t = find_error(error);
  return t != nullptr ? t->text : "unrecognized error code";
}

FUNNEL_API const char* cudaGetErrorName(cudaError_t error) {
  const ErrorText* t = find_error(error);
  return t != nullptr ? t->name : "unrecognized error code";
}

FUNNEL_API cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error();
  last_error() = cudaSuccess;
  return e;
}

FUNNEL_API cudaError_t cudaPeekAtLastError() { return last_error(); }
