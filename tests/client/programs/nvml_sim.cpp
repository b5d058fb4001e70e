// funnel's libnvidia-ml.so.1 through funnel-run (tests/client/CMakeLists.txt, client.nvml.sim):
// the library found by dlopen("libnvidia-ml.so.1") is funnel's (lib/funnel-driver/), and its
// answers agree with funnel's driver: the device count, each device's name, UUID (NVML's
// "GPU-8-4-4-4-12" form), index and memory; a bad handle, a call before nvmlInit and after the
// last nvmlShutdown fail as NVML's do; a function funnel does not serve is a loud stub (its name
// once on stderr however often it is called: nvml_sim.expected.stderr), a name NVML lacks is not
// found.
#include <cuda.h>
#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

int g_failed = 0;
void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what);
    ++g_failed;
  }
}

struct Memory {
  unsigned long long total, free, used;
};

}  // namespace

int main() {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (nvml == nullptr) {
    std::printf("FAIL: dlopen libnvidia-ml.so.1: %s\n", dlerror());
    return 1;
  }
  link_map* map = nullptr;
  dlinfo(nvml, RTLD_DI_LINKMAP, &map);
  expect(map != nullptr && std::strstr(map->l_name, "funnel-driver/libnvidia-ml.so.1") != nullptr,
         "libnvidia-ml.so.1 is funnel's");
  auto fn = [&](const char* name) { return dlsym(nvml, name); };
  auto init = reinterpret_cast<int (*)()>(fn("nvmlInit"));
  auto init2 = reinterpret_cast<int (*)()>(fn("nvmlInit_v2"));
  auto shutdown = reinterpret_cast<int (*)()>(fn("nvmlShutdown"));
  auto count = reinterpret_cast<int (*)(unsigned*)>(fn("nvmlDeviceGetCount_v2"));
  auto by_index = reinterpret_cast<int (*)(unsigned, void**)>(fn("nvmlDeviceGetHandleByIndex_v2"));
  auto index_of = reinterpret_cast<int (*)(void*, unsigned*)>(fn("nvmlDeviceGetIndex"));
  auto name_of = reinterpret_cast<int (*)(void*, char*, unsigned)>(fn("nvmlDeviceGetName"));
  auto uuid_of = reinterpret_cast<int (*)(void*, char*, unsigned)>(fn("nvmlDeviceGetUUID"));
  auto memory_of = reinterpret_cast<int (*)(void*, Memory*)>(fn("nvmlDeviceGetMemoryInfo"));
  auto version = reinterpret_cast<int (*)(int*)>(fn("nvmlSystemGetCudaDriverVersion_v2"));
  auto error_string = reinterpret_cast<const char* (*)(int)>(fn("nvmlErrorString"));
  if (!init || !init2 || !shutdown || !count || !by_index || !index_of || !name_of || !uuid_of || !memory_of ||
      !version || !error_string) {
    std::printf("FAIL: a served NVML function is missing\n");
    return 1;
  }
  auto temperature = reinterpret_cast<int (*)(void*, int, unsigned*)>(fn("nvmlDeviceGetTemperature"));
  auto utilization = reinterpret_cast<int (*)(void*, unsigned[2])>(fn("nvmlDeviceGetUtilizationRates"));
  if (!temperature || !utilization) {
    std::printf("FAIL: an NVML function funnel does not serve is missing (no stub)\n");
    return 1;
  }
  expect(fn("nvmlNoSuchFunction") == nullptr, "a name NVML does not export is not found");
  unsigned n = 0;
  expect(count(&n) == 1, "nvmlDeviceGetCount_v2 before nvmlInit: NVML_ERROR_UNINITIALIZED");
  expect(init() == 0 && init2() == 0, "nvmlInit, nvmlInit_v2");
  expect(count(&n) == 0, "nvmlDeviceGetCount_v2");
  int driver_count = 0;
  expect(cuDeviceGetCount(&driver_count) == CUDA_SUCCESS && static_cast<int>(n) == driver_count,
         "NVML's device count is the driver's");
  for (unsigned i = 0; i < n; ++i) {
    void* h = nullptr;
    expect(by_index(i, &h) == 0 && h != nullptr, "nvmlDeviceGetHandleByIndex_v2");
    unsigned idx = 99;
    expect(index_of(h, &idx) == 0 && idx == i, "nvmlDeviceGetIndex");
    CUdevice d = 0;
    cuDeviceGet(&d, static_cast<int>(i));
    char name[96] = {}, driver_name[96] = {};
    cuDeviceGetName(driver_name, sizeof driver_name, d);
    expect(name_of(h, name, sizeof name) == 0 && std::string(name) == driver_name, "nvmlDeviceGetName");
    expect(name_of(h, name, 2) == 7, "nvmlDeviceGetName into 2 bytes: NVML_ERROR_INSUFFICIENT_SIZE");
    CUuuid u{};
    cuDeviceGetUuid(&u, d);
    const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
    char want[48];
    std::snprintf(want, sizeof want, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                  b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    char uuid[96] = {};
    expect(uuid_of(h, uuid, sizeof uuid) == 0 && std::string(uuid) == want, "nvmlDeviceGetUUID");
    Memory m{};
    size_t total = 0;
    cuDeviceTotalMem(&total, d);
    expect(memory_of(h, &m) == 0 && m.total == total && m.free <= m.total && m.used == m.total - m.free,
           "nvmlDeviceGetMemoryInfo");
  }
  // By PCI bus id: the driver's (4-digit domain) and NVML's form (8 digits) find device 0.
  auto by_bus = reinterpret_cast<int (*)(const char*, void**)>(fn("nvmlDeviceGetHandleByPciBusId_v2"));
  if (n > 0) {
    CUdevice d0 = 0;
    char bus[32] = {}, nvml_bus[40] = {};
    cuDeviceGet(&d0, 0);
    cuDeviceGetPCIBusId(bus, sizeof bus, d0);
    unsigned dom = 0, b = 0, dv = 0, f = 0;
    std::sscanf(bus, "%x:%x:%x.%x", &dom, &b, &dv, &f);
    std::snprintf(nvml_bus, sizeof nvml_bus, "%08X:%02X:%02X.%X", dom, b, dv, f);
    void* h1 = nullptr;
    void* h2 = nullptr;
    void* h0 = nullptr;
    by_index(0, &h0);
    expect(by_bus(bus, &h1) == 0 && h1 == h0 && by_bus(nvml_bus, &h2) == 0 && h2 == h0,
           "nvmlDeviceGetHandleByPciBusId_v2 finds device 0 by its bus id");
    expect(by_bus("0000:ff:1f.7", &h1) == 6 || n > 1, "nvmlDeviceGetHandleByPciBusId_v2 of no GPU: NVML_ERROR_NOT_FOUND");
    expect(by_bus("no bus", &h1) == 2, "nvmlDeviceGetHandleByPciBusId_v2 of a bad id: NVML_ERROR_INVALID_ARGUMENT");
  }
  void* none = nullptr;
  expect(by_index(n, &none) == 2, "a handle past the count: NVML_ERROR_INVALID_ARGUMENT");
  unsigned idx = 0;
  expect(index_of(reinterpret_cast<void*>(uintptr_t{1000}), &idx) == 2, "a bad handle: NVML_ERROR_INVALID_ARGUMENT");
  int v = 0, dv = 0;
  cuDriverGetVersion(&dv);
  expect(version(&v) == 0 && v == dv, "nvmlSystemGetCudaDriverVersion_v2");
  expect(std::string(error_string(1)) == "Uninitialized", "nvmlErrorString");
  // The kernel module's version: /proc's where there is a module (the GPU machine), else
  // NVML_ERROR_DRIVER_NOT_LOADED (CI).
  auto kmd = reinterpret_cast<int (*)(char*, unsigned)>(fn("nvmlSystemGetDriverVersion"));
  char kv[80] = {};
  if (std::FILE* f = std::fopen("/proc/driver/nvidia/version", "r")) {
    char line[512] = {};
    const bool read = std::fgets(line, sizeof line, f) != nullptr;
    std::fclose(f);
    expect(read && kmd(kv, sizeof kv) == 0 && kv[0] >= '0' && kv[0] <= '9' && std::strchr(kv, '.') != nullptr &&
               std::strstr(line, kv) != nullptr,
           "nvmlSystemGetDriverVersion: the module's version in /proc/driver/nvidia/version");
    expect(kmd(kv, 2) == 7, "nvmlSystemGetDriverVersion into 2 bytes: NVML_ERROR_INSUFFICIENT_SIZE");
  } else {
    expect(kmd(kv, sizeof kv) == 9, "nvmlSystemGetDriverVersion without a module: NVML_ERROR_DRIVER_NOT_LOADED");
  }
  // Not served: NVML_ERROR_NOT_SUPPORTED each time, the name on stderr once.
  void* h0 = nullptr;
  by_index(0, &h0);
  unsigned degrees = 0, rates[2] = {};
  for (int i = 0; i < 2; ++i) {
    expect(temperature(h0, 0, &degrees) == 3, "nvmlDeviceGetTemperature: NVML_ERROR_NOT_SUPPORTED");
    expect(utilization(h0, rates) == 3, "nvmlDeviceGetUtilizationRates: NVML_ERROR_NOT_SUPPORTED");
  }
  expect(std::string(error_string(3)) == "Not Supported", "nvmlErrorString(NVML_ERROR_NOT_SUPPORTED)");
  expect(shutdown() == 0 && shutdown() == 0 && shutdown() == 1, "two inits, two shutdowns, a third fails");
  expect(count(&n) == 1, "nvmlDeviceGetCount_v2 after the last nvmlShutdown: NVML_ERROR_UNINITIALIZED");
  if (g_failed == 0)
    std::printf(
        "nvml: %d device(s); count, names, UUIDs, indices and memory as the driver's\n"
        "nvml: functions not served answer NVML_ERROR_NOT_SUPPORTED\nnvml: all ok\n",
        driver_count);
  return g_failed == 0 ? 0 : 1;
}
