// The driver tracer: a libcuda.so.1 that forwards every call to the real driver and records what a
// program asks of it (issue 29, step 1; doc/design/driver-surface.md says what it found):
//   - every exported driver function called, and how often;
//   - every name looked up with cuGetProcAddress (both versions): the CUDA versions and flags
//     asked for, whether the driver had it, and how often the function handed out was called;
//   - every export table asked for with cuGetExportTable (its id) and which of its slots are
//     then called, how often.
// Use: put the folder holding this libcuda.so.1 first in LD_LIBRARY_PATH (or LD_PRELOAD it),
// FUNNEL_TRACE_REAL_DRIVER names the real driver (default: the usual places), FUNNEL_TRACE_OUT
// the folder for driver-trace-PID.json (default: the working directory), FUNNEL_TRACE_VERBOSE=1
// prints each function's first call on stderr (2: every call, with its integer arguments), FUNNEL_TRACE_TABLES (below) picks the export
// tables whose slots are traced. bench/driver_trace/run.sh runs programs under it.
// To learn what an export table's slot does: FUNNEL_TRACE_ARGS=N prints the integer arguments
// (and the first words they point to) of the first N calls of every traced slot;
// FUNNEL_TRACE_SPY=ID:SLOT,ID:SLOT,NAME (ID: the table id or its first 8 digits; NAME: a function
// looked up with cuGetProcAddress, found once per lookup) also calls those through a function that prints the words behind each argument before and after the call
// and the result (it assumes at most six integer arguments: use it on slots known to take few).
//
// How: exported functions and the functions handed out are trampolines (gen_stubs.py) that put
// their number in r11 and jump to funnel_trace_common, which asks funnel_trace_enter for the real
// function and jumps to it with the argument registers untouched: no signature is needed.
// An export table is copied (its first kScanSlots words, as far as they are mapped) and each word
// that points into the real driver's code is replaced by a trampoline.
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {
#include "stubs.inc"

using CUresult = int;
constexpr CUresult kNotFound = 500;  // CUDA_ERROR_NOT_FOUND
constexpr unsigned kExportedCount = sizeof(kExported) / sizeof(kExported[0]);
constexpr unsigned kScanSlots = 128;

struct Uuid {
  unsigned char bytes[16];
};

std::atomic<uint64_t> g_calls[kExportedCount + kDynamic];
std::atomic<void*> g_target[kExportedCount + kDynamic];

struct Dynamic {
  std::string name;  // "cuMemAlloc" or "table <uuid>"
  int slot = -1;     // the export table's slot, -1 for a looked-up function
  void* real = nullptr;
};

struct Lookup {
  std::set<int> versions;
  std::set<uint64_t> flags;
  std::set<int> results;       // CUresult
  std::set<int> statuses;      // CUdriverProcAddressQueryResult (v2 only)
  std::set<unsigned> dynamic;  // the trampolines handed out for it
  uint64_t count = 0;
};

struct Table {
  std::string uuid;
  uint64_t first_word = 0;
  uint64_t requests = 0;
  unsigned words = 0;
  std::map<int, unsigned> slots;  // slot -> trampoline
  std::vector<uintptr_t> proxy;
};

struct State {
  std::mutex mu;
  void* driver = nullptr;
  std::string driver_path;
  std::vector<std::pair<uintptr_t, uintptr_t>> driver_code;  // executable segments
  std::deque<Dynamic> dynamic;                               // index i is trampoline kExportedCount + i
  std::map<std::pair<std::string, void*>, unsigned> dynamic_of;
  std::map<std::string, Lookup> lookups;
  std::map<std::string, Table> tables;
  bool out_of_trampolines = false;
};

State& state() {
  static State* s = new State;  // never destroyed: calls may come during exit
  return *s;
}

extern "C" void* const funnel_trace_dyn_table[];

CUresult missing_function() {
  std::fprintf(stderr, "driver-trace: a function the real driver does not export was called\n");
  return kNotFound;
}

int find_code(struct dl_phdr_info* info, size_t, void* arg) {
  auto* s = static_cast<State*>(arg);
  Dl_info di{};
  if (dladdr(dlsym(s->driver, "cuInit"), &di) == 0 || reinterpret_cast<uintptr_t>(di.dli_fbase) != info->dlpi_addr)
    return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) != 0)
      s->driver_code.emplace_back(info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
  }
  return 1;
}

