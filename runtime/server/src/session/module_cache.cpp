#include "session/module_cache.hpp"

namespace funnel::server {

Status ModuleCache::load(std::span<const std::byte> bytes, std::shared_ptr<BackendModule>& out) {
  std::unique_ptr<BackendModule> m;
  if (Status st = backend_.module_load(bytes, m); st != Status::Success) return st;
  loads_.fetch_add(1, std::memory_order_relaxed);
  out = std::move(m);
  return Status::Success;
}

std::shared_ptr<BackendModule> ModuleCache::share(Entry& e, std::shared_ptr<BackendModule> loaded) {
  // Two clients may load the same bytes at once; the first one published wins.
  if (!e.shared) {
    e.shared = std::move(loaded);
    shared_bytes_.emplace(e.shared.get(), e.bytes);
  }
  return e.shared;
}

Status ModuleCache::acquire(const ModuleKey& key, bool own_copy, std::shared_ptr<BackendModule>& out) {
  std::shared_ptr<const std::vector<std::byte>> bytes;
  {
    std::lock_guard lk(m_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return Status::NotReady;
    hits_.fetch_add(1, std::memory_order_relaxed);
    if (!own_copy && it->second.shared) {
      out = it->second.shared;
      return Status::Success;
    }
    bytes = it->second.bytes;
  }
  // Loaded without the lock: a large module must not stall every other client's lookups.
  std::shared_ptr<BackendModule> loaded;
  if (Status st = load(*bytes, loaded); st != Status::Success) return st;
  if (own_copy) {
    out = std::move(loaded);
    return Status::Success;
  }
  std::lock_guard lk(m_);
  out = share(entries_.at(key), std::move(loaded));
  return Status::Success;
}

Status ModuleCache::insert(const ModuleKey& key, std::vector<std::byte> bytes, bool own_copy,
                           std::shared_ptr<BackendModule>& out) {
  // Bytes that do not load are not cached: the next client uploads (and fails) again.
  std::shared_ptr<BackendModule> loaded;
  if (Status st = load(bytes, loaded); st != Status::Success) return st;
  uploads_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lk(m_);
  auto [it, fresh] = entries_.try_emplace(key);
  if (fresh) {
    bytes_ += bytes.size();
    it->second.bytes = std::make_shared<const std::vector<std::byte>>(std::move(bytes));
  }
  out = own_copy ? std::move(loaded) : share(it->second, std::move(loaded));
  return Status::Success;
}

Status ModuleCache::copy_if_shared(const BackendModule& m, std::shared_ptr<BackendModule>& out) {
  std::shared_ptr<const std::vector<std::byte>> bytes;
  {
    std::lock_guard lk(m_);
    auto it = shared_bytes_.find(&m);
    if (it == shared_bytes_.end()) return Status::Success;
    bytes = it->second;
  }
  return load(*bytes, out);
}

ModuleCache::Stats ModuleCache::stats() const {
  std::lock_guard lk(m_);
  return {entries_.size(), bytes_, hits_.load(std::memory_order_relaxed), uploads_.load(std::memory_order_relaxed),
          loads_.load(std::memory_order_relaxed)};
}

}  // namespace funnel::server
