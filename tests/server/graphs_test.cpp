// Graph commands against the server (sim backend): a build node by node, its instantiation,
// launches that really copy and set memory, updates, and what the worker refuses (nodes out of
// order, staging slots in a graph, unknown handles, memory freed since the graph was made).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "fixture.hpp"
#include "test_client.hpp"

namespace funnel::test {
namespace {

using ipc::GraphNodeKind;

// A GraphNode record: the command, then its dependencies.
uint64_t send_node(TestClient& c, ipc::GraphNodeCmd n, const std::vector<uint32_t>& deps) {
  n.dep_count = static_cast<uint32_t>(deps.size());
  std::vector<std::byte> rec(sizeof n + deps.size() * 4);
  std::memcpy(rec.data(), &n, sizeof n);
  if (!deps.empty()) std::memcpy(rec.data() + sizeof n, deps.data(), deps.size() * 4);
  return c.send(Opcode::GraphNode, rec.data(), rec.size());
}

ipc::GraphNodeCmd memset_node(uint64_t graph, uint32_t index, uint64_t address, uint64_t bytes, uint32_t value,
                              uint32_t element = 4) {
  ipc::GraphNodeCmd n{};
  n.graph = graph;
  n.index = index;
  n.kind = static_cast<uint32_t>(GraphNodeKind::Memset);
  n.memset = ipc::MemsetCmd{address, bytes, bytes, 1, value, element};
  return n;
}

ipc::GraphNodeCmd copy_node(uint64_t graph, uint32_t index, const ipc::CopyCmd& cp) {
  ipc::GraphNodeCmd n{};
  n.graph = graph;
  n.index = index;
  n.kind = static_cast<uint32_t>(GraphNodeKind::Copy);
  n.copy = cp;
  return n;
}

std::vector<uint32_t> read_words(TestClient& c, uint64_t address, size_t words) {
  std::vector<uint32_t> out(words);
  c.d2h(out.data(), address, words * 4);
  return out;
}

bool all_equal(const std::vector<uint32_t>& v, uint32_t x) {
  for (uint32_t w : v)
    if (w != x) return false;
  return true;
}

TEST_F(ServerTest, GraphsRunTheirNodesOnEveryLaunchAndTakeNewParameters) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  constexpr uint64_t kBytes = 4096;
  const uint64_t a = c.alloc(kBytes), b = c.alloc(kBytes);
  c.create_stream(1);
  // memset a -> copy a to b
  send_node(c, memset_node(10, 0, a, kBytes, 0x11223344u), {});
  send_node(c, copy_node(10, 1, device_copy(b, a, kBytes)), {0});
  ASSERT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{10, 7, 2, 0, 0}).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{10, 8, 2, 0, 0}).status, Status::InvalidValue)
      << "a build is consumed by its instantiation";
  for (int i = 0; i < 3; ++i) {
    const std::vector<uint32_t> zero(kBytes / 4, 0);
    c.h2d(b, zero.data(), kBytes, 1);
    c.post(Opcode::GraphLaunch, ipc::GraphExecCmd{7}, 1);
    EXPECT_TRUE(all_equal(read_words(c, b, kBytes / 4), 0x11223344u)) << "launch " << i;
  }
  EXPECT_EQ(c.call(Opcode::GraphUpload, ipc::GraphExecCmd{7}, 1).status, Status::Success);

  // New parameters, the same shape: a byte memset now.
  send_node(c, memset_node(11, 0, a, kBytes, 0x55, 1), {});
  send_node(c, copy_node(11, 1, device_copy(b, a, kBytes)), {0});
  ASSERT_EQ(c.call(Opcode::GraphUpdate, ipc::GraphBuildCmd{11, 7, 2, 0, 0}).status, Status::Success);
  c.post(Opcode::GraphLaunch, ipc::GraphExecCmd{7}, 1);
  EXPECT_TRUE(all_equal(read_words(c, b, kBytes / 4), 0x55555555u));
  // Another shape (the copy no longer after the memset): refused, the exec unchanged.
  send_node(c, memset_node(12, 0, a, kBytes, 0x66, 1), {});
  send_node(c, copy_node(12, 1, device_copy(b, a, kBytes)), {});
  EXPECT_EQ(c.call(Opcode::GraphUpdate, ipc::GraphBuildCmd{12, 7, 2, 0, 0}).status, Status::InvalidValue);
  c.post(Opcode::GraphLaunch, ipc::GraphExecCmd{7}, 1);
  EXPECT_TRUE(all_equal(read_words(c, b, kBytes / 4), 0x55555555u));

  // An event record node: the event is complete after the launch.
  c.create_event(5);
  ipc::GraphNodeCmd rec{};
  rec.graph = 13;
  rec.kind = static_cast<uint32_t>(GraphNodeKind::EventRecord);
  rec.event = ipc::EventCmd{5, 0, 0};
  send_node(c, rec, {});
  ASSERT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{13, 9, 1, 0, 0}).status, Status::Success);
  c.post(Opcode::GraphLaunch, ipc::GraphExecCmd{9}, 1);
  EXPECT_EQ(c.call(Opcode::EventSynchronize, ipc::EventCmd{5, 0, 0}).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::EventQuery, ipc::EventCmd{5, 0, 0}).status, Status::Success);

  // Destroyed: its launches are refused.
  c.post(Opcode::GraphExecDestroy, ipc::GraphExecCmd{9});
  EXPECT_EQ(c.call(Opcode::GraphLaunch, ipc::GraphExecCmd{9}, 1).status, Status::InvalidResourceHandle);
  EXPECT_EQ(c.call(Opcode::GraphExecDestroy, ipc::GraphExecCmd{9}).status, Status::InvalidResourceHandle);

  // Memory freed since the graph was made: the launch is refused and touches nothing.
  const uint64_t d = c.alloc(kBytes);
  send_node(c, memset_node(14, 0, d, kBytes, 0x77, 1), {});
  send_node(c, copy_node(14, 1, device_copy(b, d, kBytes)), {0});
  ASSERT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{14, 20, 2, 0, 0}).status, Status::Success);
  ASSERT_EQ(c.free(d), Status::Success);
  EXPECT_EQ(c.call(Opcode::GraphLaunch, ipc::GraphExecCmd{20}, 1).status, Status::InvalidValue);
  EXPECT_TRUE(all_equal(read_words(c, b, kBytes / 4), 0x55555555u));
  c.take_deferred();
  // The client leaves with graphs still instantiated: the server frees them (no crash, the
  // next client is served).
  c.detach();
  TestClient next(run_dir_);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next.call(Opcode::GraphLaunch, ipc::GraphExecCmd{7}).status, Status::InvalidResourceHandle);
}

