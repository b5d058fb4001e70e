#include "session/mailbox.hpp"

#include <algorithm>
#include <limits>
#include <thread>

#include <spdlog/spdlog.h>

namespace funnel::server {

Mailbox::Outcome Mailbox::pair_locked(bool send, const Key& key, uint64_t world, int32_t peer, MsgHalf& other) {
  if (gone_.contains({world, peer})) return Outcome::PeerGone;
  auto& theirs = send ? recvs_ : sends_;
  auto it = theirs.find(key);
  if (it == theirs.end()) return Outcome::Absent;
  other = std::move(it->second.half);
  theirs.erase(it);
  return Outcome::Paired;
}

Mailbox::Outcome Mailbox::take(bool send, const Key& key, uint64_t world, int32_t self, int32_t peer, uint32_t client,
                               MsgHalf& other) {
  const std::lock_guard lock(mu_);
  rank_client_[{world, self}] = client;
  worlds_.try_emplace(world);
  return pair_locked(send, key, world, peer, other);
}

Mailbox::Outcome Mailbox::park(bool send, const Key& key, uint64_t world, int32_t peer, MsgHalf&& half,
                               MsgHalf& other) {
  std::shared_ptr<BackendEvent> unused;  // let go outside the lock (it may go back to the pool)
  Outcome o;
  {
    const std::lock_guard lock(mu_);
    o = pair_locked(send, key, world, peer, other);
    if (o == Outcome::Absent) {
      auto& mine = send ? sends_ : recvs_;
      if (mine.emplace(key, Parked{std::move(half), world, peer}).second) return Outcome::Parked;
      o = Outcome::Duplicate;
    }
    unused = std::move(half.ready);
  }
  return o;
}

Mailbox::WorldAnswer Mailbox::world(uint32_t client, const ipc::MsgWorldCmd& c,
                                    std::chrono::steady_clock::time_point now) {
  const std::lock_guard lock(mu_);
  World& w = worlds_[c.world];
  if (w.first == std::chrono::steady_clock::time_point{}) w.first = now;
  if (w.local_size == 0) w.local_size = c.local_size;
  const auto settle = [&] {
    if (!w.settled && now - w.first >= std::chrono::milliseconds(ipc::kWorldWindowMs)) w.settled = true;
  };
  WorldAnswer a;
  if (c.rank >= 0) {
    // A rank joins once (a later join keeps its first answer); its client is the one to answer
    // for it when it leaves.
    settle();
    const auto [it, fresh] = w.joined.try_emplace(c.rank, !w.settled && (c.flags & ipc::kWorldLocal) != 0);
    rank_client_[{c.world, c.rank}] = client;
    if (fresh && !w.settled && w.local_size > 0 && w.joined.size() >= static_cast<size_t>(w.local_size))
      w.settled = true;
    a.self = it->second ? ipc::kMsgMember : ipc::kMsgOutsider;
  }
  settle();
  if (c.peer >= 0) {
    const auto it = w.joined.find(c.peer);
    a.peer = it != w.joined.end() ? (it->second ? ipc::kMsgMember : ipc::kMsgOutsider)
                                  : (w.settled ? ipc::kMsgOutsider : ipc::kMsgNotYet);
  }
  a.settled = w.settled;
  a.joined = static_cast<uint32_t>(w.joined.size());
  return a;
}

bool Mailbox::probe(const ipc::MsgProbeCmd& c, Probed& out) {
  const std::lock_guard lock(mu_);
  // Keys are ordered (world, comm, source, dest, tag, seq): the comm's sends are one range.
  constexpr int32_t kLow = std::numeric_limits<int32_t>::min();
  for (auto it = sends_.lower_bound({c.world, c.comm, kLow, kLow, kLow, 0});
       it != sends_.end() && std::get<0>(it->first) == c.world && std::get<1>(it->first) == c.comm; ++it) {
    const auto& [world, comm, source, dest, tag, seq] = it->first;
    if (dest != c.dest || (c.source >= 0 && source != c.source) || (c.tag >= 0 && tag != c.tag)) continue;
    out = {source, tag, seq, it->second.half.bytes};
    return true;
  }
  return false;
}

std::shared_ptr<BackendEvent> Mailbox::event(int device) {
  std::unique_ptr<BackendEvent> e;
  {
    const std::lock_guard lock(mu_);
    for (auto it = pool_.begin(); it != pool_.end(); ++it)
      if ((*it)->device() == device) {
        e = std::move(*it);
        pool_.erase(it);
        break;
      }
  }
  if (!e && backend_.create_event(device, false, e) != Status::Success) return nullptr;
  return {e.release(), [this](BackendEvent* x) { recycle(x); }};
}

void Mailbox::recycle(BackendEvent* e) {
  std::unique_ptr<BackendEvent> owned(e);
  const std::lock_guard lock(mu_);
  if (pool_.size() < 256) pool_.push_back(std::move(owned));
}

void Mailbox::in_flight(uint32_t a, uint32_t b, int device, ipc::MsgWord* wa, ipc::MsgWord* wb) {
  const std::lock_guard lock(mu_);
  if (flights_.size() >= 64) std::erase_if(flights_, [](const Flight& f) { return f.over(); });
  flights_.push_back(
      {a, b, device, wa, wb, wa->ticket.load(std::memory_order_acquire), wb->ticket.load(std::memory_order_acquire)});
}

void Mailbox::forget_device(int device) {
  std::vector<std::shared_ptr<BackendEvent>> parked_events;  // let go after the lock (back to the pool)
  {
    const std::lock_guard lock(mu_);
    for (auto* box : {&sends_, &recvs_})
      for (auto it = box->begin(); it != box->end();) {
        if (it->second.half.device != device) {
          ++it;
          continue;
        }
        it->second.half.word->state.store(ipc::kMsgFailed, std::memory_order_release);
        parked_events.push_back(std::move(it->second.half.ready));
        it = box->erase(it);
      }
    std::erase_if(flights_, [device](const Flight& f) { return f.device == device; });
  }
  parked_events.clear();
  // The device's pooled events, those just recycled included, destroyed after the lock (no
  // driver call under it).
  std::vector<std::unique_ptr<BackendEvent>> pooled;
  const std::lock_guard lock(mu_);
  const auto mine = std::stable_partition(pool_.begin(), pool_.end(),
                                          [device](const std::unique_ptr<BackendEvent>& e) { return e->device() != device; });
  pooled.assign(std::make_move_iterator(mine), std::make_move_iterator(pool_.end()));
  pool_.erase(mine, pool_.end());
}

bool Mailbox::leave(uint32_t client, int mpi_rank, std::chrono::steady_clock::time_point deadline) {
  {
    const std::lock_guard lock(mu_);
    for (const auto& [rank, c] : rank_client_)
      if (c == client) gone_.insert(rank);
    if (mpi_rank >= 0)
      for (const auto& [w, unused] : worlds_)
        if (auto it = rank_client_.find({w, mpi_rank}); it == rank_client_.end() || it->second == client)
          gone_.insert({w, mpi_rank});
    for (auto* box : {&sends_, &recvs_}) {
      for (auto it = box->begin(); it != box->end();) {
        Parked& p = it->second;
        if (p.half.client == client) {
          it = box->erase(it);
          continue;
        }
        // Waits for a rank of the leaving client: answered here (its poster is alive: a client
        // drops its own halves before its memory goes).
        if (gone_.contains({p.world, p.peer})) {
          p.half.word->state.store(ipc::kMsgPeerGone, std::memory_order_release);
          it = box->erase(it);
          continue;
        }
        ++it;
      }
    }
  }
  // The copies in flight that read or write its memory, or store into its words, end first; then
  // they are forgotten (their words go with its memory).
  for (;;) {
    {
      const std::lock_guard lock(mu_);
      const auto touches = [client](const Flight& f) { return f.a == client || f.b == client; };
      if (std::none_of(flights_.begin(), flights_.end(), [&](const Flight& f) { return touches(f) && !f.over(); })) {
        std::erase_if(flights_, touches);  // their words go with its memory
        return true;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        spdlog::error("client {}: GPU-local messages still in flight at its teardown", client);
        return false;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace funnel::server
