// The server's fat binaries, shared by every client (doc/design/kernels.md, "Modules"):
// the bytes by (digest, size), uploaded once per content for the server's lifetime,
// and the module loaded from them that every client without variables shares until it
// changes a kernel attribute (copy_if_shared).  Thread-safe: every worker calls in.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "funnel/ipc/module_digest.hpp"
#include "funnel/server/backend.hpp"

namespace funnel::server {

struct ModuleKey {
  ipc::ModuleDigest digest;
  uint64_t size;
  auto operator<=>(const ModuleKey&) const = default;
};

class ModuleCache {
 public:
  explicit ModuleCache(Backend& backend) : backend_(backend) {}

  // A module for cached bytes: the shared one (loaded on first use), or with
  // `own_copy` a fresh one for the caller alone.  NotReady when the bytes are not
  // cached (the client uploads them).
  Status acquire(const ModuleKey& key, bool own_copy, std::shared_ptr<BackendModule>& out);
  // Loads uploaded bytes, whose digest the caller checked, and caches them once they
  // load; then as acquire().
  Status insert(const ModuleKey& key, std::vector<std::byte> bytes, bool own_copy, std::shared_ptr<BackendModule>& out);
  // Copy-on-write of kernel attributes: when `m` is a shared module, `out` is a fresh
  // one loaded from the same cached bytes, for the caller alone; when it is not (a
  // module already the caller's own), `out` stays empty.
  Status copy_if_shared(const BackendModule& m, std::shared_ptr<BackendModule>& out);

  struct Stats {
    uint64_t entries, bytes, hits, uploads, loads;
  };
  Stats stats() const;

 private:
  struct Entry {
    std::shared_ptr<const std::vector<std::byte>> bytes;
    std::shared_ptr<BackendModule> shared;
  };
  Status load(std::span<const std::byte> bytes, std::shared_ptr<BackendModule>& out);
  // With m_ held: the shared module of `e`, set from `loaded` if it has none yet.
  std::shared_ptr<BackendModule> share(Entry& e, std::shared_ptr<BackendModule> loaded);

  Backend& backend_;
  mutable std::mutex m_;
  std::map<ModuleKey, Entry> entries_;
  // The bytes of each shared module (which, like its entry, lives as long as the server).
  std::map<const BackendModule*, std::shared_ptr<const std::vector<std::byte>>> shared_bytes_;
  uint64_t bytes_ = 0;
  std::atomic<uint64_t> hits_{0}, uploads_{0}, loads_{0};
};

}  // namespace funnel::server
