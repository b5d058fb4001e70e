// GPU-local messages between ranks of one funnel-server: local.hpp.
#include "local.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "funnel/common/config.hpp"
#include "staging.hpp"

namespace funnel::mpi::local {
namespace {

bool g_enabled = false;
bool g_joined = false;  // this rank joined its world on the server (funnel_msg_world)
uint64_t g_world = 0;   // the job's number (of its launcher's job id)
// By world rank: FUNNEL_PEER_MEMBER (a GPU-local peer), FUNNEL_PEER_OUTSIDER, or NOT_YET (not
// asked yet); the server's answer never changes once given, so it is kept.
std::unique_ptr<std::atomic<int>[]> g_peers;
size_t g_world_size = 0;
int g_keyval = MPI_KEYVAL_INVALID;
MPI_Comm g_probe = MPI_COMM_NULL;  // a private duplicate of MPI_COMM_SELF: progress() probes it

// A numbered communicator: its number, how many communicators were made from it, its ranks in
// MPI_COMM_WORLD, and the sequence numbers of its envelopes.
struct CommInfo {
  uint64_t id = 0;
  uint64_t children = 0;
  std::vector<int> world;
  std::mutex mu;
  std::map<std::pair<int, int>, uint64_t> sent, received;  // (peer, tag) -> messages so far
};

int delete_info(MPI_Comm, int, void* value, void*) {
  delete static_cast<CommInfo*>(value);
  return MPI_SUCCESS;
}

CommInfo* info_of(MPI_Comm comm) {
  if (g_keyval == MPI_KEYVAL_INVALID || comm == MPI_COMM_NULL) return nullptr;
  void* v = nullptr;
  int flag = 0;
  if (PMPI_Comm_get_attr(comm, g_keyval, &v, &flag) != MPI_SUCCESS || flag == 0) return nullptr;
  return static_cast<CommInfo*>(v);
}

void number(MPI_Comm comm, uint64_t id) {
  auto* info = new CommInfo();
  info->id = id;
  MPI_Group group, world;
  int n = 0;
  PMPI_Comm_group(comm, &group);
  PMPI_Comm_group(MPI_COMM_WORLD, &world);
  PMPI_Group_size(group, &n);
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ranks[static_cast<size_t>(i)] = i;
  info->world.resize(static_cast<size_t>(n));
  PMPI_Group_translate_ranks(group, n, ranks.data(), world, info->world.data());
  PMPI_Group_free(&group);
  PMPI_Group_free(&world);
  if (PMPI_Comm_set_attr(comm, g_keyval, info) != MPI_SUCCESS) delete info;
}

uint64_t mix(uint64_t a, uint64_t b) {  // splitmix64 of the pair
  uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void say(const std::string& what) { warn(what.c_str()); }

// ---- waiting -----------------------------------------------------------------------------------
constexpr auto kLongWait = std::chrono::seconds(10);
// Polls of a completion word before a waiting rank yields its core at every poll: with a rank per
// core the server's worker for it (which pairs its messages) runs on the rank's cores.
constexpr unsigned kSpins = 64;

// A half's state now (FUNNEL_MSG_FAILED where it cannot be asked); once it ended its handle is free.
int state_of(int handle, size_t& bytes) {
  int state = FUNNEL_MSG_PENDING;
  if (funnel_msg_test(handle, &state, &bytes) != 0) state = FUNNEL_MSG_FAILED;
  return state;
}

// Polls `done` until it says so, letting MPI progress and yielding the core after kSpins polls (the
// rank's worker may share it); says what() once after kLongWait.
template <class Done>
void wait_for(Done&& done, const std::function<std::string()>& what) {
  const auto since = std::chrono::steady_clock::now();
  bool said = false;
  for (unsigned spin = 0;; ++spin) {
    if (done()) return;
    if (spin >= kSpins) sched_yield();
    if (spin % 16 != 15) continue;
    progress();
    if (!said && std::chrono::steady_clock::now() - since > kLongWait) {
      said = true;
      say(what());
    }
  }
}

// Waits for a half's end; `what` names it for the long-wait notice.
int wait_half(int handle, size_t& bytes, const std::function<std::string()>& what) {
  int state = FUNNEL_MSG_PENDING;
  wait_for(
      [&] {
        state = state_of(handle, bytes);
        return state != FUNNEL_MSG_PENDING;
      },
      [&] {
        return what() + " has waited 10 s for its other half.  Under FUNNEL_MPI_LOCAL=1 a device-buffer message "
                        "between ranks of one node goes device to device: its receive must be into a device buffer "
                        "and name its source and tag, and a blocking send returns only once its receive was posted "
                        "(no eager buffering: use MPI_Sendrecv, non-blocking calls or MPI_Bsend where both ranks "
                        "send first)";
      });
  return state;
}

int error_of(int state) {
  switch (state) {
    case FUNNEL_MSG_DONE: return MPI_SUCCESS;
    case FUNNEL_MSG_TRUNCATED: return MPI_ERR_TRUNCATE;
    default: return MPI_ERR_OTHER;
  }
}

void say_end(int state, const char* call, int peer, int tag) {
  if (state == FUNNEL_MSG_DONE || state == FUNNEL_MSG_TRUNCATED) return;
  say(std::string(call) + " (GPU-local message, peer " + std::to_string(peer) + ", tag " + std::to_string(tag) +
      "): " +
      (state == FUNNEL_MSG_PEER_GONE ? "the other rank's process left funnel-server"
                                     : "funnel-server could not move it (its log says why) or is gone"));
}

void fill_status(MPI_Status* status, int source, int tag, size_t bytes) {
  if (status == MPI_STATUS_IGNORE) return;
  status->MPI_SOURCE = source;
  status->MPI_TAG = tag;
  PMPI_Status_set_elements_x(status, MPI_BYTE, static_cast<MPI_Count>(bytes));
  PMPI_Status_set_cancelled(status, 0);
}

// ---- generalized requests -------------------------------------------------------------------
struct LocalRequest {
  int handle = -1;
  bool recv = false;
  int peer = 0, tag = 0;  // communicator ranks
  size_t capacity = 0;
  int state = FUNNEL_MSG_PENDING;
  size_t bytes = 0;
  const char* call = "";
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  bool detached = false;    // freed by the program (MPI_Request_free, a buffered send): completed here
  void* bounce = nullptr;   // a buffered send's copy of its message: freed once the half ended
};
std::mutex g_requests_mu;
std::unordered_map<MPI_Request, LocalRequest*> g_requests;  // outstanding (not yet complete)
std::atomic<size_t> g_outstanding{0};
// Completed with an error, until the completing call raises it: request -> (communicator, error).
std::unordered_map<MPI_Request, std::pair<MPI_Comm, int>> g_failed;
std::atomic<size_t> g_failed_count{0};

// Persistent GPU-local requests: MPI holds a placeholder (a zero-count request to MPI_PROC_NULL,
// which completes as soon as it is started); each MPI_Start posts a half here, and the
// completion calls hold the placeholder back from MPI until the half ended.
struct Persistent {
  bool send = false;
  const void* buf = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int peer = 0, tag = 0;
  MPI_Comm comm = MPI_COMM_NULL;
  const char* call = "";
  int handle = -1;
  bool active = false;  // started, its completion not reported yet
  bool ended = false;   // its half ended (state, bytes)
  int state = FUNNEL_MSG_PENDING;
  size_t bytes = 0, capacity = 0;
};
std::unordered_map<MPI_Request, Persistent> g_persistent;  // under g_requests_mu
std::atomic<size_t> g_active{0};  // active persistent requests

// A GPU-local request that ended in `state`: an error is kept for its completing call (raise_failed).
void remember_end(MPI_Request r, MPI_Comm comm, int state) {
  if (const int e = error_of(state); e != MPI_SUCCESS) {
    g_failed[r] = {comm, e};
    g_failed_count.store(g_failed.size(), std::memory_order_release);
  }
}

// Whether persistent request `p` still waits for its half (polls it once first).
bool pending_locked(MPI_Request r, Persistent& p) {
  if (!p.active || p.ended) return false;
  size_t bytes = 0;
  const int state = state_of(p.handle, bytes);
  if (state == FUNNEL_MSG_PENDING) return true;
  p.ended = true;
  p.state = state;
  p.bytes = bytes;
  say_end(state, p.call, p.peer, p.tag);
  remember_end(r, p.comm, state);
  return false;
}

// The status only: an error is raised by the completing wrapper through the request's
// communicator (MPI would raise a generalized request's through MPI_COMM_WORLD's handler).
int query_fn(void* extra, MPI_Status* status) {
  auto* r = static_cast<LocalRequest*>(extra);
  fill_status(status, r->peer, r->tag, r->recv ? std::min(r->bytes, r->capacity) : 0);
  return MPI_SUCCESS;
}
int free_fn(void* extra) {
  delete static_cast<LocalRequest*>(extra);
  return MPI_SUCCESS;
}
// A request complete from the start (a buffered send's, a received matched message's): nothing to cancel.
int cancel_fn(void*, int) { return MPI_SUCCESS; }
// MPI_Cancel of a GPU-local half: not done (doc/design/mpi-device-buffers.md, "Next": the
// envelope's sequence numbers would have to be given back), said once; the request completes
// when its message does, as MPI allows a cancel that does not succeed (MPI_Test_cancelled false).
int local_cancel_fn(void* extra, int complete) {
  static std::once_flag said;
  if (complete == 0)
    std::call_once(said, [extra] {
      const auto* r = static_cast<const LocalRequest*>(extra);
      say(std::string("MPI_Cancel of a GPU-local ") + r->call +
          " is not supported yet: the request completes when its message does (MPI_Test_cancelled "
          "says false), so a receive no send will meet still waits; unset FUNNEL_MPI_LOCAL for programs "
          "that cancel device-buffer messages between ranks of a node");
    });
  return MPI_SUCCESS;
}

// Completes `r` if its message ended; true when it did (the caller erases it from g_requests).
bool try_complete(LocalRequest* r) {
  size_t bytes = 0;
  const int state = state_of(r->handle, bytes);
  if (state == FUNNEL_MSG_PENDING) return false;
  r->state = state;
  r->bytes = bytes;
  say_end(state, r->call, r->peer, r->tag);
  if (!r->detached) remember_end(r->request, r->comm, state);  // nobody completes a freed one
  if (r->bounce != nullptr) cudaFree(r->bounce);
  r->bounce = nullptr;
  PMPI_Grequest_complete(r->request);  // a detached one is freed now (free_fn)
  return true;
}

// The detached requests whose message ended, completed (and so freed by MPI).
size_t g_detached = 0;  // under g_requests_mu
void reap_locked() {
  if (g_detached == 0) return;
  for (auto it = g_requests.begin(); it != g_requests.end();) {
    if (it->second->detached && try_complete(it->second)) {
      it = g_requests.erase(it);
      --g_detached;
    } else {
      ++it;
    }
  }
  g_outstanding.store(g_requests.size(), std::memory_order_release);
}

// The job's number, the same in every rank of the job and different for another job that shares
// the server (two mpiruns of one allocation): of the launcher's job id; a rank without one is a
// job of its own.
uint64_t world_number() {
  for (const char* v : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID"}) {
    const char* id = std::getenv(v);
    if (id == nullptr || *id == '\0') continue;
    std::string key = std::string(v) + '=' + id;
    if (const char* step = std::getenv("SLURM_STEP_ID"); step != nullptr && std::string(v) == "SLURM_JOB_ID")
      key += std::string(".") + step;
    return mix(std::hash<std::string>{}(key), 0x66756e6e656cull);
  }
  uint64_t w = std::random_device{}();
  return (w << 32) ^ std::random_device{}();
}

// Asks the server about this rank's world (and world rank `peer`; -1: none) until `done` holds
// for its answer `a` (the world settles 5 s after its first join at the latest, so this ends);
// false if it cannot ask.
template <class Done>
bool ask_world(int peer, funnel_world_answer& a, Done&& done) {
  for (;;) {
    if (funnel_msg_world(g_world, -1, 0, 0, peer, &a) != 0) return false;
    if (done(a)) return true;
    progress();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// World rank `peer`'s final answer; FUNNEL_PEER_OUTSIDER if the server cannot be asked.
int ask_peer(int peer) {
  funnel_world_answer a{};
  return ask_world(peer, a, [](const funnel_world_answer& x) { return x.peer != FUNNEL_PEER_NOT_YET; })
             ? a.peer
             : FUNNEL_PEER_OUTSIDER;
}

// Whether world rank `peer` takes GPU-local messages from this rank (asked once).
bool gpu_local_peer(int peer) {
  if (peer < 0 || static_cast<size_t>(peer) >= g_world_size) return false;
  std::atomic<int>& known = g_peers[static_cast<size_t>(peer)];
  int state = known.load(std::memory_order_acquire);
  if (state == FUNNEL_PEER_NOT_YET) {
    state = ask_peer(peer);
    known.store(state, std::memory_order_release);
  }
  return state == FUNNEL_PEER_MEMBER;
}

}  // namespace

void init() noexcept {
  bool want = false;
  try {
    want = Settings::from_environment().mpi_local;
  } catch (const std::exception& e) {
    say(std::string("GPU-local messages stay off: ") + e.what());  // the attach said so already
  }
  // Every rank joins (its local count settles the world), whatever its setting: the server, not
  // an MPI collective, tells the ranks of this node apart, so a rank not under funnel in the same
  // job (which makes no hooked call) keeps nobody waiting.
  int rank = 0, size = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  int local_size = 1;
  try {
    local_size = launcher_local_rank(&Settings::environment).size;
  } catch (...) {
  }
  g_world = world_number();
  funnel_world_answer a{};
  if (const int e = funnel_msg_world(g_world, rank, local_size, want ? FUNNEL_WORLD_LOCAL : 0, -1, &a); e != 0) {
    if (want) say("GPU-local messages stay off: the server did not take this rank (CUDA error " + std::to_string(e) + ")");
    return;
  }
  g_joined = true;
  if (!want) return;
  if (a.self != FUNNEL_PEER_MEMBER) {
    say("GPU-local messages stay off for this rank: it reached MPI_Init more than 5 s after the first rank of its job "
        "on this node, when the node's GPU-local ranks were settled (its messages go through MPI, staged)");
    return;
  }
  g_world_size = static_cast<size_t>(size);
  g_peers = std::make_unique<std::atomic<int>[]>(g_world_size);
  for (size_t i = 0; i < g_world_size; ++i) g_peers[i].store(FUNNEL_PEER_NOT_YET, std::memory_order_relaxed);
  g_peers[static_cast<size_t>(rank)].store(FUNNEL_PEER_MEMBER, std::memory_order_relaxed);
  PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_info, &g_keyval, nullptr);
  number(MPI_COMM_WORLD, mix(g_world, 1));
  PMPI_Comm_dup(MPI_COMM_SELF, &g_probe);
  g_enabled = true;
}

int settled_ranks() noexcept {
  funnel_world_answer a{};
  return g_joined && ask_world(-1, a, [](const funnel_world_answer& x) { return x.settled != 0; }) ? a.joined : -1;
}

bool enabled() noexcept { return g_enabled; }

void comm_made(MPI_Comm parent, MPI_Comm made) noexcept {
  if (!g_enabled) return;
  CommInfo* p = info_of(parent);
  if (p == nullptr) return;
  const uint64_t id = mix(p->id, ++p->children);
  int inter = 0;
  if (made == MPI_COMM_NULL || PMPI_Comm_test_inter(made, &inter) != MPI_SUCCESS || inter != 0) return;
  number(made, id);
}

Route route(bool send, const void* buf, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm,
            const char* call, Half& h, bool take_seq) {
  if (!g_enabled || peer == MPI_PROC_NULL) return Route::Mpi;
  CommInfo* info = info_of(comm);
  if (info == nullptr) return Route::Mpi;
  const Extent e = extent_of(count, type);
  // A zero-count message still goes the way its buffer says (its receive may be a device one).
  int device = 0;
  const void* first = static_cast<const std::byte*>(buf) + e.offset;
  if (e.bytes == 0 ? funnel_memory_kind(buf, 0, &device) != FUNNEL_MEMORY_DEVICE : kind_of(buf, e) != Kind::Device)
    return Route::Mpi;
  if (!send && (peer == MPI_ANY_SOURCE || tag == MPI_ANY_TAG)) {
    say(std::string(call) + " into a device buffer with " + (peer == MPI_ANY_SOURCE ? "MPI_ANY_SOURCE" : "MPI_ANY_TAG") +
        " under FUNNEL_MPI_LOCAL=1: refused (MPI_ERR_OTHER).  GPU-local messages pair sends and receives by source "
        "and tag: name them, or unset FUNNEL_MPI_LOCAL");
    h.error = MPI_ERR_OTHER;
    return Route::Refuse;
  }
  if (peer < 0 || static_cast<size_t>(peer) >= info->world.size()) return Route::Mpi;  // MPI reports it
  const int peer_world = info->world[static_cast<size_t>(peer)];
  if (!gpu_local_peer(peer_world)) return Route::Mpi;
  if (!e.dense) {
    say(std::string(call) + " of a device buffer with a datatype that is not contiguous, to a rank of this node, "
                            "under FUNNEL_MPI_LOCAL=1: refused (MPI_ERR_TYPE).  GPU-local messages are contiguous "
                            "bytes: pack the data first, or unset FUNNEL_MPI_LOCAL");
    h.error = MPI_ERR_TYPE;
    return Route::Refuse;
  }
  int me = 0;
  PMPI_Comm_rank(comm, &me);
  const int me_world = info->world[static_cast<size_t>(me)];
  uint64_t seq = 0;
  if (take_seq) {
    const std::lock_guard lock(info->mu);
    seq = (send ? info->sent : info->received)[{peer, tag}]++;
  }
  h.env = funnel_envelope{g_world, info->id, send ? me_world : peer_world, send ? peer_world : me_world, tag, 0, seq};
  h.start = const_cast<void*>(first);
  h.bytes = e.bytes;
  return Route::Local;
}

namespace {
// The GPU-local send waiting for this rank's next receive of (source, tag) on comm (either a
// wildcard), as `from` (comm's rank), its envelope and count; `take`: that receive's sequence
// number taken too (a matched probe).
bool find_parked(int source, int tag, MPI_Comm comm, bool take, int& from, funnel_envelope& got,
                 size_t& bytes) noexcept {
  if (!g_enabled || source == MPI_PROC_NULL) return false;
  CommInfo* info = info_of(comm);
  if (info == nullptr) return false;
  int me = 0;
  PMPI_Comm_rank(comm, &me);
  funnel_envelope e{g_world, info->id, -1, info->world[static_cast<size_t>(me)], tag == MPI_ANY_TAG ? -1 : tag, 0, 0};
  if (source != MPI_ANY_SOURCE) {
    if (source < 0 || static_cast<size_t>(source) >= info->world.size()) return false;  // MPI's probe said so
    e.source = info->world[static_cast<size_t>(source)];
    if (!gpu_local_peer(e.source)) return false;
  }
  int found = 0;
  if (funnel_msg_probe(&e, &found, &got, &bytes) != 0 || found == 0) return false;
  from = -1;
  for (size_t i = 0; i < info->world.size() && from < 0; ++i)
    if (info->world[i] == got.source) from = static_cast<int>(i);
  if (from < 0) return false;
  // The message this rank's next receive of that (source, tag) takes, not a later one.
  const std::lock_guard lock(info->mu);
  uint64_t& next = info->received[{from, got.tag}];
  if (got.seq != next) return false;
  if (take) ++next;
  return true;
}

// A message matched by MPI_Mprobe/MPI_Improbe, until its MPI_Mrecv/MPI_Imrecv.
struct Matched {
  MPI_Comm comm;
  int source, tag;
  uint64_t seq;
  size_t bytes;
};
std::mutex g_matched_mu;
std::set<Matched*> g_matched;

// A request complete from the start whose status says a received message's source, tag and count.
struct Received {
  int source, tag;
  size_t bytes;
};
int received_query(void* extra, MPI_Status* status) {
  const auto* r = static_cast<const Received*>(extra);
  fill_status(status, r->source, r->tag, r->bytes);
  return MPI_SUCCESS;
}
int received_free(void* extra) {
  delete static_cast<Received*>(extra);
  return MPI_SUCCESS;
}

// A matched message whose receive buffer is not dense device memory (host memory, or a datatype
// with gaps): received GPU-local into a device buffer of its own (its send waits already, so it
// pairs at once), then unpacked into `buf` on the host; `refused` (a non-contiguous device
// buffer, said on stderr already): received and dropped, and that error raised.  MPI_Imrecv's
// request is complete when it returns.
int bounced(const Matched& m, void* buf, int count, MPI_Datatype type, MPI_Status* status, MPI_Request* request,
            const char* call, int refused) {
  void* bounce = nullptr;
  if (m.bytes != 0 && cudaMalloc(&bounce, m.bytes) != cudaSuccess) return buffer_error(m.comm);
  const std::unique_ptr<void, void (*)(void*)> freed(bounce, [](void* p) {
    if (p != nullptr) cudaFree(p);
  });
  Half b;
  if (route(false, bounce, static_cast<int>(m.bytes), MPI_BYTE, m.source, m.tag, m.comm, call, b, false) !=
      Route::Local)
    return buffer_error(m.comm);
  b.env.seq = m.seq;
  if (const int rc = blocking(false, b, m.source, m.tag, m.comm, MPI_STATUS_IGNORE, call); rc != MPI_SUCCESS) return rc;
  int rc = refused;
  int type_size = 0;
  PMPI_Type_size(type, &type_size);
  if (rc == MPI_SUCCESS && m.bytes > static_cast<size_t>(type_size) * static_cast<size_t>(std::max(count, 0)))
    rc = MPI_ERR_TRUNCATE;
  if (rc == MPI_SUCCESS && m.bytes != 0) {
    std::vector<char> host(m.bytes);
    int position = 0;
    if (cudaMemcpy(host.data(), bounce, m.bytes, cudaMemcpyDeviceToHost) != cudaSuccess ||
        PMPI_Unpack(host.data(), static_cast<int>(m.bytes), &position, buf,
                    type_size == 0 ? 0 : static_cast<int>(m.bytes / static_cast<size_t>(type_size)), type,
                    m.comm) != MPI_SUCCESS)
      rc = MPI_ERR_OTHER;
  }
  if (rc != MPI_SUCCESS) {
    if (rc != refused) say(std::string(call) + " of a GPU-local message from rank " + std::to_string(m.source) + ", tag " +
                           std::to_string(m.tag) + ": " + (rc == MPI_ERR_TRUNCATE ? "larger than its receive" : "its copy failed"));
    PMPI_Comm_call_errhandler(m.comm, rc);
    return rc;
  }
  fill_status(status, m.source, m.tag, m.bytes);
  if (request == nullptr) return MPI_SUCCESS;
  auto* done = new Received{m.source, m.tag, m.bytes};
  if (const int st = PMPI_Grequest_start(received_query, received_free, cancel_fn, done, request); st != MPI_SUCCESS) {
    delete done;
    return st;
  }
  return PMPI_Grequest_complete(*request);
}
}  // namespace

bool probe(int source, int tag, MPI_Comm comm, MPI_Status* status) noexcept {
  int from = -1;
  funnel_envelope got{};
  size_t bytes = 0;
  if (!find_parked(source, tag, comm, false, from, got, bytes)) return false;
  fill_status(status, from, got.tag, bytes);
  return true;
}

bool matched_probe(int source, int tag, MPI_Comm comm, MPI_Message* message, MPI_Status* status) noexcept {
  if constexpr (!std::is_pointer_v<MPI_Message>) {
    return false;
  } else {
    int from = -1;
    funnel_envelope got{};
    size_t bytes = 0;
    if (!find_parked(source, tag, comm, true, from, got, bytes)) return false;
    auto* m = new Matched{comm, from, got.tag, got.seq, bytes};
    {
      const std::lock_guard lock(g_matched_mu);
      g_matched.insert(m);
    }
    *message = reinterpret_cast<MPI_Message>(m);
    fill_status(status, from, got.tag, bytes);
    return true;
  }
}

std::optional<int> mrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Status* status,
                         MPI_Request* request) noexcept {
  if constexpr (!std::is_pointer_v<MPI_Message>) {
    return std::nullopt;
  } else {
    if (message == nullptr) return std::nullopt;
    auto* m = reinterpret_cast<Matched*>(*message);
    {
      const std::lock_guard lock(g_matched_mu);
      if (g_matched.erase(m) == 0) return std::nullopt;
    }
    const std::unique_ptr<Matched> owned(m);
    *message = MPI_MESSAGE_NULL;
    const char* call = request != nullptr ? "MPI_Imrecv" : "MPI_Mrecv";
    Half h;
    const Route r = route(false, buf, count, type, m->source, m->tag, m->comm, call, h, false);
    if (r != Route::Local)
      return bounced(*m, buf, count, type, status, request, call, r == Route::Refuse ? h.error : MPI_SUCCESS);
    h.env.seq = m->seq;
    if (request != nullptr) return start(false, h, m->source, m->tag, m->comm, request, call);
    return blocking(false, h, m->source, m->tag, m->comm, status, call);
  }
}

int blocking(bool send, const Half& h, int peer, int tag, MPI_Comm comm, MPI_Status* status, const char* call) {
  int handle = -1;
  if (funnel_msg_post(send ? FUNNEL_MSG_SEND : FUNNEL_MSG_RECV, &h.env, h.start, h.bytes, &handle) != 0)
    return buffer_error(comm);
  size_t bytes = 0;
  const int state = wait_half(handle, bytes, [&] {
    return std::string(call) + (send ? " to world rank " + std::to_string(h.env.dest)
                                     : " from world rank " + std::to_string(h.env.source));
  });
  say_end(state, call, peer, tag);
  if (!send) fill_status(status, peer, tag, std::min(bytes, h.bytes));
  const int e = error_of(state);
  if (e != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, e);
  return e;
}

int start(bool send, const Half& h, int peer, int tag, MPI_Comm comm, MPI_Request* request, const char* call) {
  auto* r = new LocalRequest();
  r->recv = !send;
  r->peer = peer;
  r->tag = tag;
  r->capacity = h.bytes;
  r->call = call;
  r->comm = comm;
  if (funnel_msg_post(send ? FUNNEL_MSG_SEND : FUNNEL_MSG_RECV, &h.env, h.start, h.bytes, &r->handle) != 0) {
    delete r;
    return buffer_error(comm);
  }
  if (const int rc = PMPI_Grequest_start(query_fn, free_fn, local_cancel_fn, r, request); rc != MPI_SUCCESS) {
    // The half is posted: its end is waited for here, as nothing else will.
    size_t bytes = 0;
    (void)wait_half(r->handle, bytes, [&] { return std::string(call); });
    delete r;
    return rc;
  }
  r->request = *request;
  const std::lock_guard lock(g_requests_mu);
  g_requests[*request] = r;
  g_outstanding.store(g_requests.size(), std::memory_order_release);
  return MPI_SUCCESS;
}

bool any() noexcept {
  return g_outstanding.load(std::memory_order_acquire) != 0 || g_active.load(std::memory_order_acquire) != 0;
}

bool busy() noexcept { return any() || g_failed_count.load(std::memory_order_acquire) != 0; }

void poll(const MPI_Request* requests, int n) noexcept {
  if (!any()) return;
  const std::lock_guard lock(g_requests_mu);
  reap_locked();
  for (int i = 0; i < n; ++i) {
    auto it = g_requests.find(requests[i]);
    if (it != g_requests.end() && try_complete(it->second)) g_requests.erase(it);
    if (auto p = g_persistent.find(requests[i]); p != g_persistent.end()) (void)pending_locked(p->first, p->second);
  }
  g_outstanding.store(g_requests.size(), std::memory_order_release);
}

bool outstanding(const MPI_Request* requests, int n) noexcept {
  if (!any()) return false;
  const std::lock_guard lock(g_requests_mu);
  for (int i = 0; i < n; ++i) {
    if (g_requests.contains(requests[i])) return true;
    if (auto p = g_persistent.find(requests[i]); p != g_persistent.end() && p->second.active && !p->second.ended)
      return true;
  }
  return false;
}

std::vector<int> hidden(const MPI_Request* requests, int n) noexcept {
  std::vector<int> out;
  if (g_active.load(std::memory_order_acquire) == 0) return out;
  const std::lock_guard lock(g_requests_mu);
  for (int i = 0; i < n; ++i)
    if (auto p = g_persistent.find(requests[i]); p != g_persistent.end() && pending_locked(p->first, p->second))
      out.push_back(i);
  return out;
}

bool persistent_init(bool send, const void* buf, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm,
                     MPI_Request* request, const char* call, int& rc) noexcept {
  Half h;
  switch (route(send, buf, count, type, peer, tag, comm, call, h, false)) {
    case Route::Mpi: return false;
    case Route::Refuse:
      PMPI_Comm_call_errhandler(comm, h.error);
      rc = h.error;
      return true;
    case Route::Local: break;
  }
  rc = send ? PMPI_Send_init(buf, 0, MPI_BYTE, MPI_PROC_NULL, tag, comm, request)
            : PMPI_Recv_init(const_cast<void*>(buf), 0, MPI_BYTE, MPI_PROC_NULL, tag, comm, request);
  if (rc != MPI_SUCCESS) return true;
  Persistent p;
  p.send = send;
  p.buf = buf;
  p.count = count;
  p.type = type;
  p.peer = peer;
  p.tag = tag;
  p.comm = comm;
  p.call = call;
  p.capacity = h.bytes;
  const std::lock_guard lock(g_requests_mu);
  g_persistent[*request] = p;
  return true;
}

int start_persistent(MPI_Request request) noexcept {
  Persistent* p = nullptr;
  {
    const std::lock_guard lock(g_requests_mu);
    auto it = g_persistent.find(request);
    if (it == g_persistent.end()) return MPI_SUCCESS;
    p = &it->second;
    if (p->active) return MPI_ERR_REQUEST;  // started twice without a completion: MPI says so too
  }
  // Its sequence number now, in the order of the rank's sends (or receives) of the envelope.
  Half h;
  if (route(p->send, p->buf, p->count, p->type, p->peer, p->tag, p->comm, p->call, h) != Route::Local)
    return buffer_error(p->comm);  // its memory went since MPI_Send_init or MPI_Recv_init
  int handle = -1;
  if (funnel_msg_post(p->send ? FUNNEL_MSG_SEND : FUNNEL_MSG_RECV, &h.env, h.start, h.bytes, &handle) != 0)
    return buffer_error(p->comm);
  const std::lock_guard lock(g_requests_mu);
  p->handle = handle;
  p->active = true;
  p->ended = false;
  p->state = FUNNEL_MSG_PENDING;
  g_active.fetch_add(1, std::memory_order_acq_rel);
  return MPI_SUCCESS;
}

void forget(MPI_Request request) noexcept {
  const std::lock_guard lock(g_requests_mu);
  auto it = g_persistent.find(request);
  if (it == g_persistent.end()) return;
  // An active one's half goes on in the server; its end is not waited for (MPI lets it finish).
  if (it->second.active) g_active.fetch_sub(1, std::memory_order_acq_rel);
  g_persistent.erase(it);
}

void settle(const MPI_Request* requests, int n) noexcept {
  wait_for(
      [&] {
        poll(requests, n);
        return !outstanding(requests, n);
      },
      [] {
        return std::string("a wait for GPU-local messages (FUNNEL_MPI_LOCAL=1) has taken 10 s: each needs its other "
                           "half, a device buffer's send or receive with the same source and tag on the other rank");
      });
}

int raise_failed(const MPI_Request* before, int n, MPI_Status* statuses, bool many) noexcept {
  const bool ignore = statuses == MPI_STATUSES_IGNORE || statuses == MPI_STATUS_IGNORE;
  if (g_active.load(std::memory_order_acquire) != 0) {
    // Persistent requests whose placeholder MPI just completed: their half's status.
    const std::lock_guard lock(g_requests_mu);
    for (int i = 0; i < n; ++i) {
      auto it = g_persistent.find(before[i]);
      if (it == g_persistent.end() || !it->second.active || !it->second.ended) continue;
      Persistent& p = it->second;
      if (!ignore)
        fill_status(&statuses[many ? i : 0], p.peer, p.tag, p.send ? 0 : std::min(p.bytes, p.capacity));
      p.active = false;
      g_active.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
  if (g_failed_count.load(std::memory_order_acquire) == 0) return MPI_SUCCESS;
  int first = MPI_SUCCESS;
  MPI_Comm comm = MPI_COMM_NULL;
  {
    const std::lock_guard lock(g_requests_mu);
    for (int i = 0; i < n; ++i) {
      auto it = g_failed.find(before[i]);
      if (it == g_failed.end()) continue;
      if (first == MPI_SUCCESS) {
        comm = it->second.first;
        first = it->second.second;
      }
      if (!ignore) statuses[many ? i : 0].MPI_ERROR = it->second.second;
      g_failed.erase(it);
    }
    g_failed_count.store(g_failed.size(), std::memory_order_release);
  }
  if (first == MPI_SUCCESS) return MPI_SUCCESS;
  PMPI_Comm_call_errhandler(comm, first);
  return many ? MPI_ERR_IN_STATUS : first;
}

void detach(MPI_Request request, void* bounce) noexcept {
  const std::lock_guard lock(g_requests_mu);
  auto it = g_requests.find(request);
  if (it == g_requests.end() || it->second->detached) return;
  it->second->detached = true;
  it->second->bounce = bounce;
  ++g_detached;
}

int bsend(const Half& h, int dest, int tag, MPI_Comm comm, const char* call) noexcept {
  void* copy = nullptr;
  if (h.bytes != 0 &&
      (cudaMalloc(&copy, h.bytes) != cudaSuccess || cudaMemcpy(copy, h.start, h.bytes, cudaMemcpyDeviceToDevice) != cudaSuccess)) {
    if (copy != nullptr) cudaFree(copy);
    return buffer_error(comm);
  }
  Half from = h;
  if (copy != nullptr) from.start = copy;
  MPI_Request request = MPI_REQUEST_NULL;
  if (const int rc = start(true, from, dest, tag, comm, &request, call); rc != MPI_SUCCESS) {
    if (copy != nullptr) cudaFree(copy);
    return rc;
  }
  detach(request, copy);
  return PMPI_Request_free(&request);
}

namespace {
int done_query(void*, MPI_Status* status) {
  fill_status(status, MPI_UNDEFINED, MPI_UNDEFINED, 0);
  return MPI_SUCCESS;
}
int done_free(void*) { return MPI_SUCCESS; }
}  // namespace

int ibsend(const Half& h, int dest, int tag, MPI_Comm comm, MPI_Request* request, const char* call) noexcept {
  if (const int rc = bsend(h, dest, tag, comm, call); rc != MPI_SUCCESS) return rc;
  // Its request is complete at once: the message is the copy's now.
  if (const int rc = PMPI_Grequest_start(done_query, done_free, cancel_fn, nullptr, request); rc != MPI_SUCCESS)
    return rc;
  return PMPI_Grequest_complete(*request);
}

void finish() noexcept {
  wait_for(
      [] {
        const std::lock_guard lock(g_requests_mu);
        reap_locked();
        return g_detached == 0;
      },
      [] {
        return std::string("MPI_Finalize has waited 10 s for GPU-local messages whose requests were freed "
                           "(MPI_Request_free, MPI_Bsend): each needs its receive on the other rank");
      });
}

void progress() noexcept {
  if (g_probe == MPI_COMM_NULL) return;
  int flag = 0;
  PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, g_probe, &flag, MPI_STATUS_IGNORE);
}

}  // namespace funnel::mpi::local

// ---- probes: MPI's, then the server's mailbox (GPU-local sends waiting for their receive) ---------
#define FUNNEL_MPI_API extern "C" __attribute__((visibility("default")))

FUNNEL_MPI_API int MPI_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
  const int rc = PMPI_Iprobe(source, tag, comm, flag, status);
  if (rc == MPI_SUCCESS && *flag == 0 && funnel::mpi::local::probe(source, tag, comm, status)) *flag = 1;
  return rc;
}

FUNNEL_MPI_API int MPI_Improbe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* message,
                               MPI_Status* status) {
  const int rc = PMPI_Improbe(source, tag, comm, flag, message, status);
  if (rc == MPI_SUCCESS && *flag == 0 && funnel::mpi::local::matched_probe(source, tag, comm, message, status))
    *flag = 1;
  return rc;
}

