// Writes the seed corpus of the server-command fuzz target (tests/fuzz/corpus/): a few
// well-formed command sequences of each opcode family, in fuzz_input.hpp's format.
//   make_corpus <dir>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "funnel/ipc/module_digest.hpp"
#include "fuzz_input.hpp"

namespace {

using namespace funnel;
using ipc::Opcode;

constexpr uint32_t kReply = 0;  // any slot but kNoReply: the harness picks a fresh one

class Seed {
 public:
  // One record; `reply` false: one-way.
  template <class T>
  Seed& cmd(Opcode op, const T& payload, bool reply = false, uint64_t stream = 0, int device = 0, uint8_t ctl = 0) {
    return raw(op, &payload, sizeof payload, reply, stream, device, ctl);
  }
  // Bytes for every staging slot (handed to the server), before a staged copy or ModuleData.
  Seed& stage(size_t n, uint8_t fill) {
    const std::vector<uint8_t> bytes(n, fill);
    return raw(Opcode::Pad, bytes.data(), n, false, 0, 0, fuzz::kStage);
  }
  Seed& bare(Opcode op, bool reply = false, uint64_t stream = 0, int device = 0) {
    return raw(op, nullptr, 0, reply, stream, device, 0);
  }
  // A command followed by trailing bytes (a name or a parameter buffer).
  template <class T>
  Seed& trailing(Opcode op, const T& payload, const void* tail, size_t n, bool reply, uint64_t stream = 0) {
    std::vector<uint8_t> p(sizeof payload + n);
    std::memcpy(p.data(), &payload, sizeof payload);
    if (n != 0) std::memcpy(p.data() + sizeof payload, tail, n);
    return raw(op, p.data(), p.size(), reply, stream, 0, 0);
  }
  Seed& raw(Opcode op, const void* payload, size_t len, bool reply, uint64_t stream, int device, uint8_t ctl,
            uint32_t size = 0) {
    ipc::CommandHeader h{};
    h.size = size;
    h.opcode = op;
    // kRawReplySlot: a slot past the channel's reply_slots.
    h.reply_slot = (ctl & fuzz::kRawReplySlot) != 0 ? 1000 : reply ? kReply : ipc::kNoReply;
    h.device = device;
    h.stream = stream;
    fuzz::append(bytes_, ctl, h, payload, len);
    return *this;
  }
  void write(const std::filesystem::path& dir, const char* name) const {
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes_.data()), static_cast<std::streamsize>(bytes_.size()));
    if (!out) throw std::runtime_error(std::string("cannot write ") + name);
  }

 private:
  std::vector<uint8_t> bytes_;
};

ipc::CopyCmd copy(ipc::Location dst, ipc::Location src, uint64_t width, uint64_t height = 1, uint64_t pitch = 0) {
  ipc::CopyCmd c{};
  c.dst = dst;
  c.src = src;
  c.width = width;
  c.height = height;
  c.dst_pitch = c.src_pitch = pitch != 0 ? pitch : width;
  return c;
}

ipc::Location device(uint32_t alloc, uint32_t offset) {
  return {ipc::MemSpace::Device, 0, 0, fuzz::address_token(alloc, offset)};
}

ipc::LaunchCmd launch(uint64_t kernel, uint32_t param_bytes) {
  ipc::LaunchCmd l{};
  l.kernel_id = kernel;
  l.grid[0] = l.grid[1] = l.grid[2] = 1;
  l.block[0] = 32;
  l.block[1] = l.block[2] = 1;
  l.param_bytes = param_bytes;
  return l;
}

