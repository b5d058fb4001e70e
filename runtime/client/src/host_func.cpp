// Host functions (cudaLaunchHostFunc, cudaStreamAddCallback; doc/design/kernels.md,
// "Host functions").  The stream stores a generation into a "reached" event state word,
// then waits until the "done" word holds it; one callback thread of this process sees
// the store, runs the function and stores "done".
//
// The server's wait is for equality, so a done word must not take another value before
// the stream got past the wait.  Each stream therefore keeps its pair of words for all
// its host functions (in stream order the next store comes only after the stream passed
// the previous wait), and pairs go back to the event slot pool only after a
// cudaDeviceSynchronize or cudaStreamSynchronize that began after their last use
// (hf_synchronized).
#include <sched.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include "api.hpp"
#include "host_func.hpp"

#include "graphs.hpp"

using namespace funnel::client;

namespace {

struct Pending {
  uint32_t gen;
  cudaHostFn_t fn;                // cudaLaunchHostFunc
  cudaStreamCallback_t callback;  // cudaStreamAddCallback
  cudaStream_t handle;            // as the application named the stream (for callback)
  void* data;
};

struct Pair {
  uint32_t reached = funnel::ipc::kNoEventSlot;
  uint32_t done = funnel::ipc::kNoEventSlot;
  std::deque<Pending> queue;  // in stream order
  uint64_t last_use = 0;
};

using StreamKey = std::pair<int, uint64_t>;  // device, stream id

// A host node of an executable graph (doc/design/graphs.md, "Host nodes"): each launch stores 1
// into `reached`, waits for 1 in `done`, then stores 0 into `reached` and then `done`.  This
// process runs the function when it sees `reached` 1 and stores `done` 1; it then waits for the
// graph to store `done` 0 (by then `reached` is 0 again) before it looks at `reached` again.
struct GraphHost {
  uint32_t reached;
  uint32_t done;
  cudaHostFn_t fn;
  void* data;
  uint64_t pending = 0;        // launches not yet run here
  bool waiting_reset = false;  // ran; `done` not yet back to 0
  bool retired = false;        // its graph was destroyed: the words go back once nothing is pending
};

class HostFuncs {
 public:
  explicit HostFuncs(Runtime& rt) : rt_(rt) {}

  cudaError_t submit(const StreamRef& s, Pending p) {
    std::unique_lock lk(mu_);
    auto it = pairs_.try_emplace({s.device, s.id}).first;
    Pair& pair = it->second;
    // A fresh pair (no words yet) takes its two words here.
    if (!rt_.tables.next_pair_generation(rt_.view().header().event_slots, pair.reached, pair.done, p.gen)) {
      pairs_.erase(it);
      return cudaErrorMemoryAllocation;
    }
    pair.last_use = ++uses_;
    // Posted under mu_: the queue's order is the ring's order for this stream.
    funnel::ipc::HostFuncCmd c{pair.reached, pair.done, p.gen, 0};
    if (cudaError_t e = to_cuda(rt_.post(Opcode::HostFunc, s.device, s.id, &c, sizeof c)); e != cudaSuccess) return e;
    pair.queue.push_back(p);
    ++pending_;
    if (!started_) start();
    lk.unlock();
    cv_.notify_one();
    return cudaSuccess;
  }

  uint64_t uses() {
    std::lock_guard lk(mu_);
    return uses_;
  }

  uint64_t graph_add(uint32_t reached, uint32_t done, cudaHostFn_t fn, void* data) {
    std::lock_guard lk(mu_);
    const uint64_t key = next_graph_key_++;
    graph_hosts_.emplace(key, GraphHost{reached, done, fn, data});
    return key;
  }
  void graph_set(uint64_t key, cudaHostFn_t fn, void* data) {
    std::lock_guard lk(mu_);
    if (auto it = graph_hosts_.find(key); it != graph_hosts_.end()) it->second.fn = fn, it->second.data = data;
  }
  void graph_launched(uint64_t key) {
    {
      std::lock_guard lk(mu_);
      auto it = graph_hosts_.find(key);
      if (it == graph_hosts_.end()) return;
      ++it->second.pending;
      ++pending_;
      if (!started_) start();
    }
    cv_.notify_one();
  }
  void graph_retire(uint64_t key) {
    std::lock_guard lk(mu_);
    auto it = graph_hosts_.find(key);
    if (it == graph_hosts_.end()) return;
    it->second.retired = true;
    forget_if_idle(it);
  }

