// Who opens the GPU? An LD_PRELOAD library that prints, on stderr, every open of a /dev/nvidia*
// file with the call stack that opened it (the libraries and offsets; resolve them with
// addr2line or gdb). funnel's clients must never open the GPU themselves (a second context);
// when the client core's exit warning says one did, run the program with this preloaded:
//   cc -shared -fPIC -O1 -o gpu_open_trace.so bench/driver_trace/gpu_open_trace.c -ldl
//   LD_PRELOAD=$PWD/gpu_open_trace.so funnel-run ./program
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static void report(const char* how, const char* path) {
  if (path == NULL || strncmp(path, "/dev/nvidia", 11) != 0) return;
  void* frames[32];
  const int n = backtrace(frames, 32);
  dprintf(2, "gpu-open-trace: pid %d %s(%s) from:\n", (int)getpid(), how, path);
  backtrace_symbols_fd(frames + 1, n - 1, 2);
}

#define FORWARD_OPEN(name, ...)                                 \
  int name(__VA_ARGS__, int flags, ...) {                       \
    mode_t mode = 0;                                            \
    if (flags & (O_CREAT | O_TMPFILE)) {                        \
      va_list ap;                                               \
      va_start(ap, flags);                                      \
      mode = (mode_t)va_arg(ap, int);                           \
      va_end(ap);                                               \
    }

FORWARD_OPEN(open, const char* path)
  static int (*real)(const char*, int, ...);
  if (real == NULL) real = (int (*)(const char*, int, ...))dlsym(RTLD_NEXT, "open");
  report("open", path);
  return real(path, flags, mode);
}

FORWARD_OPEN(open64, const char* path)
  static int (*real)(const char*, int, ...);
  if (real == NULL) real = (int (*)(const char*, int, ...))dlsym(RTLD_NEXT, "open64");
  report("open64", path);
  return real(path, flags, mode);
}

FORWARD_OPEN(openat, int dir, const char* path)
  static int (*real)(int, const char*, int, ...);
  if (real == NULL) real = (int (*)(int, const char*, int, ...))dlsym(RTLD_NEXT, "openat");
  report("openat", path);
  return real(dir, path, flags, mode);
}

FORWARD_OPEN(openat64, int dir, const char* path)
  static int (*real)(int, const char*, int, ...);
  if (real == NULL) real = (int (*)(int, const char*, int, ...))dlsym(RTLD_NEXT, "openat64");
  report("openat64", path);
  return real(dir, path, flags, mode);
}

int __open_2(const char* path, int flags) {
  static int (*real)(const char*, int);
  if (real == NULL) real = (int (*)(const char*, int))dlsym(RTLD_NEXT, "__open_2");
  report("__open_2", path);
  return real(path, flags);
}

int __open64_2(const char* path, int flags) {
  static int (*real)(const char*, int);
  if (real == NULL) real = (int (*)(const char*, int))dlsym(RTLD_NEXT, "__open64_2");
  report("__open64_2", path);
  return real(path, flags);
}
