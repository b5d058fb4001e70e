// Pinned host memory: pinned.hpp.
#include "pinned.hpp"

#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <optional>

#include "api.hpp"
#include "funnel/ipc/protocol.hpp"

namespace funnel::client {
namespace {

// Pinned buffers are files in the run directory: say why one could not be made, once.
void report_pinned_failure(Runtime& rt, size_t size) noexcept {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  const auto& dir = rt.settings()->run_dir;
  struct statvfs fs {};
  const bool known = ::statvfs(dir.c_str(), &fs) == 0;
  const uint64_t free_bytes = known ? uint64_t{fs.f_bavail} * fs.f_frsize : 0;
  if (known && free_bytes < size)
    log_error(
        fmt::format("funnel: cudaMallocHost({} bytes) failed: pinned buffers live in the run directory {} "
                    "(FUNNEL_RUN_DIR), whose file system has {} MiB free. Free space there, raise its size "
                    "(/dev/shm by default), or point FUNNEL_RUN_DIR at a larger tmpfs",
                    size, dir.string(), free_bytes >> 20));
  else
    log_error(
        fmt::format("funnel: cudaMallocHost({} bytes) failed: funnel-server could not pin it; its log in {} "
                    "(FUNNEL_LOG_DIR) says why",
                    size, rt.settings()->log_dir.string()));
}

}  // namespace

namespace {

// One PinnedAlloc round trip and the mapping here: at the server's address when it is free here;
// elsewhere if not, unless `same_address` (then nullptr, the server's buffer freed again).
cudaError_t map_pinned(Runtime& rt, size_t size, unsigned flags, bool same_address, void*& out, PinnedAlloc& entry) {
  funnel::ipc::PinnedAllocCmd c{size, flags, 0};
  Reply r;
  if (cudaError_t e = to_cuda(rt.call(Opcode::PinnedAlloc, current_device(), 0, &c, sizeof c, &r)); e != cudaSuccess) {
    if (e == cudaErrorMemoryAllocation) report_pinned_failure(rt, size);
    return e;
  }
  const uint64_t id = r.value[0];
  const auto path =
      rt.settings()->run_dir / fmt::format("{}{}.{}", funnel::ipc::kPinnedFilePrefix, rt.view().header().client_id, id);
  const uint64_t server_address = r.value[2];
  auto file = std::make_shared<funnel::ipc::MappedFile>();
  auto give_back = [&] {
    funnel::ipc::PinnedFreeCmd f{id};
    (void)rt.call(Opcode::PinnedFree, current_device(), 0, &f, sizeof f);
  };
  try {
    if (server_address != 0 && server_address % 4096 == 0)
      *file = funnel::ipc::MappedFile::open_at(path, r.value[1], reinterpret_cast<const void*>(server_address));
    if (!*file && same_address) {
      give_back();
      out = nullptr;
      return cudaSuccess;
    }
    if (!*file) {
      *file = funnel::ipc::MappedFile::open(path, r.value[1]);
      static std::atomic<bool> said{false};
      if (!said.exchange(true))
        log_error("funnel: a pinned buffer could not be placed at the address the GPU sees it at (that address is "
                  "in use in this process): its kernels must use the pointer cudaHostGetDevicePointer gives, not "
                  "the host pointer");
    }
  } catch (const std::exception& e) {
    log_error(fmt::format("funnel: cudaMallocHost: {}", e.what()));
    give_back();
    return cudaErrorMemoryAllocation;
  }
  ::unlink(path.c_str());  // mapped: the name is no longer needed (see channel.md)
  out = file->data();
  entry = PinnedAlloc{id, size, std::move(file), server_address};
  return cudaSuccess;
}

}  // namespace

// At the server's address if that is free here: the GPU sees registered memory at the server's
// address, so the program's pointer is then the one its kernels may use (zero-copy, as under
// unified addressing); elsewhere if not (cudaHostGetDevicePointer then differs).  Managed memory
// must be at the same address: a few more tries, then it fails.
cudaError_t pinned_alloc(void** ptr, size_t size, unsigned flags, bool managed) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  void* p = nullptr;
  PinnedAlloc entry{};
  for (int attempt = 0; attempt < (managed ? 8 : 1) && p == nullptr; ++attempt)
    if (cudaError_t e = map_pinned(rt, size, flags, managed, p, entry); e != cudaSuccess) return e;
  if (p == nullptr) {
    log_error(fmt::format("funnel: cudaMallocManaged({} bytes) failed: no address the server chose for it was free "
                          "in this process (its managed memory must have the same address in both)",
                          size));
    return cudaErrorMemoryAllocation;
  }
  entry.managed = managed;
  entry.flags = flags;
  rt.tables.add_pinned(reinterpret_cast<uintptr_t>(p), std::move(entry));
  *ptr = p;
  return cudaSuccess;
}

cudaError_t pinned_device_pointer(void** device, void* host, unsigned flags, const char* call) {
  if (device == nullptr || host == nullptr || flags != 0) return cudaErrorInvalidValue;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  const Classified c = rt.tables.classify(host);
  if (c.kind != Classified::Pinned || c.pinned_device == 0) {
    // Registered memory of the program's own stays in its process: the GPU cannot reach it.
    if (c.kind == Classified::Host && rt.tables.is_registered(reinterpret_cast<uintptr_t>(host))) {
      report_unsupported(fmt::format("{} of memory registered with cudaHostRegister (not mapped for the GPU)", call).c_str());
      return cudaErrorNotSupported;
    }
    return cudaErrorInvalidValue;
  }
  *device = reinterpret_cast<void*>(c.pinned_device + (reinterpret_cast<uint64_t>(host) - c.base));
  return cudaSuccess;
}

cudaError_t pinned_free(void* ptr, bool managed) {
  if (ptr == nullptr) return cudaSuccess;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  const Classified what = rt.tables.classify(ptr);
  if (what.kind != Classified::Pinned || what.base != reinterpret_cast<uint64_t>(ptr) || what.managed != managed)
    return cudaErrorInvalidValue;
  std::optional<PinnedAlloc> a = rt.tables.remove_pinned(reinterpret_cast<uintptr_t>(ptr));
  if (!a) return cudaErrorInvalidValue;
  // Synchronous on the server (after earlier work), then our mapping goes.
  ipc::PinnedFreeCmd c{a->id};
  const cudaError_t e = to_cuda(rt.call(Opcode::PinnedFree, current_device(), 0, &c, sizeof c));
  a->file.reset();
  return e;
}

}  // namespace funnel::client