  // The device's streams (or only `stream`, when given) got past everything enqueued
  // before `before`.
  void synchronized(int device, std::optional<uint64_t> stream, uint64_t before) {
    std::lock_guard lk(mu_);
    std::erase_if(pairs_, [&](auto& kv) {
      const Pair& p = kv.second;
      if (kv.first.first != device || (stream && kv.first.second != *stream)) return false;
      if (!p.queue.empty() || p.last_use > before) return false;
      rt_.tables.release_event_slot_pair(p.reached, p.done);
      return true;
    });
  }

  void stop() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
  }

 private:
  void start() {
    std::thread([this] { loop(); }).detach();
    started_ = true;
  }

  bool reached(const Pair& p, const Pending& f) const {
    const uint32_t seen = rt_.view().event_state(p.reached).load(std::memory_order_acquire);
    return funnel::ipc::generation_reached(seen, f.gen);
  }

  // Runs one host function whose stream got there; false if none has.  (It returns
  // after one: pairs_ may change while mu_ is released.)
  bool run_one(std::unique_lock<std::mutex>& lk, cudaError_t failed) {
    if (run_graph_host(lk, failed)) return true;
    for (auto& [key, pair] : pairs_) {
      if (pair.queue.empty() || (failed == cudaSuccess && !reached(pair, pair.queue.front()))) continue;
      const Pending f = pair.queue.front();
      pair.queue.pop_front();
      --pending_;
      const uint32_t done = pair.done;
      lk.unlock();
      // A failed context never reaches the host function: a stream callback is told
      // (as CUDA passes the stream's error), a host function is dropped.
      if (f.callback != nullptr)
        f.callback(f.handle, failed, f.data);
      else if (failed == cudaSuccess)
        f.fn(f.data);
      rt_.view().event_state(done).store(f.gen, std::memory_order_release);
      lk.lock();
      return true;
    }
    return false;
  }

  // A retired graph host node whose launches all ran and whose words the graph reset: the words
  // go back to the pool.  mu_ held.
  void forget_if_idle(std::map<uint64_t, GraphHost>::iterator it) {
    const GraphHost& g = it->second;
    if (!g.retired || g.pending != 0 || g.waiting_reset) return;
    rt_.tables.release_event_slot_pair(g.reached, g.done);
    graph_hosts_.erase(it);
  }

  // Runs one graph host node that a launch reached; false if none did.  A node waiting for its
  // reset counts as pending (the loop keeps looking).
  bool run_graph_host(std::unique_lock<std::mutex>& lk, cudaError_t failed) {
    auto& words = rt_.view();
    for (auto it = graph_hosts_.begin(); it != graph_hosts_.end(); ++it) {
      GraphHost& g = it->second;
      if (g.waiting_reset) {
        if (words.event_state(g.done).load(std::memory_order_acquire) != 0) continue;
        g.waiting_reset = false;
        --pending_;
        forget_if_idle(it);
        return true;  // the map may have changed
      }
      if (g.pending == 0) continue;
      if (failed == cudaSuccess && words.event_state(g.reached).load(std::memory_order_acquire) != 1) continue;
      --g.pending;
      g.waiting_reset = true;  // pending_ stays counted until the reset
      const cudaHostFn_t fn = g.fn;
      void* data = g.data;
      const uint32_t done = g.done;
      lk.unlock();
      if (failed == cudaSuccess && fn != nullptr) fn(data);  // a failed context never gets there
      words.event_state(done).store(1, std::memory_order_release);
      lk.lock();
      if (failed != cudaSuccess) {  // no graph resets the words any more
        for (auto& [k, h] : graph_hosts_)
          if (h.waiting_reset) h.waiting_reset = false, --pending_;
      }
      return true;
    }
    return false;
  }

  void loop() {
    using namespace std::chrono;
    std::unique_lock lk(mu_);
    int idle = 0;
    while (!stop_) {
      if (pending_ == 0) {
        stalled_since_.reset();
        cv_.wait_for(lk, milliseconds(200));
        idle = 0;
        continue;
      }
      cudaError_t failed = cudaSuccess;
      if (rt_.gone()) {
        failed = cudaErrorDevicesUnavailable;
      } else if (Status sticky = rt_.sticky(); sticky != Status::Success) {
        failed = static_cast<cudaError_t>(sticky);
      }
      if (run_one(lk, failed)) {
        idle = 0;
        stalled_since_.reset();
        continue;
      }
      report_long_stall();
      // Nothing reached yet: spin briefly, then sleep in short slices (the GPU's store
      // wakes nobody).
      if (++idle < 64) {
        lk.unlock();
        sched_yield();
        lk.lock();
      } else {
        cv_.wait_for(lk, microseconds(std::min(1000, 20 * (idle - 63))));
      }
    }
  }

