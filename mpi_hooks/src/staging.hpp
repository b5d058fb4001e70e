// Device buffers in MPI calls, staged through pinned host memory (doc/mpi.md, "Device buffers"):
// what a (buffer, count, datatype) argument is to funnel, and the host copy of a device one that
// the call hands to PMPI instead.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace funnel::mpi {

// The bytes an argument covers: count elements of the datatype from buf (true lower bound and
// extent: what MPI may read or write), as an offset from buf and a length.
struct Extent {
  std::ptrdiff_t offset = 0;
  size_t bytes = 0;
  bool dense = true;  // every byte of it is an element's (no gaps between or inside elements)
};
Extent extent_of(int count, MPI_Datatype type) noexcept;
// The same for the v-variants: counts[i] elements at displs[i] extents, i < n.
Extent extent_of(const int* counts, const int* displs, int n, MPI_Datatype type) noexcept;

enum class Kind { Host, Device, Invalid };
// Host: memory this process can read and write (pageable, pinned, managed); Device: inside one
// live device allocation of this process; Invalid: neither (a freed device buffer, one past its
// allocation's end, another process's).  Empty extents are Host.
Kind kind_of(const void* buf, Extent e) noexcept;

// A pinned host buffer from the pool (cudaMallocHost through funnel), back to the pool when done.
class StagingBuffer {
 public:
  StagingBuffer() = default;
  explicit StagingBuffer(size_t bytes);
  StagingBuffer(StagingBuffer&& o) noexcept : p_(o.p_), size_(o.size_) { o.p_ = nullptr; }
  StagingBuffer& operator=(StagingBuffer&& o) noexcept;
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;
  ~StagingBuffer();
  std::byte* data() const noexcept { return static_cast<std::byte*>(p_); }
  explicit operator bool() const noexcept { return p_ != nullptr; }

 private:
  void* p_ = nullptr;
  size_t size_ = 0;  // its pool size class
};

// One buffer argument of one call.  `in`: the call reads it (copied to the host before the call
// when it is device memory); `out`: the call writes it (copied back after the call, or when its
// request completes).  ptr() is what PMPI gets: the argument itself, or the host copy at the same
// offset.  ok() is false for an Invalid buffer or a failed copy: the caller raises MPI_ERR_BUFFER.
class Staged {
 public:
  Staged() = default;
  Staged(const void* buf, Extent e, bool in, bool out, const char* call);
  Staged(Staged&&) noexcept = default;
  Staged& operator=(Staged&&) noexcept = default;
  bool ok() const noexcept { return ok_; }
  bool staged() const noexcept { return static_cast<bool>(host_); }
  void* ptr() const noexcept { return ptr_; }
  // The host copy back to the device (out buffers); false when the copy failed.
  bool finish() noexcept;
  // The device bytes to the host copy again (a persistent send's MPI_Start).
  bool refill() noexcept;

 private:
  bool copy(bool to_device, const char* call) noexcept;  // the whole extent, one way

  void* ptr_ = nullptr;
  std::byte* device_ = nullptr;  // the extent's first byte on the device
  size_t bytes_ = 0;
  bool out_ = false;
  bool ok_ = true;
  StagingBuffer host_;
};

// Requests whose staged buffers wait for their completion: a send's host copy is kept alive, a
// receive's is copied back to the device.
void keep_until_done(MPI_Request request, std::vector<Staged> buffers);
// Persistent requests (MPI_Send_init, MPI_Recv_init, ...): the host copy PMPI was given lives as
// long as the request; each MPI_Start of a send refills it (start_persistent), each completion of
// a receive copies it back.
void keep_persistent(MPI_Request request, Staged buffer, bool send);
bool start_persistent(MPI_Request request) noexcept;
// After PMPI completed `request` (its handle as it was before the completion call).
bool complete(MPI_Request request) noexcept;
// MPI_Request_free: a persistent request's host copy goes; an active staged one's is kept until the
// process ends (MPI finishes it on its own), a receive's data then never reaches the device (said).
void free_request(MPI_Request request) noexcept;
// Whether any request has staged buffers (the Wait/Test wrappers' fast path).
bool any_pending() noexcept;

// One stderr line, "funnel (libfunnel_mpi, pid P): what".
void warn(const char* what) noexcept;

// MPI_ERR_BUFFER through the communicator's error handler (it may abort the job, as MPI does).
int buffer_error(MPI_Comm comm) noexcept;

}  // namespace funnel::mpi
