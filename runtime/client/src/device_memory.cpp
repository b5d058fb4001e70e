// Device memory (cudaMalloc, cudaMallocAsync, cuMemAlloc and their frees): device_memory.hpp.
#include "device_memory.hpp"

#include <optional>
#include <vector>

#include "api.hpp"

namespace funnel::client {
namespace {

// The server's addresses for a new allocation lay on memory of this process eight times in
// a row (the driver's small allocations come from one shared 2 MiB block, so asking again
// lands there again; the GPU soak saw it): reserve a free range here and have the server
// place the allocation exactly there.  Eight tries take the range the kernel offers (on the
// H100 the driver took 1 in 15 of those and never one of the far zone: it places memory only
// in its own address window, doc/reliability.md), four more one in the far zone
// (ClientTables::reserve_placement; the sim backend takes those).  A range the server
// cannot use is kept while the next is chosen, so each try is a different one.
cudaError_t place_device_alloc(Runtime& rt, uint64_t size, int device, uint64_t& addr) {
  constexpr int kNearTries = 8, kFarTries = 4;
  std::vector<uint64_t> refused;
  cudaError_t e = cudaErrorMemoryAllocation;
  for (int attempt = 0; attempt < kNearTries + kFarTries; ++attempt) {
    const uint64_t at = rt.tables.reserve_placement(size, attempt >= kNearTries);
    if (at == 0) break;
    funnel::ipc::MemAllocCmd c{size, at};
    e = to_cuda(rt.call(Opcode::MemAlloc, device, 0, &c, sizeof c, nullptr));
    if (e == cudaSuccess) {
      addr = at;
      rt.tables.add_placed_alloc(addr, DeviceAlloc{size, device, false});
      break;
    }
    if (e != cudaErrorAlreadyMapped) {
      rt.tables.release_placements({&at, 1}, size);
      break;
    }
    refused.push_back(at);
  }
  rt.tables.release_placements(refused, size);
  return e == cudaErrorAlreadyMapped ? cudaErrorMemoryAllocation : e;
}

}  // namespace

cudaError_t device_alloc(void** ptr, size_t size, Opcode op, const StreamRef& on) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;  // CUDA hands out nullptr for 0 bytes
  Runtime& rt = Runtime::get();
  const bool pooled = op == Opcode::MemAllocAsync;
  // A range that clashes with our own memory is kept (so the server hands out another)
  // until one fits, then given back.
  std::vector<uint64_t> clashing;
  uint64_t addr = 0;
  cudaError_t e = cudaSuccess;
  // Asking again usually escapes (a larger allocation gets fresh addresses); after eight
  // tries a plain allocation is placed (a pooled one cannot be).
  for (int attempt = 0; attempt < 8; ++attempt) {
    funnel::ipc::MemAllocCmd c{size, 0};
    Reply r;
    if (e = to_cuda(rt.call(op, on.device, on.id, &c, sizeof c, &r)); e != cudaSuccess) break;
    if (rt.tables.add_alloc(r.value[0], DeviceAlloc{size, on.device, pooled})) {
      addr = r.value[0];
      break;
    }
    clashing.push_back(r.value[0]);
  }
  for (uint64_t a : clashing) {
    funnel::ipc::AddressCmd c{a};
    if (pooled)
      rt.post(Opcode::MemFreeAsync, on.device, on.id, &c, sizeof c);
    else
      rt.call(Opcode::MemFree, on.device, 0, &c, sizeof c);
  }
  if (e == cudaSuccess && addr == 0 && !pooled) e = place_device_alloc(rt, size, on.device, addr);
  if (e != cudaSuccess) return e;
  if (addr == 0) return cudaErrorMemoryAllocation;  // every range clashed
  *ptr = reinterpret_cast<void*>(addr);
  return cudaSuccess;
}

