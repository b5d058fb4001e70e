/* A stand-in for the real libcuda under the driver tracer (tests/bench/driver_trace/check.sh):
   a few exported functions, lookups by name and one export table, each answering something the
   program can check, so that a trampoline that loses an argument or a result shows. */
#include <dlfcn.h>
#include <string.h>

typedef struct {
  unsigned char bytes[16];
} Uuid;

int cuInit(unsigned flags) { return flags == 0 ? 0 : 1; }

int cuDriverGetVersion(int* v) {
  *v = 13000;
  return 0;
}

/* Nine integer arguments (three on the stack) and two doubles: the trampolines must pass them all. */
long fake_many(long a, long b, long c, long d, long e, long f, long g, long h, double x, long i, double y) {
  return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h + (long)(x * 100) + 10 * i + (long)(y * 1000);
}

long fake_add(long a, long b) { return a + b; }

static const void* table[3] = {(const void*)(sizeof table), (const void*)fake_many, (const void*)fake_add};

int cuGetExportTable(const void** out, const Uuid* id) {
  if (id->bytes[0] != 0x42) return 500;
  *out = table;
  return 0;
}

int cuGetProcAddress_v2(const char* symbol, void** pfn, int version, unsigned long long flags, int* status) {
  (void)flags;
  *pfn = 0;
  if (strcmp(symbol, "cuDriverGetVersion") == 0) *pfn = (void*)cuDriverGetVersion;
  if (strcmp(symbol, "cuGetProcAddress_v2") == 0) *pfn = (void*)cuGetProcAddress_v2;
  if (strcmp(symbol, "cuGetExportTable") == 0) *pfn = (void*)cuGetExportTable;
  if (strcmp(symbol, "cuInit") == 0) *pfn = (void*)cuInit;
  if (strcmp(symbol, "cuMany") == 0) *pfn = (void*)fake_many;
  const int r = *pfn != 0 && version >= 12000 ? 0 : 500;
  if (r != 0) *pfn = 0;
  if (status) *status = r == 0 ? 0 : 1;
  return r;
}

int cuGetProcAddress(const char* symbol, void** pfn, int version, unsigned long long flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, 0);
}