TEST_F(ServerTest, GraphBuildsAreCheckedNodeByNode) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  const uint64_t a = c.alloc(4096);
  auto instantiate = [&](uint64_t graph, uint32_t nodes) {
    return c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{graph, graph + 100, nodes, 0, 0}).status;
  };
  // The status a one-way node got (the deferred error, once a fence has passed it).
  auto node_fails = [&](ipc::GraphNodeCmd n, const std::vector<uint32_t>& deps) {
    c.take_deferred();
    send_node(c, n, deps);
    EXPECT_EQ(c.call(Opcode::Fence).status, Status::Success);
    return static_cast<Status>(c.take_deferred());
  };
  // A dependency on itself or on a later node, twice the same one.
  send_node(c, memset_node(1, 0, a, 4096, 1), {});
  EXPECT_EQ(node_fails(memset_node(1, 1, a, 4096, 1), {1}), Status::InvalidValue);
  EXPECT_EQ(instantiate(1, 2), Status::InvalidValue) << "a refused node spoils its build";
  send_node(c, memset_node(2, 0, a, 4096, 1), {});
  EXPECT_EQ(node_fails(memset_node(2, 1, a, 4096, 1), {0, 0}), Status::InvalidValue);
  // Out of order (index 2 after 0), or a node of a build never started.
  send_node(c, memset_node(3, 0, a, 4096, 1), {});
  EXPECT_EQ(node_fails(memset_node(3, 2, a, 4096, 1), {}), Status::InvalidValue);
  EXPECT_EQ(node_fails(memset_node(4, 1, a, 4096, 1), {}), Status::InvalidValue);
  // Memory of no allocation, a staging slot, an unknown event or kernel.
  EXPECT_EQ(node_fails(memset_node(5, 0, a + 4096 * 1024, 4096, 1), {}), Status::InvalidValue);
  ipc::CopyCmd staged = device_copy(a, a, 64);
  staged.src = {ipc::MemSpace::Staging, 0, 0, 0};
  EXPECT_EQ(node_fails(copy_node(6, 0, staged), {}), Status::InvalidValue);
  ipc::GraphNodeCmd ev{};
  ev.graph = 7;
  ev.kind = static_cast<uint32_t>(GraphNodeKind::EventWait);
  ev.event = ipc::EventCmd{999, 0, 0};
  EXPECT_EQ(node_fails(ev, {}), Status::InvalidResourceHandle);
  ipc::GraphNodeCmd k{};
  k.graph = 8;
  k.kind = static_cast<uint32_t>(GraphNodeKind::Kernel);
  k.launch.kernel_id = 12345;
  EXPECT_EQ(node_fails(k, {}), Status::InvalidResourceHandle);
  ipc::GraphNodeCmd bad{};
  bad.graph = 9;
  bad.kind = 77;
  EXPECT_EQ(node_fails(bad, {}), Status::InvalidValue);
  // A node count that is not the build's, flags the server does not know.
  send_node(c, memset_node(10, 0, a, 4096, 1), {});
  EXPECT_EQ(instantiate(10, 2), Status::InvalidValue);
  send_node(c, memset_node(11, 0, a, 4096, 1), {});
  EXPECT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{11, 500, 1, 0x4, 0}).status, Status::InvalidValue);
  // At most kMaxGraphBuilds builds under way.
  for (uint64_t g = 0; g < ipc::kMaxGraphBuilds; ++g) send_node(c, memset_node(1000 + g, 0, a, 4096, 1), {});
  EXPECT_EQ(node_fails(memset_node(2000, 0, a, 4096, 1), {}), Status::InvalidValue);
  // The builds under way still instantiate.
  EXPECT_EQ(instantiate(1000, 1), Status::Success);
  EXPECT_FALSE(c.server_hung_up());
}

