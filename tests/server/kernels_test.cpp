// Kernel commands (doc/design/kernels.md) against the sim backend: a fat binary built
// by nvcc from kernels/launch_kernels.cu is uploaded through staging slots, cached for
// every client, its kernels' layouts come back as funnel::fatbin reads them, and the
// parameter buffer of a launch reaches the backend byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <cstddef>
#include <fstream>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fixture.hpp"
#include "funnel/fatbin/fatbin.hpp"
#include "funnel/ipc/module_digest.hpp"
#include "funnel/server/sim_backend.hpp"
#include "kernel_client.hpp"
#include "launch_types.h"
#include "test_client.hpp"

namespace funnel::test {
namespace {

using server::ParamLayout;

// The kernel's layout as a client learns it: KernelGet, then KernelParams five at a time.
std::vector<ParamLayout> layout_of(TestClient& c, uint64_t kernel_id, const Reply& got) {
  std::vector<ParamLayout> out;
  const uint64_t n = got.value[0];
  for (uint64_t i = 0; i < n && i < 3; ++i) out.push_back({ipc::param_offset(got.value[2 + i]), ipc::param_size(got.value[2 + i])});
  for (uint32_t first = 3; first < n; first += 5) {
    const Reply r = c.call(Opcode::KernelParams, ipc::KernelParamsCmd{kernel_id, first, 0});
    EXPECT_EQ(r.status, Status::Success);
    for (uint32_t i = 0; i < 5 && first + i < n; ++i)
      out.push_back({ipc::param_offset(r.value[i]), ipc::param_size(r.value[i])});
  }
  return out;
}

std::vector<ParamLayout> fatbin_layout(const std::string& kernel) {
  std::vector<ParamLayout> out;
  for (const auto& p : test_fatbin().kernels.at(kernel).params) out.push_back({p.offset, p.size});
  return out;
}

// Packs arguments at the offsets the server reported, as the client runtime does.
class ParamBuffer {
 public:
  ParamBuffer(std::vector<ParamLayout> layout, uint32_t bytes) : layout_(std::move(layout)), buf_(bytes) {}
  template <class T>
  ParamBuffer& arg(const T& v) {
    const ParamLayout& p = layout_.at(next_++);
    EXPECT_EQ(p.size, sizeof v) << "parameter " << next_ - 1;
    std::memcpy(buf_.data() + p.offset, &v, std::min<size_t>(p.size, sizeof v));
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return buf_; }

 private:
  std::vector<ParamLayout> layout_;
  std::vector<uint8_t> buf_;
  size_t next_ = 0;
};

nlohmann::json client_stats(const std::filesystem::path& run_dir, const TestClient& c) {
  const auto all = stats(run_dir);
  for (const auto& j : all["clients"])
    if (j["id"] == c.attach_reply().client_id) return j;
  return {};
}

std::string hex(const std::vector<uint8_t>& bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 0xf]);
  }
  return out;
}

class KernelTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    ASSERT_FALSE(test_fatbin().bytes.empty()) << FUNNEL_SERVER_TEST_FATBIN;
    ASSERT_EQ(test_fatbin().kernels.size(), 3u);
  }
};

TEST_F(KernelTest, ModuleIsUploadedOnceAndSharedByClients) {
  start_server();
  TestClient a(run_dir_, "a"), b(run_dir_, "b"), c(run_dir_, "c");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  bool hit = true;
  Reply r = load_module(a, 1, 0, &hit);
  EXPECT_FALSE(hit) << "nothing is cached yet";
  ASSERT_EQ(r.status, Status::Success);
  EXPECT_EQ(r.value[0], 1u);

  // Another client: the query alone loads it; nothing is uploaded.
  r = load_module(b, 9, 0, &hit);
  EXPECT_TRUE(hit);
  ASSERT_EQ(r.status, Status::Success);
  auto j = stats(run_dir_)["modules"];
  EXPECT_EQ(j["cached"], 1);
  EXPECT_EQ(j["cached_bytes"], test_fatbin().bytes.size());
  EXPECT_EQ(j["uploads"], 1);
  EXPECT_EQ(j["cache_hits"], 1);
  EXPECT_EQ(j["loads"], 1) << "a module without variables is loaded once per server";

  // With variables, a client gets its own copy, still from the cached bytes.
  r = load_module(c, 1, ipc::kModuleHasVariables, &hit);
  EXPECT_TRUE(hit);
  EXPECT_EQ(r.status, Status::Success);
  j = stats(run_dir_)["modules"];
  EXPECT_EQ(j["uploads"], 1);
  EXPECT_EQ(j["loads"], 2);

  // Module ids are per client; one in use cannot be loaded again.
  EXPECT_EQ(a.call(Opcode::ModuleQuery, module_cmd(1, 0, test_fatbin().digest, test_fatbin().bytes.size())).status,
            Status::InvalidResourceHandle);
  // Unloaded: its kernels and the id are gone for this client only.
  ASSERT_EQ(kernel_get(b, 5, 9, "mixed").status, Status::Success);
  b.post(Opcode::ModuleUnload, module_cmd(9, 0, test_fatbin().digest, test_fatbin().bytes.size()));
  EXPECT_EQ(kernel_get(b, 6, 9, "mixed").status, Status::InvalidResourceHandle);
  EXPECT_EQ(b.call(Opcode::FuncGetAttributes, ipc::KernelCmd{5}).status, Status::InvalidResourceHandle);
  EXPECT_EQ(kernel_get(a, 5, 1, "mixed").status, Status::Success);
  EXPECT_EQ(b.take_deferred(), 0);
}

