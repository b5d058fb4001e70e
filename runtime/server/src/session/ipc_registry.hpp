// The server's IPC memory exports (doc/design/ipc.md): device allocations a client gave a handle
// for (cudaIpcGetMemHandle), by a random token, and how many other clients have them open.  All
// clients share one context, so an opened allocation is the same memory at the same address; the
// registry only decides who may use it and keeps it alive: memory its owner freed while others
// have it open is freed by the last close.  Every worker calls in (one lock).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <unordered_map>

#include "funnel/server/backend.hpp"

namespace funnel::server {

class IpcRegistry {
 public:
  struct Export {
    uint32_t owner = 0;
    int device = 0;
    uint64_t base = 0;
    uint64_t size = 0;
    uint32_t opened = 0;       // importers that have it open
    bool owner_freed = false;  // the owner let it go: the last close frees it
  };

  explicit IpcRegistry(Backend& backend) : backend_(backend), random_(std::random_device{}()) {}
  IpcRegistry(const IpcRegistry&) = delete;
  IpcRegistry& operator=(const IpcRegistry&) = delete;
  // Memory whose owner freed it and that is still open when the server stops goes now.
  ~IpcRegistry() {
    for (auto& [token, e] : by_token_)
      if (e.owner_freed) (void)backend_.mem_free(e.device, e.base);
  }

  // Events: the token of an owner's interprocess event (the same one when exported again), and
  // the event of a token (not the opener's own; nullptr when there is none).
  uint64_t export_event(uint32_t owner, int device, const std::shared_ptr<BackendEvent>& e) {
    const std::lock_guard lock(mu_);
    for (const auto& [token, x] : events_)
      if (x.event == e) return token;
    uint64_t token = 0;
    while (token == 0 || events_.contains(token) || by_token_.contains(token)) token = random_();
    events_[token] = EventExport{owner, device, e};
    return token;
  }
  std::shared_ptr<BackendEvent> open_event(uint64_t token, uint32_t opener, int& device) {
    const std::lock_guard lock(mu_);
    auto it = events_.find(token);
    if (it == events_.end() || it->second.owner == opener) return nullptr;
    device = it->second.device;
    return it->second.event;
  }
  // The owner destroyed its event (or left): no new opens (those open keep it).
  void forget_event(const std::shared_ptr<BackendEvent>& e) {
    const std::lock_guard lock(mu_);
    std::erase_if(events_, [&](const auto& kv) { return kv.second.event == e; });
  }

  // The token of the owner's allocation [base, base + size) (the same one when exported again).
  uint64_t export_memory(uint32_t owner, int device, uint64_t base, uint64_t size) {
    const std::lock_guard lock(mu_);
    if (auto it = by_base_.find(base); it != by_base_.end()) return it->second;
    uint64_t token = 0;
    while (token == 0 || by_token_.contains(token)) token = random_();
    by_token_[token] = Export{owner, device, base, size};
    by_base_[base] = token;
    return token;
  }
  // Opens `token` for `opener`: InvalidResourceHandle for no such export (or its memory is gone),
  // or one of the opener's own.
  Status open(uint64_t token, uint32_t opener, Export& out) {
    const std::lock_guard lock(mu_);
    auto it = by_token_.find(token);
    if (it == by_token_.end() || it->second.owner_freed || it->second.owner == opener)
      return Status::InvalidResourceHandle;
    ++it->second.opened;
    out = it->second;
    return Status::Success;
  }
  // An importer closes the export at `base` (after its work on it is done).  Frees the memory
  // when its owner already let it go and this was the last importer.
  void close(uint64_t base) {
    const std::lock_guard lock(mu_);
    auto b = by_base_.find(base);
    if (b == by_base_.end()) return;
    auto it = by_token_.find(b->second);
    if (it->second.opened > 0) --it->second.opened;
    if (it->second.owner_freed && it->second.opened == 0) {
      (void)backend_.mem_free(it->second.device, base);
      by_token_.erase(it);
      by_base_.erase(b);
    }
  }
  // The owner frees the allocation at `base`: true when the caller frees it now (not exported, or
  // nobody has it open; the export ends), false when the last importer's close will.
  bool owner_frees(uint64_t base) {
    const std::lock_guard lock(mu_);
    auto b = by_base_.find(base);
    if (b == by_base_.end()) return true;
    auto it = by_token_.find(b->second);
    if (it->second.opened == 0) {
      by_token_.erase(it);
      by_base_.erase(b);
      return true;
    }
    it->second.owner_freed = true;
    return false;
  }

 private:
  Backend& backend_;
  std::mutex mu_;
  std::mt19937_64 random_;
  std::unordered_map<uint64_t, Export> by_token_;
  std::unordered_map<uint64_t, uint64_t> by_base_;  // base -> token
  struct EventExport {
    uint32_t owner;
    int device;
    std::shared_ptr<BackendEvent> event;
  };
  std::unordered_map<uint64_t, EventExport> events_;
};

}  // namespace funnel::server
