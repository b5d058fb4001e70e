// GPU-local messages between clients of this server (doc/design/mpi-device-buffers.md, "GPU-local
// messages"): the MPI hooks post each half of a message, the send and the receive, with an
// envelope; the server pairs the halves and the worker that posts the second one copies device to
// device on its own legacy stream, after the first poster's work queued before its post (an event
// recorded then), and the GPU stores each side's completion word (a MsgWord in the poster's
// pinned memory).  Neither client's thread has to run between its post and the completion, so
// the pairing never waits on a rank sitting in some other MPI call.  Every worker calls in (one
// lock); nothing here waits on the GPU but leave(), at a client's teardown.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "funnel/ipc/commands.hpp"
#include "funnel/server/backend.hpp"

namespace funnel::server {

// One posted half, as the pairing worker needs it.
struct MsgHalf {
  uint32_t client = 0;
  int device = 0;
  uint64_t address = 0;  // device memory of the poster (checked by its worker)
  uint64_t bytes = 0;    // a send's size, a receive's capacity
  ipc::MsgWord* word = nullptr;  // in the poster's pinned memory, as mapped in the server
  std::shared_ptr<BackendEvent> ready;  // a parked half: the poster's legacy stream at its post
};

class Mailbox {
 public:
  // (world, comm, source, dest, tag, seq): the n-th send of an envelope meets its n-th receive.
  using Key = std::tuple<uint64_t, uint64_t, int32_t, int32_t, int32_t, uint64_t>;
  static Key key_of(const ipc::MsgPostCmd& c) noexcept { return {c.world, c.comm, c.source, c.dest, c.tag, c.seq}; }

  explicit Mailbox(Backend& backend) : backend_(backend) {}
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  enum class Outcome { Absent, Parked, Paired, PeerGone, Duplicate };
  // A half posted (a send when `send`) by world rank `self` for `peer`: Paired when the other half
  // is here (`other`, taken out: the caller copies and stores both words), PeerGone when the other
  // side's client has left (the caller answers its own word), else Absent: the caller records its
  // stream's point in `half.ready` and parks it.  Only the first poster of a message records.
  Outcome take(bool send, const Key& key, uint64_t world, int32_t self, int32_t peer, uint32_t client, MsgHalf& other);
  // Parks `half`, unless the other half came meanwhile (Paired: `other` taken out, `half` dropped
  // but for its event, which goes back to the pool), the peer left (PeerGone) or the envelope is
  // parked already (Duplicate).
  Outcome park(bool send, const Key& key, uint64_t world, int32_t peer, MsgHalf&& half, MsgHalf& other);

  // An event for parked halves; back in the pool once the last holder lets it go (the pairing
  // workers once they queued their waits: a wait takes the record it finds, so the event may be
  // recorded again then).  nullptr when none can be made.
  std::shared_ptr<BackendEvent> event(int device);

  // MsgWorld (commands.hpp): `client` joins world `c.world` as `c.rank` (>= 0), and asks about
  // `c.peer` (>= 0).  A world settles once `local_size` ranks joined, or when asked
  // kWorldWindowMs after its first join; a rank joining after that is an outsider.
  struct WorldAnswer {
    uint32_t self = ipc::kMsgOutsider;  // c.rank's membership (kMsgOutsider when it did not join)
    uint32_t peer = ipc::kMsgOutsider;  // c.peer's
    bool settled = false;
    uint32_t joined = 0;  // ranks joined so far
  };
  WorldAnswer world(uint32_t client, const ipc::MsgWorldCmd& c, std::chrono::steady_clock::time_point now);

  // MsgProbe: the parked send to `dest` on (world, comm) from `source` with `tag` (-1: any) of the
  // lowest (source, tag, seq); false when none is parked.
  struct Probed {
    int32_t source = 0, tag = 0;
    uint64_t seq = 0, bytes = 0;
  };
  bool probe(const ipc::MsgProbeCmd& c, Probed& out);

  // A paired message's copy and word stores were queued: it has ended once both words left
  // kMsgPending (the GPU, or the worker that saw the stream get there, stores them after the
  // copy) or were armed again by their clients (a new ticket: a client arms a word again only
  // after it saw its end).  leave() waits for these before a party's memory goes.
  void in_flight(uint32_t a, uint32_t b, int device, ipc::MsgWord* wa, ipc::MsgWord* wb);

  // A client leaves (teardown, before its memory goes): its parked halves are dropped, the halves
  // that wait for one of its ranks are answered PeerGone, later posts to its ranks are too, and the
  // copies in flight that touch it are waited for (until `deadline`).  Its ranks: those it posted
  // as, and `mpi_rank` (its hello's; -1: none) in every world seen, unless another client posted
  // as that rank.  False when some copies did not end.
  bool leave(uint32_t client, int mpi_rank, std::chrono::steady_clock::time_point deadline);

  // Before `device`'s context is reset after a fault (every client released it): the halves parked
  // on it are answered kMsgFailed and dropped (their memory went with the fault), its pooled
  // events destroyed, its flights forgotten (their copies died with the context).
  void forget_device(int device);

 private:
  struct Flight {
    uint32_t a, b;
    int device;
    ipc::MsgWord *wa, *wb;
    uint32_t ta, tb;  // the words' tickets when the message was paired
    static bool ended(const ipc::MsgWord* w, uint32_t t) noexcept {
      return w->ticket.load(std::memory_order_acquire) != t || w->state.load(std::memory_order_acquire) != ipc::kMsgPending;
    }
    bool over() const noexcept { return ended(wa, ta) && ended(wb, tb); }
  };
  struct Parked {
    MsgHalf half;
    uint64_t world;
    int32_t peer;
  };
  Outcome pair_locked(bool send, const Key& key, uint64_t world, int32_t peer, MsgHalf& other);

  Backend& backend_;
  std::mutex mu_;
  std::map<Key, Parked> sends_, recvs_;
  std::map<std::pair<uint64_t, int32_t>, uint32_t> rank_client_;  // (world, rank) -> client, as posted
  std::set<std::pair<uint64_t, int32_t>> gone_;                  // ranks whose client left
  struct World {
    std::map<int32_t, bool> joined;  // rank -> a member (else an outsider)
    int32_t local_size = 0;          // by the first joiner's launcher (0: unknown)
    std::chrono::steady_clock::time_point first{};  // the first join
    bool settled = false;
  };
  std::map<uint64_t, World> worlds_;  // by world; also those only posted to
  std::vector<Flight> flights_;
  void recycle(BackendEvent* e);
  std::vector<std::unique_ptr<BackendEvent>> pool_;  // free events, any device
};

}  // namespace funnel::server
