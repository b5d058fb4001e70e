// What the server needs from a GPU: one interface, two implementations.
//   cuda — the CUDA driver API (opened with dlopen, so the server starts on machines
//          without a driver), the primary context of each GPU, per-client streams.
//   sim  — host memory stands in for device memory; every stream is a host thread that
//          really performs copies and memsets in order; events really complete
//          (funnel/server/sim_backend.hpp: its options and test hooks).
// Backends are thread-safe: every client's worker calls in concurrently.  Every
// stream operation is asynchronous and runs in stream order.  Status values are
// CUDA runtime error numbers; a sticky one (ipc::is_sticky) poisons the device.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "funnel/ipc/channel_layout.hpp"
#include "funnel/ipc/commands.hpp"
#include "funnel/ipc/status.hpp"

namespace funnel::server {

using ipc::Status;
using DeviceAddress = uint64_t;

class BackendStream {
 public:
  virtual ~BackendStream() = default;
  virtual int device() const noexcept = 0;
};

class BackendEvent {
 public:
  virtual ~BackendEvent() = default;
  virtual int device() const noexcept = 0;
};

// An SM partition of one device (cuda: a green context over some of its SM groups).
// Streams made in it run their kernels on its SMs only; memory, modules and events
// stay the device's.  Streams keep their partition alive.
class BackendPartition {
 public:
  virtual ~BackendPartition() = default;
  virtual int device() const noexcept = 0;
  virtual uint32_t sm_count() const noexcept = 0;
};

// How a device's SMs divide into the groups partitions are made of (cuda: the split of
// cuDevSmResourceSplitByCount at the hardware's granularity, 8 SMs on an H100).
// groups * group_sms <= device_sms: the remainder belongs to no group.
struct SmGroups {
  uint32_t device_sms = 0;
  uint32_t group_sms = 0;
  uint32_t groups = 0;
};

// A loaded fat binary (cuLibraryLoadData): device-independent, like a CUlibrary.
class BackendModule {
 public:
  virtual ~BackendModule() = default;
};

// A kernel of a module (a CUkernel); the module outlives it.
class BackendKernel {
 public:
  virtual ~BackendKernel() = default;
};

// Where one kernel parameter goes in the parameter buffer.
struct ParamLayout {
  uint32_t offset;
  uint32_t size;
  bool operator==(const ParamLayout&) const = default;
};

struct LaunchDesc {
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  bool cooperative = false;
  uint32_t cluster[3] = {0, 0, 0};  // all 0: no cluster attribute
  int priority = 0;                 // 0: the stream's
};

// One launch of a batch (Backend::launch_batch); `params` as for Backend::launch.
struct BatchedLaunch {
  BackendKernel* kernel;
  LaunchDesc desc;
  std::span<const std::byte> params;
};

// One end of a copy: device memory, or host memory in the server's address space
// (a staging slot or a pinned allocation, both registered with host_register).
// An array of the backend's (ipc::ArrayCreateCmd): its shape, checked by the worker.
struct ArrayShape {
  uint64_t width = 0, height = 0, depth = 0;  // elements; 0: no such dimension
  uint32_t format = 0;                        // CUarray_format
  uint32_t channels = 1;
  uint32_t flags = 0;                         // ipc::kArray*
  uint32_t levels = 0;                        // 0: an array; else a mipmapped array's levels
  uint32_t element_bytes = 0;                 // channels * the format's bytes
  uint64_t row_bytes() const noexcept { return width * element_bytes; }
  uint64_t rows() const noexcept { return height == 0 ? 1 : height; }
  uint64_t slices() const noexcept { return depth == 0 ? 1 : depth; }
};
class BackendArray {
 public:
  virtual ~BackendArray() = default;
  ArrayShape shape;
  int device = 0;
};

struct CopyEndpoint {
  bool device;
  uint64_t address;  // a DeviceAddress, or a host pointer as an integer
  // An array (device true, address unused): the region starts at byte x of row y of slice z.
  const BackendArray* array = nullptr;
  uint64_t x = 0, y = 0, z = 0;
};

struct CopyDesc {
  CopyEndpoint dst;
  CopyEndpoint src;
  uint64_t width;   // bytes per row
  uint64_t height;  // rows (1 for a 1-D copy)
  uint64_t dst_pitch;
  uint64_t src_pitch;
};

// A node of a client's graph (Backend::graph_instantiate), checked by the worker.  Nodes come
// in an order where each follows those it depends on (`deps`: indices of earlier nodes); the
// kernels and events they name outlive the graph (the worker keeps them).
struct GraphNodeDesc {
  ipc::GraphNodeKind kind = ipc::GraphNodeKind::Empty;
  std::vector<uint32_t> deps;       // nodes of the same part
  uint32_t part = 0;                // a tree's build: the graph of the tree it goes into
  uint32_t cond = 0;                // Conditional: the tree's conditional node
  BackendKernel* kernel = nullptr;  // Kernel: launched as Backend::launch would with `launch` and `params`
  LaunchDesc launch{};
  std::vector<std::byte> params;
  CopyDesc copy{};                  // Copy
  struct {
    DeviceAddress address = 0;
    uint64_t pitch = 0, width = 0, height = 0;
    uint32_t value = 0, element = 1;
  } memset;                         // Memset, as Backend::memset takes it
  BackendEvent* event = nullptr;    // EventRecord, EventWait
  // Host: event state words of the channel (registered memory): store 1 into *reached, wait for 1
  // in *done, store 0 into *reached, then into *done (write_value, wait_value's protocol)
  std::atomic<uint32_t>* reached = nullptr;
  std::atomic<uint32_t>* done = nullptr;
};

// A graph tree (ipc::GraphTreeCmd, doc/design/graphs.md "Conditional nodes"): a graph kept from
// its first conditional handle on, its conditional nodes (made as the client makes them, each
// with its bodies: new parts of the tree) and its handles.  The worker checks every command
// against `shape` and keeps it; the backend adds its own graphs.
struct GraphTreeShape {
  static constexpr uint32_t kRoot = UINT32_MAX;
  struct Cond {
    uint32_t part;        // the part it is in
    uint32_t type;        // cudaGraphCondTypeIf (0), While (1), Switch (2)
    uint32_t size;        // bodies
    uint32_t first_body;  // the part of its first body; the others follow
    uint64_t handle;
    bool alive = true;
  };
  struct Handle {
    uint64_t value;
    uint32_t part;  // the part it was made on (it goes with it)
  };
  std::vector<uint32_t> owner{kRoot};  // per part: the conditional node it is a body of
  std::vector<bool> alive{true};       // per part
  std::vector<Cond> conds;
  std::vector<Handle> handles;
  bool has_handle(uint64_t h) const noexcept {
    for (const Handle& x : handles)
      if (x.value == h && alive[x.part]) return true;
    return false;
  }
  // Whether a live conditional node uses handle h (CUDA lets one node use a handle).
  bool handle_used(uint64_t h) const noexcept {
    for (const Cond& c : conds)
      if (c.alive && c.handle == h) return true;
    return false;
  }
  // Conditional node c and every part and node inside its bodies are gone.
  void remove_cond(uint32_t c) {
    conds[c].alive = false;
    for (uint32_t b = 0; b < conds[c].size; ++b) alive[conds[c].first_body + b] = false;
    for (uint32_t i = 0; i < conds.size(); ++i)
      if (conds[i].alive && !alive[conds[i].part]) remove_cond(i);
  }
};
class BackendGraphTree {
 public:
  virtual ~BackendGraphTree() = default;
  GraphTreeShape shape;
};

// An executable graph of one device (a CUgraphExec): launched whole on a stream.
class BackendGraph {
 public:
  virtual ~BackendGraph() = default;
  virtual int device() const noexcept = 0;
};

// cudaLimit values (the same as CUlimit's).  Each is the context's, so shared by the clients of
// a device: a value one client sets holds for all (doc/not-supported.md).
enum class Limit : uint32_t {
  StackSize = 0,
  PrintfFifoSize = 1,
  MallocHeapSize = 2,
  DevRuntimeSyncDepth = 3,
  DevRuntimePendingLaunchCount = 4,
  MaxL2FetchGranularity = 5,
  PersistingL2CacheSize = 6,
};
inline constexpr uint32_t kLimits = 7;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const char* name() const noexcept = 0;
  virtual int device_count() const noexcept = 0;
  // Fills name, uuid, PCI bus id, total memory, ordinal and every attribute.
  virtual void describe(int device, ipc::DeviceRecord& out) = 0;
  virtual Status mem_get_info(int device, uint64_t& free_bytes, uint64_t& total_bytes) = 0;

