// The cuda backend: funnel::server::Backend over the CUDA driver API.  Its calls are
// defined by concern: memory.cpp (allocations, host registration, copies, memsets),
// streams.cpp (streams, events, stream memory operations), partitions.cpp (SM partitions),
// kernels.cpp (modules, kernels, their attributes and occupancy), launch.cpp (launches and
// launch batches), cuda_backend.cpp (devices, limits, reset, and make_cuda_backend).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/device.hpp"
#include "backend/cuda/objects.hpp"
#include "funnel/server/backend.hpp"

namespace funnel::server::cuda {

class CudaGraphTree;  // graphs.cpp
// A copy with an array end as one cuMemcpy3D of depth 1 (arrays.cpp).
CUDA_MEMCPY3D array_copy_params(const CopyDesc& c);

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(std::shared_ptr<Shared> shared) : s_(std::move(shared)) {}

  const char* name() const noexcept override { return "cuda"; }
  int device_count() const noexcept override { return static_cast<int>(s_->devices.size()); }

  // cuda_backend.cpp
  void describe(int device, ipc::DeviceRecord& out) override;
  void priority_range(int device, int& least, int& greatest) override;
  Status set_limit(int device, Limit limit, uint64_t value) override;
  Status get_limit(int device, Limit limit, uint64_t& value) override;
  Status set_profiling(int device, bool on) override;
  Status reset_device(int device) override;

  // No.  tests/gpu/recovery_probe.cpp (H100, driver 580): after an illegal-address fault,
  // cuDevicePrimaryCtxReset succeeds but every later cuDevicePrimaryCtxRetain answers
  // CUDA_ERROR_ILLEGAL_ADDRESS, whatever was released or destroyed first, and so does
  // cuCtxCreate of a new context: the sticky error lasts as long as the process ("the
  // process must be terminated and relaunched", as CUDA documents).  The server restarts.
  bool resets_in_process() const noexcept override { return false; }

  // memory.cpp
  Status mem_get_info(int device, uint64_t& free_bytes, uint64_t& total_bytes) override;
  Status mem_alloc(int device, uint64_t size, DeviceAddress& out) override;
  Status mem_alloc_at(int device, uint64_t size, DeviceAddress at) override;
  Status address_reserve(uint64_t size, uint64_t alignment, DeviceAddress& out) override;
  Status address_free(DeviceAddress at, uint64_t size) override;
  Status mem_map(int device, DeviceAddress at, uint64_t size) override;
  Status mem_unmap(int device, DeviceAddress at, uint64_t size) override;
  Status mem_free(int device, DeviceAddress address) override;
  Status mem_alloc_async(BackendStream& bs, uint64_t size, DeviceAddress& out) override;
  Status mem_free_async(BackendStream& bs, DeviceAddress address) override;
  Status host_register(void* p, uint64_t size) override;
  Status host_unregister(void* p) override;
  Status copy(BackendStream& bs, const CopyDesc& c) override;
  // arrays.cpp
  Status array_create(int device, const ArrayShape& shape, std::unique_ptr<BackendArray>& out) override;
  Status array_level(BackendArray& mipmap, uint32_t level, std::unique_ptr<BackendArray>& out) override;
  Status texture_create(int device, const ipc::TexCreateCmd& c, const BackendArray* array, uint64_t& handle) override;
  Status texture_destroy(int device, uint64_t handle, bool surface) override;
  Status memset(BackendStream& bs, DeviceAddress dst, uint64_t pitch, uint64_t width, uint64_t height,
                uint32_t value, uint32_t element) override;

  // streams.cpp
  Status create_stream(int device, int priority, const std::shared_ptr<BackendPartition>& partition,
                       std::unique_ptr<BackendStream>& out) override;
  Status create_event(int device, bool timing, std::unique_ptr<BackendEvent>& out) override;
  Status record(BackendEvent& be, BackendStream& bs) override;
  Status write_value(BackendStream& bs, std::atomic<uint32_t>& word, uint32_t value) override;
  Status write_values(BackendStream& bs, std::span<std::atomic<uint32_t>* const> words,
                      std::span<const uint32_t> values) override;
  Status stream_mem_op(BackendStream& bs, DeviceAddress address, ipc::StreamMemOp op, uint64_t value,
                       uint32_t flags) override;
  Status store_word(BackendStream& bs, std::atomic<uint32_t>& word, uint32_t value) override;
  Status wait(BackendStream& bs, BackendEvent& be) override;
  Status query(BackendEvent& be) override;
  Status query(BackendStream& bs) override;
  Status elapsed_ms(BackendEvent& start, BackendEvent& end, float& ms) override;
  Status synchronize(BackendStream& bs) override;
  Status wait_value(BackendStream& bs, std::atomic<uint32_t>& word, uint32_t value) override;

