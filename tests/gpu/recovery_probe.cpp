// Which driver sequence brings a device back after a sticky fault (illegal address) in a
// process that keeps running — the question funnel-server's device reset depends on.
// Each mode runs in its own process (the fault poisons the process's state):
//   recovery_probe FATBIN MODE
// MODE: primary      retain, fault, cuCtxSetCurrent(NULL), PrimaryCtxReset, Release, Retain
//       primary-clean  as primary, but first unload the library, destroy the stream and
//                    unregister host memory
//       primary-only-reset  fault, PrimaryCtxReset, (no release/retain) and use it again
//       other-thread as primary-clean while a second thread still has the context current
//       created      cuCtxCreate, fault, cuCtxDestroy, cuCtxCreate
// After the recovery it loads the library again (and tries the old one), runs a kernel,
// copies, registers host memory and prints one line per step; the last line is
// "MODE recovered" or "MODE NOT recovered".
#include <cuda.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string name(CUresult r) {
  const char* n = nullptr;
  cuGetErrorName(r, &n);
  return n != nullptr ? n : std::to_string(static_cast<int>(r));
}

bool step(const char* what, CUresult r) {
  std::printf("  %-44s %s\n", what, name(r).c_str());
  std::fflush(stdout);
  return r == CUDA_SUCCESS;
}

// Runs `inc` on a fresh allocation and checks the value.
bool works(CUlibrary lib, const char* label) {
  CUkernel k;
  CUfunction f;
  CUdeviceptr d = 0;
  CUstream s;
  bool ok = step((std::string(label) + ": cuLibraryGetKernel").c_str(), cuLibraryGetKernel(&k, lib, "inc")) &&
            step("cuKernelGetFunction", cuKernelGetFunction(&f, k)) &&
            step("cuStreamCreate", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) &&
            step("cuMemAlloc", cuMemAlloc(&d, sizeof(int)));
  if (!ok) return false;
  ok = step("cuMemsetD32", cuMemsetD32(d, 41, 1));
  void* args[] = {&d};
  ok = ok && step("cuLaunchKernel inc", cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr));
  ok = ok && step("cuStreamSynchronize", cuStreamSynchronize(s));
  std::vector<char> host(1 << 20);
  ok = ok && step("cuMemHostRegister", cuMemHostRegister(host.data(), host.size(), CU_MEMHOSTREGISTER_PORTABLE));
  int v = 0;
  ok = ok && step("cuMemcpyDtoH", cuMemcpyDtoH(host.data(), d, sizeof v));
  if (ok) {
    std::memcpy(&v, host.data(), sizeof v);
    std::printf("  value %d (want 42)\n", v);
    ok = v == 42;
  }
  cuMemHostUnregister(host.data());
  cuMemFree(d);
  cuStreamDestroy(s);
  return ok;
}

void fault(CUlibrary lib, CUstream s) {
  CUkernel k;
  CUfunction f;
  step("cuLibraryGetKernel fault", cuLibraryGetKernel(&k, lib, "fault"));
  step("cuKernelGetFunction", cuKernelGetFunction(&f, k));
  CUdeviceptr bad = 0x10;
  void* args[] = {&bad};
  step("cuLaunchKernel fault", cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr));
  step("cuStreamSynchronize (want ILLEGAL_ADDRESS)", cuStreamSynchronize(s));
  step("cuCtxSynchronize (sticky?)", cuCtxSynchronize());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: recovery_probe FATBIN MODE\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string mode = argv[2];
  std::printf("%s\n", mode.c_str());
  CUdevice dev;
  if (!step("cuInit", cuInit(0)) || !step("cuDeviceGet", cuDeviceGet(&dev, 0))) return 2;

  CUcontext ctx = nullptr;
  if (mode == "created") {
    if (!step("cuCtxCreate", cuCtxCreate(&ctx, nullptr, 0, dev))) return 2;
  } else {
    if (!step("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev))) return 2;
    step("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
  }
  CUlibrary lib;
  if (!step("cuLibraryLoadData", cuLibraryLoadData(&lib, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0)))
    return 2;
  CUstream s;
  step("cuStreamCreate", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  std::vector<char> pinned(1 << 20);
  step("cuMemHostRegister (before)", cuMemHostRegister(pinned.data(), pinned.size(), CU_MEMHOSTREGISTER_PORTABLE));
  if (!works(lib, "before")) return 2;

  std::atomic<int> other_state{0};
  std::thread other;
  if (mode == "other-thread") {
    other = std::thread([&] {
      cuCtxSetCurrent(ctx);
      other_state = 1;
      while (other_state.load() != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    while (other_state.load() != 1) std::this_thread::yield();
  }

  fault(lib, s);

  bool ok = true;
  CUlibrary lib2 = nullptr;
  if (mode == "created") {
    step("cuCtxDestroy", cuCtxDestroy(ctx));
    ok = step("cuCtxCreate (again)", cuCtxCreate(&ctx, nullptr, 0, dev));
  } else {
    if (mode != "primary") {
      step("cuLibraryUnload", cuLibraryUnload(lib));
      step("cuStreamDestroy", cuStreamDestroy(s));
      step("cuMemHostUnregister", cuMemHostUnregister(pinned.data()));
    }
    step("cuCtxSetCurrent(NULL)", cuCtxSetCurrent(nullptr));
    ok = step("cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset(dev));
    if (mode == "primary-only-reset") {
      ok = step("cuDevicePrimaryCtxRetain (2nd ref)", cuDevicePrimaryCtxRetain(&ctx, dev));
    } else {
      step("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease(dev));
      unsigned flags = 0;
      int active = -1;
      step("cuDevicePrimaryCtxGetState", cuDevicePrimaryCtxGetState(dev, &flags, &active));
      std::printf("  primary context active after release: %d\n", active);
      ok = step("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev));
    }
    if (ok) step("cuCtxSetCurrent(new)", cuCtxSetCurrent(ctx));
  }
  if (ok) {
    step("cuCtxSynchronize (new)", cuCtxSynchronize());
    if (mode == "primary" || mode == "created") {
      std::printf("  old library in the new context:\n");
      works(lib, "old-lib");
    }
    ok = step("cuLibraryLoadData (again)",
              cuLibraryLoadData(&lib2, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0)) &&
         works(lib2, "new-lib");
  }
  if (mode == "other-thread") {
    other_state = 2;
    other.join();
  }
  std::printf("%s %s\n", mode.c_str(), ok ? "recovered" : "NOT recovered");
  return ok ? 0 : 1;
}