void* driver() {
  State& s = state();
  static std::once_flag once;
  std::call_once(once, [&] {
    std::vector<std::string> paths;
    if (const char* e = std::getenv("FUNNEL_TRACE_REAL_DRIVER"); e != nullptr && *e != '\0') paths.emplace_back(e);
    for (const char* p : {"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1", "/usr/lib/libcuda.so.1",
                          "/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1"})
      paths.emplace_back(p);
    for (const auto& p : paths) {
      if (void* h = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL); h != nullptr) {
        s.driver = h;
        s.driver_path = p;
        break;
      }
    }
    if (s.driver == nullptr) {
      std::fprintf(stderr, "driver-trace: no real libcuda.so.1 found: set FUNNEL_TRACE_REAL_DRIVER\n");
      return;
    }
    dl_iterate_phdr(find_code, &s);
  });
  return s.driver;
}

void* real(const char* name) {
  void* d = driver();
  void* f = d != nullptr ? dlsym(d, name) : nullptr;
  return f != nullptr ? f : reinterpret_cast<void*>(&missing_function);
}

bool in_driver_code(uintptr_t a) {
  for (const auto& [lo, hi] : state().driver_code)
    if (a >= lo && a < hi) return true;
  return false;
}

// The trampoline for `fn` under `name` (slot >= 0: an export table's): its index in
// funnel_trace_dyn_table, the same one for the same pair; -1 when all are taken (the caller then
// hands out the real function, untraced). Called with state().mu held.
int trampoline(const std::string& name, int slot, void* fn) {
  State& s = state();
  const std::string key = slot < 0 ? name : name + "#" + std::to_string(slot);
  if (auto it = s.dynamic_of.find({key, fn}); it != s.dynamic_of.end()) return static_cast<int>(it->second);
  if (s.dynamic.size() >= kDynamic) {
    s.out_of_trampolines = true;
    return -1;
  }
  const auto i = static_cast<unsigned>(s.dynamic.size());
  s.dynamic.push_back({name, slot, fn});
  g_target[kExportedCount + i].store(fn, std::memory_order_release);
  s.dynamic_of[{key, fn}] = i;
  return static_cast<int>(i);
}

std::string uuid_text(const Uuid* id) {
  char b[40];
  for (int i = 0; i < 16; ++i) std::snprintf(b + 2 * i, 3, "%02x", id->bytes[i]);
  return std::string(b, 32);
}

// How many bytes from p are mapped readable (at most `want`).
size_t readable(uintptr_t p, size_t want) {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return 0;
  size_t n = 0;
  char line[512];
  uintptr_t end = p;
  bool found = true;
  while (found && end < p + want) {
    found = false;
    std::rewind(f);
    while (std::fgets(line, sizeof line, f) != nullptr) {
      uintptr_t lo = 0, hi = 0;
      char perms[8] = {};
      if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s", &lo, &hi, perms) == 3 && end >= lo && end < hi &&
          perms[0] == 'r') {
        end = hi;
        found = true;
        break;
      }
    }
  }
  std::fclose(f);
  n = end > p ? end - p : 0;
  return n < want ? n : want;
}

