// GPU-local messages (funnel.h, funnel_msg_*; doc/design/mpi-device-buffers.md): one half of a
// message between processes of this server, posted one-way on the legacy stream of its buffer's
// device; the GPU (or the server) answers in a completion word of this process's, a 16-byte
// ipc::MsgWord in a pinned page of 256 that this file keeps.
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "api.hpp"
#include "funnel/funnel.h"
#include "pinned.hpp"

namespace funnel::client {
namespace {

static_assert(FUNNEL_MSG_PENDING == ipc::kMsgPending && FUNNEL_MSG_DONE == ipc::kMsgDone &&
              FUNNEL_MSG_TRUNCATED == ipc::kMsgTruncated && FUNNEL_MSG_PEER_GONE == ipc::kMsgPeerGone &&
              FUNNEL_MSG_FAILED == ipc::kMsgFailed);

constexpr size_t kWordsPerPage = 4096 / sizeof(ipc::MsgWord);

class MsgWords {
 public:
  // A free word, set pending; its handle (>= 0), or -1 with `e` when no page could be had.
  int take(ipc::MsgWord*& word, uint64_t& pinned_id, uint64_t& offset, cudaError_t& e) {
    const std::lock_guard lock(mu_);
    if (free_.empty()) {
      void* p = nullptr;
      if (e = pinned_alloc(&p, 4096, 0); e != cudaSuccess) return -1;
      const Classified c = Runtime::get().tables.classify(p);
      pages_.push_back({static_cast<ipc::MsgWord*>(p), c.pinned_id});
      const size_t first = (pages_.size() - 1) * kWordsPerPage;
      for (size_t i = kWordsPerPage; i-- > 0;) free_.push_back(static_cast<int>(first + i));
    }
    const int h = free_.back();
    free_.pop_back();
    const Page& pg = pages_[static_cast<size_t>(h) / kWordsPerPage];
    const size_t i = static_cast<size_t>(h) % kWordsPerPage;
    word = &pg.words[i];
    word->bytes.store(0, std::memory_order_relaxed);
    word->ticket.fetch_add(1, std::memory_order_relaxed);
    word->state.store(ipc::kMsgPending, std::memory_order_release);
    pinned_id = pg.id;
    offset = i * sizeof(ipc::MsgWord);
    return h;
  }
  ipc::MsgWord* word(int h) {
    const std::lock_guard lock(mu_);
    if (h < 0 || static_cast<size_t>(h) >= pages_.size() * kWordsPerPage) return nullptr;
    return &pages_[static_cast<size_t>(h) / kWordsPerPage].words[static_cast<size_t>(h) % kWordsPerPage];
  }
  void give_back(int h) {
    const std::lock_guard lock(mu_);
    free_.push_back(h);
  }

