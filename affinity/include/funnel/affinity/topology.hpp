// The node's hardware as hwloc sees it, reduced to what placement needs: the physical cores
// (each with its hyperthreads) and where each GPU sits. hwloc stays behind this header.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "funnel/affinity/cpu_list.hpp"

namespace funnel::affinity {

// A failed hwloc call; the message names the call and errno.
class TopologyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct GpuLocality {
  std::string bus_id;  // as asked for
  std::string where;   // "Package P#1, NUMANode P#1": the GPU's nearest CPU-side object
  CpuList cpus;        // every PU of that object
};

class Topology {
 public:
  // The machine this process runs on, restricted (hwloc's default) to what its cgroup allows,
  // e.g. the job's Slurm allocation; not to this process's own CPU binding, which a server
  // started by a rank inherits from that rank.
  static Topology this_machine();
  // A topology exported with `lstopo --of xml`; for tests and `funnelctl plan -i`.
  static Topology from_xml_file(const std::filesystem::path& path);
  static Topology from_xml(std::string_view xml);

  Topology(Topology&&) noexcept;
  Topology& operator=(Topology&&) noexcept;
  ~Topology();

  // Each physical core as the list of its PUs, in topology order; a PU counts as a core of its
  // own where the topology has no Core level.
  const std::vector<CpuList>& cores() const;
  // The PCI bus ids ("0000:19:00.0") of the GPUs (PCI class 3D controller, or VGA from NVIDIA).
  std::vector<std::string> gpu_bus_ids() const;
  // Where the GPU with this PCI bus id ("0000:19:00.0" or "19:00.0") sits; nullopt when the
  // topology has no such PCI device.
  std::optional<GpuLocality> locate_gpu(std::string_view bus_id) const;

 private:
  struct Impl;
  explicit Topology(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace funnel::affinity