// FUNNEL_TRACE_TABLES: which export tables get their slots traced: "all" (the default), "none",
// "only:ID,ID" or "except:ID,ID" (an ID or its first 8 or more digits; the runtime's integrity check fails where some are traced).
bool wrap_table(const std::string& id) {
  static const std::string policy = [] {
    const char* v = std::getenv("FUNNEL_TRACE_TABLES");
    return std::string(v != nullptr && *v != '\0' ? v : "all");
  }();
  if (policy == "none") return false;
  // Listed: an entry of the list is the id or its beginning (at least 8 digits).
  const auto listed = [&](size_t from) {
    for (size_t b = from; b < policy.size();) {
      const size_t e = std::min(policy.find(',', b), policy.size());
      if (e - b >= 8 && id.compare(0, e - b, policy, b, e - b) == 0) return true;
      b = e + 1;
    }
    return false;
  };
  if (policy.rfind("except:", 0) == 0) return !listed(7);
  if (policy.rfind("only:", 0) == 0) return listed(5);
  return true;
}

// Prints up to `words` words at p, if readable, and returns them.
std::vector<uintptr_t> dump(const char* what, uintptr_t p, size_t words) {
  std::vector<uintptr_t> v;
  if (p < 4096) return v;
  const size_t n = readable(p, words * sizeof(uintptr_t)) / sizeof(uintptr_t);
  if (n == 0) return v;
  v.assign(reinterpret_cast<const uintptr_t*>(p), reinterpret_cast<const uintptr_t*>(p) + n);
  std::string line;
  char b[24];
  for (uintptr_t w : v) {
    std::snprintf(b, sizeof b, " %" PRIxPTR, w);
    line += b;
  }
  std::fprintf(stderr, "driver-trace:     %s %#" PRIxPTR ":%s\n", what, p, line.c_str());
  return v;
}

unsigned env_count(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? static_cast<unsigned>(std::strtoul(v, nullptr, 10)) : 0;
}

// FUNNEL_TRACE_SPY: the slots called through a spy (below).
// A function looked up by name is spied when FUNNEL_TRACE_SPY lists its name (slot ~0U).
bool spied(const std::string& id, unsigned slot) {
  static const std::string spec = [] {
    const char* v = std::getenv("FUNNEL_TRACE_SPY");
    return "," + std::string(v != nullptr ? v : "") + ",";
  }();
  if (slot == ~0U) return spec.find("," + id + ",") != std::string::npos;
  for (const std::string& key : {id + ":" + std::to_string(slot), id.substr(0, 8) + ":" + std::to_string(slot)})
    if (spec.find("," + key + ",") != std::string::npos) return true;
  return false;
}

constexpr unsigned kSpies = 32;
struct Spy {
  std::string name;
  uintptr_t (*real)(uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t) = nullptr;
  std::atomic<unsigned> calls{0};
};
Spy g_spy[kSpies];
unsigned g_spies = 0;

template <unsigned K>
uintptr_t spy(uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3, uintptr_t a4, uintptr_t a5) {
  Spy& sp = g_spy[K];
  static const unsigned limit = env_count("FUNNEL_TRACE_SPY_CALLS") != 0 ? env_count("FUNNEL_TRACE_SPY_CALLS") : 6;
  const unsigned n = ++sp.calls;
  if (n > limit) return sp.real(a0, a1, a2, a3, a4, a5);
  const uintptr_t a[6] = {a0, a1, a2, a3, a4, a5};
  std::fprintf(stderr, "driver-trace: spy %s call %u: %" PRIxPTR " %" PRIxPTR " %" PRIxPTR " %" PRIxPTR " %" PRIxPTR
               " %" PRIxPTR "\n", sp.name.c_str(), n, a0, a1, a2, a3, a4, a5);
  std::vector<uintptr_t> before[6];
  for (int i = 0; i < 6; ++i) before[i] = dump(("before a" + std::to_string(i)).c_str(), a[i], 8);
  const uintptr_t r = sp.real(a0, a1, a2, a3, a4, a5);
  std::fprintf(stderr, "driver-trace: spy %s call %u returned %#" PRIxPTR "\n", sp.name.c_str(), n, r);
  for (int i = 0; i < 6; ++i) {
    if (before[i].empty()) continue;
    const std::vector<uintptr_t> after = dump(("after  a" + std::to_string(i)).c_str(), a[i], before[i].size());
    for (size_t w = 0; w < after.size() && w < 4; ++w)
      if (after[w] != before[i][w]) dump(("  new *a" + std::to_string(i) + "[" + std::to_string(w) + "]").c_str(), after[w], 16);
  }
  return r;
}

