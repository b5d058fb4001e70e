// libFuzzer target over the server's command decoding and validation (doc/reliability.md,
// "Fuzzing").  One funnel::server::Server (sim backend, two devices) runs in this process
// for the whole session; every input attaches a fresh client through the real socket and
// channel (tests/server's TestClient), writes the input's chunks (fuzz_input.hpp) into the
// ring as records, and ends with a Fence.  What must hold, else the target aborts:
//  - the server consumes every record and answers the Fence within 5 s (no hang);
//  - a record whose framing is wrong (unknown opcode, payload size, trailing-byte count)
//    and that names a reply slot is answered with an error;
//  - a command that the contract answers "once the worker processed it" (channel.md) has
//    been answered by the time the Fence is;
//  - the server hangs up on this client only after a record that broke the ring protocol
//    (a size of the input's own, or a Pad), and then with the sticky IllegalState;
// and ASan, UBSan and LeakSanitizer watch the server code itself.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "funnel/ipc/module_digest.hpp"
#include "funnel/server/server.hpp"
#include "fuzz_input.hpp"
#include "fuzz_server.hpp"
#include "test_client.hpp"

namespace {

using namespace funnel;
using ipc::Opcode;
using ipc::Status;
using Clock = std::chrono::steady_clock;

constexpr auto kAnswerWait = std::chrono::seconds(5);
// PinnedAlloc sizes are taken modulo this: each one is a file in /dev/shm.
constexpr uint64_t kMaxPinnedBytes = uint64_t{16} << 20;
constexpr uint64_t kModuleId = 1;  // the test fat binary, loaded before every input when built with it

[[noreturn]] void broken(const char* what, int opcode = -1, long detail = 0) {
  std::fprintf(stderr, "\nfunnel fuzz: %s (opcode %d, %ld)\n", what, opcode, detail);
  std::fflush(stderr);
  std::abort();
}

// The test fat binary (module 1) and its digest; the server is fuzz_server()'s.
struct Env {
  std::filesystem::path run_dir;
  std::vector<std::byte> fatbin;
  ipc::ModuleDigest digest{};
};
Env* env = nullptr;  // reachable until exit: LeakSanitizer does not count what it holds
// FUNNEL_FUZZ_VERBOSE=1: print each answered command's status (to see what a seed reaches).
bool verbose = false;

// Commands that the contract answers once the worker processed them (channel.md, "When
// is the reply written"), and the kernel queries that are answered the same way.
bool answered_when_processed(Opcode op) {
  switch (op) {
    case Opcode::MemAlloc: case Opcode::MemAllocAsync: case Opcode::MemGetInfo: case Opcode::GetLimit:
    case Opcode::SetLimit: case Opcode::Profiler: case Opcode::PinnedAlloc: case Opcode::StreamQuery: case Opcode::EventQuery:
    case Opcode::EventElapsedTime: case Opcode::Fence: case Opcode::ModuleQuery: case Opcode::ModuleLoad:
    case Opcode::KernelGet: case Opcode::KernelParams: case Opcode::SymbolGet: case Opcode::ModuleManaged:
    case Opcode::FuncGetAttributes:
    case Opcode::FuncSetAttribute: case Opcode::Occupancy: case Opcode::OccupancyDynamicSmem:
    case Opcode::MaxActiveClusters: case Opcode::AddressReserve: case Opcode::AddressFree: case Opcode::MemMap:
      return true;
    default:
      return false;
  }
}

template <class T>
T field(const std::vector<std::byte>& rec, size_t offset) {
  T v{};
  std::memcpy(&v, rec.data() + offset, sizeof v);
  return v;
}

// The worker's framing rule (payload_size, has_trailing_bytes and the trailing-byte
// limits), restated from doc/design/channel.md: whether the record must be refused.
bool badly_framed(const std::vector<std::byte>& rec) {
  const auto h = field<ipc::CommandHeader>(rec, 0);
  const int64_t want = ipc::payload_size(h.opcode);
  if (want < 0) return true;
  const auto fixed = static_cast<uint64_t>(want);
  if (!ipc::has_trailing_bytes(h.opcode)) return h.size != ipc::record_size_for(fixed);
  if (h.size < ipc::record_size_for(fixed)) return true;
  constexpr size_t p = sizeof(ipc::CommandHeader);
  uint64_t trailing = 0;
  uint64_t limit = ipc::kMaxNameBytes;
  if (h.opcode == Opcode::KernelGet) trailing = field<ipc::KernelGetCmd>(rec, p).name_bytes;
  if (h.opcode == Opcode::SymbolGet) trailing = field<ipc::SymbolGetCmd>(rec, p).name_bytes;
  if (h.opcode == Opcode::ModuleManaged) trailing = field<ipc::ModuleManagedCmd>(rec, p).name_bytes;
  if (h.opcode == Opcode::Launch) {
    trailing = field<ipc::LaunchCmd>(rec, p).param_bytes;
    limit = ipc::kMaxParamBytes;
  }
  return trailing > limit || h.size != ipc::record_size_for(fixed + trailing);
}

// One input's client: the TestClient attaches and waits for replies; the records go
// through a ring writer of our own, which lets a header say anything.
class Session {
 public:
  explicit Session(const std::filesystem::path& run_dir) : client_(run_dir, "fuzz") {
    if (!client_.ok()) broken("attach refused", -1, client_.attach_reply().status);
    ring_ = ipc::RingWriter(client_.view());
  }