  virtual Status mem_alloc(int device, uint64_t size, DeviceAddress& out) = 0;
  // At exactly `at` (2 MiB aligned), the size rounded up to 2 MiB: AlreadyMapped when the
  // server's address space has something there.  mem_free frees either kind.
  virtual Status mem_alloc_at(int device, uint64_t size, DeviceAddress at) = 0;
  virtual Status mem_free(int device, DeviceAddress address) = 0;
  // The virtual memory calls of a client (the worker checked sizes, alignment and that a
  // mapping lies in a reservation of the client's and on nothing mapped): a range of the
  // address space, anywhere (`size` and `alignment` multiples of the 2 MiB granule); new memory
  // of `device` mapped over [at, at + size) of a reserved range, readable and writable by the
  // device; mem_unmap undoes a mem_map (the memory goes back), address_free a reservation.
  virtual Status address_reserve(uint64_t size, uint64_t alignment, DeviceAddress& out) = 0;
  virtual Status address_free(DeviceAddress at, uint64_t size) = 0;
  virtual Status mem_map(int device, DeviceAddress at, uint64_t size) = 0;
  virtual Status mem_unmap(int device, DeviceAddress at, uint64_t size) = 0;
  virtual Status mem_alloc_async(BackendStream& s, uint64_t size, DeviceAddress& out) = 0;
  virtual Status mem_free_async(BackendStream& s, DeviceAddress address) = 0;

