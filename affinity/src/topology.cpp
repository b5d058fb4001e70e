// The hwloc adapter: loads a topology with its PCI devices and reduces it to cores and GPU
// localities. Every hwloc call that can fail goes through FUNNEL_HWLOC_CHECK.
#include "funnel/affinity/topology.hpp"

#include <fmt/format.h>
#include <hwloc.h>

#include <cerrno>
#include <cstring>
#include <limits>

namespace funnel::affinity {

namespace {

int check_hwloc(int rc, const char* call) {
  if (rc < 0) throw TopologyError(fmt::format("{} failed: {}", call, std::strerror(errno)));
  return rc;
}

#define FUNNEL_HWLOC_CHECK(expr) check_hwloc((expr), #expr)

// hwloc_bitmap_foreach_begin uses C casts, which -Wold-style-cast rejects.
CpuList to_cpu_list(hwloc_const_bitmap_t set) {
  CpuList cpus;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) cpus.push_back(static_cast<unsigned>(i));
  return cpus;
}

constexpr unsigned short kPciClass3D = 0x0302;
constexpr unsigned short kPciClassVga = 0x0300;
constexpr unsigned short kPciVendorNvidia = 0x10de;

bool is_gpu(hwloc_obj_t obj) {
  const auto& pci = obj->attr->pcidev;
  return pci.class_id == kPciClass3D || (pci.class_id == kPciClassVga && pci.vendor_id == kPciVendorNvidia);
}

// "Package P#1, NUMANode P#1": the enclosing package and the NUMA nodes local to the object.
std::string describe(hwloc_topology_t topo, hwloc_obj_t obj) {
  std::string where;
  hwloc_obj_t package = obj->type == HWLOC_OBJ_PACKAGE ? obj : hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, obj);
  if (package != nullptr) where = fmt::format("Package P#{}", package->os_index);
  if (obj->type != HWLOC_OBJ_PACKAGE && obj->type != HWLOC_OBJ_MACHINE)
    where += fmt::format("{}{} L#{}", where.empty() ? "" : ", ", hwloc_obj_type_string(obj->type), obj->logical_index);
  if (obj->nodeset != nullptr && !hwloc_bitmap_iszero(obj->nodeset)) {
    for (unsigned node : to_cpu_list(obj->nodeset)) where += fmt::format("{}NUMANode P#{}", where.empty() ? "" : ", ", node);
  }
  return where.empty() ? "Machine" : where;
}

}  // namespace

struct Topology::Impl {
  hwloc_topology_t topo = nullptr;
  std::vector<CpuList> cores;

  Impl() { FUNNEL_HWLOC_CHECK(hwloc_topology_init(&topo)); }
  ~Impl() { hwloc_topology_destroy(topo); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // PCI devices are filtered out by default; placement needs the GPUs and their bridges.
  void keep_pci() { FUNNEL_HWLOC_CHECK(hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT)); }

  void load() {
    FUNNEL_HWLOC_CHECK(hwloc_topology_load(topo));
    const int core_depth = hwloc_get_type_depth(topo, HWLOC_OBJ_CORE);
    const hwloc_obj_type_t unit = core_depth >= 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    for (hwloc_obj_t obj = hwloc_get_next_obj_by_type(topo, unit, nullptr); obj != nullptr;
         obj = hwloc_get_next_obj_by_type(topo, unit, obj)) {
      CpuList pus = to_cpu_list(obj->cpuset);
      if (!pus.empty()) cores.push_back(std::move(pus));
    }
  }
};

Topology::Topology(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;
Topology::~Topology() = default;

Topology Topology::this_machine() {
  auto impl = std::make_unique<Impl>();
  impl->keep_pci();
  // Linux's own component reads the PCI devices from sysfs; the libpciaccess one ("pci")
  // adds nothing placement needs, costs time and leaks about 1 KB per load (seen under ASan).
  // Where that plugin is not installed (the H100 machine) or HWLOC_COMPONENTS chose the
  // components already (as Open MPI's launcher may), hwloc answers EINVAL: nothing to leave out.
  (void)hwloc_topology_set_components(impl->topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
  impl->load();
  return Topology(std::move(impl));
}

Topology Topology::from_xml_file(const std::filesystem::path& path) {
  auto impl = std::make_unique<Impl>();
  impl->keep_pci();
  const std::string name = path.string();
  if (hwloc_topology_set_xml(impl->topo, name.c_str()) < 0)
    throw TopologyError(fmt::format("hwloc_topology_set_xml({}) failed: {}", name, std::strerror(errno)));
  impl->load();
  return Topology(std::move(impl));
}

Topology Topology::from_xml(std::string_view xml) {
  auto impl = std::make_unique<Impl>();
  impl->keep_pci();
  if (xml.size() >= static_cast<std::size_t>(std::numeric_limits<int>::max())) throw TopologyError("topology XML too large");
  // hwloc wants the length including the terminating NUL.
  const std::string buffer(xml);
  FUNNEL_HWLOC_CHECK(hwloc_topology_set_xmlbuffer(impl->topo, buffer.c_str(), static_cast<int>(buffer.size() + 1)));
  impl->load();
  return Topology(std::move(impl));
}

const std::vector<CpuList>& Topology::cores() const { return impl_->cores; }

std::vector<std::string> Topology::gpu_bus_ids() const {
  std::vector<std::string> ids;
  for (hwloc_obj_t obj = hwloc_get_next_pcidev(impl_->topo, nullptr); obj != nullptr;
       obj = hwloc_get_next_pcidev(impl_->topo, obj)) {
    if (!is_gpu(obj)) continue;
    const auto& pci = obj->attr->pcidev;
    ids.push_back(fmt::format("{:04x}:{:02x}:{:02x}.{:01x}", pci.domain, pci.bus, pci.dev, pci.func));
  }
  return ids;
}

std::optional<GpuLocality> Topology::locate_gpu(std::string_view bus_id) const {
  const std::string id(bus_id);
  hwloc_obj_t dev = hwloc_get_pcidev_by_busidstring(impl_->topo, id.c_str());
  if (dev == nullptr) return std::nullopt;
  hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(impl_->topo, dev);
  if (near == nullptr || near->cpuset == nullptr) return std::nullopt;
  return GpuLocality{id, describe(impl_->topo, near), to_cpu_list(near->cpuset)};
}

}  // namespace funnel::affinity
