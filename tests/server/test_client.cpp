#include "test_client.hpp"

#include <algorithm>

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <thread>

#include "funnel/ipc/futex.hpp"

namespace funnel::test {
namespace {

using Clock = std::chrono::steady_clock;

ipc::HelloMsg hello(ipc::Role role, const char* command) {
  ipc::HelloMsg h{};
  h.magic = ipc::kSocketMagic;
  h.version = ipc::kProtocolVersion;
  h.role = role;
  h.pid = ::getpid();
  h.mpi_rank = 3;
  std::strncpy(h.command, command, sizeof h.command - 1);
  return h;
}

}  // namespace

TestClient::TestClient(const std::filesystem::path& run_dir, const char* command,
                       const std::vector<uint64_t>& device_mem_limit,
                       const std::function<void(ipc::HelloMsg&)>& edit_hello) {
  int err = 0;
  fd_ = ipc::connect_seqpacket(run_dir / ipc::kSocketName, err);
  if (!fd_) throw std::runtime_error("connect: " + std::string(std::strerror(err)));
  auto h = hello(ipc::Role::Client, command);
  for (size_t d = 0; d < device_mem_limit.size() && d < ipc::kMaxDevices; ++d) h.device_mem_limit[d] = device_mem_limit[d];
  if (edit_hello) edit_hello(h);
  if (!ipc::send_message(fd_.get(), &h, sizeof h)) throw std::runtime_error("send hello");
  const ssize_t n = ipc::recv_message(fd_.get(), &attach_, sizeof attach_, std::chrono::seconds(10));
  if (n != static_cast<ssize_t>(sizeof attach_)) {
    attach_.status = static_cast<int32_t>(Status::Unknown);
    return;
  }
  if (attach_.status != 0) return;
  map_ = ipc::MappedFile::open(run_dir / attach_.channel_file, attach_.segment_size);
  ipc::ChannelHeader hdr;
  std::memcpy(&hdr, map_.data(), sizeof hdr);
  const char* why = nullptr;
  if (!ipc::validate_header(hdr, map_.size(), &why)) throw std::runtime_error(why);
  view_ = ipc::ChannelView(map_.data(), hdr);
  ring_ = ipc::RingWriter(view_);
  ipc::MappedMsg m{attach_.client_id, 0};
  if (!ipc::send_message(fd_.get(), &m, sizeof m)) throw std::runtime_error("send mapped");
  mapped_ = true;
}

uint64_t TestClient::send(Opcode op, const void* payload, size_t payload_len, uint32_t reply_slot, uint64_t stream,
                          int device, uint32_t record_size) {
  const uint32_t size = record_size != 0 ? record_size : ipc::record_size_for(payload_len);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  std::byte* p = ring_.reserve(size, [&] { return Clock::now() > deadline; });
  if (p == nullptr) throw std::runtime_error("ring full for 10 s");
  ipc::CommandHeader h{};
  h.size = size;
  h.opcode = op;
  h.seq = ++seq_;
  h.posted_us = static_cast<uint16_t>(ipc::monotonic_us16() - backdate_us_);
  h.reply_slot = reply_slot;
  h.device = device;
  h.stream = stream;
  // As the client runtime does when it takes a slot: a GPU answer of an earlier command
  // there must not count for this one.
  if (reply_slot < view_.header().reply_slots) view_.reply_word(reply_slot).store(0, std::memory_order_relaxed);
  std::memset(p, 0, size);
  std::memcpy(p, &h, sizeof h);
  if (payload_len != 0) std::memcpy(p + sizeof h, payload, std::min<size_t>(payload_len, size - sizeof h));
  if (held_)
    ring_.stage();
  else
    ring_.publish(op == Opcode::Launch);  // as the client runtime
  return h.seq;
}

Reply TestClient::wait(uint32_t slot, uint64_t seq, std::chrono::milliseconds timeout) {
  auto& r = view_.reply(slot);
  auto& c = view_.completion();
  const auto deadline = Clock::now() + timeout;
  Reply out;
  const bool got = ipc::wait_until(
      c.reply_epoch, [&] { return ipc::reply_arrived(r, view_.reply_word(slot), seq); },
      [&] {
        if (ipc::peer_hung_up(fd_.get())) {
          out.hung_up = true;
          return true;
        }
        return Clock::now() > deadline;
      },
      {.sleepers = &c.client_waiting});
  if (!got) {
    out.status = out.hung_up ? Status::DevicesUnavailable : Status::Timeout;
    return out;
  }
  out.status = static_cast<Status>(r.status);
  for (int i = 0; i < 5; ++i) out.value[i] = r.value[i];
  return out;
}

Reply TestClient::call(Opcode op, const void* payload, size_t payload_len, uint64_t stream, int device) {
  const uint32_t slot = next_slot();
  const uint64_t seq = send(op, payload, payload_len, slot, stream, device);
  return wait(slot, seq);
}

uint64_t TestClient::alloc(uint64_t size) {
  const Reply r = call(Opcode::MemAlloc, ipc::MemAllocCmd{size});
  if (r.status != Status::Success) throw std::runtime_error("MemAlloc failed: " + std::to_string(static_cast<int>(r.status)));
  return r.value[0];
}

Status TestClient::free(uint64_t address) { return call(Opcode::MemFree, ipc::AddressCmd{address}).status; }

bool TestClient::wait_staging(uint32_t slot, ipc::StagingState want) {
  auto& w = view_.staging_state(slot);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  return ipc::wait_until(
      w, [&] { return w.load(std::memory_order_acquire) == static_cast<uint32_t>(want); },
      [&] { return Clock::now() > deadline || ipc::peer_hung_up(fd_.get()); },
      {.sleepers = &view_.completion().client_waiting});
}

void TestClient::h2d(uint64_t dst, const void* src, uint64_t n, uint64_t stream) {
  const uint64_t chunk = view_.header().staging_slot_size;
  const uint32_t slots = view_.header().staging_slots;
  uint32_t slot = 0;
  for (uint64_t off = 0; off < n; off += chunk, slot = (slot + 1) % slots) {
    const uint64_t len = std::min(chunk, n - off);
    if (!wait_staging(slot, ipc::StagingState::Free)) throw std::runtime_error("staging slot never came back");
    std::memcpy(view_.staging(slot), static_cast<const char*>(src) + off, len);
    view_.staging_state(slot).store(static_cast<uint32_t>(ipc::StagingState::InFlight));
    ipc::CopyCmd c{};
    c.dst = {ipc::MemSpace::Device, 0, 0, dst + off};
    c.src = {ipc::MemSpace::Staging, slot, 0, 0};
    c.width = len;
    c.height = 1;
    c.dst_pitch = c.src_pitch = len;
    post(Opcode::Copy, c, stream);
  }
  for (uint32_t s = 0; s < slots; ++s)
    if (!wait_staging(s, ipc::StagingState::Free)) throw std::runtime_error("staging slot never came back");
}

void TestClient::d2h(void* dst, uint64_t src, uint64_t n, uint64_t stream) {
  const uint64_t chunk = view_.header().staging_slot_size;
  for (uint64_t off = 0; off < n; off += chunk) {
    const uint64_t len = std::min(chunk, n - off);
    if (!wait_staging(0, ipc::StagingState::Free)) throw std::runtime_error("staging slot busy");
    view_.staging_state(0).store(static_cast<uint32_t>(ipc::StagingState::InFlight));
    ipc::CopyCmd c{};
    c.dst = {ipc::MemSpace::Staging, 0, 0, 0};
    c.src = {ipc::MemSpace::Device, 0, 0, src + off};
    c.width = len;
    c.height = 1;
    c.dst_pitch = c.src_pitch = len;
    post(Opcode::Copy, c, stream);
    if (!wait_staging(0, ipc::StagingState::Ready)) throw std::runtime_error("d2h never completed");
    std::memcpy(static_cast<char*>(dst) + off, view_.staging(0), len);
    view_.staging_state(0).store(static_cast<uint32_t>(ipc::StagingState::Free));
  }
}

void TestClient::create_stream(uint64_t id, uint32_t flags) { post(Opcode::StreamCreate, ipc::StreamCreateCmd{id, flags, 0}); }
void TestClient::create_event(uint64_t id, uint32_t flags) { post(Opcode::EventCreate, ipc::EventCreateCmd{id, flags, 0}); }
void TestClient::record(uint64_t event, uint64_t stream) { post(Opcode::EventRecord, ipc::EventRecordCmd{event, 0, ipc::kNoEventSlot, 0, 0}, stream); }
Status TestClient::sync_device() { return call(Opcode::DeviceSynchronize).status; }

void TestClient::detach(ipc::DetachCmd cpu) {
  send(Opcode::Detach, &cpu, sizeof cpu);
  fd_.reset();
  map_ = ipc::MappedFile();
  mapped_ = false;
}

std::string control(const std::filesystem::path& run_dir, const char* verb) { return control(run_dir, verb, ""); }

std::string control(const std::filesystem::path& run_dir, std::string_view verb, std::string_view arg) {
  int err = 0;
  ipc::UniqueFd fd = ipc::connect_seqpacket(run_dir / ipc::kSocketName, err);
  if (!fd) return {};
  const auto h = hello(ipc::Role::Control, "test-control");
  ipc::ControlRequest req{};
  std::memcpy(req.verb, verb.data(), std::min(verb.size(), sizeof req.verb - 1));
  std::memcpy(req.arg, arg.data(), std::min(arg.size(), sizeof req.arg - 1));
  if (!ipc::send_message(fd.get(), &h, sizeof h) || !ipc::send_message(fd.get(), &req, sizeof req)) return {};
  std::string buf(ipc::kMaxControlReply, '\0');
  const ssize_t n = ipc::recv_message(fd.get(), buf.data(), buf.size(), std::chrono::seconds(10));
  if (n <= 0) return {};
  buf.resize(static_cast<size_t>(n));
  return buf;
}

pid_t fork_client(const std::filesystem::path& run_dir, const char* command,
                  const std::function<bool(TestClient&)>& setup) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return -1;
  const pid_t child = ::fork();
  if (child < 0) return -1;
  if (child == 0) {
    ::close(pipefd[0]);
    // The child only talks to the server and then waits to be killed.
    try {
      TestClient c(run_dir, command);
      if (!c.ok() || !setup(c)) ::_exit(2);
      const char ok = 'k';
      if (::write(pipefd[1], &ok, 1) != 1) ::_exit(4);
      for (;;) ::pause();
    } catch (...) {
      ::_exit(5);
    }
  }
  ::close(pipefd[1]);
  char got = 0;
  const bool ready = ::read(pipefd[0], &got, 1) == 1;
  ::close(pipefd[0]);
  if (!ready) {
    ::waitpid(child, nullptr, 0);
    return -1;
  }
  return child;
}

}  // namespace funnel::test