 private:
  struct Page {
    ipc::MsgWord* words;
    uint64_t id;
  };
  std::mutex mu_;
  std::vector<Page> pages_;
  std::vector<int> free_;
};

MsgWords& words() {
  static auto* w = new MsgWords();  // never destroyed: handles may be tested during exit
  return *w;
}

}  // namespace

FUNNEL_API int funnel_server_pid(void) {
  Runtime& rt = Runtime::get();
  if (rt.ensure() != Status::Success) return 0;
  return rt.view().header().server_pid;
}

FUNNEL_API int funnel_msg_post(int role, const funnel_envelope* e, const void* buf, size_t bytes, int* handle) {
  return static_cast<int>(guarded(__func__, [&]() -> cudaError_t {
    if (handle == nullptr || e == nullptr || buf == nullptr ||
        (role != FUNNEL_MSG_SEND && role != FUNNEL_MSG_RECV) || e->source < 0 || e->dest < 0)
      return cudaErrorInvalidValue;
    *handle = -1;
    Runtime& rt = Runtime::get();
    if (cudaError_t err = to_cuda(rt.ready()); err != cudaSuccess) return err;
    const Classified c = rt.tables.classify(buf);
    const uint64_t at = reinterpret_cast<uint64_t>(buf);
    if (c.kind != Classified::Device || at - c.base > c.size || bytes > c.size - (at - c.base))
      return cudaErrorInvalidValue;
    ipc::MsgWord* word = nullptr;
    ipc::MsgPostCmd cmd{};
    cudaError_t err = cudaSuccess;
    const int h = words().take(word, cmd.word_pinned, cmd.word_offset, err);
    if (h < 0) return err;
    cmd.world = e->world;
    cmd.comm = e->comm;
    cmd.source = e->source;
    cmd.dest = e->dest;
    cmd.tag = e->tag;
    cmd.role = role == FUNNEL_MSG_SEND ? ipc::kMsgSend : ipc::kMsgRecv;
    cmd.seq = e->seq;
    cmd.address = at;
    cmd.bytes = bytes;
    if (err = to_cuda(rt.post(Opcode::MsgPost, c.device, 0, &cmd, sizeof cmd)); err != cudaSuccess) {
      words().give_back(h);
      return err;
    }
    *handle = h;
    return cudaSuccess;
  }));
}

static_assert(FUNNEL_WORLD_LOCAL == ipc::kWorldLocal && FUNNEL_PEER_NOT_YET == ipc::kMsgNotYet &&
              FUNNEL_PEER_MEMBER == ipc::kMsgMember && FUNNEL_PEER_OUTSIDER == ipc::kMsgOutsider);

FUNNEL_API int funnel_msg_world(unsigned long long world, int rank, int local_size, int flags, int peer,
                                funnel_world_answer* a) {
  return static_cast<int>(guarded(__func__, [&]() -> cudaError_t {
    if (a == nullptr || rank < -1 || peer < -1 || local_size < 0 || (flags & ~FUNNEL_WORLD_LOCAL) != 0)
      return cudaErrorInvalidValue;
    const ipc::MsgWorldCmd cmd{world, rank, local_size, peer, static_cast<uint32_t>(flags)};
    Reply r;
    if (cudaError_t e = to_cuda(Runtime::get().call(Opcode::MsgWorld, 0, 0, &cmd, sizeof cmd, &r)); e != cudaSuccess)
      return e;
    a->self = static_cast<int>(r.value[0]);
    a->peer = static_cast<int>(r.value[1]);
    a->settled = static_cast<int>(r.value[2]);
    a->joined = static_cast<int>(r.value[3]);
    return cudaSuccess;
  }));
}

FUNNEL_API int funnel_msg_probe(const funnel_envelope* e, int* found, funnel_envelope* out, size_t* bytes) {
  return static_cast<int>(guarded(__func__, [&]() -> cudaError_t {
    if (e == nullptr || found == nullptr || out == nullptr || bytes == nullptr || e->source < -1 || e->dest < 0 ||
        e->tag < -1)
      return cudaErrorInvalidValue;
    const ipc::MsgProbeCmd cmd{e->world, e->comm, e->source, e->dest, e->tag, 0};
    Reply r;
    if (cudaError_t err = to_cuda(Runtime::get().call(Opcode::MsgProbe, 0, 0, &cmd, sizeof cmd, &r)); err != cudaSuccess)
      return err;
    *found = r.value[0] != 0 ? 1 : 0;
    if (*found != 0) {
      *out = *e;
      out->source = static_cast<int>(static_cast<uint32_t>(r.value[1]));
      out->tag = static_cast<int>(static_cast<uint32_t>(r.value[2]));
      out->seq = r.value[3];
      *bytes = static_cast<size_t>(r.value[4]);
    }
    return cudaSuccess;
  }));
}

FUNNEL_API int funnel_msg_test(int handle, int* state, size_t* bytes) {
  if (state == nullptr) return cudaErrorInvalidValue;
  ipc::MsgWord* w = words().word(handle);
  if (w == nullptr) return cudaErrorInvalidValue;
  const uint32_t s = w->state.load(std::memory_order_acquire);
  if (s == ipc::kMsgPending) {
    // The halves are posted quietly (a napping worker is not woken for each): the first test
    // that finds one pending wakes it for all of them.
    Runtime::get().nudge();
    // A server that went away answers nothing: asked at most every 10 ms (a system call).
    thread_local auto last = std::chrono::steady_clock::time_point{};
    const auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::milliseconds(10)) {
      *state = FUNNEL_MSG_PENDING;
      return cudaSuccess;
    }
    last = now;
    if (!Runtime::get().gone()) {
      *state = FUNNEL_MSG_PENDING;
      return cudaSuccess;
    }
    *state = FUNNEL_MSG_FAILED;
  } else {
    *state = s <= ipc::kMsgFailed ? static_cast<int>(s) : FUNNEL_MSG_FAILED;
    if (bytes != nullptr) *bytes = static_cast<size_t>(w->bytes.load(std::memory_order_relaxed));
  }
  words().give_back(handle);
  return cudaSuccess;
}

}  // namespace funnel::client