std::vector<std::byte> read_bytes(const char* path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

// __managed__ variables (doc/design/managed.md): a module that has them is always uploaded, its
// variables must lie in the client's pinned memory, and the load writes their initial values there
// (the cubin patched to use them), -rdc code too; PTX only and sizes that disagree with the cubin
// are refused.
TEST_F(KernelTest, ManagedVariablesLiveInTheClientsMemoryWithTheirInitialValues) {
  start_server();
  TestClient a(run_dir_), b(run_dir_);
  ASSERT_TRUE(a.ok() && b.ok());
  const auto fat = read_bytes(FUNNEL_SERVER_MANAGED_FATBIN);
  ASSERT_GT(fat.size(), 64u);
  const auto digest = ipc::module_digest(fat);
  // Another client loads the same bytes plainly: they are cached, but that spares no upload.
  const auto plain = module_cmd(1, 0, digest, fat.size());
  ASSERT_EQ(b.call(Opcode::ModuleQuery, plain).value[0], 0u);
  upload(b, 1, fat);
  ASSERT_EQ(b.call(Opcode::ModuleLoad, plain).status, Status::Success);

  const Reply p = a.call(Opcode::PinnedAlloc, ipc::PinnedAllocCmd{4096, 0, 0});
  ASSERT_EQ(p.status, Status::Success);
  const uint64_t storage = p.value[2];  // the buffer at the server's address (this process)
  ASSERT_NE(storage, 0u);
  std::memset(reinterpret_cast<void*>(storage), 0x5a, 4096);
  auto managed = [&](uint64_t module, const std::string& name, uint64_t address, uint64_t size) {
    const ipc::ModuleManagedCmd c{module, address, size, static_cast<uint32_t>(name.size()), 0};
    return call_record(a, Opcode::ModuleManaged, with_trailing(c, name.data(), name.size())).status;
  };
  const auto cmd = module_cmd(7, ipc::kModuleHasManaged, digest, fat.size());
  EXPECT_EQ(managed(7, "counter", storage, 4), Status::InvalidResourceHandle) << "no upload under way";
  ASSERT_EQ(a.call(Opcode::ModuleQuery, cmd).value[0], 0u) << "a managed module is always uploaded";
  upload(a, 7, fat);
  EXPECT_EQ(managed(7, "counter", storage + 4096, 4), Status::InvalidValue) << "past the client's pinned buffer";
  EXPECT_EQ(managed(7, "counter", a.alloc(64), 4), Status::InvalidValue) << "device memory";
  EXPECT_EQ(managed(7, "counter", storage, 0), Status::InvalidValue);
  EXPECT_EQ(managed(7, "", storage, 4), Status::InvalidValue);
  ASSERT_EQ(managed(7, "counter", storage, 4), Status::Success);
  EXPECT_EQ(managed(7, "counter", storage + 512, 4), Status::InvalidValue) << "a name twice";
  ASSERT_EQ(managed(7, "table", storage + 256, 64), Status::Success);
  ASSERT_EQ(a.call(Opcode::ModuleLoad, cmd).status, Status::Success);
  int counter = 0;
  std::memcpy(&counter, reinterpret_cast<const void*>(storage), sizeof counter);
  EXPECT_EQ(counter, 42) << "the initial value";
  const auto* bytes = reinterpret_cast<const uint8_t*>(storage);
  EXPECT_EQ(std::count(bytes + 256, bytes + 320, 0), 64) << "no initial value: zeros";
  EXPECT_EQ(bytes[4], 0x5a) << "nothing written past the variables";
  EXPECT_EQ(bytes[320], 0x5a);
  EXPECT_EQ(kernel_get(a, 1, 7, "_Z4stepi").status, Status::Success);

  // A plain module's upload takes no managed variables.
  ASSERT_EQ(a.call(Opcode::ModuleQuery, module_cmd(8, 0, digest, fat.size())).value[0], 1u);
  const auto other = read_bytes(FUNNEL_SERVER_TEST_FATBIN);
  const auto other_cmd = module_cmd(9, 0, ipc::module_digest(other), other.size());
  ASSERT_EQ(a.call(Opcode::ModuleQuery, other_cmd).value[0], 0u);
  EXPECT_EQ(managed(9, "counter", storage, 4), Status::InvalidResourceHandle);
  // A module of `image` with one variable, counter, of `var_size` bytes at `at`: what its load answers.
  auto load_with_counter = [&](uint64_t id, const std::vector<std::byte>& image, uint64_t at, uint64_t var_size) {
    const auto c = module_cmd(id, ipc::kModuleHasManaged, ipc::module_digest(image), image.size());
    EXPECT_EQ(a.call(Opcode::ModuleQuery, c).value[0], 0u);
    upload(a, id, image);
    EXPECT_EQ(managed(id, "counter", at, var_size), Status::Success);
    return a.call(Opcode::ModuleLoad, c).status;
  };
  // A size the cubin disagrees with.
  EXPECT_EQ(load_with_counter(10, fat, storage + 1024, 8), Status::InvalidValue);
  // Relocatable device code (the variables reached from the instructions): served the same way.
  EXPECT_EQ(load_with_counter(11, read_bytes(FUNNEL_SERVER_MANAGED_RDC_FATBIN), storage + 2048, 4), Status::Success);
  std::memcpy(&counter, reinterpret_cast<const void*>(storage + 2048), sizeof counter);
  EXPECT_EQ(counter, 42);
  // PTX only (the driver would compile it, with its own storage): refused.
  EXPECT_EQ(load_with_counter(12, read_bytes(FUNNEL_SERVER_MANAGED_PTX_FATBIN), storage + 3072, 4),
            Status::NotSupported);
  EXPECT_EQ(a.take_deferred(), 0);
}

TEST_F(KernelTest, LayoutsMatchTheCubinAndLaunchesCarryTheParameterBuffer) {
  launch_log_ = (dir_ / "launches.jsonl").string();
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(load_module(c, 1).status, Status::Success);

  // mixed(char, short, int, double, int*, Padded, Aligned8, char)
  Reply got = kernel_get(c, 10, 1, "mixed");
  ASSERT_EQ(got.status, Status::Success);
  const auto& mixed = test_fatbin().kernels.at("mixed");
  EXPECT_EQ(got.value[0], 8u);
  EXPECT_EQ(got.value[1], mixed.param_bytes);
  const auto layout = layout_of(c, 10, got);
  EXPECT_EQ(layout, fatbin_layout("mixed"));
  // Natural alignment, as the host lays out a struct of the same members.
  EXPECT_EQ(layout[3].offset, 8u);   // double after char, short, int
  EXPECT_EQ(layout[5].offset, 24u);  // Padded after the pointer
  EXPECT_EQ(layout[5].size, sizeof(server_test::Padded));
  EXPECT_EQ(layout[6].offset, 48u);  // Aligned8
  EXPECT_EQ(got.value[1], 57u);      // ends with the char, not rounded up

  ParamBuffer mixed_args(layout, static_cast<uint32_t>(got.value[1]));
  mixed_args.arg('a').arg(short{-1234}).arg(7).arg(3.25).arg(reinterpret_cast<int*>(0x7f0012345600));
  mixed_args.arg(server_test::Padded{'z', 6.5, 99}).arg(server_test::Aligned8{11, 22}).arg('T');
  post_launch(c, launch_cmd(10, {4, 2, 1}, {128, 1, 1}, 512, static_cast<uint32_t>(got.value[1])), mixed_args.bytes());

  // big_param(char, Block4k, int, unsigned char*): over 4 KiB of parameters.
  got = kernel_get(c, 11, 1, "big_param");
  ASSERT_EQ(got.status, Status::Success);
  EXPECT_EQ(got.value[0], 4u);
  const auto big_layout = layout_of(c, 11, got);
  EXPECT_EQ(big_layout, fatbin_layout("big_param"));
  server_test::Block4k block{};
  for (size_t i = 0; i < sizeof block.bytes; ++i) block.bytes[i] = static_cast<unsigned char>(i * 31 + 7);
  ParamBuffer big_args(big_layout, static_cast<uint32_t>(got.value[1]));
  big_args.arg('q').arg(block).arg(-5).arg(reinterpret_cast<unsigned char*>(0x1000));
  c.create_stream(3);
  post_launch(c, launch_cmd(11, {1000, 1, 1}, {32, 4, 2}, 0, static_cast<uint32_t>(got.value[1])), big_args.bytes(), 3);

  got = kernel_get(c, 12, 1, "no_params");
  ASSERT_EQ(got.status, Status::Success);
  EXPECT_EQ(got.value[0], 0u);
  EXPECT_EQ(got.value[1], 0u);
  post_launch(c, launch_cmd(12, {1, 1, 1}, {1, 1, 1}, 0, 0), {});

  ASSERT_EQ(c.sync_device(), Status::Success);
  EXPECT_EQ(c.take_deferred(), 0);
  const auto records = server::sim_launch_records(*backend_);
  ASSERT_EQ(records.size(), 3u);
  std::map<std::string, server::SimLaunchRecord> by_name;
  for (const auto& r : records) by_name[r.kernel] = r;
  const auto& m = by_name.at("mixed");
  EXPECT_EQ(m.params, mixed_args.bytes());
  EXPECT_EQ(std::vector<uint32_t>(m.grid, m.grid + 3), (std::vector<uint32_t>{4, 2, 1}));
  EXPECT_EQ(std::vector<uint32_t>(m.block, m.block + 3), (std::vector<uint32_t>{128, 1, 1}));
  EXPECT_EQ(m.shared_bytes, 512u);
  EXPECT_EQ(by_name.at("big_param").params, big_args.bytes());
  EXPECT_EQ(by_name.at("big_param").params.size(), big_layout.back().offset + 8u);
  EXPECT_TRUE(by_name.at("no_params").params.empty());

  // The launch log: one JSON line per launch, in each stream's order.
  std::ifstream log(launch_log_);
  std::map<std::string, nlohmann::json> lines;
  for (std::string line; std::getline(log, line);) {
    auto j = nlohmann::json::parse(line);
    lines[j["kernel"]] = j;
  }
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines["mixed"]["params"], hex(mixed_args.bytes()));
  EXPECT_EQ(lines["mixed"]["grid"], nlohmann::json({4, 2, 1}));
  EXPECT_EQ(lines["big_param"]["block"], nlohmann::json({32, 4, 2}));
  EXPECT_EQ(lines["big_param"]["params"], hex(big_args.bytes()));
  EXPECT_EQ(lines["no_params"]["shared"], 0);
  EXPECT_EQ(client_stats(run_dir_, c)["launches"], 3);
}