  // Makes host memory of this process DMA-capable for every device (cuMemHostRegister).
  virtual Status host_register(void* p, uint64_t size) = 0;
  virtual Status host_unregister(void* p) = 0;

  virtual void priority_range(int device, int& least, int& greatest) = 0;
  // A stream that synchronises with no other stream (the core emulates the legacy
  // default stream among one client's streams with events), in `partition` (of this
  // device) when one is given, else on the whole device.
  virtual Status create_stream(int device, int priority, const std::shared_ptr<BackendPartition>& partition,
                               std::unique_ptr<BackendStream>& out) = 0;
  Status create_stream(int device, int priority, std::unique_ptr<BackendStream>& out) {
    return create_stream(device, priority, nullptr, out);
  }
  virtual Status sm_groups(int device, SmGroups& out) = 0;
  // A partition made of the given groups (distinct indices below SmGroups::groups).
  virtual Status create_partition(int device, std::span<const uint32_t> groups,
                                  std::shared_ptr<BackendPartition>& out) = 0;
  virtual Status create_event(int device, bool timing, std::unique_ptr<BackendEvent>& out) = 0;

  virtual Status copy(BackendStream& s, const CopyDesc& c) = 0;
  // Arrays (doc/design/arrays.md): an array, or a mipmapped array (shape.levels > 0), on
  // `device`; a mipmapped array's level as an array of its own (the mipmapped array's, valid while
  // it lives).  Copies reach arrays through CopyEndpoint::array.
  virtual Status array_create(int device, const ArrayShape& shape, std::unique_ptr<BackendArray>& out) = 0;
  virtual Status array_level(BackendArray& mipmap, uint32_t level, std::unique_ptr<BackendArray>& out) = 0;
  // A texture or surface object (ipc::TexCreateCmd, checked by the worker) of `array` (the
  // resource's array or mipmapped array, else null: the command's device memory) -> its handle,
  // the value kernels take.
  virtual Status texture_create(int device, const ipc::TexCreateCmd& c, const BackendArray* array, uint64_t& handle) = 0;
  virtual Status texture_destroy(int device, uint64_t handle, bool surface) = 0;
  // Fills `height` rows of `width` bytes, `pitch` apart, with `value`, one element of
  // `element` bytes (1, 2 or 4; the worker checks that address, width and pitch are multiples).
  virtual Status memset(BackendStream& s, DeviceAddress dst, uint64_t pitch, uint64_t width, uint64_t height,
                        uint32_t value, uint32_t element) = 0;
  virtual Status record(BackendEvent& e, BackendStream& s) = 0;
  // Stores `value` into a 32-bit word of registered host memory (see host_register) once
  // the stream's earlier work has completed, with a fence before it: the GPU tells a
  // client directly that it got there.  NotSupported where the device cannot.
  virtual Status write_value(BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) = 0;
  // write_value of values[i] into *words[i] for each i (as many values as words), one after the
  // other once the earlier work completed: one driver call where the backend can.
  virtual Status write_values(BackendStream& s, std::span<std::atomic<uint32_t>* const> words,
                              std::span<const uint32_t> values) {
    for (size_t i = 0; i < words.size() && i < values.size(); ++i)
      if (Status st = write_value(s, *words[i], values[i]); st != Status::Success) return st;
    return Status::Success;
  }
  // As write_value, stored by a one-thread kernel launched after the stream's earlier work:
  // it waits for this stream only, where the stream write's fence waits for every copy in
  // flight on the device (measured on the H100: doc/performance.md), at the price of a
  // launch (a few us more when the GPU is otherwise idle).  NotSupported where the backend
  // cannot (the caller then uses write_value).
  virtual Status store_word(BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) = 0;
  virtual Status wait(BackendStream& s, BackendEvent& e) = 0;
  // A client's stream memory operation on its device memory (cuStreamWriteValue32/64,
  // cuStreamWaitValue32/64): the worker checked the operation, the flags, the alignment and that
  // the word lies in the client's memory.
  virtual Status stream_mem_op(BackendStream& s, DeviceAddress address, ipc::StreamMemOp op, uint64_t value,
                               uint32_t flags) = 0;