namespace {
// A blocking probe: its non-blocking wrapper (MPI's probe, then the mailbox) until it finds one.
// Each look at the mailbox is a round trip to the server: after the first ones, every 20 us.
template <class Once>
int probe_until(Once&& once) {
  for (unsigned spin = 0;; ++spin) {
    int flag = 0;
    if (const int rc = once(&flag); rc != MPI_SUCCESS || flag != 0) return rc;
    if (spin >= 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}
}  // namespace

FUNNEL_MPI_API int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message* message, MPI_Status* status) {
  if (!funnel::mpi::local::enabled()) return PMPI_Mprobe(source, tag, comm, message, status);
  return probe_until([&](int* flag) { return MPI_Improbe(source, tag, comm, flag, message, status); });
}

FUNNEL_MPI_API int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
  if (!funnel::mpi::local::enabled()) return PMPI_Probe(source, tag, comm, status);
  return probe_until([&](int* flag) { return MPI_Iprobe(source, tag, comm, flag, status); });
}

// ---- communicators made by collective calls: numbered after their parent ------------------------
namespace {
template <class Make>
int made_from(MPI_Comm parent, MPI_Comm* out, Make&& make) {
  const int rc = make();
  if (rc == MPI_SUCCESS && out != nullptr) funnel::mpi::local::comm_made(parent, *out);
  return rc;
}
}  // namespace

