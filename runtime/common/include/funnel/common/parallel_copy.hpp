// Host-side memcpy of a large region split across a few helper threads.
//
// A pageable cudaMemcpy goes through the staging buffers: the client copies each chunk
// into (or out of) a staging slot and the server DMAs it.  One core's memcpy (about
// 10 GB/s on the H100 machine) is far slower than the DMA (about 50 GB/s), so the
// pipeline runs at memcpy speed; with a few threads copying parts of each chunk it runs
// at the driver's own pageable speed or better (doc/performance.md).
//
// One copy at a time uses the helpers; a caller that finds them busy copies alone.
// Helpers spin briefly after a copy (the next chunk of a pipeline follows within tens of
// microseconds), then sleep until the next one.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace funnel {

class ParallelCopy {
 public:
  // `threads` counts the caller: 1 never starts a helper.  Capped at the number of CPUs
  // this process may run on (an MPI rank bound to one core gets no helpers).
  explicit ParallelCopy(unsigned threads);
  ~ParallelCopy();
  ParallelCopy(const ParallelCopy&) = delete;
  ParallelCopy& operator=(const ParallelCopy&) = delete;

  // Copies `rows` rows of `width` bytes (a 1-D copy: rows = 1).  Regions must not overlap.
  void copy(std::byte* dst, uint64_t dst_pitch, const std::byte* src, uint64_t src_pitch, uint64_t width,
            uint64_t rows) noexcept;

  unsigned threads() const noexcept { return static_cast<unsigned>(helpers_.size()) + 1; }

  // Below this many bytes a copy is not split (waking a helper costs more than it saves).
  static constexpr uint64_t kMinSplit = 512 * 1024;

 private:
  struct Job {
    std::byte* dst = nullptr;
    uint64_t dst_pitch = 0;
    const std::byte* src = nullptr;
    uint64_t src_pitch = 0;
    uint64_t width = 0;
    uint64_t rows = 0;
    unsigned parts = 0;
  };
  void helper_loop() noexcept;
  void run_parts() noexcept;  // claims and copies parts of job_ until none is left
  void copy_part(unsigned part) noexcept;

  std::mutex busy_;  // held by the caller whose copy uses the helpers
  Job job_;          // written only while active_ is false and no helper is inside
  std::atomic<bool> active_{false};
  std::atomic<unsigned> next_part_{0};
  std::atomic<unsigned> done_parts_{0};
  std::atomic<unsigned> inside_{0};  // helpers currently reading job_
  std::atomic<uint32_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> helpers_;
};

}  // namespace funnel