  // Success when everything before the event's last record (or in the stream) has
  // completed, NotReady while it has not, an error if that work failed.
  virtual Status query(BackendEvent& e) = 0;
  virtual Status query(BackendStream& s) = 0;
  virtual Status elapsed_ms(BackendEvent& start, BackendEvent& end, float& ms) = 0;
  // Blocks until the stream is idle (used when a client is torn down).
  virtual Status synchronize(BackendStream& s) = 0;

  // Kernels.  `image` is a fat binary as nvcc embeds it (the bytes the registration
  // wrapper points at).  kernel_get fills the parameter layout in parameter order
  // (driver: cuKernelGetParamInfo; sim: funnel::fatbin); `param_bytes` is the size of
  // the parameter buffer a launch carries (end of the last parameter).
  virtual Status module_load(std::span<const std::byte> image, std::unique_ptr<BackendModule>& out) = 0;
  virtual Status kernel_get(BackendModule& m, const std::string& name, std::unique_ptr<BackendKernel>& out,
                            std::vector<ParamLayout>& params, uint32_t& param_bytes) = 0;
  // A __device__, __constant__ or __managed__ variable of the module on `device` (`managed`: the
  // last, whose storage the driver made managed memory of the server's).
  virtual Status global_get(BackendModule& m, int device, const std::string& name, DeviceAddress& address,
                            uint64_t& size, bool& managed) = 0;
  // `params` is exactly param_bytes long, laid out as kernel_get said; the caller checked it.
  virtual Status launch(BackendStream& s, BackendKernel& k, const LaunchDesc& d, std::span<const std::byte> params) = 0;
  // Consecutive launches on one stream, nothing between them, that the worker held back
  // (FUNNEL_LAUNCH_BATCH): launches them in order, as few driver submissions as the
  // backend can (cuda: one CUDA graph launch per piece), each as `launch` would.  Sets
  // `launched` to how many went out, in order; on an error, or NotSupported where the
  // backend does not batch on this stream, the caller launches the rest one by one (which
  // reports each launch's own error).  The default batches nothing.
  virtual Status launch_batch(BackendStream& s, std::span<const BatchedLaunch> launches, size_t& launched) {
    (void)s;
    (void)launches;
    launched = 0;
    return Status::NotSupported;
  }
  virtual Status func_attributes(BackendKernel& k, int device, ipc::FuncAttributes& out) = 0;
  // attribute as in ipc::FuncSetAttributeCmd.
  virtual Status func_set_attribute(BackendKernel& k, int device, uint32_t attribute, int32_t value) = 0;
  virtual Status occupancy(BackendKernel& k, int device, uint32_t block_size, uint64_t dynamic_shared_bytes,
                           uint32_t flags, int& blocks_per_sm) = 0;
  // cudaOccupancyAvailableDynamicSMemPerBlock: dynamic shared memory a block may use so
  // that `blocks_per_sm` blocks of `block_size` threads fit on a multiprocessor.
  virtual Status available_dynamic_smem(BackendKernel& k, int device, uint32_t blocks_per_sm, uint32_t block_size,
                                        uint64_t& bytes) = 0;
  // cudaOccupancyMaxActiveClusters for a launch configuration with cluster dimensions.
  virtual Status max_active_clusters(BackendKernel& k, int device, const LaunchDesc& d, int& clusters) = 0;
  // cudaOccupancyMaxPotentialClusterSize: the largest cluster of the launch's blocks that fits.
  virtual Status max_cluster_size(BackendKernel& k, int device, const LaunchDesc& d, int& size) = 0;
  // cuTensorMapEncodeTiled of the arguments in `c` (rank checked by the worker; the driver
  // checks the rest): the 128-byte descriptor into `map`.
  virtual Status tensor_map_encode(int device, const ipc::TensorMapCmd& c,
                                   std::array<std::byte, ipc::kTensorMapBytes>& map) = 0;
  // cudaCtxResetPersistingL2Cache: the device's persisting L2 lines made normal (the context's,
  // so every client's on the device).
  virtual Status reset_persisting_l2(int device) = 0;
  // A stream's access-policy window (bytes 0: none), checked by the worker.
  virtual Status stream_access_policy(BackendStream& s, DeviceAddress base, uint64_t bytes, float hit_ratio,
                                      uint32_t hit_prop, uint32_t miss_prop) = 0;
  // The stream waits (without holding the worker) until `word` reaches `value` (wrapping
  // compare: (int32_t)(word - value) >= 0) — stored by a client after a host function ran
  // (cuStreamWaitValue32 with CU_STREAM_WAIT_VALUE_GEQ).
  virtual Status wait_value(BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) = 0;