TEST_F(KernelTest, BadKernelCommandsFailOnlyTheirClient) {
  start_server();
  TestClient bad(run_dir_, "bad"), good(run_dir_, "good");
  ASSERT_TRUE(bad.ok() && good.ok());
  const auto& f = test_fatbin();

  // Bytes that do not match the digest: rejected, nothing cached.
  ipc::ModuleDigest wrong = f.digest;
  wrong[3] ^= 0x40;
  const auto wrong_cmd = module_cmd(1, 0, wrong, f.bytes.size());
  ASSERT_EQ(bad.call(Opcode::ModuleQuery, wrong_cmd).value[0], 0u);
  upload(bad, 1, f.bytes);
  EXPECT_EQ(bad.call(Opcode::ModuleLoad, wrong_cmd).status, Status::InvalidValue);
  EXPECT_EQ(stats(run_dir_)["modules"]["cached"], 0);
  // Garbage with its own digest: not a fat binary.
  std::vector<std::byte> junk(5000, std::byte{0x5a});
  const auto junk_cmd = module_cmd(2, 0, ipc::module_digest(junk), junk.size());
  ASSERT_EQ(bad.call(Opcode::ModuleQuery, junk_cmd).value[0], 0u);
  upload(bad, 2, junk);
  EXPECT_EQ(bad.call(Opcode::ModuleLoad, junk_cmd).status, Status::InvalidKernelImage);
  // Pieces out of order break the upload; a staging slot out of range is refused.
  const auto cmd = module_cmd(3, 0, f.digest, f.bytes.size());
  ASSERT_EQ(bad.call(Opcode::ModuleQuery, cmd).value[0], 0u);
  bad.view().staging_state(0).store(static_cast<uint32_t>(ipc::StagingState::InFlight));
  bad.post(Opcode::ModuleData, ipc::ModuleDataCmd{3, 4096, 100, 0, 0});
  ASSERT_TRUE(wait_slot_free(bad, 0)) << "a refused piece still gives its slot back";
  bad.post(Opcode::ModuleData, ipc::ModuleDataCmd{3, 0, 100, 1000, 0});
  EXPECT_EQ(bad.call(Opcode::ModuleLoad, cmd).status, Status::InvalidResourceHandle);
  EXPECT_EQ(bad.take_deferred(), static_cast<int32_t>(Status::InvalidValue));
  // Sizes and flags out of range.
  EXPECT_EQ(bad.call(Opcode::ModuleQuery, module_cmd(4, 0, f.digest, ipc::kMaxModuleBytes + 1)).status, Status::InvalidValue);
  EXPECT_EQ(bad.call(Opcode::ModuleQuery, module_cmd(4, 0x80, f.digest, f.bytes.size())).status, Status::InvalidValue);

  ASSERT_EQ(load_module(bad, 5).status, Status::Success);
  EXPECT_EQ(kernel_get(bad, 1, 5, "no_such_kernel").status, Status::InvalidDeviceFunction);
  EXPECT_EQ(kernel_get(bad, 1, 77, "mixed").status, Status::InvalidResourceHandle);
  // A name over kMaxNameBytes, and a name_bytes that disagrees with the record's size.
  const std::string long_name(ipc::kMaxNameBytes + 1, 'k');
  EXPECT_EQ(kernel_get(bad, 1, 5, long_name).status, Status::InvalidValue);
  ipc::KernelGetCmd lying{1, 5, 5, 0};
  auto rec = with_trailing(lying, "mixed_and_more", 14);
  EXPECT_EQ(call_record(bad, Opcode::KernelGet, rec).status, Status::InvalidValue);

  const Reply got = kernel_get(bad, 1, 5, "mixed");
  ASSERT_EQ(got.status, Status::Success);
  EXPECT_EQ(kernel_get(bad, 1, 5, "mixed").status, Status::InvalidResourceHandle) << "kernel id in use";
  const auto bytes = static_cast<uint32_t>(got.value[1]);
  std::vector<uint8_t> params(bytes + 8);
  EXPECT_EQ(call_launch(bad, launch_cmd(1, {1, 1, 1}, {1, 1, 1}, 0, bytes - 1), params.data(), bytes - 1).status,
            Status::InvalidValue);
  EXPECT_EQ(call_launch(bad, launch_cmd(1, {1, 1, 1}, {1, 1, 1}, 0, bytes + 8), params.data(), bytes + 8).status,
            Status::InvalidValue);
  EXPECT_EQ(call_launch(bad, launch_cmd(2, {1, 1, 1}, {1, 1, 1}, 0, bytes), params.data(), bytes).status,
            Status::InvalidResourceHandle);
  EXPECT_EQ(call_launch(bad, launch_cmd(1, {0, 1, 1}, {1, 1, 1}, 0, bytes), params.data(), bytes).status,
            Status::InvalidConfiguration);
  EXPECT_EQ(call_launch(bad, launch_cmd(1, {1, 1, 1}, {1024, 2, 1}, 0, bytes), params.data(), bytes).status,
            Status::InvalidConfiguration);
  EXPECT_EQ(call_launch(bad, launch_cmd(1, {1, 1, 1}, {1, 1, 1}, 100000, bytes), params.data(), bytes).status,
            Status::InvalidValue) << "more dynamic shared memory than the kernel allows";
  // param_bytes over kMaxParamBytes (the record carries them all).
  std::vector<uint8_t> huge(ipc::kMaxParamBytes + 4);
  EXPECT_EQ(call_launch(bad, launch_cmd(1, {1, 1, 1}, {1, 1, 1}, 0, static_cast<uint32_t>(huge.size())), huge.data(),
                        huge.size())
                .status,
            Status::InvalidValue);
  // One-way: the error is deferred to the next synchronising call.
  post_launch(bad, launch_cmd(1, {1, 1, 1}, {1, 1, 1}, 0, bytes - 1), std::vector<uint8_t>(bytes - 1));
  EXPECT_EQ(bad.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(bad.take_deferred(), static_cast<int32_t>(Status::InvalidValue));
  EXPECT_EQ(bad.call(Opcode::KernelParams, ipc::KernelParamsCmd{1, 9, 0}).status, Status::InvalidValue);
  EXPECT_EQ(bad.call(Opcode::KernelParams, ipc::KernelParamsCmd{8, 0, 0}).status, Status::InvalidResourceHandle);
  EXPECT_EQ(server::sim_launch_records(*backend_).size(), 0u) << "no bad launch reached the backend";

  // The other client never noticed.
  ASSERT_EQ(load_module(good, 5).status, Status::Success);
  ASSERT_EQ(kernel_get(good, 1, 5, "no_params").status, Status::Success);
  post_launch(good, launch_cmd(1, {1, 1, 1}, {1, 1, 1}, 0, 0), {});
  EXPECT_EQ(good.sync_device(), Status::Success);
  EXPECT_EQ(good.take_deferred(), 0);
  EXPECT_EQ(server::sim_launch_records(*backend_).size(), 1u);
}

// FUNNEL_LAUNCH_BATCH (doc/design/overview.md, "Launch batches"): launches of one stream
// that reach the worker together go to the backend together (the sim records each launch's
// batch); a launch on another stream, or any other command, ends a batch; every launch still
// runs once, in its stream's order, with its own parameters.
class LaunchBatchTest : public KernelTest {
 protected:
  // Module 1 and kernel 10 ("mixed") on `c`; 10 launches' worth of setup.
  void prepare(TestClient& c) {
    ASSERT_EQ(load_module(c, 1).status, Status::Success);
    const Reply got = kernel_get(c, 10, 1, "mixed");
    ASSERT_EQ(got.status, Status::Success);
    layout_ = layout_of(c, 10, got);
    bytes_ = static_cast<uint32_t>(got.value[1]);
  }
  // A launch of "mixed" whose int parameter is `index`.
  void launch(TestClient& c, int index, uint64_t stream, uint32_t shared = 0) {
    ParamBuffer b(layout_, bytes_);
    b.arg('a').arg(short{1}).arg(index).arg(0.5).arg(static_cast<int*>(nullptr));
    b.arg(server_test::Padded{'p', 1.5, 2}).arg(server_test::Aligned8{3, 4}).arg('z');
    post_launch(c, launch_cmd(10, {2, 1, 1}, {64, 1, 1}, shared, bytes_), b.bytes(), stream);
  }
  // (index, batch) of every launch the sim ran, in the order it ran them.
  std::vector<std::pair<int, uint32_t>> ran() {
    std::vector<std::pair<int, uint32_t>> out;
    for (const auto& r : server::sim_launch_records(*backend_)) {
      int index = 0;
      std::memcpy(&index, r.params.data() + layout_.at(2).offset, sizeof index);
      out.emplace_back(index, r.batch);
    }
    return out;
  }
  // The launches of indices [first, last) ran in this order, each in a batch of `batch`.
  static void expect_run(const std::vector<std::pair<int, uint32_t>>& ran, int first, int last,
                         const std::vector<uint32_t>& batches) {
    std::vector<std::pair<int, uint32_t>> want, got;
    for (int i = first; i < last; ++i) want.emplace_back(i, batches.at(static_cast<size_t>(i - first)));
    for (const auto& r : ran)
      if (r.first >= first && r.first < last) got.push_back(r);
    EXPECT_EQ(got, want);
  }
  std::vector<ParamLayout> layout_;
  uint32_t bytes_ = 0;
};

TEST_F(LaunchBatchTest, LaunchesQueuedTogetherOnAStreamGoOutTogether) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  prepare(c);
  c.create_stream(3);
  c.hold();
  for (int i = 0; i < 10; ++i) launch(c, i, 3);
  launch(c, 100, 0);  // another stream ends the batch
  for (int i = 10; i < 15; ++i) launch(c, i, 3);
  c.create_event(7);  // so does any other command
  for (int i = 20; i < 23; ++i) launch(c, i, 3);
  c.release();
  ASSERT_EQ(c.sync_device(), Status::Success);
  EXPECT_EQ(c.take_deferred(), 0);
  const auto r = ran();
  EXPECT_EQ(r.size(), 19u);
  expect_run(r, 0, 10, std::vector<uint32_t>(10, 10));
  expect_run(r, 100, 101, {0});  // alone: the next launch was on another stream
  expect_run(r, 10, 15, std::vector<uint32_t>(5, 5));
  expect_run(r, 20, 23, std::vector<uint32_t>(3, 3));

  // A launch the worker finds alone in the ring goes at once, in no batch.
  launch(c, 30, 3);
  ASSERT_EQ(c.sync_device(), Status::Success);
  expect_run(ran(), 30, 31, {0});
}