  // Host functions whose streams have not reached them for long are said once, with the
  // words they wait on (a hang's first clue).  Called with mu_ held.
  void report_long_stall() {
    const auto now = std::chrono::steady_clock::now();
    if (!stalled_since_) stalled_since_ = now;
    if (stall_reported_ || now - *stalled_since_ < Runtime::kLongWait) return;
    stall_reported_ = true;
    std::string what;
    for (const auto& [key, pair] : pairs_) {
      if (pair.queue.empty()) continue;
      what += fmt::format(
          "{}stream {} of device {}: {} queued, reached word {} shows {} for generation {}, done word "
          "{} shows {}",
          what.empty() ? "" : "; ", key.second, key.first, pair.queue.size(), pair.reached,
          rt_.view().event_state(pair.reached).load(), pair.queue.front().gen, pair.done,
          rt_.view().event_state(pair.done).load());
    }
    log_error(fmt::format("funnel: host functions have waited {} s for their streams to reach them: {}",
                          Runtime::kLongWait.count(), what));
  }

  Runtime& rt_;
  std::optional<std::chrono::steady_clock::time_point> stalled_since_;
  bool stall_reported_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<StreamKey, Pair> pairs_;
  std::map<uint64_t, GraphHost> graph_hosts_;
  uint64_t next_graph_key_ = 1;
  uint64_t uses_ = 0;
  size_t pending_ = 0;
  bool started_ = false;
  bool stop_ = false;
};

std::atomic<HostFuncs*> g_host_funcs{nullptr};

void stop_at_exit() {
  if (HostFuncs* h = g_host_funcs.load()) h->stop();
}

// This process's host function state; a forked child (new Runtime) gets its own.  Never
// destroyed: the callback thread and atexit handlers use it.
HostFuncs& host_funcs(Runtime& rt) {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(stop_at_exit); });
  static std::atomic<Runtime*> owner{nullptr};
  HostFuncs* h = g_host_funcs.load(std::memory_order_acquire);
  if (h != nullptr && owner.load(std::memory_order_acquire) == &rt) return *h;
  static std::mutex mu;  // only taken on the first use in a process (or a forked child)
  std::lock_guard lk(mu);
  h = g_host_funcs.load();
  if (h == nullptr || owner.load() != &rt) {
    h = new HostFuncs(rt);
    g_host_funcs.store(h, std::memory_order_release);
    owner.store(&rt, std::memory_order_release);
  }
  return *h;
}

cudaError_t add(cudaStream_t stream, bool per_thread, Pending p) {
  StreamRef s;
  if (cudaError_t e = resolve_stream(stream, per_thread, s); e != cudaSuccess) return e;
  if (s.capturing()) {
    if (p.fn != nullptr) return capture_host(s, p.fn, p.data);  // a host node
    return capture_refuse(s, "a stream callback in a stream capture (cudaStreamAddCallback)");
  }
  p.handle = stream;
  return host_funcs(Runtime::get()).submit(s, p);
}

}  // namespace

namespace funnel::client {

cudaError_t launch_host_func(cudaStream_t stream, cudaHostFn_t fn, void* data, bool per_thread) {
  if (fn == nullptr) return cudaErrorInvalidValue;
  return add(stream, per_thread, Pending{0, fn, nullptr, nullptr, data});
}

cudaError_t add_callback(cudaStream_t stream, cudaStreamCallback_t cb, void* data, unsigned flags, bool per_thread) {
  if (cb == nullptr || flags != 0) return cudaErrorInvalidValue;
  return add(stream, per_thread, Pending{0, nullptr, cb, nullptr, data});
}

uint64_t graph_host_add(uint32_t reached, uint32_t done, cudaHostFn_t fn, void* data) {
  return host_funcs(Runtime::get()).graph_add(reached, done, fn, data);
}
void graph_host_set(uint64_t key, cudaHostFn_t fn, void* data) { host_funcs(Runtime::get()).graph_set(key, fn, data); }
void graph_host_launched(uint64_t key) { host_funcs(Runtime::get()).graph_launched(key); }
void graph_host_retire(uint64_t key) { host_funcs(Runtime::get()).graph_retire(key); }

uint64_t hf_uses() noexcept {
  HostFuncs* h = g_host_funcs.load(std::memory_order_acquire);
  return h != nullptr ? h->uses() : 0;
}

void hf_synchronized(int device, std::optional<uint64_t> stream, uint64_t uses_before) noexcept {
  HostFuncs* h = g_host_funcs.load(std::memory_order_acquire);
  if (h == nullptr) return;
  try {
    h->synchronized(device, stream, uses_before);
  } catch (...) {  // the pairs stay taken until the next synchronisation
  }
}

}  // namespace funnel::client