// Host nodes: each launch waits at the node until the client stores 1 into its done word; a client
// that is gone (here: one that never answers and hangs up with three launches queued) is answered
// by the server, launch after launch, so its teardown ends and the server goes on.
TEST_F(ServerTest, GraphHostNodesWaitForTheClientAndAreAnsweredWhenItGoes) {
  start_server();
  const uint64_t kBytes = 4096;
  {
    TestClient c(run_dir_);
    ASSERT_TRUE(c.ok());
    const uint64_t a = c.alloc(kBytes);
    c.create_stream(1);
    ipc::GraphNodeCmd host{};
    host.graph = 1;
    host.kind = static_cast<uint32_t>(GraphNodeKind::Host);
    host.host = ipc::HostFuncCmd{10, 11, 0, 0};
    auto& reached = c.view().event_state(10);
    auto& done = c.view().event_state(11);
    reached.store(0);
    done.store(0);
    send_node(c, host, {});
    send_node(c, memset_node(1, 1, a, kBytes, 0x42, 1), {0});
    ASSERT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{1, 2, 2, 0, 0}).status, Status::Success);
    // One launch answered by the client: the memset after the host node runs only then.
    c.post(Opcode::GraphLaunch, ipc::GraphExecCmd{2}, 1);
    ASSERT_TRUE(eventually([&] { return reached.load() == 1; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(reached.load(), 1u) << "the graph went on without the client's answer";
    done.store(1);
    ASSERT_TRUE(eventually([&] { return reached.load() == 0 && done.load() == 0; })) << "the graph resets its words";
    EXPECT_TRUE(all_equal(read_words(c, a, kBytes / 4), 0x42424242u));
    // Three more, never answered, then the client goes.
    for (int i = 0; i < 3; ++i) c.post(Opcode::GraphLaunch, ipc::GraphExecCmd{2}, 1);
    ASSERT_TRUE(eventually([&] { return reached.load() == 1; }));
    c.detach();
  }
  bool gone = false;
  for (int i = 0; i < 400 && !gone; ++i) {
    gone = nlohmann::json::parse(control(run_dir_, "stats"))["clients"].empty();
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_TRUE(gone) << "the teardown of a client with launches held at host nodes did not end";
  TestClient next(run_dir_);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next.call(Opcode::Fence).status, Status::Success);
}

// IPC: an allocation exported by one client is opened by another (the same memory at the same
// address), refused to its owner and to a third client once the owner freed it, and kept alive
// while opened: the owner's free leaves it to the opener until it closes it (ASan would see a read
// of freed memory otherwise).
TEST_F(ServerTest, IpcExportsAreOpenedByOtherClientsAndOutliveTheOwnersFree) {
  start_server();
  constexpr uint64_t kBytes = 4096;
  TestClient a(run_dir_), b(run_dir_);
  ASSERT_TRUE(a.ok() && b.ok());
  const uint64_t x = a.alloc(kBytes);
  std::vector<uint32_t> data(kBytes / 4, 0x01020304u);
  a.h2d(x, data.data(), kBytes);
  ASSERT_EQ(a.sync_device(), Status::Success);  // another client's streams are not ordered after a's
  const Reply exp = a.call(Opcode::IpcExport, ipc::AddressCmd{x + 16});
  ASSERT_EQ(exp.status, Status::Success);
  EXPECT_EQ(exp.value[1], x);
  EXPECT_EQ(exp.value[2], kBytes);
  const uint64_t token = exp.value[0];
  EXPECT_EQ(a.call(Opcode::IpcExport, ipc::AddressCmd{x}).value[0], token) << "the same export again";
  EXPECT_EQ(a.call(Opcode::IpcOpen, ipc::IpcOpenCmd{token}).status, Status::InvalidResourceHandle) << "its own";
  EXPECT_EQ(b.call(Opcode::IpcOpen, ipc::IpcOpenCmd{token + 1}).status, Status::InvalidResourceHandle);
  const Reply open = b.call(Opcode::IpcOpen, ipc::IpcOpenCmd{token});
  ASSERT_EQ(open.status, Status::Success);
  EXPECT_EQ(open.value[0], x) << "the owner's address";
  EXPECT_TRUE(all_equal(read_words(b, x, kBytes / 4), 0x01020304u));
  ipc::MemsetCmd set{x, kBytes, kBytes, 1, 0x77, 1};
  ASSERT_EQ(b.call(Opcode::Memset, set).status, Status::Success);
  ASSERT_EQ(b.sync_device(), Status::Success);
  // (Read back by the opener: the sim's streams of two clients give TSan no order between them;
  // tests/programs/ipc.cu checks the other process's view, natively and on the GPU.)
  EXPECT_TRUE(all_equal(read_words(b, x, kBytes / 4), 0x77777777u));
  // The owner frees it: the opener still has it, nobody else may open it.
  ASSERT_EQ(a.free(x), Status::Success);
  EXPECT_TRUE(all_equal(read_words(b, x, kBytes / 4), 0x77777777u));
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.call(Opcode::IpcOpen, ipc::IpcOpenCmd{token}).status, Status::InvalidResourceHandle);
  // Closed: no longer the opener's (and now freed).
  ASSERT_EQ(b.call(Opcode::IpcClose, ipc::AddressCmd{x}).status, Status::Success);
  EXPECT_EQ(b.call(Opcode::IpcClose, ipc::AddressCmd{x}).status, Status::InvalidValue);
  EXPECT_EQ(b.call(Opcode::Memset, set).status, Status::InvalidValue);
}