cudaError_t device_free(void* ptr, Opcode op, const StreamRef& on) {
  Runtime& rt = Runtime::get();
  const auto addr = reinterpret_cast<uint64_t>(ptr);
  // A graph's memory stays the graph's for its later launches (doc/design/graphs.md, "Memory
  // nodes"): freed with the graph.
  if (const Classified c = rt.tables.classify(ptr); c.kind == Classified::Device && c.graph && c.base == addr)
    return cudaSuccess;
  const std::optional<DeviceAlloc> freed = rt.tables.remove_alloc(addr);
  if (!freed) return cudaErrorInvalidValue;
  const int device = freed->device;
  funnel::ipc::AddressCmd c{addr};
  if (op == Opcode::MemFree) return to_cuda(rt.call(op, device, 0, &c, sizeof c));
  return to_cuda(rt.post(op, on.id == 0 ? device : on.device, on.id, &c, sizeof c));
}

cudaError_t address_reserve(uint64_t size, uint64_t alignment, uint64_t& out) {
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  std::vector<uint64_t> clashing;
  cudaError_t e = cudaSuccess;
  out = 0;
  for (int attempt = 0; attempt < 8 && out == 0; ++attempt) {
    const funnel::ipc::AddressReserveCmd c{size, alignment};
    Reply r;
    if (e = to_cuda(rt.call(Opcode::AddressReserve, current_device(), 0, &c, sizeof c, &r)); e != cudaSuccess) break;
    if (rt.tables.add_reservation(r.value[0], size))
      out = r.value[0];
    else
      clashing.push_back(r.value[0]);
  }
  for (uint64_t a : clashing) {
    const funnel::ipc::AddressRangeCmd c{a, size};
    rt.call(Opcode::AddressFree, current_device(), 0, &c, sizeof c);
  }
  if (e == cudaSuccess && out == 0) e = cudaErrorMemoryAllocation;  // every range clashed
  return e;
}

cudaError_t address_free(uint64_t addr, uint64_t size) {
  Runtime& rt = Runtime::get();
  const funnel::ipc::AddressRangeCmd c{addr, size};
  if (cudaError_t e = to_cuda(rt.call(Opcode::AddressFree, current_device(), 0, &c, sizeof c)); e != cudaSuccess)
    return e;
  rt.tables.remove_reservation(addr, size);
  return cudaSuccess;
}

cudaError_t map_memory(uint64_t addr, uint64_t size, int device) {
  Runtime& rt = Runtime::get();
  const funnel::ipc::AddressRangeCmd c{addr, size};
  if (cudaError_t e = to_cuda(rt.call(Opcode::MemMap, device, 0, &c, sizeof c)); e != cudaSuccess) return e;
  // The range is reserved here (the server checked that it lies in a reservation of ours).
  if (!rt.tables.add_alloc(addr, DeviceAlloc{size, device, false, true})) {
    rt.call(Opcode::MemUnmap, device, 0, &c, sizeof c);
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

cudaError_t unmap_memory(uint64_t addr, uint64_t size) {
  Runtime& rt = Runtime::get();
  const std::optional<DeviceAlloc> a = rt.tables.device_range(addr, size);
  if (!a || !a->mapped) return cudaErrorInvalidValue;
  const funnel::ipc::AddressRangeCmd c{addr, size};
  if (cudaError_t e = to_cuda(rt.call(Opcode::MemUnmap, a->device, 0, &c, sizeof c)); e != cudaSuccess) return e;
  rt.tables.remove_alloc(addr, true);
  return cudaSuccess;
}

// cudaMallocPitch and cudaMalloc3D: `rows` rows of `width` bytes, each starting 512 bytes
// after the previous one's start at the least (the row alignment cudaMallocPitch gives on
// current GPUs).
cudaError_t pitched_alloc(void** ptr, size_t* pitch, size_t width, size_t rows, const StreamRef& on) {
  if (ptr == nullptr || pitch == nullptr) return cudaErrorInvalidValue;
  constexpr size_t kRowAlignment = 512;
  size_t bytes = 0;
  if (width > SIZE_MAX - (kRowAlignment - 1)) return cudaErrorMemoryAllocation;
  *pitch = (width + kRowAlignment - 1) / kRowAlignment * kRowAlignment;
  if (__builtin_mul_overflow(*pitch, rows, &bytes)) return cudaErrorMemoryAllocation;
  return device_alloc(ptr, bytes, Opcode::MemAlloc, on);
}

}  // namespace funnel::client
