// funnel's client driver (runtime/client/driver) without a server: run against
// build/lib/funnel-driver/libcuda.so.1 (LD_LIBRARY_PATH), linked against the toolkit's stub.
// cuGetProcAddress answers every name and version NVIDIA's runtimes, libraries and frameworks
// looked up on the H100 (driver_lookups.txt, recorded by bench/driver_trace: issue 29, step 1)
// with the right function of funnel's; a function not served yet answers CUDA_ERROR_NOT_SUPPORTED.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

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
  using Alloc = CUresult (*)(CUdeviceptr*, size_t, unsigned);
  auto alloc = reinterpret_cast<Alloc>(lookup("cuMemAllocManaged", 13000, 0));
  ASSERT_NE(alloc, nullptr);
  CUdeviceptr d = 0;
  EXPECT_EQ(alloc(&d, 64, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(alloc(&d, 64, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuTexObjectDestroy(0), CUDA_ERROR_NOT_SUPPORTED);
  const CUuuid id{{0x6b, static_cast<char>(0xd5)}};
  const void* table = reinterpret_cast<const void*>(1);
  EXPECT_EQ(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(table, nullptr);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err,
            "funnel: cuMemAllocManaged is not supported yet\n"
            "funnel: cuTexObjectDestroy is not supported yet\n"
            "funnel: cuGetExportTable(6bd50000000000000000000000000000) is not supported yet\n");
}

}  // namespace
