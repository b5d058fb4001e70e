// funnel's client driver (runtime/client/driver) without a server: run against
// build/lib/funnel-driver/libcuda.so.1 (LD_LIBRARY_PATH), linked against the toolkit's stub.
// cuGetProcAddress answers every name and version NVIDIA's runtimes, libraries and frameworks
// looked up on the H100 (driver_lookups.txt, recorded by bench/driver_trace: issue 29, step 1)
// with the right function of funnel's; a function not served yet answers CUDA_ERROR_NOT_SUPPORTED.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "md2.hpp"

namespace {

void* ours(const char* symbol) {
  void* self = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return self != nullptr ? dlsym(self, symbol) : nullptr;
}

void* lookup(const char* name, int version, cuuint64_t flags, CUresult* r = nullptr,
             CUdriverProcAddressQueryResult* status = nullptr) {
  void* p = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult s{};
  const CUresult got = cuGetProcAddress_v2(name, &p, version, flags, &s);
  if (r != nullptr) *r = got;
  if (status != nullptr) *status = s;
  return p;
}

TEST(ClientDriver, IsFunnelsDriver) {
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&cuInit), &info), 0);
  EXPECT_NE(std::string(info.dli_fname).find("funnel-driver"), std::string::npos) << info.dli_fname;
}