template <unsigned... K>
constexpr auto spy_functions(std::integer_sequence<unsigned, K...>) {
  return std::array<uintptr_t (*)(uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t), sizeof...(K)>{
      &spy<K>...};
}
constexpr auto kSpyFunctions = spy_functions(std::make_integer_sequence<unsigned, kSpies>{});

void write_report();

struct AtExit {
  AtExit() { std::atexit(write_report); }
} at_exit;

std::string json_string(const std::string& v) {
  std::string o = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o + "\"";
}

template <typename Set>
std::string json_list(const Set& v) {
  std::string o = "[";
  for (const auto& x : v) o += (o.size() > 1 ? "," : "") + std::to_string(x);
  return o + "]";
}

std::string read_small(const char* path, bool nul_to_space) {
  std::string v;
  if (FILE* f = std::fopen(path, "r"); f != nullptr) {
    char b[4096];
    const size_t n = std::fread(b, 1, sizeof b, f);
    std::fclose(f);
    v.assign(b, n);
    if (nul_to_space)
      for (char& c : v)
        if (c == '\0') c = ' ';
  }
  return v;
}

void write_report() {
  State& s = state();
  std::lock_guard lk(s.mu);
  const char* dir = std::getenv("FUNNEL_TRACE_OUT");
  const std::string path =
      std::string(dir != nullptr && *dir != '\0' ? dir : ".") + "/driver-trace-" + std::to_string(getpid()) + ".json";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "driver-trace: cannot write %s\n", path.c_str());
    return;
  }
  char exe[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::fprintf(f, "{\n\"pid\": %d,\n\"exe\": %s,\n\"cmdline\": %s,\n\"real_driver\": %s,\n", getpid(),
               json_string(n > 0 ? std::string(exe, static_cast<size_t>(n)) : "").c_str(),
               json_string(read_small("/proc/self/cmdline", true)).c_str(), json_string(s.driver_path).c_str());
  std::fprintf(f, "\"out_of_trampolines\": %s,\n\"exported_calls\": {", s.out_of_trampolines ? "true" : "false");
  bool first = true;
  for (unsigned i = 0; i < kExportedCount; ++i)
    if (const uint64_t c = g_calls[i].load(); c != 0) {
      std::fprintf(f, "%s\n  %s: %" PRIu64, first ? "" : ",", json_string(kExported[i]).c_str(), c);
      first = false;
    }
  std::fprintf(f, "\n},\n\"lookups\": {");
  first = true;
  for (const auto& [name, l] : s.lookups) {
    uint64_t calls = 0;
    for (unsigned d : l.dynamic) calls += g_calls[kExportedCount + d].load();
    std::fprintf(f,
                 "%s\n  %s: {\"count\": %" PRIu64
                 ", \"versions\": %s, \"flags\": %s, \"results\": %s, "
                 "\"statuses\": %s, \"calls\": %" PRIu64 "}",
                 first ? "" : ",", json_string(name).c_str(), l.count, json_list(l.versions).c_str(),
                 json_list(l.flags).c_str(), json_list(l.results).c_str(), json_list(l.statuses).c_str(), calls);
    first = false;
  }
  std::fprintf(f, "\n},\n\"export_tables\": {");
  first = true;
  for (const auto& [id, t] : s.tables) {
    std::fprintf(
        f, "%s\n  %s: {\"requests\": %" PRIu64 ", \"first_word\": %" PRIu64 ", \"words_copied\": %u, \"slots\": {",
        first ? "" : ",", json_string(id).c_str(), t.requests, t.first_word, t.words);
    bool first_slot = true;
    for (const auto& [slot, d] : t.slots) {
      const uint64_t c = g_calls[kExportedCount + d].load();
      std::fprintf(f, "%s\"%d\": %" PRIu64, first_slot ? "" : ", ", slot, c);
      first_slot = false;
    }
    std::fprintf(f, "}}");
    first = false;
  }
  std::fprintf(f, "\n}\n}\n");
  std::fclose(f);
}

