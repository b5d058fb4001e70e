// GPU-local messages (MsgPost; mailbox.hpp, doc/design/mpi-device-buffers.md): each half is
// checked against its poster's own memory, then parked in the server's mailbox or paired with the
// other half there.  The worker that pairs copies on its client's legacy stream, after the other
// poster's work queued before its post, and the GPU then stores both completion words.
#include <spdlog/spdlog.h>

#include "session/mailbox.hpp"
#include "session/validation.hpp"
#include "session/worker.hpp"

namespace funnel::server {

namespace {

// The device of the poster's memory [address, address + bytes): one allocation (or a run of
// mapped chunks), a symbol or an opened IPC allocation of this client; -1 when it is none.
int device_of(const ClientResources& res, uint64_t address, uint64_t bytes) {
  if (!res.device_range_ok(address, std::max<uint64_t>(bytes, 1))) return -1;
  if (auto it = containing(res.allocations, address, 1); it != res.allocations.end()) return it->second.device;
  if (auto it = containing(res.imported, address, 1); it != res.imported.end()) return it->second.device;
  return -2;  // a symbol: its module's device is the command's
}

}  // namespace

Status Worker::msg_post(const ipc::CommandHeader& h, const ipc::MsgPostCmd& c) {
  if (shared_.mailbox == nullptr || h.stream != 0) return Status::InvalidValue;
  if (c.role != ipc::kMsgSend && c.role != ipc::kMsgRecv) return Status::InvalidValue;
  if (c.source < 0 || c.dest < 0 || c.bytes > (uint64_t{1} << 46)) return Status::InvalidValue;
  last_message_ = std::chrono::steady_clock::now();
  // The completion word: 16 bytes, aligned, inside one of this client's pinned buffers.
  auto pinned = res_.pinned.find(c.word_pinned);
  if (pinned == res_.pinned.end() || c.word_offset % sizeof(ipc::MsgWord) != 0 ||
      c.word_offset > pinned->second.size - sizeof(ipc::MsgWord))
    return Status::InvalidValue;
  auto* word = reinterpret_cast<ipc::MsgWord*>(static_cast<std::byte*>(pinned->second.file.data()) + c.word_offset);
  // From here on a failure is answered in the word too (the client waits on it, not on a reply).
  const auto fail = [word](Status st) {
    word->state.store(ipc::kMsgFailed, std::memory_order_release);
    return st;
  };
  const int device = device_of(res_, c.address, c.bytes);
  if (device == -1 || (device >= 0 && device != h.device)) return fail(Status::InvalidValue);
  Status st;
  StreamEntry* s = find_stream(h, st);
  if (s == nullptr) return fail(st);
  if (st = streams_.before_work(*s); st != Status::Success) return fail(st);

  const bool send = c.role == ipc::kMsgSend;
  const int32_t self = send ? c.source : c.dest, peer = send ? c.dest : c.source;
  const Mailbox::Key key = Mailbox::key_of(c);
  MsgHalf other;
  Mailbox::Outcome o = shared_.mailbox->take(send, key, c.world, self, peer, shared_.id, other);
  if (o == Mailbox::Outcome::Absent) {
    // The first half of its message: parked with an event at this client's work so far, which
    // the second half's stream will wait for (not recorded under the mailbox's lock).  Halves
    // posted with no work queued between them (a rank's receives at the start of a step) share
    // one record.
    if (!s->msg_mark || s->msg_mark_generation != s->generation || s->msg_mark_waits != s->waits) {
      std::shared_ptr<BackendEvent> e = shared_.mailbox->event(h.device);
      if (!e) return fail(Status::MemoryAllocation);
      if (st = backend_.record(*e, *s->stream); st != Status::Success) return fail(st);
      s->msg_mark = std::move(e);
      s->msg_mark_generation = s->generation;
      s->msg_mark_waits = s->waits;
    }
    MsgHalf mine{shared_.id, h.device, c.address, c.bytes, word, s->msg_mark};
    o = shared_.mailbox->park(send, key, c.world, peer, std::move(mine), other);
  }
  switch (o) {
    case Mailbox::Outcome::Absent:
    case Mailbox::Outcome::Parked:
      return Status::Success;
    case Mailbox::Outcome::PeerGone:
      word->state.store(ipc::kMsgPeerGone, std::memory_order_release);
      return Status::Success;
    case Mailbox::Outcome::Duplicate:
      spdlog::warn("client {}: GPU-local message posted twice (comm {:#x}, {} -> {}, tag {}, seq {})", shared_.id,
                   c.comm, c.source, c.dest, c.tag, c.seq);
      return fail(Status::InvalidValue);
    case Mailbox::Outcome::Paired:
      break;
  }
  const uint64_t src = send ? c.address : other.address, dst = send ? other.address : c.address;
  const uint64_t sent = send ? c.bytes : other.bytes, capacity = send ? other.bytes : c.bytes;
  ipc::MsgWord* recv_word = send ? other.word : word;
  const uint64_t n = std::min(sent, capacity);
  const uint32_t recv_state = sent > capacity ? ipc::kMsgTruncated : ipc::kMsgDone;
  recv_word->bytes.store(sent, std::memory_order_relaxed);
  CopyDesc d{};
  d.dst = {true, dst};
  d.src = {true, src};
  d.width = d.dst_pitch = d.src_pitch = n;
  d.height = 1;
  st = backend_.wait(*s->stream, *other.ready);
  other.ready.reset();  // the wait took its record
  if (st == Status::Success && n != 0) st = backend_.copy(*s->stream, d);
  if (st != Status::Success) {
    spdlog::warn("client {}: a GPU-local message's copy failed: status {}", shared_.id, static_cast<int>(st));
    // Both words answered at once: the other side's poster is alive (it drops its halves before
    // its memory goes, under the mailbox's lock, and this half was taken out under it).
    other.word->state.store(ipc::kMsgFailed, std::memory_order_release);
    return fail(st);
  }
  streams_.after_work(*s);
  bump(counters_.local_messages, 1);
  bump(counters_.local_bytes, n);
  // The GPU stores both words once the copy is done (one batch of stream writes); where it
  // cannot, this worker does when it sees the stream get there (Completions).  The mailbox
  // remembers the flight until both are stored, so that neither party's memory goes before.
  // (Before the stores are queued: the words' tickets are read then.)
  const uint32_t other_state = send ? recv_state : ipc::kMsgDone, my_state = send ? ipc::kMsgDone : recv_state;
  shared_.mailbox->in_flight(shared_.id, other.client, h.device, other.word, word);
  std::atomic<uint32_t>* words[2] = {&other.word->state, &word->state};
  const uint32_t values[2] = {other_state, my_state};
  if (backend_.write_values(*s->stream, words, values) != Status::Success)
    completions_.when_complete(*s, ipc::kNoReply, h.seq, [ow = other.word, w = word, other_state, my_state](Status done) {
      ow->state.store(done == Status::Success ? other_state : ipc::kMsgFailed, std::memory_order_release);
      w->state.store(done == Status::Success ? my_state : ipc::kMsgFailed, std::memory_order_release);
      return Status::Success;
    });
  return Status::Success;
}

Status Worker::msg_world(const ipc::CommandHeader& h, const ipc::MsgWorldCmd& c) {
  if (one_way(h) || shared_.mailbox == nullptr) return Status::InvalidValue;
  constexpr int32_t kMaxRank = 1 << 24;
  if (c.rank < -1 || c.rank >= kMaxRank || c.peer < -1 || c.peer >= kMaxRank || c.local_size < 0 ||
      c.local_size > kMaxRank || (c.flags & ~ipc::kWorldLocal) != 0)
    return Status::InvalidValue;
  const Mailbox::WorldAnswer a = shared_.mailbox->world(shared_.id, c, std::chrono::steady_clock::now());
  answers_.answer(h, {a.self, a.peer, a.settled ? 1u : 0u, a.joined});
  return Status::Success;
}

Status Worker::msg_probe(const ipc::CommandHeader& h, const ipc::MsgProbeCmd& c) {
  if (one_way(h) || shared_.mailbox == nullptr) return Status::InvalidValue;
  if (c.source < -1 || c.dest < 0 || c.tag < -1 || c.reserved != 0) return Status::InvalidValue;
  Mailbox::Probed p;
  if (!shared_.mailbox->probe(c, p)) {
    answers_.answer(h, {0});
    return Status::Success;
  }
  answers_.answer(h, {1, static_cast<uint32_t>(p.source), static_cast<uint32_t>(p.tag), p.seq, p.bytes});
  return Status::Success;
}

}  // namespace funnel::server
