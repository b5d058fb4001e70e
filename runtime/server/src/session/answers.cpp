#include "session/answers.hpp"

#include "funnel/ipc/futex.hpp"
#include "funnel/ipc/protocol.hpp"
#include "session/counter_ops.hpp"

namespace funnel::server {

void Answers::reply(uint32_t slot, uint64_t seq, Status st, const std::array<uint64_t, 5>& values) {
  auto& r = view_.reply(slot);
  r.status = static_cast<int32_t>(st);
  for (size_t i = 0; i < values.size(); ++i) r.value[i] = values[i];
  r.seq.store(seq, std::memory_order_seq_cst);
  wake_sleeping_client();
}

void Answers::answer(const ipc::CommandHeader& h, const std::array<uint64_t, 5>& values) {
  if (h.reply_slot != ipc::kNoReply) reply(h.reply_slot, h.seq, Status::Success, values);
}

void Answers::fail(const ipc::CommandHeader& h, Status st) {
  add(counters_.errors, 1);
  uint64_t none = 0;
  counters_.first_error.compare_exchange_strong(
      none, uint64_t{static_cast<uint16_t>(h.opcode)} << 32 | static_cast<uint32_t>(st), std::memory_order_relaxed);
  auto& c = view_.completion();
  if (ipc::is_sticky(st)) c.sticky_error.store(static_cast<int32_t>(st), std::memory_order_release);
  if (h.reply_slot != ipc::kNoReply) {
    reply(h.reply_slot, h.seq, st);
    return;
  }
  if (!ipc::is_sticky(st)) {
    int32_t expected = 0;
    c.deferred_error.compare_exchange_strong(expected, static_cast<int32_t>(st), std::memory_order_acq_rel);
  }
}

void Answers::fail_later(Status st) {
  ipc::CommandHeader h{};
  h.reply_slot = ipc::kNoReply;
  fail(h, st);
}

void Answers::wake_sleeping_client() {
  auto& c = view_.completion();
  // Only a client thread that went to sleep needs the epoch bumped and a futex wake (a
  // system call, a third of an empty cudaStreamSynchronize's round trip on the H100
  // machine); a spinning one watches r.seq (or its reply word).  Dekker pairing (seq_cst):
  // we store r.seq (or saw the GPU's word), then load client_waiting; the client increments
  // client_waiting, then checks r.seq and the word before it sleeps on the epoch.  One of us
  // sees the other.
  if (c.client_waiting.load(std::memory_order_seq_cst) != 0) {
    c.reply_epoch.fetch_add(1, std::memory_order_seq_cst);
    ipc::futex_wake_all(c.reply_epoch);
  }
}

void Answers::wake_staging_sleepers(std::atomic<uint32_t>& word) {
  // A client thread asleep on a staging state counts itself in client_waiting too (the same
  // Dekker pairing as above: the state was stored, or seen stored by the GPU, before this load),
  // so a chunk nobody sleeps for costs no system call.
  if (view_.completion().client_waiting.load(std::memory_order_seq_cst) != 0) ipc::futex_wake_all(word);
}

void Answers::release_staging(const ipc::CopyCmd& c) {
  const auto& hd = view_.header();
  auto set = [&](const ipc::Location& l, ipc::StagingState s) {
    if (l.space != ipc::MemSpace::Staging || l.index >= hd.staging_slots) return;
    auto& w = view_.staging_state(l.index);
    w.store(static_cast<uint32_t>(s), std::memory_order_seq_cst);
    wake_staging_sleepers(w);
  };
  set(c.src, ipc::StagingState::Free);
  set(c.dst, ipc::StagingState::Ready);
}

}  // namespace funnel::server