// GPU-local messages (MsgPost; runtime/server/src/session/mailbox.hpp): the server pairs a send
// and a receive of one envelope from two clients, copies device to device and answers both
// completion words; what it refuses, and a client that leaves while a partner waits.
// A client's completion words: one pinned page of this client's, mapped here as the client runtime
// maps it (not read through the server's mapping: ThreadSanitizer would not see the channel's
// ordering between the server's mmap and this thread).
struct Words {
  uint64_t id = 0;
  ipc::MappedFile file;
  ipc::MsgWord* words = nullptr;
  Words(TestClient& c, const std::filesystem::path& run_dir) {
    const Reply r = c.call(Opcode::PinnedAlloc, ipc::PinnedAllocCmd{4096, 0, 0});
    EXPECT_EQ(r.status, Status::Success);
    id = r.value[0];
    const auto path = run_dir / ("pinned." + std::to_string(c.attach_reply().client_id) + "." + std::to_string(id));
    file = ipc::MappedFile::open(path, r.value[1]);
    std::filesystem::remove(path);
    words = static_cast<ipc::MsgWord*>(file.data());
  }
  // Word i set pending, as the client does before it posts.
  uint64_t arm(size_t i) {
    words[i].bytes.store(0);
    words[i].state.store(ipc::kMsgPending);
    return i * sizeof(ipc::MsgWord);
  }
  // Word i's end (kMsgPending after 10 s).
  uint32_t end(size_t i) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (words[i].state.load() == ipc::kMsgPending && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return words[i].state.load();
  }
};

ipc::MsgPostCmd half(uint32_t role, int32_t source, int32_t dest, int32_t tag, uint64_t seq, uint64_t address,
                     uint64_t bytes, const Words& w, uint64_t offset) {
  ipc::MsgPostCmd c{};
  c.world = 42;
  c.comm = 7;
  c.source = source;
  c.dest = dest;
  c.tag = tag;
  c.role = role;
  c.seq = seq;
  c.address = address;
  c.bytes = bytes;
  c.word_pinned = w.id;
  c.word_offset = offset;
  return c;
}