FUNNEL_MPI_API int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* out) {
  return made_from(comm, out, [&] { return PMPI_Comm_dup(comm, out); });
}
FUNNEL_MPI_API int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm* out) {
  return made_from(comm, out, [&] { return PMPI_Comm_dup_with_info(comm, info, out); });
}
FUNNEL_MPI_API int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* out) {
  return made_from(comm, out, [&] { return PMPI_Comm_split(comm, color, key, out); });
}
FUNNEL_MPI_API int MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info, MPI_Comm* out) {
  return made_from(comm, out, [&] { return PMPI_Comm_split_type(comm, type, key, info, out); });
}
FUNNEL_MPI_API int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm* out) {
  return made_from(comm, out, [&] { return PMPI_Comm_create(comm, group, out); });
}
FUNNEL_MPI_API int MPI_Cart_create(MPI_Comm comm, int ndims, const int dims[], const int periods[], int reorder,
                                   MPI_Comm* out) {
  return made_from(comm, out, [&] { return PMPI_Cart_create(comm, ndims, dims, periods, reorder, out); });
}
FUNNEL_MPI_API int MPI_Cart_sub(MPI_Comm comm, const int remain_dims[], MPI_Comm* out) {
  return made_from(comm, out, [&] { return PMPI_Cart_sub(comm, remain_dims, out); });
}
FUNNEL_MPI_API int MPI_Graph_create(MPI_Comm comm, int nnodes, const int index[], const int edges[], int reorder,
                                    MPI_Comm* out) {
  return made_from(comm, out, [&] { return PMPI_Graph_create(comm, nnodes, index, edges, reorder, out); });
}
FUNNEL_MPI_API int MPI_Dist_graph_create_adjacent(MPI_Comm comm, int indegree, const int sources[],
                                                  const int sourceweights[], int outdegree, const int destinations[],
                                                  const int destweights[], MPI_Info info, int reorder, MPI_Comm* out) {
  return made_from(comm, out, [&] {
    return PMPI_Dist_graph_create_adjacent(comm, indegree, sources, sourceweights, outdegree, destinations, destweights,
                                           info, reorder, out);
  });
}
FUNNEL_MPI_API int MPI_Dist_graph_create(MPI_Comm comm, int n, const int sources[], const int degrees[],
                                         const int destinations[], const int weights[], MPI_Info info, int reorder,
                                         MPI_Comm* out) {
  return made_from(comm, out, [&] {
    return PMPI_Dist_graph_create(comm, n, sources, degrees, destinations, weights, info, reorder, out);
  });
}
