// Where a client with a GPU fraction runs (FUNNEL_GPU_FRACTION, doc/mpi.md "GPU fraction").
// A device's SMs are split once into groups at the hardware's granularity (Backend::
// sm_groups: 16 groups of 8 SMs on an H100); a client asking for a share of the device
// gets a partition (a green context) over floor(share x SMs / group size) groups, at least
// one -- rounded down, as MPS rounds its active thread percentage.
//   shared   (the default) the groups with the fewest clients, a window after the last
//            one handed out, so that n clients of 2/n each (MPS's 100/(0.5n) advice) spread
//            evenly and overlap pairwise.  Groups a disjoint client holds count as full.
//   disjoint groups no other disjoint client holds; when too few are free the attach
//            fails (PartitionUnavailable) instead of overlapping.
// Clients asking the same groups share one partition.  What acquire returns is a lease: a
// client's streams hold it, and the groups are given back once the last of them is gone.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>

#include "funnel/ipc/protocol.hpp"
#include "funnel/server/backend.hpp"

namespace funnel::server {

// Not enough free SMs for a disjoint partition: the attach fails with this message.
class PartitionUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class SmPartitions {
 public:
  explicit SmPartitions(Backend& backend);
  ~SmPartitions();
  SmPartitions(const SmPartitions&) = delete;
  SmPartitions& operator=(const SmPartitions&) = delete;

  // The partition of `device` for `share_bp` / 10000 of its SMs; null when the share is
  // the whole device (0 or >= 10000).  Throws PartitionUnavailable (disjoint: too few
  // free groups) or std::runtime_error (the backend cannot make one), naming the fix.
  std::shared_ptr<BackendPartition> acquire(int device, uint32_t share_bp, ipc::GpuPlacement placement);
  // The SMs such a partition has (what the client is told); 0: the whole device.
  uint32_t sms_for_share(int device, uint32_t share_bp);

  // How many clients use each group of `device` (shared ones count 1 each; a disjoint
  // holder shows as -1).  For tests and funnelctl.
  std::vector<int> group_use(int device);

 private:
  struct State;
  struct Lease;
  std::shared_ptr<State> state_;
  // The device's layout, made known on first use; the caller holds the state's lock.
  const SmGroups& layout_locked(int device);
};

// The number of groups a share asks for (at least one, at most all).
uint32_t groups_for_share(const SmGroups& layout, uint32_t share_bp) noexcept;

}  // namespace funnel::server