  // Graphs (doc/design/graphs.md).  An executable graph of `nodes` on `device`; a launch runs it
  // on the stream after the stream's earlier work, and later work after all of it.  The
  // default keeps the nodes and runs them one by one in their order on the stream (a valid order
  // of the graph), through the calls above; the cuda backend builds and launches a CUDA graph.
  // `tree` (when given): the nodes go into the tree's parts (the worker checked each node's part
  // and conditional node), and the executable graph is made of the tree's root.
  virtual Status graph_instantiate(int device, std::span<const GraphNodeDesc> nodes, std::unique_ptr<BackendGraph>& out,
                                   BackendGraphTree* tree = nullptr);
  // Graph trees: a new one on `device`; a conditional handle of part `part` (*handle); a
  // conditional node in part `part` with `size` bodies (new parts, in order, after the tree's
  // others); a conditional node gone (with its bodies).  The worker keeps `shape` and checked the
  // arguments against it.  The default keeps handles' values for its launches (a kernel cannot set
  // them: the sim runs no kernels).
  virtual Status graph_tree_create(int device, std::unique_ptr<BackendGraphTree>& out);
  virtual Status graph_tree_handle(BackendGraphTree& t, uint32_t part, uint32_t default_value, uint32_t flags,
                                   uint64_t& handle);
  virtual Status graph_tree_cond(BackendGraphTree& t, uint32_t part, uint64_t handle, uint32_t type, uint32_t size);
  virtual Status graph_tree_cond_destroy(BackendGraphTree& t, uint32_t cond);
  // New parameters for every node of `g` (the worker checked that kinds and dependencies are the
  // graph's own); nothing changes on an error.
  // `tree`: the tree `g` was made of (its nodes rebuilt in place, then the update).
  virtual Status graph_update(BackendGraph& g, std::span<const GraphNodeDesc> nodes, BackendGraphTree* tree = nullptr);
  virtual Status graph_launch(BackendStream& s, BackendGraph& g);
  // Readies the graph for launches on the stream (cuGraphUpload); the default has nothing to do.
  virtual Status graph_upload(BackendStream& s, BackendGraph& g);

  virtual Status set_limit(int device, Limit limit, uint64_t value) = 0;
  virtual Status get_limit(int device, Limit limit, uint64_t& value) = 0;
  // Profiling of the device's context (cuProfilerStart/Stop).  The device's one context serves
  // every client, so the profiled range is the union of theirs: `profiling` counts the clients
  // that started it; the first start switches it on, the last stop off.
  Status profiling(int device, bool start);
  // Switches the device context's profiling on or off (the driver's cuProfilerStart/Stop).
  virtual Status set_profiling(int device, bool on) = 0;

  // Whether reset_device brings a device back after a sticky fault in this process.
  // When it does not, the server recovers by re-executing itself once every client has
  // left (doc/design/faults.md).  The default is the CUDA driver's answer.
  virtual bool resets_in_process() const noexcept { return false; }
  // The most streams one client may hold (0: no limit of funnel's; the driver's own).
  virtual uint32_t max_streams_per_client() const noexcept { return 0; }
  // Recovers a device after a sticky fault (doc/design/faults.md): destroys its context
  // with everything in it and makes a fresh one current for every thread's next call.
  // The caller guarantees that nothing of the device (stream, event, allocation) is
  // still held and that no other thread calls in for that device meanwhile; modules
  // (device-independent) survive.
  virtual Status reset_device(int device) = 0;

 private:
  std::mutex profiling_m_;
  std::array<uint32_t, ipc::kMaxDevices> profiling_{};  // clients that started it, by device
};

// Throws std::runtime_error naming the problem (no driver, no GPU, bad ordinal) and the fix.
std::unique_ptr<Backend> make_cuda_backend(const std::vector<int>& devices);

}  // namespace funnel::server