  const ipc::ChannelView& view() const { return client_.view(); }
  uint32_t reply_slots() const { return view().header().reply_slots; }
  uint32_t fresh_slot() { return next_slot_++ % reply_slots(); }

  // Writes `rec` (its header's size may differ from rec.size()) with the next seq;
  // 0 once the server hung up.
  uint64_t send(std::vector<std::byte>& rec) {
    const auto deadline = Clock::now() + kAnswerWait;
    bool hung_up = false;
    std::byte* p = ring_.reserve(static_cast<uint32_t>(rec.size()), [&] {
      hung_up = client_.server_hung_up();
      return hung_up || Clock::now() > deadline;
    });
    if (p == nullptr) {
      if (!hung_up) broken("the server stopped reading the ring");
      return 0;
    }
    const uint64_t seq = ++seq_;
    std::memcpy(rec.data() + offsetof(ipc::CommandHeader, seq), &seq, sizeof seq);
    std::memcpy(p, rec.data(), rec.size());
    ring_.publish();
    written_ += rec.size();
    return seq;
  }

  // A well-formed command of the harness's own.
  uint64_t send(Opcode op, const void* payload, size_t len, uint32_t slot) {
    std::vector<std::byte> rec(ipc::record_size_for(len));
    ipc::CommandHeader h{};
    h.size = static_cast<uint32_t>(rec.size());
    h.opcode = op;
    h.reply_slot = slot;
    std::memcpy(rec.data(), &h, sizeof h);
    if (len != 0) std::memcpy(rec.data() + sizeof h, payload, len);
    return send(rec);
  }

  test::Reply wait(uint32_t slot, uint64_t seq) {
    const test::Reply r = client_.wait(slot, seq, kAnswerWait);
    if (r.status == Status::Timeout && !r.hung_up) broken("no answer within 5 s", -1, static_cast<long>(seq));
    return r;
  }

  bool hung_up() const { return client_.server_hung_up(); }
  int32_t sticky() const { return client_.sticky(); }