TEST_F(ServerTest, GpuLocalMessagesArePairedCopiedAndAnswered) {
  start_server();
  constexpr uint64_t kBytes = 4096;
  TestClient a(run_dir_), b(run_dir_);
  ASSERT_TRUE(a.ok() && b.ok());
  Words wa(a, run_dir_), wb(b, run_dir_);
  const uint64_t x = a.alloc(kBytes), y = b.alloc(kBytes);
  std::vector<uint32_t> data(kBytes / 4, 0x0a0b0c0du), zero(kBytes / 4, 0);
  a.h2d(x, data.data(), kBytes);
  b.h2d(y, zero.data(), kBytes);
  // The send first (parked), then the receive (paired: the copy runs on b's stream, after a's
  // work before its post): rank 0 of a to rank 1 of b.  (Read back by b, whose stream made the
  // copy: the sim's streams of two clients give ThreadSanitizer no order between them.)
  a.post(Opcode::MsgPost, half(ipc::kMsgSend, 0, 1, 5, 0, x, kBytes, wa, wa.arm(0)));
  ASSERT_EQ(a.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(wa.words[0].state.load(), ipc::kMsgPending) << "parked until its receive comes";
  b.post(Opcode::MsgPost, half(ipc::kMsgRecv, 0, 1, 5, 0, y, kBytes, wb, wb.arm(0)));
  EXPECT_EQ(wa.end(0), ipc::kMsgDone);
  EXPECT_EQ(wb.end(0), ipc::kMsgDone);
  EXPECT_EQ(wb.words[0].bytes.load(), kBytes);
  ASSERT_EQ(b.sync_device(), Status::Success);
  EXPECT_TRUE(all_equal(read_words(b, y, kBytes / 4), 0x0a0b0c0du));

  // The receive first, smaller than its send: paired by the send, truncated (its capacity copied).
  b.post(Opcode::MsgPost, half(ipc::kMsgRecv, 0, 1, 5, 1, y + 1000, 100, wb, wb.arm(1)));
  ASSERT_EQ(b.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(wb.words[1].state.load(), ipc::kMsgPending) << "parked until its send comes";
  a.post(Opcode::MsgPost, half(ipc::kMsgSend, 0, 1, 5, 1, x, 200, wa, wa.arm(1)));
  EXPECT_EQ(wa.end(1), ipc::kMsgDone);
  EXPECT_EQ(wb.end(1), ipc::kMsgTruncated);
  EXPECT_EQ(wb.words[1].bytes.load(), 200u);

  // Refused: memory that is not the poster's (b posts a's buffer), a duplicate envelope.
  b.post(Opcode::MsgPost, half(ipc::kMsgSend, 1, 0, 6, 0, x, 64, wb, wb.arm(2)));
  EXPECT_EQ(wb.end(2), ipc::kMsgFailed);
  ASSERT_EQ(b.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(b.take_deferred(), static_cast<int32_t>(Status::InvalidValue)) << "the one-way post's deferred error";
  a.post(Opcode::MsgPost, half(ipc::kMsgRecv, 1, 0, 7, 0, x, 64, wa, wa.arm(2)));
  a.post(Opcode::MsgPost, half(ipc::kMsgRecv, 1, 0, 7, 0, x, 64, wa, wa.arm(3)));
  EXPECT_EQ(wa.end(3), ipc::kMsgFailed) << "the same envelope posted twice";
  // A word outside the client's pinned page, or not aligned: refused without an answer.
  for (uint64_t offset : {uint64_t{4096}, uint64_t{8}}) {
    a.post(Opcode::MsgPost, half(ipc::kMsgSend, 0, 1, 8, 0, x, 64, wa, offset));
    ASSERT_EQ(a.call(Opcode::Fence).status, Status::Success);
    EXPECT_EQ(a.take_deferred(), static_cast<int32_t>(Status::InvalidValue)) << "word at " << offset;
  }

  // b leaves with a receive parked for a; a's receive from b (parked above, tag 7) is answered
  // PeerGone, and so is a later post to b's rank.
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  b.post(Opcode::MsgPost, half(ipc::kMsgRecv, 0, 1, 9, 0, y, 64, wb, wb.arm(4)));
  ASSERT_EQ(b.call(Opcode::Fence).status, Status::Success);
  b.detach();
  EXPECT_EQ(wa.end(2), ipc::kMsgPeerGone);
  a.post(Opcode::MsgPost, half(ipc::kMsgSend, 0, 1, 10, 0, x, 64, wa, wa.arm(4)));
  EXPECT_EQ(wa.end(4), ipc::kMsgPeerGone);
}

// MsgProbe: a parked send is seen by its destination's probe (by name and with wildcards: its
// source, tag, seq and size), not by another destination's or another tag's, and no more once
// its receive took it.
TEST_F(ServerTest, AParkedGpuLocalSendIsProbed) {
  start_server();
  TestClient a(run_dir_), b(run_dir_);
  ASSERT_TRUE(a.ok() && b.ok());
  Words wa(a, run_dir_), wb(b, run_dir_);
  const uint64_t x = a.alloc(4096), y = b.alloc(4096);
  a.post(Opcode::MsgPost, half(ipc::kMsgSend, 0, 1, 5, 0, x, 300, wa, wa.arm(0)));
  ASSERT_EQ(a.call(Opcode::Fence).status, Status::Success);
  const auto probe = [&](int32_t source, int32_t dest, int32_t tag) {
    return b.call(Opcode::MsgProbe, ipc::MsgProbeCmd{42, 7, source, dest, tag, 0});
  };
  for (const auto& [source, tag] : {std::pair{0, 5}, std::pair{-1, -1}, std::pair{-1, 5}, std::pair{0, -1}}) {
    const Reply r = probe(source, 1, tag);
    ASSERT_EQ(r.status, Status::Success);
    EXPECT_EQ(r.value[0], 1u) << source << " " << tag;
    EXPECT_EQ(r.value[1], 0u);
    EXPECT_EQ(r.value[2], 5u);
    EXPECT_EQ(r.value[3], 0u);
    EXPECT_EQ(r.value[4], 300u);
  }
  EXPECT_EQ(probe(0, 1, 6).value[0], 0u) << "another tag";
  EXPECT_EQ(probe(0, 0, -1).value[0], 0u) << "another destination";
  EXPECT_EQ(b.call(Opcode::MsgProbe, ipc::MsgProbeCmd{42, 8, -1, 1, -1, 0}).value[0], 0u) << "another communicator";
  EXPECT_EQ(probe(-2, 1, 5).status, Status::InvalidValue);
  EXPECT_EQ(probe(0, -1, 5).status, Status::InvalidValue);
  b.post(Opcode::MsgPost, half(ipc::kMsgRecv, 0, 1, 5, 0, y, 4096, wb, wb.arm(0)));
  EXPECT_EQ(wb.end(0), ipc::kMsgDone);
  EXPECT_EQ(probe(-1, 1, -1).value[0], 0u) << "received";
}

// The job's ranks on the server (MsgWorld): joins, members and outsiders, the world settled by
// its local count (a rank joining after that is an outsider), a peer's answer final once given,
// and a member that left answered PeerGone.  (The 5 s window is mpi.mixed_job's.)
TEST_F(ServerTest, JobRanksJoinSettleAndAnswerThePeersTheSame) {
  start_server();
  TestClient a(run_dir_), b(run_dir_), c(run_dir_), d(run_dir_);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  const auto world = [](TestClient& t, int32_t rank, int32_t peer, uint32_t flags = ipc::kWorldLocal) {
    return t.call(Opcode::MsgWorld, ipc::MsgWorldCmd{42, rank, 3, peer, flags});
  };
  Reply r = world(a, 0, -1);
  ASSERT_EQ(r.status, Status::Success);
  EXPECT_EQ(r.value[0], ipc::kMsgMember);
  EXPECT_EQ(r.value[2], 0u) << "1 of the node's 3 ranks joined";
  EXPECT_EQ(r.value[3], 1u);
  EXPECT_EQ(world(b, -1, 1).value[1], ipc::kMsgNotYet) << "rank 1 has not joined, the world is not settled";
  r = world(b, 1, -1, 0);  // without FUNNEL_MPI_LOCAL: counted, not a GPU-local peer
  EXPECT_EQ(r.value[0], ipc::kMsgOutsider);
  EXPECT_EQ(world(a, -1, 1).value[1], ipc::kMsgOutsider);
  EXPECT_EQ(world(a, -1, 2).value[1], ipc::kMsgNotYet);
  r = world(c, 2, 0);
  EXPECT_EQ(r.value[0], ipc::kMsgMember);
  EXPECT_EQ(r.value[1], ipc::kMsgMember) << "rank 0 as c sees it";
  EXPECT_EQ(r.value[2], 1u) << "3 of 3 joined: settled";
  EXPECT_EQ(world(a, -1, 2).value[1], ipc::kMsgMember);
  EXPECT_EQ(world(a, -1, 7).value[1], ipc::kMsgOutsider) << "never joined, and the world settled";
  EXPECT_EQ(world(d, 7, 0).value[0], ipc::kMsgOutsider) << "joined after the world settled";
  EXPECT_EQ(world(a, -1, 7).value[1], ipc::kMsgOutsider) << "the answer given before stays";
  EXPECT_EQ(world(a, 0, -1).value[0], ipc::kMsgMember) << "a second join keeps the first answer";
  // Another world is counted apart.
  EXPECT_EQ(world(d, -1, 0).value[1], ipc::kMsgMember);
  EXPECT_EQ(d.call(Opcode::MsgWorld, ipc::MsgWorldCmd{43, -1, 0, 0, 0}).value[1], ipc::kMsgNotYet);
  // Refused: a rank below -1, an unknown flag, a one-way post.
  EXPECT_EQ(d.call(Opcode::MsgWorld, ipc::MsgWorldCmd{42, -2, 3, -1, 0}).status, Status::InvalidValue);
  EXPECT_EQ(d.call(Opcode::MsgWorld, ipc::MsgWorldCmd{42, 3, 3, -1, 2}).status, Status::InvalidValue);
  d.post(Opcode::MsgWorld, ipc::MsgWorldCmd{42, 3, 3, -1, 0});
  ASSERT_EQ(d.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(d.take_deferred(), static_cast<int32_t>(Status::InvalidValue));
  // c (rank 2) leaves: a send to rank 2 is answered PeerGone.
  Words wa(a, run_dir_);
  const uint64_t x = a.alloc(64);
  c.detach();
  a.post(Opcode::MsgPost, half(ipc::kMsgSend, 0, 2, 5, 0, x, 64, wa, wa.arm(0)));
  EXPECT_EQ(wa.end(0), ipc::kMsgPeerGone);
}

// A graph tree (conditional nodes): handles and conditional nodes made as the client makes them,
// builds into the tree's parts, bodies chosen by the handles' values at every launch (the
// defaults here: the sim runs no kernels), and what the worker refuses.
TEST_F(ServerTest, GraphTreesRunTheBodiesTheirHandlesChoose) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  constexpr uint64_t kBytes = 256;
  const uint64_t a = c.alloc(kBytes), b = c.alloc(kBytes);
  c.create_stream(1);
  auto tree = [&](ipc::GraphTreeOp op, uint64_t id, uint32_t part = 0, uint32_t value = 0, uint32_t flags = 0,
                  uint64_t handle = 0) {
    ipc::GraphTreeCmd t{};
    t.tree = id;
    t.handle = handle;
    t.op = static_cast<uint32_t>(op);
    t.part = part;
    t.value = value;
    t.flags = flags;
    return c.call(Opcode::GraphTree, t);
  };
  using Op = ipc::GraphTreeOp;
  ASSERT_EQ(tree(Op::Create, 3).status, Status::Success);
  EXPECT_EQ(tree(Op::Create, 3).status, Status::InvalidValue) << "a tree id in use";
  const Reply if_h = tree(Op::Handle, 3, 0, 0, 1);  // default 0, assigned at every launch
  const Reply sw_h = tree(Op::Handle, 3, 0, 2, 1);  // default 2
  ASSERT_EQ(if_h.status, Status::Success);
  ASSERT_EQ(sw_h.status, Status::Success);
  EXPECT_EQ(tree(Op::Handle, 3, 7).status, Status::InvalidValue) << "a part the tree does not have";
  EXPECT_EQ(tree(Op::Handle, 3, 0, 0, 2).status, Status::InvalidValue) << "flags CUDA does not have";
  // IF with an else (parts 1, 2), SWITCH of 3 (parts 3, 4, 5).
  const Reply ifn = tree(Op::CondNode, 3, 0, 0, 2, if_h.value[0]);
  ASSERT_EQ(ifn.status, Status::Success);
  EXPECT_EQ(ifn.value[0], 0u);
  EXPECT_EQ(ifn.value[1], 1u);
  const Reply swn = tree(Op::CondNode, 3, 0, 2, 3, sw_h.value[0]);
  ASSERT_EQ(swn.status, Status::Success);
  EXPECT_EQ(swn.value[0], 1u);
  EXPECT_EQ(swn.value[1], 3u);
  EXPECT_EQ(tree(Op::CondNode, 3, 0, 0, 3, if_h.value[0]).status, Status::InvalidValue) << "an IF of 3 bodies";
  EXPECT_EQ(tree(Op::CondNode, 3, 0, 1, 2, if_h.value[0]).status, Status::InvalidValue) << "a WHILE of 2 bodies";
  EXPECT_EQ(tree(Op::CondNode, 3, 0, 0, 1, 0xdead).status, Status::InvalidValue) << "a handle of no tree";
  EXPECT_EQ(tree(Op::Handle, 4).status, Status::InvalidResourceHandle) << "a tree never made";

  // memset a=0 -> IF {a=0x11 | a=0x22} -> SWITCH {b=0x30 | b=0x31 | b=0x32}
  auto in_part = [](ipc::GraphNodeCmd n, uint32_t part) {
    n.part = part;
    return n;
  };
  auto cond = [](uint64_t graph, uint32_t index, uint32_t which) {
    ipc::GraphNodeCmd n{};
    n.graph = graph;
    n.index = index;
    n.kind = static_cast<uint32_t>(GraphNodeKind::Conditional);
    n.cond = ipc::GraphCondRef{which, 0};
    return n;
  };
  auto build = [&](uint64_t graph, uint32_t otherwise = 0x22) {
    send_node(c, memset_node(graph, 0, a, kBytes, 0, 1), {});
    send_node(c, cond(graph, 1, 0), {0});
    send_node(c, in_part(memset_node(graph, 2, a, kBytes, 0x11, 1), 1), {});
    send_node(c, in_part(memset_node(graph, 3, a, kBytes, otherwise, 1), 2), {});
    send_node(c, cond(graph, 4, 1), {1});
    for (uint32_t k = 0; k < 3; ++k) send_node(c, in_part(memset_node(graph, 5 + k, b, kBytes, 0x30 + k, 1), 3 + k), {});
  };
  build(20);
  ASSERT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{20, 40, 8, 0, 3}).status, Status::Success);
  for (int i = 0; i < 2; ++i) {
    c.post(Opcode::GraphLaunch, ipc::GraphExecCmd{40}, 1);
    EXPECT_TRUE(all_equal(read_words(c, a, kBytes / 4), 0x22222222u)) << "the else body, launch " << i;
    EXPECT_TRUE(all_equal(read_words(c, b, kBytes / 4), 0x32323232u)) << "switch body 2, launch " << i;
  }
  build(21);
  EXPECT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{21, 41, 8, 0, 3}).status, Status::NotSupported)
      << "one executable graph of a tree at a time (CUDA: cudaErrorNotSupported)";
  // An update from the tree's own graph: the else body's memset now 0x44.
  build(22, 0x44);
  ASSERT_EQ(c.call(Opcode::GraphUpdate, ipc::GraphBuildCmd{22, 40, 8, 0, 3}).status, Status::Success);
  c.post(Opcode::GraphLaunch, ipc::GraphExecCmd{40}, 1);
  EXPECT_TRUE(all_equal(read_words(c, a, kBytes / 4), 0x44444444u)) << "the updated else body";
  build(32);
  EXPECT_EQ(c.call(Opcode::GraphUpdate, ipc::GraphBuildCmd{32, 40, 8, 0, 0}).status, Status::NotSupported)
      << "a build of no tree for a tree's executable graph";
  c.post(Opcode::GraphExecDestroy, ipc::GraphExecCmd{40});
  // A build without one of the tree's conditional nodes, or one into a part of no tree.
  send_node(c, memset_node(23, 0, a, kBytes, 0, 1), {});
  send_node(c, cond(23, 1, 0), {0});
  EXPECT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{23, 42, 2, 0, 3}).status, Status::InvalidValue);
  send_node(c, in_part(memset_node(24, 0, a, kBytes, 0, 1), 1), {});
  EXPECT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{24, 43, 1, 0, 0}).status, Status::InvalidValue);
  // A dependency across parts is refused with its node.
  c.take_deferred();
  send_node(c, memset_node(25, 0, a, kBytes, 0, 1), {});
  send_node(c, in_part(memset_node(25, 1, a, kBytes, 0, 1), 1), {0});
  EXPECT_EQ(c.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(static_cast<Status>(c.take_deferred()), Status::InvalidValue);
  // As CUDA: a handle serves one conditional node, and a graph with a handle no node uses is not
  // instantiated.
  EXPECT_EQ(tree(Op::CondNode, 3, 0, 0, 1, if_h.value[0]).status, Status::InvalidValue);
  const Reply unused = tree(Op::Handle, 3, 3);  // made on the SWITCH's body 0
  ASSERT_EQ(unused.status, Status::Success);
  build(26);
  EXPECT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{26, 44, 8, 0, 3}).status, Status::InvalidValue);
  ASSERT_EQ(tree(Op::CondNode, 3, 3, 1, 1, unused.value[0]).status, Status::Success);  // a WHILE (part 6)
  build(27);
  send_node(c, in_part(cond(27, 8, 2), 3), {});
  send_node(c, in_part(memset_node(27, 9, a, kBytes, 0x44, 1), 6), {});
  ASSERT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{27, 45, 10, 0, 3}).status, Status::Success);

  // The SWITCH node destroyed: its bodies (and the WHILE in one) go with it, a build naming them
  // is refused, and so is one without them (the SWITCH's handle is no node's now, as CUDA).
  ASSERT_EQ(tree(Op::CondDestroy, 3, 0, 1).status, Status::Success);
  EXPECT_EQ(tree(Op::CondDestroy, 3, 0, 1).status, Status::InvalidValue);
  EXPECT_EQ(tree(Op::CondDestroy, 3, 0, 2).status, Status::InvalidValue) << "the WHILE went with its part";
  c.post(Opcode::GraphExecDestroy, ipc::GraphExecCmd{45});
  build(28);
  EXPECT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{28, 46, 8, 0, 3}).status, Status::InvalidValue);
  send_node(c, memset_node(29, 0, a, kBytes, 0, 1), {});
  send_node(c, cond(29, 1, 0), {0});
  send_node(c, in_part(memset_node(29, 2, a, kBytes, 0x11, 1), 1), {});
  send_node(c, in_part(memset_node(29, 3, a, kBytes, 0x22, 1), 2), {});
  EXPECT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{29, 47, 4, 0, 3}).status, Status::InvalidValue);

  // A tree destroyed under its executable graph: the graph lives on.
  ASSERT_EQ(tree(Op::Create, 7).status, Status::Success);
  const Reply h7 = tree(Op::Handle, 7, 0, 1, 1);
  ASSERT_EQ(tree(Op::CondNode, 7, 0, 0, 1, h7.value[0]).status, Status::Success);
  send_node(c, cond(30, 0, 0), {});
  send_node(c, in_part(memset_node(30, 1, a, kBytes, 0x66, 1), 1), {});
  ASSERT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{30, 48, 2, 0, 7}).status, Status::Success);
  ASSERT_EQ(tree(Op::Destroy, 7).status, Status::Success);
  const std::vector<uint32_t> zero(kBytes / 4, 0);
  c.h2d(a, zero.data(), kBytes, 1);
  c.post(Opcode::GraphLaunch, ipc::GraphExecCmd{48}, 1);
  EXPECT_TRUE(all_equal(read_words(c, a, kBytes / 4), 0x66666666u));

  // A WHILE node whose condition is not 0: the sim cannot run it (no kernel could end it).
  ASSERT_EQ(tree(Op::Create, 5).status, Status::Success);
  const Reply wh = tree(Op::Handle, 5, 0, 1, 1);
  ASSERT_EQ(tree(Op::CondNode, 5, 0, 1, 1, wh.value[0]).status, Status::Success);
  send_node(c, cond(31, 0, 0), {});
  ASSERT_EQ(c.call(Opcode::GraphInstantiate, ipc::GraphBuildCmd{31, 49, 1, 0, 5}).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::GraphLaunch, ipc::GraphExecCmd{49}, 1).status, Status::NotSupported);
  c.take_deferred();
}

}  // namespace
}  // namespace funnel::test