TEST_F(LaunchBatchTest, ABatchHoldsAtMostTheConfiguredLaunchesAndNoneWhenOff) {
  for (uint32_t limit : {4u, 1u, 0u}) {
    SCOPED_TRACE("launch_batch " + std::to_string(limit));
    auto o = options();
    o.launch_batch = limit;
    start_server(o);
    {
      TestClient c(run_dir_);
      ASSERT_TRUE(c.ok());
      prepare(c);
      c.hold();
      for (int i = 0; i < 10; ++i) launch(c, i, 0);
      c.release();
      ASSERT_EQ(c.sync_device(), Status::Success);
      EXPECT_EQ(c.take_deferred(), 0);
      if (limit == 4)
        expect_run(ran(), 0, 10, {4, 4, 4, 4, 4, 4, 4, 4, 2, 2});
      else
        expect_run(ran(), 0, 10, std::vector<uint32_t>(10, 0));
      c.detach();
    }
    stop_server();
  }
}

TEST_F(LaunchBatchTest, ALaunchTheBackendRefusesInABatchFailsAloneAndTheRestRun) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  prepare(c);
  c.hold();
  for (int i = 0; i < 3; ++i) launch(c, i, 0);
  launch(c, 3, 0, 1u << 30);  // more dynamic shared memory than a block may have
  for (int i = 4; i < 6; ++i) launch(c, i, 0);
  c.release();
  ASSERT_EQ(c.sync_device(), Status::Success);
  EXPECT_EQ(c.take_deferred(), static_cast<int32_t>(Status::InvalidValue)) << "the refused launch's own error";
  // The backend ran the batch up to the refused launch; the worker then launched the rest
  // one by one, as if never held.
  expect_run(ran(), 0, 3, {6, 6, 6});
  expect_run(ran(), 4, 6, {0, 0});
  EXPECT_EQ(ran().size(), 5u);
}

