// IPC memory handles between two processes (issue 30): the parent allocates and fills device
// memory and starts a second process (itself again) with the handle; the child opens it, checks
// the data, writes its own and closes it; the parent sees the child's data.  Natively two
// processes with their own contexts; through funnel two clients of one server.  Prints the same.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "check.h"

extern char** environ;

static const int N = 1024;

template <class H>
static std::string hex(const H& h) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (unsigned char c : h.reserved) s += digits[c >> 4], s += digits[c & 15];
  return s;
}

template <class H>
static bool unhex(const char* s, H& h) {
  if (std::strlen(s) != 2 * sizeof h.reserved) return false;
  for (size_t i = 0; i < sizeof h.reserved; ++i) {
    unsigned v = 0;
    if (std::sscanf(s + 2 * i, "%2x", &v) != 1) return false;
    h.reserved[i] = static_cast<char>(v);
  }
  return true;
}

static bool all(const int* p, int v) {
  for (int i = 0; i < N; ++i)
    if (p[i] != v) return false;
  return true;
}

// The child: exit 0 when everything it checked held, else a code that says which step failed.
// The parent's event was recorded after its last write: waited for, here, through its handle.
static int child(const char* text, const char* event_text) {
  cudaIpcMemHandle_t h;
  cudaIpcEventHandle_t eh;
  if (!unhex(text, h) || !unhex(event_text, eh)) return 10;
  cudaEvent_t e = nullptr;
  if (cudaIpcOpenEventHandle(&e, eh) != cudaSuccess) return 20;
  if (cudaEventSynchronize(e) != cudaSuccess) return 21;
  int* d = nullptr;
  if (cudaIpcOpenMemHandle(reinterpret_cast<void**>(&d), h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) return 11;
  static int host[N];
  if (cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost) != cudaSuccess) return 12;
  if (!all(host, 0x11111111)) return 13;
  if (cudaMemset(d, 0x22, sizeof host) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) return 14;
  if (cudaFree(d) == cudaSuccess) return 15;  // opened memory is closed, never freed
  cudaGetLastError();
  if (cudaIpcCloseMemHandle(d) != cudaSuccess) return 16;
  if (cudaEventDestroy(e) != cudaSuccess) return 22;
  return 0;
}

static int run_child(const std::string& handle, const std::string& event) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return -1;
  self[n] = '\0';
  char arg1[] = "child";
  std::string h = handle, eh = event;
  char* argv[] = {self, arg1, h.data(), eh.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, self, nullptr, nullptr, argv, environ) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "child") == 0) return child(argv[2], argv[3]);
  int* d = nullptr;
  CHECK(cudaMalloc(&d, N * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t done;
  CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming | cudaEventInterprocess));
  std::printf("an interprocess event needs no timing: %s\n",
              cudaEventCreateWithFlags(&done, cudaEventInterprocess) == cudaErrorInvalidValue ? "yes" : "no");
  cudaGetLastError();
  CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming | cudaEventInterprocess));
  CHECK(cudaMemsetAsync(d, 0x11, N * sizeof(int), s));
  CHECK(cudaEventRecord(done, s));
  cudaIpcMemHandle_t h;
  CHECK(cudaIpcGetMemHandle(&h, d));
  cudaIpcEventHandle_t eh;
  CHECK(cudaIpcGetEventHandle(&eh, done));
  std::printf("handles of an allocation and an event: ok\n");
  const int rc = run_child(hex(h), hex(eh));
  std::printf("the other process opened it, read it, wrote it, closed it: %s (exit %d)\n", rc == 0 ? "ok" : "FAIL", rc);
  static int host[N];
  CHECK(cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost));
  std::printf("its data here: %s\n", all(host, 0x22222222) ? "ok" : "FAIL");
  // A handle of memory that is not device memory, and garbage as a handle: refused.
  int local = 0;
  cudaIpcMemHandle_t bad;
  std::printf("handle of host memory: %s\n", cudaIpcGetMemHandle(&bad, &local) != cudaSuccess ? "refused" : "FAIL");
  cudaGetLastError();
  std::memset(&bad, 0x5a, sizeof bad);
  int* p = nullptr;
  std::printf("a handle of nothing: %s\n",
              cudaIpcOpenMemHandle(reinterpret_cast<void**>(&p), bad, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess
                  ? "refused"
                  : "FAIL");
  cudaGetLastError();
  cudaEvent_t timed;
  CHECK(cudaEventCreate(&timed));
  cudaIpcEventHandle_t teh;
  std::printf("handle of an event without cudaEventInterprocess: %s\n",
              cudaIpcGetEventHandle(&teh, timed) != cudaSuccess ? "refused" : "FAIL");
  cudaGetLastError();
  CHECK(cudaEventDestroy(timed));
  CHECK(cudaEventDestroy(done));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  std::printf("ipc: done\n");
  return 0;
}