  // partitions.cpp
  Status sm_groups(int device, SmGroups& out) override;
  Status create_partition(int device, std::span<const uint32_t> groups,
                          std::shared_ptr<BackendPartition>& out) override;

  // kernels.cpp
  Status module_load(std::span<const std::byte> image, std::unique_ptr<BackendModule>& out) override;
  Status kernel_get(BackendModule& bm, const std::string& name, std::unique_ptr<BackendKernel>& out,
                    std::vector<ParamLayout>& params, uint32_t& param_bytes) override;
  Status global_get(BackendModule& bm, int device, const std::string& name, DeviceAddress& address,
                    uint64_t& size, bool& managed) override;
  Status func_attributes(BackendKernel& bk, int device, ipc::FuncAttributes& out) override;
  Status func_set_attribute(BackendKernel& bk, int device, uint32_t attribute, int32_t value) override;
  Status occupancy(BackendKernel& bk, int device, uint32_t block_size, uint64_t dynamic_shared_bytes, uint32_t flags,
                   int& blocks_per_sm) override;
  Status available_dynamic_smem(BackendKernel& bk, int device, uint32_t blocks_per_sm, uint32_t block_size,
                                uint64_t& bytes) override;
  Status max_active_clusters(BackendKernel& bk, int device, const LaunchDesc& d, int& clusters) override;
  Status max_cluster_size(BackendKernel& bk, int device, const LaunchDesc& d, int& size) override;
  Status tensor_map_encode(int device, const ipc::TensorMapCmd& c,
                           std::array<std::byte, ipc::kTensorMapBytes>& map) override;
  Status reset_persisting_l2(int device) override;
  Status stream_access_policy(BackendStream& bs, DeviceAddress base, uint64_t bytes, float hit_ratio, uint32_t hit_prop,
                              uint32_t miss_prop) override;

  // launch.cpp
  Status launch(BackendStream& bs, BackendKernel& bk, const LaunchDesc& l, std::span<const std::byte> params) override;
  Status launch_batch(BackendStream& bs, std::span<const BatchedLaunch> launches, size_t& launched) override;

  // graphs.cpp
  Status graph_instantiate(int device, std::span<const GraphNodeDesc> nodes, std::unique_ptr<BackendGraph>& out,
                           BackendGraphTree* tree) override;
  Status graph_tree_create(int device, std::unique_ptr<BackendGraphTree>& out) override;
  Status graph_tree_handle(BackendGraphTree& t, uint32_t part, uint32_t default_value, uint32_t flags,
                           uint64_t& handle) override;
  Status graph_tree_cond(BackendGraphTree& t, uint32_t part, uint64_t handle, uint32_t type, uint32_t size) override;
  Status graph_tree_cond_destroy(BackendGraphTree& t, uint32_t cond) override;
  Status graph_update(BackendGraph& g, std::span<const GraphNodeDesc> nodes, BackendGraphTree* tree) override;
  Status graph_launch(BackendStream& bs, BackendGraph& g) override;
  Status graph_upload(BackendStream& bs, BackendGraph& g) override;

 private:
  Status host_word_op(BackendStream& bs, CudaStream*& out);                 // streams.cpp
  Status function_of(BackendKernel& bk, int device, CUfunction& f);         // kernels.cpp
  Status launch_graph(CudaStream& s, std::span<const BatchedLaunch> part);  // launch.cpp
  // A client's nodes into `graph` (graphs.cpp), or into the parts of `tree` when given.
  Status build_graph(int device, std::span<const GraphNodeDesc> nodes, CUgraph graph, CudaGraphTree* tree);

  Status map_new(int device, CUdeviceptr va, uint64_t bytes);
  // Allocations placed by mem_alloc_at: address -> reserved bytes (workers call at once).
  static constexpr uint64_t kPlacedGranule = ipc::kPlacedGranule;
  std::mutex placed_mu_;
  std::map<DeviceAddress, uint64_t> placed_;
  std::shared_ptr<Shared> s_;
};

}  // namespace funnel::server::cuda