TEST_F(KernelTest, SymbolsAreCopyTargetsOfTheirClientOnly) {
  start_server();
  TestClient a(run_dir_, "a"), b(run_dir_, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(load_module(a, 1, ipc::kModuleHasVariables).status, Status::Success);
  ASSERT_EQ(load_module(b, 1, ipc::kModuleHasVariables).status, Status::Success);
  auto symbol = [](TestClient& c, uint64_t module, const std::string& name) {
    const auto rec = with_trailing(ipc::SymbolGetCmd{module, static_cast<uint32_t>(name.size()), 0}, name.data(), name.size());
    return call_record(c, Opcode::SymbolGet, rec);
  };
  const Reply counter = symbol(a, 1, "server_counter");
  ASSERT_EQ(counter.status, Status::Success);
  EXPECT_NE(counter.value[0], 0u);
  EXPECT_EQ(counter.value[1], 16 * sizeof(int));
  const uint64_t addr = counter.value[0];

  // Copies into and out of the variable, as cudaMemcpyToSymbol/FromSymbol.
  std::array<int, 16> in{}, out{};
  for (int i = 0; i < 16; ++i) in[static_cast<size_t>(i)] = i * i - 3;
  a.h2d(addr, in.data(), sizeof in);
  a.d2h(out.data(), addr, sizeof out);
  EXPECT_EQ(in, out);
  a.post(Opcode::Memset, ipc::MemsetCmd{addr + 8, 8, 8, 1, 0, 0});
  a.d2h(out.data(), addr, sizeof out);
  EXPECT_EQ(out[2], 0);
  EXPECT_EQ(out[3], 0);
  EXPECT_EQ(out[4], in[4]);
  // A __constant__ variable starts with its initializer.
  const Reply table = symbol(a, 1, "server_table");
  ASSERT_EQ(table.status, Status::Success);
  EXPECT_EQ(table.value[1], 32 * sizeof(float));
  std::array<float, 4> init{};
  a.d2h(init.data(), table.value[0], sizeof init);
  EXPECT_EQ(init, (std::array<float, 4>{0.5f, 1.5f, 2.5f, 3.5f}));

  // Past the end of the variable: rejected.
  ipc::CopyCmd cp{};
  cp.dst = {ipc::MemSpace::Device, 0, 0, addr + sizeof in - 4};
  cp.src = {ipc::MemSpace::Staging, 0, 0, 0};
  cp.width = cp.dst_pitch = cp.src_pitch = 8;
  cp.height = 1;
  a.view().staging_state(0).store(static_cast<uint32_t>(ipc::StagingState::InFlight));
  EXPECT_EQ(a.call(Opcode::Copy, cp).status, Status::InvalidValue);
  ASSERT_TRUE(wait_slot_free(a, 0));
  EXPECT_EQ(symbol(a, 1, "no_such_variable").status, Status::SymbolNotFound);
  EXPECT_EQ(symbol(a, 2, "server_counter").status, Status::InvalidResourceHandle);

  // Each client has its own variables; another client's are not its copy targets.
  const Reply theirs = symbol(b, 1, "server_counter");
  ASSERT_EQ(theirs.status, Status::Success);
  EXPECT_NE(theirs.value[0], addr);
  b.d2h(out.data(), theirs.value[0], sizeof out);
  EXPECT_EQ(out, (std::array<int, 16>{})) << "b's copy is untouched by a's writes";
  cp.dst.address = theirs.value[0];
  cp.width = cp.dst_pitch = cp.src_pitch = 4;
  a.view().staging_state(0).store(static_cast<uint32_t>(ipc::StagingState::InFlight));
  EXPECT_EQ(a.call(Opcode::Copy, cp).status, Status::InvalidValue);

  // Unloaded: the range is no longer a copy target.
  a.post(Opcode::ModuleUnload, module_cmd(1, ipc::kModuleHasVariables, test_fatbin().digest, test_fatbin().bytes.size()));
  EXPECT_EQ(a.call(Opcode::Memset, ipc::MemsetCmd{addr, 4, 4, 1, 0, 0}).status, Status::InvalidValue);
  EXPECT_EQ(stats(run_dir_)["totals"]["allocations"], 0) << "symbols are not allocations";
}

TEST_F(KernelTest, FunctionAttributesAndOccupancy) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(load_module(c, 1).status, Status::Success);
  const Reply got = kernel_get(c, 1, 1, "mixed");
  ASSERT_EQ(got.status, Status::Success);
  const auto& mixed = test_fatbin().kernels.at("mixed");

  Reply r = c.call(Opcode::FuncGetAttributes, ipc::KernelCmd{1});
  ASSERT_EQ(r.status, Status::Success);
  ipc::FuncAttributes a = ipc::unpack_func_attributes(r.value);
  EXPECT_EQ(a.num_regs, mixed.num_regs);
  EXPECT_GT(a.num_regs, 0u);
  EXPECT_EQ(a.shared_size_bytes, mixed.shared_bytes);
  EXPECT_GE(a.shared_size_bytes, 256 * sizeof(int));
  EXPECT_EQ(a.const_size_bytes, 32 * sizeof(float));
  EXPECT_EQ(a.binary_version, 90u);
  EXPECT_GT(a.max_threads_per_block, 0u);
  EXPECT_LE(a.max_threads_per_block, 1024u);
  EXPECT_EQ(a.max_dynamic_shared_size_bytes, 49152u - a.shared_size_bytes);

  // Opting in to more dynamic shared memory makes a larger launch valid.
  std::vector<uint8_t> params(got.value[1]);
  const auto bytes = static_cast<uint32_t>(params.size());
  EXPECT_EQ(call_launch(c, launch_cmd(1, {1, 1, 1}, {32, 1, 1}, 100000, bytes), params.data(), bytes).status,
            Status::InvalidValue);
  c.post(Opcode::FuncSetAttribute, ipc::FuncSetAttributeCmd{1, 8, 100000});
  r = c.call(Opcode::FuncGetAttributes, ipc::KernelCmd{1});
  EXPECT_EQ(ipc::unpack_func_attributes(r.value).max_dynamic_shared_size_bytes, 100000u);
  EXPECT_EQ(call_launch(c, launch_cmd(1, {1, 1, 1}, {32, 1, 1}, 100000, bytes), params.data(), bytes).status,
            Status::Success);
  c.post(Opcode::FuncSetAttribute, ipc::FuncSetAttributeCmd{1, 8, 300000});
  c.post(Opcode::FuncSetAttribute, ipc::FuncSetAttributeCmd{9, 8, 1000});
  EXPECT_EQ(c.call(Opcode::Fence).status, Status::Success);
  EXPECT_EQ(c.take_deferred(), static_cast<int32_t>(Status::InvalidValue));
  EXPECT_EQ(c.call(Opcode::FuncSetAttribute, ipc::FuncSetAttributeCmd{9, 8, 1000}).status, Status::InvalidResourceHandle);
  EXPECT_EQ(c.call(Opcode::FuncSetAttribute, ipc::FuncSetAttributeCmd{1, 12345, 1}).status, Status::InvalidValue);

  auto occupancy = [&](uint32_t block, uint64_t shared) {
    return c.call(Opcode::Occupancy, ipc::OccupancyCmd{1, block, 0, shared});
  };
  r = occupancy(128, 0);
  ASSERT_EQ(r.status, Status::Success);
  EXPECT_GE(r.value[0], 1u);
  EXPECT_LE(r.value[0], 16u);  // 2048 threads per multiprocessor
  const uint64_t small = r.value[0];
  EXPECT_LE(occupancy(1024, 0).value[0], 2u);
  EXPECT_EQ(occupancy(2048, 0).value[0], 0u) << "over the block limit";
  r = occupancy(128, 200000);
  EXPECT_EQ(r.value[0], 1u) << "shared memory leaves room for one block";
  EXPECT_LE(r.value[0], small);
  EXPECT_EQ(occupancy(0, 0).status, Status::InvalidValue);
  EXPECT_EQ(c.call(Opcode::Occupancy, ipc::OccupancyCmd{1, 128, 0, 0}, 0, 7).status, Status::InvalidDevice);

  // cudaOccupancyAvailableDynamicSMemPerBlock: fewer blocks per multiprocessor leave more.
  auto available = [&](uint32_t block, uint64_t blocks) {
    return c.call(Opcode::OccupancyDynamicSmem, ipc::OccupancyCmd{1, block, 0, blocks});
  };
  r = available(256, 1);
  ASSERT_EQ(r.status, Status::Success);
  const uint64_t one = r.value[0];
  r = available(256, 4);
  ASSERT_EQ(r.status, Status::Success);
  EXPECT_GT(one, r.value[0]);
  EXPECT_GT(r.value[0], 0u);
  EXPECT_LE(one + a.shared_size_bytes, 232448u);
  EXPECT_EQ(available(256, 0).status, Status::InvalidValue);
  EXPECT_EQ(available(0, 1).status, Status::InvalidValue);

  // cudaOccupancyMaxActiveClusters: larger clusters, fewer of them; parameters never follow.
  auto clusters = [&](uint32_t width) {
    ipc::LaunchCmd q = launch_cmd(1, {width * 8, 1, 1}, {128, 1, 1}, 0, 0);
    q.cluster[0] = width;
    q.cluster[1] = q.cluster[2] = 1;
    return c.call(Opcode::MaxActiveClusters, q);
  };
  r = clusters(2);
  ASSERT_EQ(r.status, Status::Success);
  const uint64_t pairs = r.value[0];
  r = clusters(8);
  ASSERT_EQ(r.status, Status::Success);
  EXPECT_GT(pairs, r.value[0]);
  EXPECT_GT(r.value[0], 0u);
  EXPECT_EQ(c.call(Opcode::MaxActiveClusters, launch_cmd(1, {8, 1, 1}, {128, 1, 1}, 0, 4)).status,
            Status::InvalidValue);
  EXPECT_EQ(c.call(Opcode::MaxActiveClusters, launch_cmd(77, {8, 1, 1}, {128, 1, 1}, 0, 0)).status,
            Status::InvalidResourceHandle);
}

