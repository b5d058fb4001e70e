// A raw funnel client for the server tests, written directly against runtime/ipc
// (not runtime/client), so the server is tested against the contract itself.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "funnel/ipc/channel_layout.hpp"
#include "funnel/ipc/commands.hpp"
#include "funnel/ipc/protocol.hpp"
#include "funnel/ipc/ring.hpp"
#include "funnel/ipc/segment.hpp"
#include "funnel/ipc/socket.hpp"
#include "funnel/ipc/status.hpp"

namespace funnel::test {

using ipc::Opcode;
using ipc::Status;

struct Reply {
  Status status = Status::Unknown;
  uint64_t value[5]{};
  bool hung_up = false;  // the wait ended because the server went away
};

// A 1-D copy of `bytes` from device address `src` to device address `dst` (device 0's memory).
inline ipc::CopyCmd device_copy(uint64_t dst, uint64_t src, uint64_t bytes) {
  ipc::CopyCmd cp{};
  cp.dst = {ipc::MemSpace::Device, 0, 0, dst};
  cp.src = {ipc::MemSpace::Device, 0, 0, src};
  cp.width = cp.dst_pitch = cp.src_pitch = bytes;
  cp.height = 1;
  return cp;
}

class TestClient {
 public:
  // Connects and attaches.  On a refused attach, ok() is false and attach_reply() says why.
  // `device_mem_limit`: the hello's per-device limits (FUNNEL_DEVICE_MEM_LIMIT), device 0 first;
  // `edit_hello` changes any other field of the hello before it is sent.
  explicit TestClient(const std::filesystem::path& run_dir, const char* command = "test-client",
                      const std::vector<uint64_t>& device_mem_limit = {},
                      const std::function<void(ipc::HelloMsg&)>& edit_hello = {});

  bool ok() const noexcept { return mapped_; }
  const ipc::AttachReply& attach_reply() const noexcept { return attach_; }
  const ipc::ChannelView& view() const noexcept { return view_; }
  int fd() const noexcept { return fd_.get(); }

  // Writes one record; `record_size` 0 means the right size for `payload_len`.
  uint64_t send(Opcode op, const void* payload, size_t payload_len, uint32_t reply_slot = ipc::kNoReply,
                uint64_t stream = 0, int device = 0, uint32_t record_size = 0);
  Reply wait(uint32_t slot, uint64_t seq, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // The seq of the last record sent (the next one gets seq() + 1).
  uint64_t seq() const noexcept { return seq_; }
  // send + wait on a fresh slot.
  Reply call(Opcode op, const void* payload = nullptr, size_t payload_len = 0, uint64_t stream = 0, int device = 0);
  Reply on_stream(Opcode op, uint64_t stream) { return call(op, nullptr, 0, stream, 0); }
  template <class T>
  Reply call(Opcode op, const T& payload, uint64_t stream = 0, int device = 0) {
    return call(op, &payload, sizeof payload, stream, device);
  }
  template <class T>
  uint64_t post(Opcode op, const T& payload, uint64_t stream = 0, int device = 0) {
    return send(op, &payload, sizeof payload, ipc::kNoReply, stream, device);
  }

  // hold(): records sent from now on stay invisible to the server until release() shows
  // them all at once (as a client that launches faster than the server reads leaves them).
  void hold() noexcept { held_ = true; }
  void release() noexcept {
    held_ = false;
    ring_.publish();
  }

  // Records sent from now on say they were written `us` microseconds ago (posted_us), as
  // a command that waited that long in the ring before the server took it.
  void backdate(uint16_t us) noexcept { backdate_us_ = us; }

  int32_t take_deferred() { return view_.completion().deferred_error.exchange(0); }
  int32_t sticky() const { return view_.completion().sticky_error.load(); }

  // Conveniences over the commands.
  uint64_t alloc(uint64_t size);
  Status free(uint64_t address);
  void h2d(uint64_t dst, const void* src, uint64_t n, uint64_t stream = 0);
  void d2h(void* dst, uint64_t src, uint64_t n, uint64_t stream = 0);
  void create_stream(uint64_t id, uint32_t flags = 0);
  void create_event(uint64_t id, uint32_t flags = 0);
  void record(uint64_t event, uint64_t stream);
  Status sync_device();
  // Sends a Detach (with `cpu` as this client's CPU times) and hangs up.
  void detach(ipc::DetachCmd cpu = {ipc::kNoCpuTime, ipc::kNoCpuTime});
  bool server_hung_up() const noexcept { return ipc::peer_hung_up(fd_.get()); }

  // A reply slot for send() (call() takes one too).
  uint32_t next_slot() noexcept { return slot_++ % view_.header().reply_slots; }

  // Waits (at most 10 s, or until the server hangs up) for a staging slot's state.
  bool wait_staging(uint32_t slot, ipc::StagingState want);

 private:

  ipc::UniqueFd fd_;
  ipc::AttachReply attach_{};
  ipc::MappedFile map_;
  ipc::ChannelView view_;
  ipc::RingWriter ring_;
  uint64_t seq_ = 0;
  uint32_t slot_ = 0;
  bool mapped_ = false;
  bool held_ = false;
  uint16_t backdate_us_ = 0;
};

// Forks a process that attaches as `command`, runs `setup` on its client (false: it exits
// with 2), and then waits to be killed; returns its pid once setup is done (-1 when the child
// failed before that).
pid_t fork_client(const std::filesystem::path& run_dir, const char* command,
                  const std::function<bool(TestClient&)>& setup);

// Sends a control verb and returns the JSON answer ("" on failure).
std::string control(const std::filesystem::path& run_dir, const char* verb);
// The same with any bytes as the verb and the argument (cut to the request's fields).
std::string control(const std::filesystem::path& run_dir, std::string_view verb, std::string_view arg);

}  // namespace funnel::test
