// __device__ and __constant__ variables: SymbolGet answers the address once per variable
// and device; copies to and from a symbol are then ordinary copies at address + offset.
#include "api.hpp"
#include "copy_engine.hpp"
#include "modules.hpp"

using namespace funnel::client;

namespace {

// The variable's address on the current device, and its size.
cudaError_t symbol_range(const void* symbol, uint64_t& address, uint64_t& size) {
  Variable* v = find_variable(symbol);
  if (v == nullptr) return cudaErrorInvalidSymbol;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  if (cudaError_t e = to_cuda(variable_address(*v, rt, current_device(), address)); e != cudaSuccess) return e;
  size = v->size;
  return cudaSuccess;
}

enum class Dir { To, From };

// `other`: the copy's other end (source of a To copy, destination of a From copy).
cudaError_t symbol_copy(Dir dir, const void* symbol, const void* other, size_t count, size_t offset,
                        cudaMemcpyKind kind, cudaStream_t stream, bool async, bool per_thread) {
  const bool to_symbol = dir == Dir::To;
  if (to_symbol ? kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost
                : kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost)
    return cudaErrorInvalidMemcpyDirection;
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  uint64_t address = 0, size = 0;
  if (cudaError_t e = symbol_range(symbol, address, size); e != cudaSuccess) return e;
  if (offset > size || count > size - offset) return cudaErrorInvalidValue;
  auto* at = reinterpret_cast<void*>(address + offset);
  if (to_symbol) return copy_2d(at, count, other, count, count, 1, kind, stream, async, per_thread);
  return copy_2d(const_cast<void*>(other), count, at, count, count, 1, kind, stream, async, per_thread);
}

}  // namespace

FUNNEL_API cudaError_t cudaGetSymbolAddress(void** ptr, const void* symbol) {
  return guarded(__func__, [&] {
    if (ptr == nullptr) return cudaErrorInvalidValue;
    uint64_t address = 0, size = 0;
    const cudaError_t e = symbol_range(symbol, address, size);
    if (e == cudaSuccess) *ptr = reinterpret_cast<void*>(address);
    return e;
  });
}
FUNNEL_API cudaError_t cudaGetSymbolSize(size_t* out, const void* symbol) {
  return guarded(__func__, [&] {
    if (out == nullptr) return cudaErrorInvalidValue;
    uint64_t address = 0, size = 0;
    const cudaError_t e = symbol_range(symbol, address, size);
    if (e == cudaSuccess) *out = size;
    return e;
  });
}

FUNNEL_API cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                                          cudaMemcpyKind kind) {
  return guarded(__func__, [&] { return symbol_copy(Dir::To, symbol, src, count, offset, kind, nullptr, false, false); });
}
FUNNEL_API cudaError_t cudaMemcpyToSymbol_ptds(const void* symbol, const void* src, size_t count, size_t offset,
                                               cudaMemcpyKind kind) {
  return guarded(__func__, [&] { return symbol_copy(Dir::To, symbol, src, count, offset, kind, nullptr, false, true); });
}
FUNNEL_API cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count, size_t offset,
                                               cudaMemcpyKind kind, cudaStream_t stream) {
  return guarded(__func__, [&] { return symbol_copy(Dir::To, symbol, src, count, offset, kind, stream, true, false); });
}
FUNNEL_API cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void* symbol, const void* src, size_t count, size_t offset,
                                                    cudaMemcpyKind kind, cudaStream_t stream) {
  return guarded(__func__, [&] { return symbol_copy(Dir::To, symbol, src, count, offset, kind, stream, true, true); });
}
FUNNEL_API cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                            cudaMemcpyKind kind) {
  return guarded(__func__, [&] { return symbol_copy(Dir::From, symbol, dst, count, offset, kind, nullptr, false, false); });
}
FUNNEL_API cudaError_t cudaMemcpyFromSymbol_ptds(void* dst, const void* symbol, size_t count, size_t offset,
                                                 cudaMemcpyKind kind) {
  return guarded(__func__, [&] { return symbol_copy(Dir::From, symbol, dst, count, offset, kind, nullptr, false, true); });
}
FUNNEL_API cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                                 cudaMemcpyKind kind, cudaStream_t stream) {
  return guarded(__func__, [&] { return symbol_copy(Dir::From, symbol, dst, count, offset, kind, stream, true, false); });
}
FUNNEL_API cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void* dst, const void* symbol, size_t count, size_t offset,
                                                      cudaMemcpyKind kind, cudaStream_t stream) {
  return guarded(__func__, [&] { return symbol_copy(Dir::From, symbol, dst, count, offset, kind, stream, true, true); });
}