TEST_F(KernelTest, HostFunctionHoldsItsStreamUntilTheClientIsDone) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  const uint64_t dev = c.alloc(4096);
  c.create_stream(5);
  auto& reached = c.view().event_state(10);
  auto& done = c.view().event_state(11);
  c.post(Opcode::HostFunc, ipc::HostFuncCmd{10, 11, 7, 0}, 5);
  c.post(Opcode::Memset, ipc::MemsetCmd{dev, 4096, 4096, 1, 0x33, 0}, 5);
  ASSERT_TRUE(eventually([&] { return reached.load() == 7; })) << "the stream got to the host function";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(c.on_stream(Opcode::StreamQuery, 5).status, Status::NotReady) << "held until done is stored";
  done.store(7);
  EXPECT_EQ(c.on_stream(Opcode::StreamSynchronize, 5).status, Status::Success);
  std::array<uint8_t, 16> back{};
  c.d2h(back.data(), dev, back.size());
  EXPECT_EQ(back[0], 0x33);

  const uint32_t slots = c.view().header().event_slots;
  EXPECT_EQ(c.call(Opcode::HostFunc, ipc::HostFuncCmd{slots, 1, 1, 0}).status, Status::InvalidValue);
  EXPECT_EQ(c.call(Opcode::HostFunc, ipc::HostFuncCmd{1, slots, 1, 0}).status, Status::InvalidValue);
  EXPECT_EQ(c.call(Opcode::HostFunc, ipc::HostFuncCmd{1, 2, 1, 0}, 99).status, Status::InvalidResourceHandle);
  EXPECT_EQ(c.take_deferred(), 0);
}