// The functions a lookup may hand back that must stay ours, so that lookups through them are
// traced too.
void* ours_for(void* fn);

CUresult after_lookup(const char* symbol, void** pfn, int version, uint64_t flags, CUresult r, const int* status) {
  State& s = state();
  std::lock_guard lk(s.mu);
  Lookup& l = s.lookups[symbol != nullptr ? symbol : "(null)"];
  ++l.count;
  l.versions.insert(version);
  l.flags.insert(flags);
  l.results.insert(r);
  if (status != nullptr) l.statuses.insert(*status);
  if (r == 0 && pfn != nullptr && *pfn != nullptr && symbol != nullptr) {
    if (void* ours = ours_for(*pfn); ours != nullptr) {
      *pfn = ours;
    } else if (spied(symbol, ~0U) && g_spies < kSpies) {
      Spy& sp = g_spy[g_spies];
      sp.name = symbol;
      sp.real = reinterpret_cast<decltype(sp.real)>(*pfn);
      *pfn = reinterpret_cast<void*>(kSpyFunctions[g_spies++]);
    } else {
      if (const int t = trampoline(symbol, -1, *pfn); t >= 0) {
        l.dynamic.insert(static_cast<unsigned>(t));
        *pfn = funnel_trace_dyn_table[t];
      }
    }
  }
  return r;
}

}  // namespace

