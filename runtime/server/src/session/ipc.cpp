// IPC memory handles (doc/design/ipc.md): a client exports one of its allocations (the server's
// IpcRegistry gives it a token), another client of this server opens the token and may then use
// the range as its own device memory (the same context: the same address) until it closes it.
#include "session/ipc_registry.hpp"
#include "session/validation.hpp"
#include "session/worker.hpp"

namespace funnel::server {

Status Worker::ipc_export(const ipc::CommandHeader& h, const ipc::AddressCmd& c) {
  if (h.reply_slot == ipc::kNoReply || shared_.ipc == nullptr) return Status::InvalidValue;
  const auto it = containing(res_.allocations, c.address, 1);
  if (it == res_.allocations.end() || it->second.mapped) return Status::InvalidValue;
  const uint64_t token = shared_.ipc->export_memory(shared_.id, it->second.device, it->first, it->second.size);
  answers_.answer(h, {token, it->first, it->second.size});
  return Status::Success;
}

Status Worker::ipc_open(const ipc::CommandHeader& h, const ipc::IpcOpenCmd& c) {
  if (h.reply_slot == ipc::kNoReply || shared_.ipc == nullptr) return Status::InvalidValue;
  IpcRegistry::Export e;
  if (Status st = shared_.ipc->open(c.token, shared_.id, e); st != Status::Success) return st;
  if (Status st = check_device(e.device); st != Status::Success) {
    shared_.ipc->close(e.base);
    return st;
  }
  // Opened again: the one opening stands (CUDA answers the same pointer).
  if (!res_.imported.emplace(e.base, DeviceAllocation{e.device, e.size}).second) shared_.ipc->close(e.base);
  answers_.answer(h, {e.base, e.size, static_cast<uint64_t>(e.device)});
  return Status::Success;
}

Status Worker::ipc_close(const ipc::CommandHeader& h, const ipc::AddressCmd& c) {
  auto it = res_.imported.find(c.address);
  if (it == res_.imported.end()) return Status::InvalidValue;
  res_.imported.erase(it);
  // No later command may use it; the registry hears of the close once earlier work is done (it
  // may free the memory then).
  const uint64_t base = c.address;
  completions_.when_drained(-1, h.reply_slot, h.seq, [this, base](Status) {
    shared_.ipc->close(base);
    return Status::Success;
  });
  return Status::Success;
}

Status Worker::ipc_export_event(const ipc::CommandHeader& h, const ipc::EventCmd& c) {
  if (h.reply_slot == ipc::kNoReply || shared_.ipc == nullptr) return Status::InvalidValue;
  EventEntry* e = res_.find_event(c.event_id);
  if (e == nullptr) return Status::InvalidResourceHandle;
  if (!e->interprocess || e->imported) return Status::InvalidValue;
  answers_.answer(h, {shared_.ipc->export_event(shared_.id, e->device, e->event)});
  return Status::Success;
}

Status Worker::ipc_open_event(const ipc::CommandHeader& h, const ipc::IpcOpenEventCmd& c) {
  if (h.reply_slot == ipc::kNoReply || shared_.ipc == nullptr) return Status::InvalidValue;
  if (c.event_id == 0 || res_.events.contains(c.event_id)) return Status::InvalidResourceHandle;
  int device = 0;
  std::shared_ptr<BackendEvent> ev = shared_.ipc->open_event(c.token, shared_.id, device);
  if (ev == nullptr) return Status::InvalidResourceHandle;
  if (Status st = check_device(device); st != Status::Success) return st;
  // Recorded as far as this client knows: its waits and queries go to the event as it is (a
  // wait on an event never recorded passes, as the driver's).
  EventEntry entry{std::move(ev), device, false};
  entry.recorded = true;
  entry.interprocess = true;
  entry.imported = true;
  res_.events.emplace(c.event_id, std::move(entry));
  add(counters_.events, 1);
  answers_.answer(h, {static_cast<uint64_t>(device)});
  return Status::Success;
}

}  // namespace funnel::server
