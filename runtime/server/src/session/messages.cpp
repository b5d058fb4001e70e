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
  MsgHalf mine{shared_.id, h.device, c.address, c.bytes, word, nullptr};
  // Recorded before the mailbox is asked (its lock is never held over a driver call): the other
  // half, if it comes later, waits for this client's work so far.
  std::unique_ptr<BackendEvent> ready;
  if (st = completions_.record_event(h.device, *s->stream, ready); st != Status::Success) return fail(st);
  mine.ready = std::move(ready);
  MsgHalf other;
  const int32_t self = send ? c.source : c.dest, peer = send ? c.dest : c.source;
  switch (shared_.mailbox->post(send, Mailbox::key_of(c), c.world, self, peer, std::move(mine), other)) {
    case Mailbox::Outcome::Parked:
      return Status::Success;
    case Mailbox::Outcome::PeerGone:
      word->state.store(ipc::kMsgPeerGone, std::memory_order_release);
      return Status::Success;
    case Mailbox::Outcome::Duplicate:
      spdlog::warn("client {}: GPU-local message posted twice (comm {:#x}, {} -> {}, tag {}, seq {})", shared_.id,
                   c.comm, c.source, c.dest, c.tag, c.seq);
      word->state.store(ipc::kMsgFailed, std::memory_order_release);
      return Status::Success;
    case Mailbox::Outcome::Paired:
      break;
  }
  const MsgHalf me{shared_.id, h.device, c.address, c.bytes, word, nullptr};
  const MsgHalf& sender = send ? me : other;
  const MsgHalf& receiver = send ? other : me;
  const uint64_t n = std::min(sender.bytes, receiver.bytes);
  const uint32_t recv_state = sender.bytes > receiver.bytes ? ipc::kMsgTruncated : ipc::kMsgDone;
  receiver.word->bytes.store(sender.bytes, std::memory_order_relaxed);
  CopyDesc d{};
  d.dst = {true, receiver.address};
  d.src = {true, sender.address};
  d.width = d.dst_pitch = d.src_pitch = n;
  d.height = 1;
  st = backend_.wait(*s->stream, *other.ready);
  if (st == Status::Success && n != 0) st = backend_.copy(*s->stream, d);
  if (st != Status::Success) {
    spdlog::warn("client {}: a GPU-local message's copy failed: status {}", shared_.id, static_cast<int>(st));
    // Both words answered at once: the other side's poster is alive (it drops its halves before
    // its memory goes, under the mailbox's lock, and this half was taken out under it).
    other.word->state.store(ipc::kMsgFailed, std::memory_order_release);
    word->state.store(ipc::kMsgFailed, std::memory_order_release);
    return Status::Success;
  }
  streams_.after_work(*s);
  bump(counters_.local_messages, 1);
  bump(counters_.local_bytes, n);
  // The GPU stores the words once the copy is done; where it cannot, this worker does when it
  // sees the stream get there (Completions).  Either way the mailbox remembers the flight, so that
  // neither party's memory goes before it ends.
  const uint32_t other_state = send ? recv_state : ipc::kMsgDone, my_state = send ? ipc::kMsgDone : recv_state;
  std::shared_ptr<std::atomic<bool>> stored;
  if (backend_.write_value(*s->stream, other.word->state, other_state) != Status::Success ||
      backend_.write_value(*s->stream, word->state, my_state) != Status::Success) {
    stored = std::make_shared<std::atomic<bool>>(false);
    completions_.when_complete(*s, ipc::kNoReply, h.seq,
                               [ow = other.word, w = word, other_state, my_state, stored](Status done) {
                                 ow->state.store(done == Status::Success ? other_state : ipc::kMsgFailed,
                                                 std::memory_order_release);
                                 w->state.store(done == Status::Success ? my_state : ipc::kMsgFailed,
                                                std::memory_order_release);
                                 stored->store(true, std::memory_order_release);
                                 return Status::Success;
                               });
  }
  std::unique_ptr<BackendEvent> done;
  (void)completions_.record_event(h.device, *s->stream, done);
  shared_.mailbox->in_flight(shared_.id, other.client, std::shared_ptr<BackendEvent>(std::move(done)), std::move(stored));
  return Status::Success;
}

}  // namespace funnel::server