extern "C" {

// saved: the argument registers funnel_trace_common pushed, r11 first: r11, rax, r9, r8, rcx,
// rdx, rsi, rdi.
__attribute__((visibility("hidden"))) void* funnel_trace_enter(unsigned i, const uintptr_t* saved) {
  if (i >= kExportedCount + kDynamic) return reinterpret_cast<void*>(&missing_function);
  g_calls[i].fetch_add(1, std::memory_order_relaxed);
  void* f = g_target[i].load(std::memory_order_acquire);
  if (f == nullptr && i < kExportedCount) {
    f = real(kExported[i]);
    g_target[i].store(f, std::memory_order_release);
  }
  if (f == nullptr) return reinterpret_cast<void*>(&missing_function);
  static const unsigned verbose = env_count("FUNNEL_TRACE_VERBOSE");
  if (verbose >= 2) {
    const char* name = i < kExportedCount ? kExported[i] : nullptr;
    std::string dyn;
    if (name == nullptr) {
      std::lock_guard lk(state().mu);
      const Dynamic& d = state().dynamic[i - kExportedCount];
      dyn = d.slot >= 0 ? d.name.substr(0, 14) + " slot " + std::to_string(d.slot) : d.name;
      name = dyn.c_str();
    }
    std::fprintf(stderr, "driver-trace: call %s(%" PRIxPTR ", %" PRIxPTR ", %" PRIxPTR ", %" PRIxPTR ", %" PRIxPTR
                 ", %" PRIxPTR ")\n", name, saved[7], saved[6], saved[5], saved[4], saved[3], saved[2]);
  } else if (verbose == 1 && g_calls[i].load(std::memory_order_relaxed) == 1) {
    if (i < kExportedCount) {
      std::fprintf(stderr, "driver-trace: %s\n", kExported[i]);
    } else {
      std::lock_guard lk(state().mu);
      const Dynamic& d = state().dynamic[i - kExportedCount];
      std::fprintf(stderr, "driver-trace: %s%s%s\n", d.name.c_str(), d.slot >= 0 ? " slot " : "",
                   d.slot >= 0 ? std::to_string(d.slot).c_str() : "");
    }
  }
  static const unsigned args = env_count("FUNNEL_TRACE_ARGS");
  if (args != 0 && i >= kExportedCount && g_calls[i].load(std::memory_order_relaxed) <= args) {
    std::string name;
    {
      std::lock_guard lk(state().mu);
      const Dynamic& d = state().dynamic[i - kExportedCount];
      if (d.slot >= 0) name = d.name + " slot " + std::to_string(d.slot);
    }
    if (!name.empty()) {
      const uintptr_t a[6] = {saved[7], saved[6], saved[5], saved[4], saved[3], saved[2]};
      std::fprintf(stderr, "driver-trace: %s call %" PRIu64 ": %" PRIxPTR " %" PRIxPTR " %" PRIxPTR " %" PRIxPTR
                   " %" PRIxPTR " %" PRIxPTR "\n", name.c_str(), g_calls[i].load(), a[0], a[1], a[2], a[3], a[4], a[5]);
      for (int k = 0; k < 6; ++k) dump(("a" + std::to_string(k)).c_str(), a[k], 4);
    }
  }
  return f;
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                                                    uint64_t flags, int* status) {
  using Fn = CUresult (*)(const char*, void**, int, uint64_t, int*);
  static const auto fn = reinterpret_cast<Fn>(real("cuGetProcAddress_v2"));
  const CUresult r = fn(symbol, pfn, version, flags, status);
  return after_lookup(symbol, pfn, version, flags, r, status);
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                                                 uint64_t flags) {
  using Fn = CUresult (*)(const char*, void**, int, uint64_t);
  static const auto fn = reinterpret_cast<Fn>(real("cuGetProcAddress"));
  const CUresult r = fn(symbol, pfn, version, flags);
  return after_lookup(symbol, pfn, version, flags, r, nullptr);
}

__attribute__((visibility("default"))) CUresult cuGetExportTable(const void** table, const Uuid* id) {
  using Fn = CUresult (*)(const void**, const Uuid*);
  static const auto fn = reinterpret_cast<Fn>(real("cuGetExportTable"));
  const CUresult r = fn(table, id);
  State& s = state();
  std::lock_guard lk(s.mu);
  const std::string key = id != nullptr ? uuid_text(id) : "(null)";
  Table& t = s.tables[key];
  t.uuid = key;
  ++t.requests;
  if (r != 0 || table == nullptr || *table == nullptr || !wrap_table(key)) return r;
  if (t.proxy.empty()) {
    const auto base = reinterpret_cast<uintptr_t>(*table);
    const auto* words = static_cast<const uintptr_t*>(*table);
    t.words = static_cast<unsigned>(readable(base, kScanSlots * sizeof(uintptr_t)) / sizeof(uintptr_t));
    if (t.words == 0) return r;
    t.first_word = words[0];
    t.proxy.assign(words, words + t.words);
    for (unsigned i = 0; i < t.words; ++i) {
      if (!in_driver_code(words[i])) continue;
      if (spied(key, i) && g_spies < kSpies) {
        Spy& sp = g_spy[g_spies];
        sp.name = key.substr(0, 8) + ":" + std::to_string(i);
        sp.real = reinterpret_cast<decltype(sp.real)>(words[i]);
        t.proxy[i] = reinterpret_cast<uintptr_t>(kSpyFunctions[g_spies++]);
        continue;
      }
      const int d = trampoline("table " + key, static_cast<int>(i), reinterpret_cast<void*>(words[i]));
      if (d < 0) continue;
      t.proxy[i] = reinterpret_cast<uintptr_t>(funnel_trace_dyn_table[d]);
      t.slots[static_cast<int>(i)] = static_cast<unsigned>(d);
    }
  }
  *table = t.proxy.data();
  return r;
}

}  // extern "C"

namespace {
void* ours_for(void* fn) {
  if (fn == real("cuGetProcAddress_v2")) return reinterpret_cast<void*>(&cuGetProcAddress_v2);
  if (fn == real("cuGetProcAddress")) return reinterpret_cast<void*>(&cuGetProcAddress);
  if (fn == real("cuGetExportTable")) return reinterpret_cast<void*>(&cuGetExportTable);
  return nullptr;
}
}  // namespace
