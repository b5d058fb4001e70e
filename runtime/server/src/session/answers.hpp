// The answer side of a client's channel: the replies in its slots, its deferred and sticky
// errors, its staging slots handed back, and the wake-ups of its sleeping threads
// (doc/design/channel.md).  Only the client's worker thread writes them.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>

#include "funnel/ipc/channel_layout.hpp"
#include "funnel/ipc/commands.hpp"
#include "funnel/ipc/status.hpp"
#include "session/session.hpp"

namespace funnel::server {

class Answers {
 public:
  Answers(const ipc::ChannelView& view, ClientCounters& counters) : view_(view), counters_(counters) {}

  // Reply slot `slot` answers call `seq` with `st` and `values`, and a sleeping client wakes.
  void reply(uint32_t slot, uint64_t seq, Status st, const std::array<uint64_t, 5>& values = {});
  // Success for h, if h waits for an answer.
  void answer(const ipc::CommandHeader& h, const std::array<uint64_t, 5>& values = {});
  // h failed with `st`: counted (ClientCounters::errors, first_error), a sticky status made the
  // channel's sticky error, and answered through h's slot, or, one-way, kept as the channel's
  // deferred error (the first one stays) for the client's next synchronising call.
  void fail(const ipc::CommandHeader& h, Status st);
  // A one-way failure of no command in particular (work that completed with an error).
  void fail_later(Status st);
  // Wakes client threads asleep on a staging state the GPU or this thread just changed, if any
  // client thread sleeps at all (Completion::client_waiting).
  void wake_staging_sleepers(std::atomic<uint32_t>& word);
  // A staging slot handed to the server comes back even when its copy failed, or the client
  // would wait for it forever: Free for a source, Ready for a destination.
  void release_staging(const ipc::CopyCmd& c);

 private:
  void wake_sleeping_client();

  ipc::ChannelView view_;
  ClientCounters& counters_;
};

}  // namespace funnel::server
