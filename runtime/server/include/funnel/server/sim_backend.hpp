// The sim backend (funnel/server/backend.hpp): its options, and the hooks through which
// tests see what it was asked (launches, calls).  For funnel-server's --backend sim and the
// tests; the server itself knows only the Backend interface.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "funnel/server/backend.hpp"

namespace funnel::server {

// What the sim backend saw of one launch (for tests of argument packing).
struct SimLaunchRecord {
  std::string kernel;   // mangled name
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  std::vector<uint8_t> params;  // the parameter buffer as launched
  uint32_t sms = 0;                // the SMs it could run on: its stream's partition's, or all
  std::vector<uint32_t> sm_groups;  // the partition's SM groups; empty: the whole device
  int priority = 0;                 // the launch's, else its stream's (as clamped)
  uint32_t batch = 0;               // launched alone: 0; in a launch_batch of n launches: n
};

struct SimOptions {
  int devices = 1;
  uint64_t memory_bytes = uint64_t{16} << 30;  // per simulated device
  // When set, every launch is appended to this file as one JSON line (FUNNEL_SIM_LAUNCH_LOG).
  std::string launch_log;
  // When set, a launch of the kernel of this (mangled) name faults its device once the
  // stream reaches it: from then on every stream, event and memory call on that device
  // answers IllegalAddress until reset_device (FUNNEL_SIM_FAULT_KERNEL); calls for no
  // particular device (host registration, module loads) use the first healthy device.
  std::string fault_kernel;
  // As the CUDA driver (false), a fault is recovered by restarting the server; true lets
  // reset_device recover it in process (the server's other recovery path).
  bool resets_in_process = false;
  // Each stream memory write (write_value, store_word) lands this long after the stream reaches it, as a
  // GPU's does behind other streams' copies (tests of who answers first; 0: at once).
  std::chrono::microseconds stream_write_delay{0};
  // false: store_word answers NotSupported, as a CUDA backend whose reply kernel did not load.
  bool kernel_stores = true;
  // Tests only: called on the caller's thread at the start of every create_event, before the
  // device is checked (to make the device fault at that moment, between the worker's stream
  // query and the event it records after it).
  std::function<void()> before_create_event;
  // Tests only: what a stream memory write stores instead of its value (a late write of an
  // earlier call landing over this one's, as the GPU's writes of two streams may).
  std::function<uint32_t(uint32_t)> stream_write_value;
  // Tests only: called on the stream's thread just before a stream write or kernel store of
  // `value` lands (to hold one back while the stream waits, as a GPU's store behind other work).
  std::function<void(uint32_t)> before_store;
  // Tests only: a store of a value for which this returns true is seen only after its stream
  // went on (it lands from another thread, after before_store), as a GPU's store to host
  // memory may become visible after its stream reports idle.
  std::function<bool(uint32_t)> store_after_idle;
  // Each sim stream is a thread of the server: a client may hold this many, no more (one
  // client's thousands of streams must not slow the others or the machine).
  uint32_t max_streams_per_client = 512;
};

std::unique_ptr<Backend> make_sim_backend(const SimOptions& options);
// The launches a sim backend has run so far, oldest first (the most recent 65536); empty
// for any other backend.
std::vector<SimLaunchRecord> sim_launch_records(const Backend& sim);
// How many of the calls that cost a driver call on a GPU a sim backend has taken so far
// (for tests of what the worker asks the backend); zeros for any other backend.
struct SimCallCounts {
  uint64_t events_created = 0;
  uint64_t event_queries = 0;
  uint64_t stream_queries = 0;
  uint64_t stream_writes = 0;  // write_value
  uint64_t kernel_stores = 0;  // store_word
  uint64_t profiling_on = 0;   // set_profiling(true) calls
  uint64_t profiling_off = 0;  // set_profiling(false) calls
};
SimCallCounts sim_call_counts(const Backend& sim);

}  // namespace funnel::server