  // Whether the server consumed everything written, within 5 s (or hung up).
  bool drained() const {
    const auto deadline = Clock::now() + kAnswerWait;
    while (Clock::now() < deadline) {
      if (view().control().head.load() == written_ || hung_up()) return true;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return false;
  }

  void stage(const uint8_t* bytes, size_t n) {
    const auto& hd = view().header();
    for (uint32_t s = 0; s < hd.staging_slots; ++s) {
      std::memcpy(view().staging(s), bytes, std::min<size_t>(n, hd.staging_slot_size));
      view().staging_state(s).store(static_cast<uint32_t>(ipc::StagingState::InFlight));
    }
  }

  // The test fat binary as module kModuleId (a cache hit after the first input).
  void load_module() {
    if (env->fatbin.empty()) return;
    ipc::ModuleCmd m{};
    m.module_id = kModuleId;
    std::memcpy(m.digest, env->digest.data(), sizeof m.digest);
    m.size = env->fatbin.size();
    uint32_t slot = fresh_slot();
    test::Reply r = wait(slot, send(Opcode::ModuleQuery, &m, sizeof m, slot));
    if (r.status != Status::Success) broken("ModuleQuery of the test fat binary failed", -1, static_cast<long>(r.status));
    if (r.value[0] == 1) return;
    const uint64_t chunk = view().header().staging_slot_size;
    for (uint64_t off = 0; off < m.size; off += chunk) {
      const uint64_t n = std::min(chunk, m.size - off);
      while (view().staging_state(0).load() != static_cast<uint32_t>(ipc::StagingState::Free)) std::this_thread::yield();
      std::memcpy(view().staging(0), env->fatbin.data() + off, n);
      view().staging_state(0).store(static_cast<uint32_t>(ipc::StagingState::InFlight));
      const ipc::ModuleDataCmd d{kModuleId, off, n, 0, 0};
      send(Opcode::ModuleData, &d, sizeof d, ipc::kNoReply);
    }
    slot = fresh_slot();
    r = wait(slot, send(Opcode::ModuleLoad, &m, sizeof m, slot));
    if (r.status != Status::Success) broken("ModuleLoad of the test fat binary failed", -1, static_cast<long>(r.status));
  }

  void detach() {
    const ipc::DetachCmd cpu{ipc::kNoCpuTime, ipc::kNoCpuTime};
    if (!hung_up()) send(Opcode::Detach, &cpu, sizeof cpu, ipc::kNoReply);
  }

 private:
  test::TestClient client_;
  ipc::RingWriter ring_;
  uint64_t seq_ = 0;
  uint64_t written_ = 0;
  uint32_t next_slot_ = 0;
};

struct Expectation {
  uint64_t seq;
  uint32_t slot;
  Opcode op;
  bool badly_framed;
  bool live = true;  // false once a later record named the same slot
};

// The record for `c`: header and payload as the input gives them, but for seq, the
// size (unless kRawSize), the reply slot (unless kRawReplySlot), address tokens and
// PinnedAlloc sizes.  `fresh` says whether the harness chose the reply slot.
std::vector<std::byte> make_record(const fuzz::Chunk& c, Session& s, const std::vector<uint64_t>& addresses,
                                   bool& fresh) {
  std::vector<std::byte> rec(ipc::record_size_for(c.payload_len));
  ipc::CommandHeader h = c.header;
  if ((c.ctl & fuzz::kRawSize) == 0) h.size = static_cast<uint32_t>(rec.size());
  fresh = h.reply_slot != ipc::kNoReply && (c.ctl & fuzz::kRawReplySlot) == 0;
  if (fresh) h.reply_slot = s.fresh_slot();
  std::memcpy(rec.data(), &h, sizeof h);
  std::byte* payload = rec.data() + sizeof h;
  if (c.payload_len != 0) std::memcpy(payload, c.payload, c.payload_len);
  for (size_t i = 0; i + 8 <= c.payload_len && !addresses.empty(); i += 8) {
    uint64_t v;
    std::memcpy(&v, payload + i, sizeof v);
    if ((v >> 48) != fuzz::kAddressTag) continue;
    v = addresses[((v >> 32) & 0xffff) % addresses.size()] + (v & 0xffffffffu);
    std::memcpy(payload + i, &v, sizeof v);
  }
  if (h.opcode == Opcode::PinnedAlloc) {
    uint64_t size;
    std::memcpy(&size, payload, sizeof size);
    size %= kMaxPinnedBytes + 1;
    std::memcpy(payload, &size, sizeof size);
  }
  return rec;
}

void run_input(const uint8_t* data, size_t size) {
  Session s(env->run_dir);
  s.load_module();
  std::vector<Expectation> expected;
  std::vector<size_t> slot_user(s.reply_slots(), SIZE_MAX);
  std::vector<uint64_t> addresses;
  bool may_drop = false;  // a record broke the ring protocol: the server may hang up
  bool desync = false;    // a header's size differs from its record's: the server's record
                          //   boundaries are no longer ours, so neither are its answers
  for (const fuzz::Chunk& c : fuzz::parse(data, size)) {
    if (c.ctl & fuzz::kStage) {
      s.stage(c.payload, c.payload_len);
      continue;
    }
    bool fresh = false;
    std::vector<std::byte> rec = make_record(c, s, addresses, fresh);
    const auto h = field<ipc::CommandHeader>(rec, 0);
    if (h.size != rec.size()) desync = may_drop = true;
    if (h.opcode == Opcode::Pad) may_drop = true;
    const uint64_t seq = s.send(rec);
    if (seq == 0) break;
    if (h.reply_slot < s.reply_slots() && slot_user[h.reply_slot] != SIZE_MAX)
      expected[slot_user[h.reply_slot]].live = false;
    if (desync) continue;
    // A well-framed Detach ends the session: the server stops reading and hangs up.
    if (h.opcode == Opcode::Detach && !badly_framed(rec)) return;
    if (!fresh || h.opcode == Opcode::Pad) continue;
    slot_user[h.reply_slot] = expected.size();
    expected.push_back({seq, h.reply_slot, h.opcode, badly_framed(rec)});
    // Device addresses for later records' address tokens.
    if ((h.opcode == Opcode::MemAlloc || h.opcode == Opcode::MemAllocAsync || h.opcode == Opcode::AddressReserve) &&
        !expected.back().badly_framed) {
      const test::Reply r = s.wait(h.reply_slot, seq);
      if (r.hung_up) break;
      if (r.status == Status::Success) addresses.push_back(r.value[0]);
    }
  }

  if (!desync && !s.hung_up()) {
    const uint32_t slot = s.fresh_slot();
    if (slot_user[slot] != SIZE_MAX) expected[slot_user[slot]].live = false;
    const uint64_t seq = s.send(Opcode::Fence, nullptr, 0, slot);
    const test::Reply fence = seq == 0 ? test::Reply{Status::DevicesUnavailable, {}, true} : s.wait(slot, seq);
    if (verbose) std::fprintf(stderr, "deferred error %d\n", s.view().completion().deferred_error.load());
    if (!fence.hung_up) {
      if (fence.status != Status::Success) broken("Fence failed", -1, static_cast<long>(fence.status));
      for (const Expectation& e : expected) {
        if (!e.live) continue;
        const auto& r = s.view().reply(e.slot);
        const bool answered = r.seq.load() == e.seq;
        const auto op = static_cast<int>(e.op);
        if (verbose)
          std::fprintf(stderr, "seq %llu opcode %d: %s %d\n", static_cast<unsigned long long>(e.seq), op,
                       answered ? "status" : "no answer", answered ? r.status : 0);
        if (e.badly_framed && !(answered && r.status != static_cast<int32_t>(Status::Success)))
          broken("a badly framed record was not answered with an error", op, r.status);
        if (!e.badly_framed && answered_when_processed(e.op) && !answered)
          broken("a command answered once processed was not answered before the Fence", op);
      }
    }
  } else if (!s.drained()) {
    broken("the server stopped reading a desynchronised ring");
  }
  if (s.hung_up()) {
    if (!may_drop) broken("the server dropped a client that kept the ring protocol", -1, s.sticky());
    // IllegalState: the protocol break; 0: a Detach read out of a desynchronised ring.
    if (s.sticky() != static_cast<int32_t>(Status::IllegalState) && !(desync && s.sticky() == 0))
      broken("dropped with an unexpected sticky error", -1, s.sticky());
  }
  s.detach();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  verbose = std::getenv("FUNNEL_FUZZ_VERBOSE") != nullptr;
  spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::off);
  env = new Env;
  env->run_dir = fuzz::start_fuzz_server(4).run_dir;
#ifdef FUNNEL_FUZZ_FATBIN
  std::ifstream in(FUNNEL_FUZZ_FATBIN, std::ios::binary);
  const std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (chars.empty()) broken("cannot read the test fat binary " FUNNEL_FUZZ_FATBIN);
  env->fatbin.resize(chars.size());
  std::memcpy(env->fatbin.data(), chars.data(), chars.size());
  env->digest = ipc::module_digest(env->fatbin);
#endif
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  run_input(data, size);
  return 0;
}
