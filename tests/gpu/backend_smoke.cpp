// Smoke test of the cuda backend alone (no server, no client): compiled by tests/gpu/run.sh
// straight from runtime/server/src/backend/cuda/*.cpp.  On a machine without a driver it checks
// that make_cuda_backend() throws the "no driver" error; with a GPU it exercises every
// Backend call and checks the data.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fstream>
#include <iterator>

#include "funnel/fatbin/fatbin.hpp"
#include "funnel/server/backend.hpp"

using namespace funnel::server;
using funnel::ipc::DeviceRecord;

static int failures = 0;
#define EXPECT(cond)                                                      \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
      ++failures;                                                         \
    }                                                                     \
  } while (0)
#define EXPECT_OK(expr) EXPECT((expr) == Status::Success)

static void* host_alloc(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("mmap");
  return p;
}
static uint64_t addr(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

static Status wait_event(Backend& b, BackendEvent& e) {
  for (;;) {
    Status s = b.query(e);
    if (s != Status::NotReady) return s;
    std::this_thread::yield();
  }
}

// Kernels: load tests/fatbin/kernels.cu (compiled by run.sh with nvcc -fatbin), check
// that the driver's parameter layouts equal funnel::fatbin's (what the sim backend and CI
// rely on), launch one, read a __constant__, attributes, occupancy, and a stream that
// waits for a host word (host functions).
static void kernels(Backend& b, BackendStream& s, const char* fatbin_path, uint8_t* host /* registered */) {
  std::ifstream in(fatbin_path, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT(!raw.empty());
  if (raw.empty()) return;
  const auto bytes = std::as_bytes(std::span(raw.data(), raw.size()));
  std::unique_ptr<BackendModule> m;
  EXPECT_OK(b.module_load(bytes, m));
  if (!m) return;
  std::unique_ptr<BackendModule> bad;
  std::vector<std::byte> junk(4096, std::byte{0x5a});
  EXPECT(b.module_load(junk, bad) != Status::Success);

  const funnel::fatbin::FatbinKernels parsed = funnel::fatbin::kernels_of_fatbin(bytes);
  int compared = 0, mismatched = 0;
  for (const auto& k : parsed.kernels) {
    if (k.sm_arch != 90) continue;
    std::unique_ptr<BackendKernel> bk;
    std::vector<ParamLayout> layout;
    uint32_t param_bytes = 0;
    if (b.kernel_get(*m, k.name, bk, layout, param_bytes) != Status::Success) {
      std::printf("FAIL kernel_get %s\n", k.name.c_str());
      ++failures;
      continue;
    }
    bool same = layout.size() == k.params.size();
    for (size_t i = 0; same && i < layout.size(); ++i)
      same = layout[i].offset == k.params[i].offset && layout[i].size == k.params[i].size;
    ++compared;
    if (!same) {
      ++mismatched;
      std::printf("layout mismatch %s: driver", k.name.c_str());
      for (const auto& l : layout) std::printf(" %u+%u", l.offset, l.size);
      std::printf(" fatbin");
      for (const auto& l : k.params) std::printf(" %u+%u", l.offset, l.size);
      std::printf("\n");
    }
  }
  std::printf("kernel layouts: %d compared with funnel::fatbin, %d mismatched\n", compared, mismatched);
  EXPECT(compared >= 8 && mismatched == 0);

  std::unique_ptr<BackendKernel> none;
  std::vector<ParamLayout> layout;
  uint32_t param_bytes = 0;
  EXPECT(b.kernel_get(*m, "no_such_kernel", none, layout, param_bytes) == Status::InvalidDeviceFunction);

  // scalars(char c, short s, int i, long long ll, float f, double d, int* out): *out = sum
  std::unique_ptr<BackendKernel> k;
  EXPECT_OK(b.kernel_get(*m, "scalars", k, layout, param_bytes));
  EXPECT(layout.size() == 7);
  if (!k || layout.size() != 7) return;
  DeviceAddress out = 0;
  EXPECT_OK(b.mem_alloc(s.device(), 64, out));
  std::vector<std::byte> buf(param_bytes);
  auto put = [&](size_t i, const void* v, size_t n) {
    EXPECT(layout[i].size == n);
    std::memcpy(buf.data() + layout[i].offset, v, n);
  };
  const char c = 3;
  const short sh = 40;
  const int i = 500;
  const long long ll = 6000;
  const float f = 70000.0f;
  const double d = 800000.0;
  put(0, &c, 1);
  put(1, &sh, 2);
  put(2, &i, 4);
  put(3, &ll, 8);
  put(4, &f, 4);
  put(5, &d, 8);
  put(6, &out, 8);
  LaunchDesc l{};
  l.grid[0] = l.grid[1] = l.grid[2] = 1;
  l.block[0] = l.block[1] = l.block[2] = 1;
  EXPECT_OK(b.launch(s, *k, l, buf));
  EXPECT_OK(b.copy(s, CopyDesc{{false, addr(host)}, {true, out}, 4, 1, 4, 4}));
  EXPECT_OK(b.synchronize(s));
  int result = 0;
  std::memcpy(&result, host, 4);
  std::printf("launch scalars -> %d (expect 876543)\n", result);
  EXPECT(result == 876543);

  // launch cost (one-way, as the worker pays it)
  {
    std::vector<double> t;
    // in bursts of 50 with the stream drained in between, so the driver's queue never fills
    for (int it = 0; it < 2000; ++it) {
      if (it % 50 == 0) EXPECT_OK(b.synchronize(s));
      const auto a = std::chrono::steady_clock::now();
      EXPECT_OK(b.launch(s, *k, l, buf));
      t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
    }
    EXPECT_OK(b.synchronize(s));
    std::sort(t.begin(), t.end());
    std::printf("timing: cuLaunchKernelEx %.3f us\n", t[t.size() / 2]);
  }

  // a __constant__ global: fatbin_table = {1..8}
  DeviceAddress table = 0;
  uint64_t table_size = 0;
  bool table_managed = true;
  EXPECT_OK(b.global_get(*m, s.device(), "fatbin_table", table, table_size, table_managed));
  EXPECT(!table_managed);
  EXPECT(table_size == 8 * sizeof(float));
  EXPECT_OK(b.copy(s, CopyDesc{{false, addr(host)}, {true, table}, 32, 1, 32, 32}));
  EXPECT_OK(b.synchronize(s));
  float tv[8];
  std::memcpy(tv, host, sizeof tv);
  EXPECT(tv[0] == 1.0f && tv[7] == 8.0f);
  EXPECT(b.global_get(*m, s.device(), "no_such_global", table, table_size, table_managed) != Status::Success);

  funnel::ipc::FuncAttributes fa;
  EXPECT_OK(b.func_attributes(*k, s.device(), fa));
  std::printf("scalars: regs=%u maxThreads=%u ptx=%u binary=%u\n", fa.num_regs, fa.max_threads_per_block,
              fa.ptx_version, fa.binary_version);
  EXPECT(fa.max_threads_per_block > 0 && fa.binary_version == 90);
  EXPECT_OK(b.func_set_attribute(*k, s.device(), 8 /* MaxDynamicSharedMemorySize */, 64 * 1024));
  EXPECT_OK(b.func_attributes(*k, s.device(), fa));
  EXPECT(fa.max_dynamic_shared_size_bytes == 64 * 1024);
  EXPECT(b.func_set_attribute(*k, s.device(), 3, 1) == Status::InvalidValue);
  int blocks = 0;
  EXPECT_OK(b.occupancy(*k, s.device(), 256, 0, 0, blocks));
  std::printf("occupancy(256 threads): %d blocks/SM\n", blocks);
  EXPECT(blocks > 0);

  // wait_value: the stream holds until the host stores the word (host functions)
  auto* reached = reinterpret_cast<std::atomic<uint32_t>*>(host + 256);
  auto* done = reinterpret_cast<std::atomic<uint32_t>*>(host + 512);
  reached->store(0);
  done->store(0);
  EXPECT_OK(b.write_value(s, *reached, 7));
  EXPECT_OK(b.wait_value(s, *done, 7));
  EXPECT_OK(b.launch(s, *k, l, buf));
  const auto t0 = std::chrono::steady_clock::now();
  while (reached->load() != 7 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
  }
  EXPECT(reached->load() == 7u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT(b.query(s) == Status::NotReady);  // still held by the host word
  done->store(7);
  EXPECT_OK(b.synchronize(s));
  EXPECT_OK(b.mem_free(s.device(), out));
  k.reset();
  m.reset();
}

int main(int argc, char** argv) {
  const bool expect_no_driver = argc > 1 && std::strcmp(argv[1], "--expect-no-driver") == 0;
  const char* fatbin_path = std::getenv("FUNNEL_SMOKE_FATBIN");
  std::unique_ptr<Backend> b;
  try {
    b = make_cuda_backend({});
  } catch (const std::exception& e) {
    std::printf("make_cuda_backend threw: %s\n", e.what());
    return expect_no_driver ? 0 : 1;
  }
  if (expect_no_driver) {
    std::printf("FAIL: expected no driver\n");
    return 1;
  }
  try {
    make_cuda_backend({99});
    std::printf("FAIL: ordinal 99 accepted\n");
    ++failures;
  } catch (const std::exception& e) {
    std::printf("bad ordinal -> %s\n", e.what());
  }

  std::printf("devices: %d\n", b->device_count());
  EXPECT(b->device_count() >= 1);
  auto rec = std::make_unique<DeviceRecord>();
  b->describe(0, *rec);
  std::printf("name=%s pci=%s total=%" PRIu64 " ordinal=%d cc=%d.%d sms=%d maxThreadsPerBlock=%d uuid=",
              rec->name, rec->pci_bus_id, rec->total_memory, rec->ordinal, rec->attributes[75], rec->attributes[76],
              rec->attributes[16], rec->attributes[1]);
  for (uint8_t x : rec->uuid) std::printf("%02x", x);
  std::printf("\n");
  EXPECT(rec->attributes[1] == 1024);
  EXPECT(rec->total_memory > (uint64_t{1} << 30));
  int nonzero = 0;
  for (int v : rec->attributes) nonzero += v != 0;
  std::printf("nonzero attributes: %d\n", nonzero);

  uint64_t fr = 0, tot = 0;
  EXPECT_OK(b->mem_get_info(0, fr, tot));
  std::printf("mem_get_info free=%" PRIu64 " total=%" PRIu64 "\n", fr, tot);
  int least = 0, greatest = 0;
  b->priority_range(0, least, greatest);
  std::printf("priority range least=%d greatest=%d\n", least, greatest);

  std::unique_ptr<BackendStream> s, s2;
  EXPECT_OK(b->create_stream(0, greatest, s));
  EXPECT_OK(b->create_stream(0, least, s2));
  std::unique_ptr<BackendEvent> e, t0, t1;
  EXPECT_OK(b->create_event(0, false, e));
  EXPECT_OK(b->create_event(0, true, t0));
  EXPECT_OK(b->create_event(0, true, t1));
  EXPECT_OK(b->query(*e));  // never recorded -> complete

  const size_t n = size_t{64} << 20;
  auto* A = static_cast<uint8_t*>(host_alloc(n));
  auto* B = static_cast<uint8_t*>(host_alloc(n));
  EXPECT_OK(b->host_register(A, n));
  EXPECT_OK(b->host_register(B, n));
  EXPECT(b->host_register(A, n) != Status::Success);  // already registered
  for (size_t i = 0; i < n; ++i) A[i] = static_cast<uint8_t>(i * 7 + 3);

  DeviceAddress d1 = 0, d2 = 0;
  EXPECT_OK(b->mem_alloc(0, n, d1));
  EXPECT_OK(b->mem_alloc(0, n, d2));
  DeviceAddress huge = 0;
  EXPECT(b->mem_alloc(0, uint64_t{1} << 50, huge) == Status::MemoryAllocation);

  // 1-D H2D, D2D, D2H
  EXPECT_OK(b->record(*t0, *s));
  EXPECT_OK(b->copy(*s, CopyDesc{{true, d1}, {false, addr(A)}, n, 1, n, n}));
  EXPECT_OK(b->record(*t1, *s));
  EXPECT_OK(b->memset(*s, d2, n, n, 1, 0xee, 1));
  EXPECT_OK(b->copy(*s, CopyDesc{{true, d2}, {true, d1}, n / 2, 1, 0, 0}));
  EXPECT_OK(b->copy(*s, CopyDesc{{false, addr(B)}, {true, d2}, n, 1, n, n}));
  EXPECT_OK(b->record(*e, *s));
  EXPECT_OK(wait_event(*b, *e));
  EXPECT(std::memcmp(A, B, n / 2) == 0);
  bool tail_ok = true;
  for (size_t i = n / 2; i < n; ++i) tail_ok = tail_ok && B[i] == 0xee;
  EXPECT(tail_ok);
  float ms = 0;
  EXPECT_OK(b->elapsed_ms(*t0, *t1, ms));
  std::printf("H2D 64 MiB pinned: %.3f ms = %.1f GB/s\n", static_cast<double>(ms), static_cast<double>(n) / (static_cast<double>(ms) * 1e6));
  EXPECT(b->elapsed_ms(*e, *t1, ms) != Status::Success);  // e has no timing

  // 2-D: 100 rows of 1000 bytes, host pitch 4096, device pitch 1024, then back to pitch 2048
  std::memset(B, 0, n);
  EXPECT_OK(b->memset(*s2, d1, n, n, 1, 0, 1));
  EXPECT_OK(b->copy(*s2, CopyDesc{{true, d1}, {false, addr(A)}, 1000, 100, 1024, 4096}));
  EXPECT_OK(b->memset(*s2, d1 + 1000, 1024, 24, 100, 0x55, 1));  // 2-D memset of the row gaps
  EXPECT_OK(b->copy(*s2, CopyDesc{{false, addr(B)}, {true, d1}, 1024, 100, 2048, 1024}));
  EXPECT_OK(b->synchronize(*s2));
  EXPECT_OK(b->query(*s2));
  bool ok2d = true;
  for (size_t r = 0; r < 100; ++r) {
    ok2d = ok2d && std::memcmp(B + r * 2048, A + r * 4096, 1000) == 0;
    for (size_t c = 1000; c < 1024; ++c) ok2d = ok2d && B[r * 2048 + c] == 0x55;
    for (size_t c = 1024; c < 2048; ++c) ok2d = ok2d && B[r * 2048 + c] == 0;
  }
  EXPECT(ok2d);

  // 32- and 16-bit elements (cuMemsetD32Async, cuMemsetD2D16Async): 1-D, then 2-D rows of 6
  // elements 32 bytes apart.
  std::memset(B, 0, 4096);
  EXPECT_OK(b->memset(*s2, d1, 4096, 4096, 1, 0, 1));
  EXPECT_OK(b->memset(*s2, d1, 64, 64, 1, 0xcafef00du, 4));
  EXPECT_OK(b->memset(*s2, d1 + 1024, 32, 12, 4, 0xbeef, 2));
  EXPECT_OK(b->copy(*s2, CopyDesc{{false, addr(B)}, {true, d1}, 4096, 1, 4096, 4096}));
  EXPECT_OK(b->synchronize(*s2));
  bool wide = true;
  for (size_t i = 0; i < 16; ++i) {
    uint32_t v = 0;
    std::memcpy(&v, B + 4 * i, 4);
    wide = wide && v == 0xcafef00du;
  }
  for (size_t r = 0; r < 4; ++r)
    for (size_t c = 0; c < 16; c += 2) {
      uint16_t v = 0;
      std::memcpy(&v, B + 1024 + r * 32 + c, 2);
      wide = wide && v == (c < 12 ? 0xbeef : 0);
    }
  EXPECT(wide && B[64] == 0);

  // host to host (1-D and 2-D)
  EXPECT_OK(b->copy(*s, CopyDesc{{false, addr(B)}, {false, addr(A)}, 4096, 1, 4096, 4096}));
  EXPECT_OK(b->synchronize(*s));
  EXPECT(std::memcmp(A, B, 4096) == 0);

  // cross-stream wait: s2 waits for s's event
  EXPECT_OK(b->memset(*s, d2, n, n, 1, 0x11, 1));
  EXPECT_OK(b->record(*e, *s));
  EXPECT_OK(b->wait(*s2, *e));
  EXPECT_OK(b->copy(*s2, CopyDesc{{false, addr(B)}, {true, d2}, n, 1, n, n}));
  EXPECT_OK(b->synchronize(*s2));
  EXPECT(B[0] == 0x11 && B[n - 1] == 0x11);

  // stream-ordered allocation
  DeviceAddress da = 0;
  EXPECT_OK(b->mem_alloc_async(*s, 1 << 20, da));
  EXPECT(da != 0);
  EXPECT_OK(b->memset(*s, da, 1 << 20, 1 << 20, 1, 0x42, 1));
  EXPECT_OK(b->copy(*s, CopyDesc{{false, addr(B)}, {true, da}, 1 << 20, 1, 0, 0}));
  EXPECT_OK(b->mem_free_async(*s, da));
  EXPECT_OK(b->synchronize(*s));
  EXPECT(B[0] == 0x42 && B[(1 << 20) - 1] == 0x42);

  // limits
  uint64_t v = 0;
  EXPECT_OK(b->get_limit(0, Limit::MallocHeapSize, v));
  std::printf("malloc heap limit %" PRIu64 "\n", v);
  EXPECT_OK(b->set_limit(0, Limit::MallocHeapSize, uint64_t{64} << 20));
  EXPECT_OK(b->get_limit(0, Limit::MallocHeapSize, v));
  EXPECT(v == uint64_t{64} << 20);
  EXPECT_OK(b->get_limit(0, Limit::StackSize, v));
  EXPECT_OK(b->get_limit(0, Limit::PrintfFifoSize, v));
  EXPECT(b->get_limit(0, static_cast<Limit>(7), v) == Status::UnsupportedLimit);

  // errors: bad pointer (not sticky), bad device
  EXPECT(b->copy(*s, CopyDesc{{true, 0x10}, {false, addr(A)}, 4096, 1, 0, 0}) != Status::Success);
  EXPECT(b->mem_alloc(5, 16, huge) == Status::InvalidDevice);

  // threads: each its own stream and buffers, concurrently
  std::vector<std::thread> th;
  std::vector<int> thread_ok(8, 0);
  for (int t = 0; t < 8; ++t) {
    th.emplace_back([&, t] {
      std::unique_ptr<BackendStream> ts;
      std::unique_ptr<BackendEvent> te;
      if (b->create_stream(0, 0, ts) != Status::Success || b->create_event(0, false, te) != Status::Success) return;
      const size_t m = 4 << 20;
      uint8_t* src = A + static_cast<size_t>(t) * m;
      uint8_t* dst = B + static_cast<size_t>(t) * m;
      DeviceAddress dd = 0;
      if (b->mem_alloc(0, m, dd) != Status::Success) return;
      bool good = true;
      for (int it = 0; it < 20; ++it) {
        good = good && b->copy(*ts, CopyDesc{{true, dd}, {false, addr(src)}, m, 1, 0, 0}) == Status::Success;
        good = good && b->copy(*ts, CopyDesc{{false, addr(dst)}, {true, dd}, m, 1, 0, 0}) == Status::Success;
        good = good && b->record(*te, *ts) == Status::Success;
        good = good && wait_event(*b, *te) == Status::Success;
        good = good && std::memcmp(src, dst, m) == 0;
      }
      good = good && b->mem_free(0, dd) == Status::Success;
      thread_ok[static_cast<size_t>(t)] = good ? 1 : 0;
    });
  }
  for (auto& x : th) x.join();
  for (int t = 0; t < 8; ++t) EXPECT(thread_ok[static_cast<size_t>(t)] == 1);

  // write_value: the stream stores into registered host memory once it gets there; and
  // what each step of an event round trip costs the server (medians of 2000).
  {
    auto* word = reinterpret_cast<std::atomic<uint32_t>*>(A);
    word->store(0);
    EXPECT_OK(b->write_value(*s, *word, 41));
    EXPECT_OK(b->synchronize(*s));
    EXPECT(word->load() == 41u);
    using C = std::chrono::steady_clock;
    auto med = [](std::vector<double> xs) {
      std::sort(xs.begin(), xs.end());
      return xs[xs.size() / 2];
    };
    std::vector<double> t_rec, t_wv, seen_ev, seen_word;
    for (uint32_t i = 1; i <= 2000; ++i) {
      const auto a0 = C::now();
      EXPECT_OK(b->record(*e, *s));
      const auto a1 = C::now();
      EXPECT_OK(b->write_value(*s, *word, 100 + i));
      const auto a2 = C::now();
      bool ev_done = false, word_done = false;
      double ev_at = 0, word_at = 0;
      while (!ev_done || !word_done) {
        if (!ev_done && b->query(*e) == Status::Success) {
          ev_done = true;
          ev_at = std::chrono::duration<double, std::micro>(C::now() - a0).count();
        }
        if (!word_done && word->load(std::memory_order_acquire) == 100 + i) {
          word_done = true;
          word_at = std::chrono::duration<double, std::micro>(C::now() - a0).count();
        }
      }
      t_rec.push_back(std::chrono::duration<double, std::micro>(a1 - a0).count());
      t_wv.push_back(std::chrono::duration<double, std::micro>(a2 - a1).count());
      seen_ev.push_back(ev_at);
      seen_word.push_back(word_at);
    }
    std::printf("timing: cuEventRecord %.3f us, cuStreamWriteValue32 %.3f us; from record: event done %.3f us, "
                "word stored %.3f us\n",
                med(t_rec), med(t_wv), med(seen_ev), med(seen_word));
  }

  if (fatbin_path != nullptr) {
    kernels(*b, *s, fatbin_path, A);
  } else {
    std::printf("FAIL: FUNNEL_SMOKE_FATBIN not set (run.sh sets it): kernels not tested\n");
    ++failures;
  }

  // A device fault is recovered by restarting the server (doc/design/faults.md): the driver
  // keeps a sticky fault for the whole process (tests/gpu/recovery_probe.cpp), so this
  // backend must never claim an in-process reset.
  EXPECT(!b->resets_in_process());
  EXPECT_OK(b->mem_free(0, d1));
  EXPECT_OK(b->mem_free(0, d2));

  EXPECT_OK(b->host_unregister(A));
  EXPECT_OK(b->host_unregister(B));
  EXPECT(b->host_unregister(B) != Status::Success);
  // destroy a stream and an event after the backend (shared ownership)
  b.reset();
  s.reset();
  e.reset();
  s2.reset();
  t0.reset();
  t1.reset();
  std::printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
