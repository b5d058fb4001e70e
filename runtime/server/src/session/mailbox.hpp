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
  std::shared_ptr<BackendEvent> ready;  // the poster's legacy stream at its post
};

class Mailbox {
 public:
  // (world, comm, source, dest, tag, seq): the n-th send of an envelope meets its n-th receive.
  using Key = std::tuple<uint64_t, uint64_t, int32_t, int32_t, int32_t, uint64_t>;
  static Key key_of(const ipc::MsgPostCmd& c) noexcept { return {c.world, c.comm, c.source, c.dest, c.tag, c.seq}; }

  explicit Mailbox(Backend& backend) : backend_(backend) {}
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // What post() found.
  enum class Outcome { Parked, Paired, PeerGone, Duplicate };
  // Posts `half` (a send when `send`); `self`/`peer` are the world ranks of the poster and of the
  // other side.  Paired: `other` is the other half, taken out of the mailbox (the caller copies
  // and stores both words); Parked: kept until the other half comes; PeerGone: the other side's
  // client has left (the caller answers its own word); Duplicate: this envelope is posted twice.
  Outcome post(bool send, const Key& key, uint64_t world, int32_t self, int32_t peer, MsgHalf half, MsgHalf& other);

  // A paired message's copy was queued: `done` completes once both words are stored (nullptr:
  // stored already, or `stored` says when).  leave() waits for these before a party's memory goes.
  void in_flight(uint32_t a, uint32_t b, std::shared_ptr<BackendEvent> done, std::shared_ptr<std::atomic<bool>> stored);

  // A client leaves (teardown, before its memory goes): its parked halves are dropped, the halves
  // that wait for one of its ranks are answered PeerGone, later posts to its ranks are too, and the
  // copies in flight that touch it are waited for (until `deadline`).  Its ranks: those it posted
  // as, and `mpi_rank` (its hello's; -1: none) in every world seen, unless another client posted
  // as that rank.  False when some copies did not end.
  bool leave(uint32_t client, int mpi_rank, std::chrono::steady_clock::time_point deadline);

  size_t parked() const;

 private:
  struct Flight {
    uint32_t a, b;
    std::shared_ptr<BackendEvent> done;
    std::shared_ptr<std::atomic<bool>> stored;
  };
  struct Parked {
    MsgHalf half;
    uint64_t world;
    int32_t peer;
  };
  bool flight_over(const Flight& f);
  void prune_flights();

  Backend& backend_;
  mutable std::mutex mu_;
  std::map<Key, Parked> sends_, recvs_;
  std::map<std::pair<uint64_t, int32_t>, uint32_t> rank_client_;  // (world, rank) -> client, as posted
  std::set<std::pair<uint64_t, int32_t>> gone_;                  // ranks whose client left
  std::set<uint64_t> worlds_;
  std::vector<Flight> flights_;
};

}  // namespace funnel::server
