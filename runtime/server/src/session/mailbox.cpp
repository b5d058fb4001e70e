#include "session/mailbox.hpp"

#include <thread>

#include <spdlog/spdlog.h>

namespace funnel::server {

Mailbox::Outcome Mailbox::post(bool send, const Key& key, uint64_t world, int32_t self, int32_t peer, MsgHalf half,
                               MsgHalf& other) {
  const std::lock_guard lock(mu_);
  rank_client_[{world, self}] = half.client;
  worlds_.insert(world);
  if (gone_.contains({world, peer})) return Outcome::PeerGone;
  auto& mine = send ? sends_ : recvs_;
  auto& theirs = send ? recvs_ : sends_;
  if (auto it = theirs.find(key); it != theirs.end()) {
    other = std::move(it->second.half);
    theirs.erase(it);
    return Outcome::Paired;
  }
  if (!mine.emplace(key, Parked{std::move(half), world, peer}).second) return Outcome::Duplicate;
  return Outcome::Parked;
}

void Mailbox::in_flight(uint32_t a, uint32_t b, std::shared_ptr<BackendEvent> done,
                        std::shared_ptr<std::atomic<bool>> stored) {
  const std::lock_guard lock(mu_);
  if (flights_.size() >= 64) prune_flights();
  flights_.push_back({a, b, std::move(done), std::move(stored)});
}

bool Mailbox::flight_over(const Flight& f) {
  if (f.stored && !f.stored->load(std::memory_order_acquire)) return false;
  return f.done == nullptr || backend_.query(*f.done) != Status::NotReady;
}

void Mailbox::prune_flights() {
  std::erase_if(flights_, [this](const Flight& f) { return flight_over(f); });
}

bool Mailbox::leave(uint32_t client, int mpi_rank, std::chrono::steady_clock::time_point deadline) {
  {
    const std::lock_guard lock(mu_);
    for (const auto& [rank, c] : rank_client_)
      if (c == client) gone_.insert(rank);
    if (mpi_rank >= 0)
      for (uint64_t w : worlds_)
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
  // The copies in flight that read or write its memory, or store into its words, end first.
  for (;;) {
    {
      const std::lock_guard lock(mu_);
      bool busy = false;
      for (const Flight& f : flights_)
        if ((f.a == client || f.b == client) && !flight_over(f)) busy = true;
      if (!busy) return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      spdlog::error("client {}: GPU-local messages still in flight at its teardown", client);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

size_t Mailbox::parked() const {
  const std::lock_guard lock(mu_);
  return sends_.size() + recvs_.size();
}

}  // namespace funnel::server