void write_all(const std::filesystem::path& dir) {
  using ipc::MemSpace;
  // Memory: allocation, memset, copies each way through device, staging and pinned memory.
  Seed()
      .cmd(Opcode::MemAlloc, ipc::MemAllocCmd{1 << 16}, true)
      .cmd(Opcode::MemAlloc, ipc::MemAllocCmd{4096}, true)
      .bare(Opcode::MemGetInfo, true)
      .cmd(Opcode::Memset, ipc::MemsetCmd{fuzz::address_token(0, 0), 4096, 4096, 4, 0x5a, 0})
      .cmd(Opcode::Copy, copy(device(1, 0), device(0, 1024), 2048))
      .cmd(Opcode::Copy, copy(device(0, 0), device(0, 8192), 512, 8, 1024))
      .stage(4096, 0x33)
      .cmd(Opcode::Copy, copy(device(0, 0), {MemSpace::Staging, 1, 0, 0}, 4096))
      .cmd(Opcode::Copy, copy({MemSpace::Staging, 2, 0, 0}, device(0, 0), 4096), true)
      .cmd(Opcode::MemFreeAsync, ipc::AddressCmd{fuzz::address_token(1, 0)})
      .cmd(Opcode::MemFree, ipc::AddressCmd{fuzz::address_token(0, 0)}, true)
      .write(dir, "memory");
  Seed()
      .cmd(Opcode::PinnedAlloc, ipc::PinnedAllocCmd{8192, 0, 0}, true)
      .cmd(Opcode::MemAlloc, ipc::MemAllocCmd{8192}, true)
      .cmd(Opcode::Copy, copy(device(0, 0), {MemSpace::Pinned, 0, 1, 0}, 8192))
      .cmd(Opcode::Copy, copy({MemSpace::Pinned, 0, 1, 4096}, device(0, 0), 4096), true)
      .cmd(Opcode::PinnedFree, ipc::PinnedFreeCmd{1}, true)
      .write(dir, "pinned");
  // GPU-local messages: the rank joins its world and asks about a peer; a receive parked, a probe,
  // its send (the same client: a message to itself) paired and copied, completion words in a
  // pinned page; a duplicate envelope.
  {
    auto msg = [](uint32_t role, uint64_t seq, uint32_t offset, uint64_t bytes, uint64_t word) {
      ipc::MsgPostCmd c{};
      c.world = 1;
      c.comm = 2;
      c.source = 0;
      c.dest = 0;
      c.tag = 3;
      c.role = role;
      c.seq = seq;
      c.address = fuzz::address_token(0, offset);
      c.bytes = bytes;
      c.word_pinned = 1;
      c.word_offset = word;
      return c;
    };
    Seed()
        .cmd(Opcode::MsgWorld, ipc::MsgWorldCmd{1, 0, 2, -1, ipc::kWorldLocal}, true)
        .cmd(Opcode::MsgWorld, ipc::MsgWorldCmd{1, -1, 0, 1, 0}, true)
        .cmd(Opcode::PinnedAlloc, ipc::PinnedAllocCmd{4096, 0, 0}, true)
        .cmd(Opcode::MemAlloc, ipc::MemAllocCmd{8192}, true)
        .cmd(Opcode::MsgPost, msg(ipc::kMsgRecv, 0, 4096, 4096, 0))
        .cmd(Opcode::MsgProbe, ipc::MsgProbeCmd{1, 2, -1, 0, -1, 0}, true)
        .cmd(Opcode::MsgPost, msg(ipc::kMsgSend, 0, 0, 4096, 16))
        .cmd(Opcode::MsgPost, msg(ipc::kMsgRecv, 1, 0, 100, 32))
        .cmd(Opcode::MsgPost, msg(ipc::kMsgRecv, 1, 0, 100, 48))
        .cmd(Opcode::MsgPost, msg(ipc::kMsgSend, 1, 4096, 200, 64))
        .bare(Opcode::Fence, true)
        .write(dir, "messages");
  }
  Seed()
      .cmd(Opcode::StreamCreate, ipc::StreamCreateCmd{5, 0, 0})
      .cmd(Opcode::MemAllocAsync, ipc::MemAllocCmd{4096}, true, 5)
      .cmd(Opcode::MemAllocAsync, ipc::MemAllocCmd{4096}, true, 5, 1)
      .cmd(Opcode::MemFreeAsync, ipc::AddressCmd{fuzz::address_token(1, 0)}, false, 5, 1)
      .cmd(Opcode::Memset, ipc::MemsetCmd{fuzz::address_token(0, 0), 4096, 4096, 1, 1, 0}, false, 5)
      .write(dir, "memory_async");
  // The virtual memory commands: a reserved range, memory mapped over part of it, used, unmapped.
  Seed()
      .cmd(Opcode::AddressReserve, ipc::AddressReserveCmd{uint64_t{8} << 20, 0}, true)
      .cmd(Opcode::MemMap, ipc::AddressRangeCmd{fuzz::address_token(0, 0), uint64_t{2} << 20}, true)
      .cmd(Opcode::MemMap, ipc::AddressRangeCmd{fuzz::address_token(0, 2 << 20), uint64_t{2} << 20}, true)
      .cmd(Opcode::Memset, ipc::MemsetCmd{fuzz::address_token(0, (2 << 20) - 4096), 8192, 8192, 1, 7, 0})
      .cmd(Opcode::Copy, copy(device(0, 4096), device(0, (2 << 20) - 2048), 4096), true)
      .cmd(Opcode::MemUnmap, ipc::AddressRangeCmd{fuzz::address_token(0, 0), uint64_t{2} << 20}, true)
      .cmd(Opcode::MemUnmap, ipc::AddressRangeCmd{fuzz::address_token(0, 2 << 20), uint64_t{2} << 20}, true)
      .cmd(Opcode::AddressFree, ipc::AddressRangeCmd{fuzz::address_token(0, 0), uint64_t{8} << 20}, true)
      .write(dir, "virtual_memory");
  // Stream memory operations on device memory: writes, and waits already met.
  Seed()
      .cmd(Opcode::MemAlloc, ipc::MemAllocCmd{4096}, true)
      .cmd(Opcode::StreamMemOp, ipc::StreamMemOpCmd{fuzz::address_token(0, 0), 5, 1, 0})
      .cmd(Opcode::StreamMemOp, ipc::StreamMemOpCmd{fuzz::address_token(0, 8), 9, 2, ipc::kWriteValueNoMemoryBarrier})
      .cmd(Opcode::StreamMemOp, ipc::StreamMemOpCmd{fuzz::address_token(0, 0), 5, 3, ipc::kWaitValueEq})
      .cmd(Opcode::StreamMemOp, ipc::StreamMemOpCmd{fuzz::address_token(0, 8), 4, 4, ipc::kWaitValueGeq})
      .bare(Opcode::Fence, true)
      .write(dir, "stream_mem_op");
  // Streams and events, blocking and non-blocking, legacy-stream ordering.
  Seed()
      .cmd(Opcode::StreamCreate, ipc::StreamCreateCmd{5, 0, 0})
      .cmd(Opcode::StreamCreate, ipc::StreamCreateCmd{6, ipc::kStreamNonBlocking, -1})
      .cmd(Opcode::EventCreate, ipc::EventCreateCmd{7, 0, 0})
      .cmd(Opcode::EventCreate, ipc::EventCreateCmd{8, ipc::kEventBlockingSync, 0})
      .cmd(Opcode::EventRecord, ipc::EventRecordCmd{7, 0, 0, 1, 0}, false, 5)
      .cmd(Opcode::StreamWaitEvent, ipc::EventCmd{7, 0, 0}, false, 6)
      .cmd(Opcode::EventRecord, ipc::EventRecordCmd{8, 0, ipc::kNoEventSlot, 0, 0}, false, 6)
      .cmd(Opcode::EventQuery, ipc::EventCmd{7, 0, 0}, true)
      .cmd(Opcode::EventSynchronize, ipc::EventCmd{8, 0, 0}, true)
      .cmd(Opcode::EventElapsedTime, ipc::EventPairCmd{7, 8}, true)
      .bare(Opcode::StreamQuery, true, 5)
      .bare(Opcode::StreamSynchronize, true, 6)
      .bare(Opcode::StreamSynchronize, true, 0)
      .cmd(Opcode::EventDestroy, ipc::EventCmd{7, 0, 0})
      .bare(Opcode::StreamDestroy, false, 5)
      .write(dir, "streams_events");
  Seed()
      .cmd(Opcode::StreamCreate, ipc::StreamCreateCmd{5, 0, 0}, false, 0, 1)
      .cmd(Opcode::HostFunc, ipc::HostFuncCmd{1, 2, 1, 0}, false, 5, 1)
      .bare(Opcode::StreamQuery, true, 5, 1)
      .bare(Opcode::DeviceSynchronize, true, 0, 1)
      .write(dir, "host_func");
  // Device commands.
  ipc::TensorMapCmd tmap{};
  tmap.data_type = 7;
  tmap.rank = 2;
  tmap.global_address = 0x10000;
  tmap.global_dim[0] = 256;
  tmap.global_dim[1] = 16;
  tmap.global_strides[0] = 1024;
  tmap.box_dim[0] = 64;
  tmap.box_dim[1] = 16;
  tmap.element_strides[0] = tmap.element_strides[1] = 1;
  ipc::TensorMapCmd tmap_last = tmap;
  tmap_last.part = ipc::kTensorMapParts - 1;
  Seed()
      .cmd(Opcode::SetLimit, ipc::LimitCmd{0, 0, 4096}, true)
      .cmd(Opcode::GetLimit, ipc::LimitCmd{0, 0, 0}, true)
      .cmd(Opcode::GetLimit, ipc::LimitCmd{2, 0, 0}, true, 0, 1)
      .cmd(Opcode::SetLimit, ipc::LimitCmd{6, 0, 1u << 20}, true)
      .cmd(Opcode::Profiler, ipc::ProfilerCmd{1, 0}, true)
      .cmd(Opcode::Profiler, ipc::ProfilerCmd{0, 0}, true, 0, 1)
      .cmd(Opcode::MemAlloc, ipc::MemAllocCmd{4096}, true, 0, 1)
      .bare(Opcode::DeviceSynchronize, true)
      .bare(Opcode::DeviceReset, true, 0, 1)
      .bare(Opcode::Fence, true)
      .cmd(Opcode::TensorMapEncode, tmap, true)
      .cmd(Opcode::TensorMapEncode, tmap_last, true)
      .write(dir, "device");
  // Kernels of the test fat binary (module 1, loaded by the harness when built with it).
  const std::string mixed = "mixed", none = "no_params", big = "big_param", counter = "server_counter",
                    table = "server_table";
  std::vector<uint8_t> params(64, 0);
  const uint64_t p = fuzz::address_token(0, 0);
  std::memcpy(params.data() + 24, &p, sizeof p);
  Seed()
      .cmd(Opcode::MemAlloc, ipc::MemAllocCmd{4096}, true)
      .trailing(Opcode::KernelGet, ipc::KernelGetCmd{10, 1, static_cast<uint32_t>(mixed.size()), 0}, mixed.data(),
                mixed.size(), true)
      .trailing(Opcode::KernelGet, ipc::KernelGetCmd{11, 1, static_cast<uint32_t>(none.size()), 0}, none.data(),
                none.size(), true)
      .trailing(Opcode::KernelGet, ipc::KernelGetCmd{12, 1, static_cast<uint32_t>(big.size()), 0}, big.data(),
                big.size(), true)
      .cmd(Opcode::KernelParams, ipc::KernelParamsCmd{10, 0, 0}, true)
      .cmd(Opcode::KernelParams, ipc::KernelParamsCmd{10, 5, 0}, true)
      .cmd(Opcode::FuncGetAttributes, ipc::KernelCmd{10}, true)
      .cmd(Opcode::FuncSetAttribute, ipc::FuncSetAttributeCmd{10, 8, 1024}, true)
      .cmd(Opcode::FuncSetAttribute, ipc::FuncSetAttributeCmd{11, ipc::kFuncCacheConfig, 1}, true)
      .cmd(Opcode::Occupancy, ipc::OccupancyCmd{10, 128, 0, 0}, true)
      .cmd(Opcode::OccupancyDynamicSmem, ipc::OccupancyCmd{10, 128, 0, 2}, true)
      .cmd(Opcode::MaxActiveClusters, launch(11, 0), true)
      .trailing(Opcode::Launch, launch(11, 0), nullptr, 0, false)
      .trailing(Opcode::Launch, launch(10, static_cast<uint32_t>(params.size())), params.data(), params.size(), false)
      .bare(Opcode::DeviceSynchronize, true)
      .trailing(Opcode::SymbolGet, ipc::SymbolGetCmd{1, static_cast<uint32_t>(counter.size()), 0}, counter.data(),
                counter.size(), true)
      .trailing(Opcode::SymbolGet, ipc::SymbolGetCmd{1, static_cast<uint32_t>(table.size()), 0}, table.data(),
                table.size(), true)
      .write(dir, "kernels");
  // Graphs: a build of a memset, a copy after it, a kernel and an event record; instantiated,
  // launched, updated, uploaded, destroyed; a launch after the memory went.
  auto node = [](uint64_t graph, uint32_t index, ipc::GraphNodeKind kind) {
    ipc::GraphNodeCmd n{};
    n.graph = graph;
    n.index = index;
    n.kind = static_cast<uint32_t>(kind);
    return n;
  };
  auto with_deps = [](ipc::GraphNodeCmd n, std::vector<uint32_t> deps) {
    n.dep_count = static_cast<uint32_t>(deps.size());
    return std::pair{n, deps};
  };
  ipc::GraphNodeCmd gm = node(3, 0, ipc::GraphNodeKind::Memset);
  gm.memset = ipc::MemsetCmd{fuzz::address_token(0, 0), 4096, 4096, 1, 0x3c, 4};
  ipc::GraphNodeCmd gc = node(3, 1, ipc::GraphNodeKind::Copy);
  gc.copy = copy(device(1, 0), device(0, 0), 4096);
  ipc::GraphNodeCmd gk = node(3, 2, ipc::GraphNodeKind::Kernel);
  gk.launch = launch(11, 0);
  ipc::GraphNodeCmd ge = node(3, 3, ipc::GraphNodeKind::EventRecord);
  ge.event = ipc::EventCmd{7, 0, 0};
  const auto [cn, cdeps] = with_deps(gc, {0});
  const auto [kn, kdeps] = with_deps(gk, {0, 1});
  const auto [en, edeps] = with_deps(ge, {2});
  ipc::GraphNodeCmd um = gm;
  um.graph = 4;
  um.memset.value = 0x7;
  ipc::GraphNodeCmd uc = cn;
  uc.graph = 4;
  ipc::GraphNodeCmd uk = kn;
  uk.graph = 4;
  ipc::GraphNodeCmd ue = en;
  ue.graph = 4;
  const std::string none_name = "no_params";
  Seed()
      .cmd(Opcode::MemAlloc, ipc::MemAllocCmd{4096}, true)
      .cmd(Opcode::MemAlloc, ipc::MemAllocCmd{4096}, true)
      .cmd(Opcode::StreamCreate, ipc::StreamCreateCmd{5, 0, 0})
      .cmd(Opcode::EventCreate, ipc::EventCreateCmd{7, 0, 0})
      .trailing(Opcode::KernelGet, ipc::KernelGetCmd{11, 1, static_cast<uint32_t>(none_name.size()), 0},
                none_name.data(), none_name.size(), true)
      .cmd(Opcode::GraphNode, gm)
      .trailing(Opcode::GraphNode, cn, cdeps.data(), cdeps.size() * 4, false)
      .trailing(Opcode::GraphNode, kn, kdeps.data(), kdeps.size() * 4, false)
      .trailing(Opcode::GraphNode, en, edeps.data(), edeps.size() * 4, false)
      .cmd(Opcode::GraphInstantiate, ipc::GraphBuildCmd{3, 9, 4, 0, 0}, true)
      .cmd(Opcode::GraphLaunch, ipc::GraphExecCmd{9}, false, 5)
      .cmd(Opcode::GraphLaunch, ipc::GraphExecCmd{9}, false, 0)
      .cmd(Opcode::GraphUpload, ipc::GraphExecCmd{9}, false, 5)
      .cmd(Opcode::GraphNode, um)
      .trailing(Opcode::GraphNode, uc, cdeps.data(), cdeps.size() * 4, false)
      .trailing(Opcode::GraphNode, uk, kdeps.data(), kdeps.size() * 4, false)
      .trailing(Opcode::GraphNode, ue, edeps.data(), edeps.size() * 4, false)
      .cmd(Opcode::GraphUpdate, ipc::GraphBuildCmd{4, 9, 4, 0, 0}, true)
      .cmd(Opcode::GraphLaunch, ipc::GraphExecCmd{9}, false, 5)
      .cmd(Opcode::EventSynchronize, ipc::EventCmd{7, 0, 0}, true)
      .cmd(Opcode::MemFree, ipc::AddressCmd{fuzz::address_token(0, 0)}, true)
      .cmd(Opcode::GraphLaunch, ipc::GraphExecCmd{9}, true, 5)
      .cmd(Opcode::GraphExecDestroy, ipc::GraphExecCmd{9})
      .bare(Opcode::DeviceSynchronize, true)
      .write(dir, "graphs");
  // A graph tree: two handles (the sim's handles are 1, 2, ...), an IF with an else and a WHILE
  // (condition 1: refused at launch by the sim), a build into their parts, launches, a conditional
  // node destroyed, the tree destroyed under its executable graph.
  auto tree = [](ipc::GraphTreeOp op, uint32_t part, uint32_t value, uint32_t flags, uint64_t handle) {
    ipc::GraphTreeCmd t{};
    t.tree = 6;
    t.op = static_cast<uint32_t>(op);
    t.part = part;
    t.value = value;
    t.flags = flags;
    t.handle = handle;
    return t;
  };
  ipc::GraphNodeCmd tm = node(8, 0, ipc::GraphNodeKind::Memset);
  tm.memset = gm.memset;
  ipc::GraphNodeCmd tc = node(8, 1, ipc::GraphNodeKind::Conditional);
  tc.cond = ipc::GraphCondRef{0, 0};
  const auto [tcn, tcdeps] = with_deps(tc, {0});
  ipc::GraphNodeCmd tb1 = node(8, 2, ipc::GraphNodeKind::Memset);
  tb1.memset = gm.memset;
  tb1.part = 1;
  ipc::GraphNodeCmd tb2 = tb1;
  tb2.index = 3;
  tb2.part = 2;
  ipc::GraphNodeCmd tw = node(8, 4, ipc::GraphNodeKind::Conditional);
  tw.cond = ipc::GraphCondRef{1, 0};
  Seed()
      .cmd(Opcode::MemAlloc, ipc::MemAllocCmd{4096}, true)
      .cmd(Opcode::StreamCreate, ipc::StreamCreateCmd{5, 0, 0})
      .cmd(Opcode::GraphTree, tree(ipc::GraphTreeOp::Create, 0, 0, 0, 0), true)
      .cmd(Opcode::GraphTree, tree(ipc::GraphTreeOp::Handle, 0, 0, 1, 0), true)
      .cmd(Opcode::GraphTree, tree(ipc::GraphTreeOp::Handle, 0, 1, 1, 0), true)
      .cmd(Opcode::GraphTree, tree(ipc::GraphTreeOp::CondNode, 0, 0, 2, 1), true)
      .cmd(Opcode::GraphTree, tree(ipc::GraphTreeOp::CondNode, 0, 1, 1, 2), true)
      .cmd(Opcode::GraphNode, tm)
      .trailing(Opcode::GraphNode, tcn, tcdeps.data(), tcdeps.size() * 4, false)
      .cmd(Opcode::GraphNode, tb1)
      .cmd(Opcode::GraphNode, tb2)
      .cmd(Opcode::GraphNode, tw)
      .cmd(Opcode::GraphInstantiate, ipc::GraphBuildCmd{8, 12, 5, 0, 6}, true)
      .cmd(Opcode::GraphLaunch, ipc::GraphExecCmd{12}, false, 5)
      .cmd(Opcode::GraphTree, tree(ipc::GraphTreeOp::CondDestroy, 0, 1, 0, 0), true)
      .cmd(Opcode::GraphTree, tree(ipc::GraphTreeOp::Destroy, 0, 0, 0, 0), true)
      .cmd(Opcode::GraphLaunch, ipc::GraphExecCmd{12}, true, 5)
      .cmd(Opcode::GraphExecDestroy, ipc::GraphExecCmd{12})
      .bare(Opcode::DeviceSynchronize, true)
      .write(dir, "graph_trees");
  // Arrays: a 3-D float array, copies into and out of a region, a mipmapped array's level, a
  // texture object of the array and one of device memory, frees.
  ipc::TexCreateCmd tex{};
  tex.res_id = 21;
  ipc::TexCreateCmd linear{};
  linear.res_type = 2;
  linear.address = fuzz::address_token(0, 0);
  linear.format = 0x20;
  linear.channels = 1;
  linear.size = 4096;
  const ipc::Location arr{MemSpace::Array, 0, 21, 32};
  Seed()
      .cmd(Opcode::MemAlloc, ipc::MemAllocCmd{4096}, true)
      .cmd(Opcode::ArrayCreate, ipc::ArrayCreateCmd{21, 16, 8, 4, 0x20, 1, 0, 0}, true)
      .cmd(Opcode::ArrayCreate, ipc::ArrayCreateCmd{22, 16, 16, 0, 0x01, 4, 0, 3}, true)
      .cmd(Opcode::ArrayLevel, ipc::ArrayLevelCmd{22, 23, 1, 0}, true)
      .cmd(Opcode::Copy, copy(arr, device(0, 0), 64, 4, 64))
      .cmd(Opcode::Copy, copy(device(0, 512), arr, 64, 4, 64))
      .cmd(Opcode::Copy, copy(ipc::Location{MemSpace::Array, 0, 23, 0}, device(0, 0), 32, 2, 32))
      .cmd(Opcode::TexCreate, tex, true)
      .cmd(Opcode::TexCreate, linear, true)
      .cmd(Opcode::ArrayDestroy, ipc::ArrayCmd{22}, true)
      .cmd(Opcode::ArrayDestroy, ipc::ArrayCmd{21}, true)
      .bare(Opcode::DeviceSynchronize, true)
      .write(dir, "arrays");
  // Modules: a second upload (whose bytes are no fat binary) and an unload.
  ipc::ModuleCmd m{};
  m.module_id = 2;
  m.size = 96;
  const std::vector<std::byte> junk(96, std::byte{0x42});
  const ipc::ModuleDigest digest = ipc::module_digest(junk);  // the bytes load (and fail) as a fat binary
  std::memcpy(m.digest, digest.data(), sizeof m.digest);
  Seed()
      .cmd(Opcode::ModuleQuery, m, true)
      .stage(96, 0x42)
      .cmd(Opcode::ModuleData, ipc::ModuleDataCmd{2, 0, 96, 0, 0})
      .cmd(Opcode::ModuleLoad, m, true)
      .cmd(Opcode::ModuleQuery, ipc::ModuleCmd{1, {}, ipc::kModuleHasVariables, 0, 0}, true)
      .cmd(Opcode::ModuleUnload, ipc::ModuleCmd{1, {}, 0, 0, 0}, true)
      .write(dir, "modules");
  // A module with __managed__ variables: names whose storage is not the client's, a second
  // name, a load of bytes that are no fat binary.
  ipc::ModuleCmd mm = m;
  mm.module_id = 3;
  mm.flags = ipc::kModuleHasManaged;
  const std::string counter_name = "counter";
  Seed()
      .cmd(Opcode::ModuleQuery, mm, true)
      .stage(96, 0x42)
      .cmd(Opcode::ModuleData, ipc::ModuleDataCmd{3, 0, 96, 0, 0})
      .trailing(Opcode::ModuleManaged, ipc::ModuleManagedCmd{3, 0x7f0000001000, 4, 7, 0}, counter_name.data(),
                counter_name.size(), true)
      .trailing(Opcode::ModuleManaged, ipc::ModuleManagedCmd{4, 0x1000, 4, 7, 0}, counter_name.data(),
                counter_name.size(), true)
      .cmd(Opcode::ModuleLoad, mm, true)
      .write(dir, "managed_modules");
  // The framing and the ring: unknown opcodes, wrong sizes, a reply slot out of range,
  // a size of the record's own, a Pad, a Detach.
  const ipc::MemAllocCmd small{64};
  std::vector<uint8_t> forty(40, 0);  // MemAlloc's payload and more: a record of the wrong size
  std::memcpy(forty.data(), &small, sizeof small);
  Seed()
      .bare(static_cast<Opcode>(99), true)
      .bare(static_cast<Opcode>(77), true)
      .bare(Opcode::ModuleQuery, true)
      .raw(Opcode::MemAlloc, forty.data(), forty.size(), true, 0, 0, 0)
      .raw(Opcode::MemAlloc, &small, sizeof small, false, 0, 0, fuzz::kRawReplySlot)
      .cmd(Opcode::MemAlloc, small, true, 0, 9)
      .bare(Opcode::StreamQuery, true, 77)
      .write(dir, "framing");
  Seed()
      .bare(Opcode::Fence, true)
      .raw(Opcode::Fence, nullptr, 0, true, 0, 0, fuzz::kRawSize, 128)
      .bare(Opcode::Fence, true)
      .bare(Opcode::Fence, true)
      .write(dir, "ring_size");
  Seed().bare(Opcode::Fence, true).bare(Opcode::Pad, false).write(dir, "ring_pad");
  Seed().bare(Opcode::MemGetInfo, true).bare(Opcode::Detach).bare(Opcode::MemGetInfo, true).write(dir, "detach");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  std::filesystem::create_directories(argv[1]);
  write_all(argv[1]);
  return 0;
}
