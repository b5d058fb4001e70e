/* Runs under the driver tracer over fake_driver.c (check.sh): calls an exported function, looks
   functions up (directly and through a looked-up cuGetProcAddress), uses an export table, and
   checks every answer. Prints what it did; exit 1 on a wrong answer. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  unsigned char bytes[16];
} Uuid;
typedef int (*Init)(unsigned);
typedef int (*Lookup)(const char*, void**, int, unsigned long long, int*);
typedef int (*ExportTable)(const void**, const Uuid*);
typedef int (*Version)(int*);
typedef long (*Many)(long, long, long, long, long, long, long, long, double, long, double);
typedef long (*Add)(long, long);

static int bad = 0;
#define CHECK(c)                                                     \
  do {                                                               \
    if (!(c)) {                                                      \
      fprintf(stderr, "program: FAIL %s (line %d)\n", #c, __LINE__); \
      bad = 1;                                                       \
    }                                                                \
  } while (0)

int main(void) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cuda) {
    fprintf(stderr, "program: %s\n", dlerror());
    return 1;
  }
  Init init = (Init)dlsym(cuda, "cuInit");
  Lookup get = (Lookup)dlsym(cuda, "cuGetProcAddress_v2");
  CHECK(init && get);
  if (!init || !get) return 1;
  CHECK(init(0) == 0);
  CHECK(init(7) == 1);

  const long want = 1 + 2 * 2 + 3 * 3 + 4 * 4 + 5 * 5 + 6 * 6 + 7 * 7 + 8 * 8 + 150 + 10 * 9 + 250;
  Many many = 0;
  int status = -1;
  CHECK(get("cuMany", (void**)&many, 13000, 0, &status) == 0 && status == 0 && many);
  if (many) {
    CHECK(many(1, 2, 3, 4, 5, 6, 7, 8, 1.5, 9, 0.25) == want);
    CHECK(many(1, 2, 3, 4, 5, 6, 7, 8, 1.5, 9, 0.25) == want);
  }
  void* none = (void*)1;
  CHECK(get("cuNothing", &none, 13000, 2, &status) == 500 && status == 1 && none == 0);

  /* Through a looked-up cuGetProcAddress: the tracer must hand out its own, so this lookup shows. */
  Lookup get2 = 0;
  CHECK(get("cuGetProcAddress_v2", (void**)&get2, 12000, 0, 0) == 0 && get2);
  Version version = 0;
  if (get2) CHECK(get2("cuDriverGetVersion", (void**)&version, 12000, 1, 0) == 0 && version);
  int v = 0;
  if (version) CHECK(version(&v) == 0 && v == 13000);

  ExportTable table_of = (ExportTable)dlsym(cuda, "cuGetExportTable");
  const void** table = 0;
  Uuid id;
  memset(&id, 0x11, sizeof id);
  id.bytes[0] = 0x42;
  CHECK(table_of && table_of((const void**)&table, &id) == 0 && table);
  if (table) {
    CHECK((unsigned long)table[0] == 3 * sizeof(void*));
    Many m = (Many)table[1];
    for (int i = 0; i < 3; ++i) CHECK(m(1, 2, 3, 4, 5, 6, 7, 8, 1.5, 9, 0.25) == want);
    CHECK(((Add)table[2]) != 0);
  }
  Uuid other;
  memset(&other, 0, sizeof other);
  const void** none_table = 0;
  CHECK(table_of((const void**)&none_table, &other) == 500);
  printf("program: %s\n", bad ? "FAIL" : "ok");
  return bad;
}