TEST(ClientDriver, InitVersionAndErrors) {
  EXPECT_EQ(cuInit(1), CUDA_ERROR_INVALID_VALUE);  // cuInit(0) attaches: client.driver.sim runs it
  int v = 0;
  EXPECT_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
  EXPECT_EQ(v, CUDA_VERSION);
  const char* s = nullptr;
  EXPECT_EQ(cuGetErrorName(CUDA_ERROR_NOT_SUPPORTED, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_NOT_SUPPORTED");
  EXPECT_EQ(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s,
               "This indicates that one or more of the parameters passed to the API call is not within an "
               "acceptable range of values.");
  EXPECT_EQ(cuGetErrorName(static_cast<CUresult>(998), &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(s, nullptr);
}

TEST(ClientDriver, LookupsPickTheVersionAndTheStreamVariant) {
  EXPECT_EQ(lookup("cuMemAlloc", 13000, 0), ours("cuMemAlloc_v2"));
  EXPECT_EQ(lookup("cuMemAlloc", 3020, 0), ours("cuMemAlloc_v2"));
  EXPECT_EQ(lookup("cuMemAlloc", 3010, 0), ours("cuMemAlloc"));
  EXPECT_EQ(lookup("cuMemcpyHtoDAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            ours("cuMemcpyHtoDAsync_v2_ptsz"));
  EXPECT_EQ(lookup("cuMemcpyHtoDAsync", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM), ours("cuMemcpyHtoDAsync_v2"));
  EXPECT_EQ(lookup("cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), ours("cuMemcpyHtoD_v2_ptds"));
  EXPECT_EQ(lookup("cuCtxCreate", 11000, 0), ours("cuCtxCreate_v2"));
  EXPECT_EQ(lookup("cuCtxCreate", 13000, 0), ours("cuCtxCreate_v4"));
  // A function without a per-thread form: the same one for both flags.
  EXPECT_EQ(lookup("cuDeviceGetCount", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), ours("cuDeviceGetCount"));
  // The lookup functions answer with funnel's own, so lookups through them stay funnel's.
  EXPECT_EQ(lookup("cuGetProcAddress", 11030, 0), ours("cuGetProcAddress"));
  EXPECT_EQ(lookup("cuGetProcAddress", 12000, 0), reinterpret_cast<void*>(&cuGetProcAddress_v2));
  CUresult r{};
  CUdriverProcAddressQueryResult st{};
  EXPECT_EQ(lookup("cuNoSuchFunction", 13000, 0, &r, &st), nullptr);
  EXPECT_EQ(r, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(lookup("cuMemAlloc", 1000, 0, &r, &st), nullptr);
  EXPECT_EQ(r, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  void* p = nullptr;
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", &p, 13000, 4, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress_v2(nullptr, &p, 13000, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST(ClientDriver, EveryLookupTheTracedProgramsMadeIsAnswered) {
  std::ifstream in(FUNNEL_DRIVER_LOOKUPS);
  ASSERT_TRUE(in) << FUNNEL_DRIVER_LOOKUPS;
  std::string name;
  int version = 0;
  cuuint64_t flags = 0;
  int n = 0;
  while (in >> name >> version >> flags) {
    CUresult r{};
    CUdriverProcAddressQueryResult st{};
    void* p = lookup(name.c_str(), version, flags, &r, &st);
    EXPECT_EQ(r, CUDA_SUCCESS) << name << " " << version << " " << flags;
    EXPECT_NE(p, nullptr) << name;
    Dl_info info{};
    EXPECT_TRUE(p != nullptr && dladdr(p, &info) != 0 &&
                std::string(info.dli_fname).find("funnel-driver") != std::string::npos)
        << name << " is not answered by funnel's driver";
    ++n;
  }
  EXPECT_GT(n, 500);
}

TEST(ClientDriver, AFunctionNotServedYetSaysSoOnce) {
  testing::internal::CaptureStderr();
  using EnablePeer = CUresult (*)(CUcontext, unsigned);
  auto enable = reinterpret_cast<EnablePeer>(lookup("cuCtxEnablePeerAccess", 13000, 0));
  ASSERT_NE(enable, nullptr);
  EXPECT_EQ(enable(nullptr, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(enable(nullptr, 0), CUDA_ERROR_NOT_SUPPORTED);
  CUexternalMemory ext = nullptr;
  EXPECT_EQ(cuImportExternalMemory(&ext, nullptr), CUDA_ERROR_NOT_SUPPORTED);
  const CUuuid id{{0x6c, static_cast<char>(0xd5)}};
  const void* table = reinterpret_cast<const void*>(1);
  EXPECT_EQ(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(table, nullptr);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err,
            "funnel: cuCtxEnablePeerAccess is not supported yet\n"
            "funnel: cuImportExternalMemory is not supported yet\n"
            "funnel: cuGetExportTable(6cd50000000000000000000000000000) is not supported yet\n");
}

// MD2 against RFC 1319's test suite; HMAC-MD2 against an independent implementation (Python,
// from the RFCs) with the runtime's integrity key.
TEST(ClientDriver, Md2AndHmacMd2) {
  auto hex = [](const std::array<uint8_t, 16>& d) {
    std::string s;
    for (uint8_t b : d) s += "0123456789abcdef"[b >> 4], s += "0123456789abcdef"[b & 15];
    return s;
  };
  auto md2 = [&](const std::string& m) {
    funnel::driver::Md2 h;
    h.update(m.data(), m.size());
    return hex(h.digest());
  };
  EXPECT_EQ(md2(""), "8350e5a3e24c153df2275c9f80692773");
  EXPECT_EQ(md2("abc"), "da853b0d3f88d99b30283a69e6ded6bb");
  EXPECT_EQ(md2("message digest"), "ab4f496bfb2a530b219ff33031fe06b0");
  EXPECT_EQ(md2("abcdefghijklmnopqrstuvwxyz"), "4e8ddff3650292ab5a4108c3aa47940b");
  funnel::driver::Md2 pieces;  // fed in pieces across block edges: the same digest
  pieces.update("abcdefghijklm", 13);
  pieces.update("nopqrstuvwxyz", 13);
  EXPECT_EQ(hex(pieces.digest()), "4e8ddff3650292ab5a4108c3aa47940b");
  const std::array<uint8_t, 16> key = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                       0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};
  EXPECT_EQ(hex(funnel::driver::hmac_md2(key, "funnel", 6)), "fafe9360f084281e3b5d855f277eeaf9");
  uint8_t counting[100];
  for (int i = 0; i < 100; ++i) counting[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(hex(funnel::driver::hmac_md2(key, counting, sizeof counting)), "defbb22a4e46ee01c4239113149b1a16");
}

// The tables NVIDIA's runtime asks for: each is there with its size word (context-local storage
// has none) and its functions behave as the runtime expects without a server.
TEST(ClientDriver, ExportTablesTheRuntimeNeeds) {
  auto table = [](std::initializer_list<int> bytes) {
    CUuuid id{};
    int i = 0;
    for (int b : bytes) id.bytes[i++] = static_cast<char>(b);
    const void* t = nullptr;
    EXPECT_EQ(cuGetExportTable(&t, &id), CUDA_SUCCESS);
    return static_cast<const void* const*>(t);
  };
  auto size_of = [](const void* const* t) { return reinterpret_cast<uintptr_t>(t[0]); };
  const auto* cudart = table({0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9});
  const auto* integrity =
      table({0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2});
  const auto* storage = table({0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93});
  const auto* checks = table({0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e});
  const auto* tls = table({0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc});
  const auto* hooks = table({0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66});
  const auto* contexts = table({0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2});
  ASSERT_TRUE(cudart && integrity && storage && checks && tls && hooks && contexts);
  // The tools' context table: as long as the driver's, every slot a function; slot 4 is
  // cuCtxGetId, the others say so when called.
  EXPECT_EQ(size_of(contexts), 95 * sizeof(void*));
  for (int slot = 1; slot < 95; ++slot) EXPECT_NE(contexts[slot], nullptr) << slot;
  testing::internal::CaptureStderr();
  EXPECT_EQ(reinterpret_cast<CUresult (*)()>(contexts[16])(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "funnel: cuGetExportTable(21318c60971432488ca641ff7324c8f2) slot 16 is not supported yet\n");
  // PyTorch's two tables not known yet: as long as the driver's, every slot a loud stub.
  const auto* torch34 = table({0x69, 0xa2, 0x8e, 0x9f, 0x24, 0x49, 0x8b, 0x47, 0xb0, 0x30, 0xc5, 0xda, 0x33, 0x0e, 0xa4, 0xe9});
  const auto* torch17 = table({0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca});
  ASSERT_TRUE(torch34 && torch17);
  EXPECT_EQ(size_of(torch34), 34 * sizeof(void*));
  EXPECT_EQ(size_of(torch17), 17 * sizeof(void*));
  for (int slot = 1; slot < 34; ++slot) EXPECT_NE(torch34[slot], nullptr) << slot;
  for (int slot = 1; slot < 17; ++slot) EXPECT_NE(torch17[slot], nullptr) << slot;
  testing::internal::CaptureStderr();
  EXPECT_EQ(reinterpret_cast<CUresult (*)()>(torch34[24])(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(reinterpret_cast<CUresult (*)()>(torch17[4])(), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "funnel: cuGetExportTable(69a28e9f24498b47b030c5da330ea4e9) slot 24 is not supported yet\n"
            "funnel: cuGetExportTable(1734dc26800d47458726c0f1e7dd8bca) slot 4 is not supported yet\n");
  EXPECT_EQ(size_of(cudart), 13 * sizeof(void*));
  EXPECT_EQ(size_of(integrity), 3 * sizeof(void*));
  EXPECT_EQ(size_of(checks), 4 * sizeof(void*));
  EXPECT_EQ(size_of(tls), 4 * sizeof(void*));
  EXPECT_EQ(size_of(hooks), 7 * sizeof(void*));
  for (int slot : {1, 2, 6, 7, 8, 12}) EXPECT_NE(cudart[slot], nullptr) << slot;

  // Context-local storage: put, get, delete; a key never put is "not there".
  using Put = CUresult (*)(CUcontext, void*, void*, void (*)(CUcontext, void*, void*));
  using Delete = CUresult (*)(CUcontext, void*);
  using Get = CUresult (*)(void**, CUcontext, void*);
  auto put = reinterpret_cast<Put>(storage[0]);
  auto del = reinterpret_cast<Delete>(storage[1]);
  auto get = reinterpret_cast<Get>(storage[2]);
  auto ctx = reinterpret_cast<CUcontext>(0x1000);
  int key = 0, value = 0;
  void* got = nullptr;
  EXPECT_EQ(get(&got, ctx, &key), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(put(ctx, &key, &value, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(get(&got, ctx, &key), CUDA_SUCCESS);
  EXPECT_EQ(got, &value);
  EXPECT_EQ(get(&got, reinterpret_cast<CUcontext>(0x2000), &key), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(del(ctx, &key), CUDA_SUCCESS);
  EXPECT_EQ(del(ctx, &key), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(get(&got, ctx, &key), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(get(&got, nullptr, &key), CUDA_ERROR_INVALID_CONTEXT);  // no current context

  // No context is special to tools.
  unsigned kind = 7;
  const void* detail = &kind;
  using Check = CUresult (*)(CUcontext, unsigned*, const void**);
  EXPECT_EQ(reinterpret_cast<Check>(checks[2])(ctx, &kind, &detail), CUDA_SUCCESS);
  EXPECT_EQ(kind, 0u);
  EXPECT_EQ(detail, nullptr);

  // The integrity check's fixed answers for runtime versions ending in 0 and 1.
  using Integrity = CUresult (*)(unsigned, uint64_t, uint64_t (*)[2]);
  uint64_t answer[2] = {};
  EXPECT_EQ(reinterpret_cast<Integrity>(integrity[1])(13000, 1, &answer), CUDA_SUCCESS);
  EXPECT_EQ(answer[0], 0x3341181c03cb675cULL);
  EXPECT_EQ(answer[1], 0x8ed383aa1f4cd1e8ULL);
  EXPECT_EQ(reinterpret_cast<Integrity>(integrity[1])(13001, 1, &answer), CUDA_SUCCESS);
  EXPECT_EQ(answer[0], 0x1841181c03cb675cULL);
  EXPECT_EQ(reinterpret_cast<Integrity>(integrity[1])(13000, 1, nullptr), CUDA_ERROR_INVALID_VALUE);
}

}  // namespace