// A worker on its client's own core (Completion::worker_on_client_cpus) naps rather than
// sleeps for kNapWindow after its last command: a kernel launch does not wake it (each wake
// took the rank's core at once), and it still reads the launch when the nap ends; any other
// record wakes it.  Without the flag it sleeps as before.
TEST_F(KernelTest, AWorkerOnItsClientsCoreNapsThroughLaunches) {
  auto o = options();
  o.worker_threads = 0;  // a thread of its own (a pooled thread serves several clients, on no client's core)
  start_server(o);
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(load_module(c, 1).status, Status::Success);
  ASSERT_EQ(kernel_get(c, 2, 1, "no_params").status, Status::Success);
  auto& ctl = c.view().control();
  ASSERT_TRUE(eventually([&] { return ctl.consumer_sleeping.load() == ipc::kConsumerAsleep; }))
      << "an idle worker off its client's core sleeps";
  c.view().completion().worker_on_client_cpus.store(1);
  ASSERT_EQ(c.call(Opcode::Fence).status, Status::Success);  // wakes it; it naps from now on
  ASSERT_TRUE(eventually([&] { return ctl.consumer_sleeping.load() == ipc::kConsumerNapping; }))
      << "the worker did not nap after a command";
  const uint32_t bells = ctl.doorbell.load();
  for (int i = 0; i < 3; ++i) post_launch(c, launch_cmd(2, {1, 1, 1}, {1, 1, 1}, 0, 0), {});
  EXPECT_EQ(ctl.doorbell.load(), bells) << "a launch rang the doorbell of a napping worker";
  EXPECT_TRUE(eventually([&] { return ctl.head.load() == ctl.tail.load(); }))
      << "the napping worker never read the launches";
  ASSERT_TRUE(eventually([&] { return ctl.consumer_sleeping.load() == ipc::kConsumerNapping; }));
  const uint32_t bells_then = ctl.doorbell.load();
  EXPECT_EQ(c.sync_device(), Status::Success);
  EXPECT_NE(ctl.doorbell.load(), bells_then) << "a synchronize did not wake the napping worker";
  EXPECT_EQ(c.take_deferred(), 0);
}

// A synchronize waits for the work queued before it only, as CUDA's does: work queued on
// the stream after it (by another host thread of the client) must not hold its answer.
// Host functions hold the stream where the test wants it: the first until its done word
// (slot 21) is stored, the second (queued after the synchronize) until slot 23's is.
TEST_F(KernelTest, ASynchronizeDoesNotWaitForWorkQueuedAfterIt) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  c.create_stream(5);
  uint32_t gen = 0;
  for (const Opcode op : {Opcode::StreamSynchronize, Opcode::DeviceSynchronize}) {
    SCOPED_TRACE(op == Opcode::StreamSynchronize ? "StreamSynchronize" : "DeviceSynchronize");
    const uint32_t first = ++gen, second = ++gen;
    auto& reached1 = c.view().event_state(20);
    auto& reached2 = c.view().event_state(22);
    c.post(Opcode::HostFunc, ipc::HostFuncCmd{20, 21, first, 0}, 5);
    ASSERT_TRUE(eventually([&] { return reached1.load() == first; }));
    const uint32_t slot = c.next_slot();
    const uint64_t seq = c.send(op, nullptr, 0, slot, 5);
    c.post(Opcode::HostFunc, ipc::HostFuncCmd{22, 23, second, 0}, 5);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the worker has read both
    EXPECT_EQ(c.wait(slot, seq, std::chrono::milliseconds(50)).status, Status::Timeout)
        << "answered before the work queued before it was done";
    c.view().event_state(21).store(first);
    EXPECT_EQ(c.wait(slot, seq, std::chrono::seconds(5)).status, Status::Success)
        << "the synchronize waited for the host function queued after it";
    ASSERT_TRUE(eventually([&] { return reached2.load() == second; }));
    EXPECT_EQ(c.on_stream(Opcode::StreamQuery, 5).status, Status::NotReady) << "the second one still holds it";
    c.view().event_state(23).store(second);
    EXPECT_EQ(c.on_stream(Opcode::StreamSynchronize, 5).status, Status::Success);
  }
  EXPECT_EQ(c.take_deferred(), 0);
}

