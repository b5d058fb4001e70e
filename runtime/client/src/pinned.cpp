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

cudaError_t pinned_alloc(void** ptr, size_t size, unsigned flags) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  funnel::ipc::PinnedAllocCmd c{size, flags, 0};
  Reply r;
  if (cudaError_t e = to_cuda(rt.call(Opcode::PinnedAlloc, current_device(), 0, &c, sizeof c, &r)); e != cudaSuccess) {
    if (e == cudaErrorMemoryAllocation) report_pinned_failure(rt, size);
    return e;
  }
  const uint64_t id = r.value[0];
  const auto path =
      rt.settings()->run_dir / fmt::format("{}{}.{}", funnel::ipc::kPinnedFilePrefix, rt.view().header().client_id, id);
  auto file = std::make_shared<funnel::ipc::MappedFile>();
  try {
    *file = funnel::ipc::MappedFile::open(path, r.value[1]);
  } catch (const std::exception& e) {
    log_error(fmt::format("funnel: cudaMallocHost: {}", e.what()));
    funnel::ipc::PinnedFreeCmd f{id};
    (void)rt.call(Opcode::PinnedFree, current_device(), 0, &f, sizeof f);
    return cudaErrorMemoryAllocation;
  }
  ::unlink(path.c_str());  // mapped: the name is no longer needed (see channel.md)
  void* p = file->data();
  rt.tables.add_pinned(reinterpret_cast<uintptr_t>(p), PinnedAlloc{id, size, std::move(file)});
  *ptr = p;
  return cudaSuccess;
}

cudaError_t pinned_free(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  std::optional<PinnedAlloc> a = rt.tables.remove_pinned(reinterpret_cast<uintptr_t>(ptr));
  if (!a) return cudaErrorInvalidValue;
  // Synchronous on the server (after earlier work), then our mapping goes.
  ipc::PinnedFreeCmd c{a->id};
  const cudaError_t e = to_cuda(rt.call(Opcode::PinnedFree, current_device(), 0, &c, sizeof c));
  a->file.reset();
  return e;
}

}  // namespace funnel::client