TEST_F(KernelTest, ClientLeavingWithAHeldStreamDoesNotHangTheServer) {
  start_server();
  {
    TestClient c(run_dir_, "leaves");
    ASSERT_TRUE(c.ok());
    c.create_stream(5, ipc::kStreamNonBlocking);  // the legacy stream must not wait for it
    c.post(Opcode::HostFunc, ipc::HostFuncCmd{0, 1, 3, 0}, 5);
    c.post(Opcode::HostFunc, ipc::HostFuncCmd{2, 3, 4, 0});  // the legacy stream too
    ASSERT_TRUE(eventually([&] { return c.view().event_state(0).load() == 3 && c.view().event_state(2).load() == 4; }));
    c.detach();  // without storing either done word
  }
  ASSERT_TRUE(eventually([&] { return stats(run_dir_)["server"]["clients"] == 0; }))
      << "the session was torn down although its streams were held";
  TestClient next(run_dir_);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next.sync_device(), Status::Success);
}

}  // namespace
}  // namespace funnel::test

namespace funnel::test {
namespace {

// FUNNEL_GPU_FRACTION / FUNNEL_GPU_PLACEMENT / FUNNEL_CLIENT_PRIORITY as the hello carries them.
std::function<void(ipc::HelloMsg&)> share(uint32_t bp, ipc::GpuPlacement p = ipc::GpuPlacement::Shared) {
  return [=](ipc::HelloMsg& h) {
    h.gpu_share_bp = bp;
    h.gpu_placement = static_cast<uint32_t>(p);
  };
}

// Launches `no_params` once on the legacy stream of device 0 and returns its record.
std::optional<server::SimLaunchRecord> launch_once(TestClient& c, server::Backend& backend) {
  if (load_module(c, 1).status != Status::Success || kernel_get(c, 2, 1, "no_params").status != Status::Success)
    return std::nullopt;
  const size_t before = server::sim_launch_records(backend).size();
  post_launch(c, launch_cmd(2, {1, 1, 1}, {1, 1, 1}, 0, 0), {});
  if (c.sync_device() != Status::Success) return std::nullopt;
  const auto all = server::sim_launch_records(backend);
  if (all.size() != before + 1) return std::nullopt;
  return all.back();
}

TEST_F(KernelTest, AGpuFractionIsTheSmCountTheClientSeesAndWhereItsKernelsRun) {
  start_server();
  TestClient whole(run_dir_, "whole"), quarter(run_dir_, "quarter", {}, share(2500));
  ASSERT_TRUE(whole.ok() && quarter.ok());
  EXPECT_EQ(whole.view().devices()[0].attributes[ipc::kAttrMultiprocessorCount], 132);
  EXPECT_EQ(quarter.view().devices()[0].attributes[ipc::kAttrMultiprocessorCount], 32) << "25% of 132 SMs, rounded down to groups of 8";
  EXPECT_EQ(quarter.view().devices()[1].attributes[ipc::kAttrMultiprocessorCount], 32);

  auto w = launch_once(whole, *backend_);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->sms, 132u);
  EXPECT_TRUE(w->sm_groups.empty());
  auto q = launch_once(quarter, *backend_);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->sms, 32u);
  EXPECT_EQ(q->sm_groups, (std::vector<uint32_t>{0, 1, 2, 3}));
  // A second quarter lands on the next four groups, not on the first one's.
  TestClient second(run_dir_, "second", {}, share(2500));
  ASSERT_TRUE(second.ok());
  auto s = launch_once(second, *backend_);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->sm_groups, (std::vector<uint32_t>{4, 5, 6, 7}));
  EXPECT_EQ(quarter.take_deferred(), 0);
}

TEST_F(KernelTest, ADisjointClientThatFindsNoFreeSmsFailsItsFirstWorkOnThatGpu) {
  start_server();
  std::vector<std::unique_ptr<TestClient>> held;
  for (int i = 0; i < 2; ++i) {  // 40% of 132 SMs: 6 of the 15 groups each, 3 left
    held.push_back(std::make_unique<TestClient>(run_dir_, "held", std::vector<uint64_t>{},
                                                share(4000, ipc::GpuPlacement::Disjoint)));
    ASSERT_TRUE(held.back()->ok());
    auto r = launch_once(*held.back(), *backend_);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->sm_groups.size(), 6u);
  }
  TestClient late(run_dir_, "late", {}, share(3000, ipc::GpuPlacement::Disjoint));  // 4 groups
  ASSERT_TRUE(late.ok()) << "the attach succeeds: the partition is leased at the first stream";
  ASSERT_EQ(load_module(late, 1).status, Status::Success);
  ASSERT_EQ(kernel_get(late, 2, 1, "no_params").status, Status::Success);
  post_launch(late, launch_cmd(2, {1, 1, 1}, {1, 1, 1}, 0, 0), {});
  late.sync_device();
  EXPECT_EQ(late.take_deferred(), static_cast<int32_t>(Status::DevicesUnavailable));
  // Once a holder leaves, the late client gets SMs.
  held[0]->detach();
  held[0].reset();
  ASSERT_TRUE(eventually([&] { return stats(run_dir_)["server"]["clients"] == 2; }));
  post_launch(late, launch_cmd(2, {1, 1, 1}, {1, 1, 1}, 0, 0), {});
  ASSERT_EQ(late.sync_device(), Status::Success);
  EXPECT_EQ(late.take_deferred(), 0);
  const auto records = server::sim_launch_records(*backend_);
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.back().sms, 32u);
  EXPECT_EQ(records.back().sm_groups.size(), 4u);
}

TEST_F(KernelTest, AHelloWithAFractionAboveTheWholeGpuIsRefused) {
  start_server();
  TestClient bad(run_dir_, "bad", {}, share(10001));
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.attach_reply().status, static_cast<int32_t>(Status::InvalidValue));
  EXPECT_NE(std::string(bad.attach_reply().message).find("above the whole GPU"), std::string::npos);
  TestClient worse(run_dir_, "bad", {}, [](ipc::HelloMsg& h) { h.client_priority = 7; });
  EXPECT_FALSE(worse.ok());
  EXPECT_NE(std::string(worse.attach_reply().message).find("unknown client priority 7"), std::string::npos);
}

}  // namespace
}  // namespace funnel::test
