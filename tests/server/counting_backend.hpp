// A backend that forwards every call to another one (the sim) and counts the event
// records, so that a test sees how many events the server recorded for its commands.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "funnel/server/backend.hpp"

namespace funnel::test {

class CountingBackend final : public server::Backend {
 public:
  using Status = ipc::Status;
  using DeviceAddress = server::DeviceAddress;

  explicit CountingBackend(std::unique_ptr<server::Backend> inner) : in_(std::move(inner)) {}

  // Event records so far (the server's own completion events and marks, and the client's).
  uint64_t records() const noexcept { return records_.load(); }

  Status record(server::BackendEvent& e, server::BackendStream& s) override {
    records_.fetch_add(1);
    return in_->record(e, s);
  }

  const char* name() const noexcept override { return in_->name(); }
  int device_count() const noexcept override { return in_->device_count(); }
  void describe(int device, ipc::DeviceRecord& out) override { in_->describe(device, out); }
  Status mem_get_info(int device, uint64_t& free_bytes, uint64_t& total_bytes) override {
    return in_->mem_get_info(device, free_bytes, total_bytes);
  }
  Status mem_alloc(int device, uint64_t size, DeviceAddress& out) override { return in_->mem_alloc(device, size, out); }
  Status mem_free(int device, DeviceAddress address) override { return in_->mem_free(device, address); }
  Status mem_alloc_async(server::BackendStream& s, uint64_t size, DeviceAddress& out) override {
    return in_->mem_alloc_async(s, size, out);
  }
  Status mem_free_async(server::BackendStream& s, DeviceAddress address) override {
    return in_->mem_free_async(s, address);
  }
  Status host_register(void* p, uint64_t size) override { return in_->host_register(p, size); }
  Status host_unregister(void* p) override { return in_->host_unregister(p); }
  void priority_range(int device, int& least, int& greatest) override { in_->priority_range(device, least, greatest); }
  Status create_stream(int device, int priority, std::unique_ptr<server::BackendStream>& out) override {
    return in_->create_stream(device, priority, out);
  }
  Status create_event(int device, bool timing, std::unique_ptr<server::BackendEvent>& out) override {
    return in_->create_event(device, timing, out);
  }
  Status copy(server::BackendStream& s, const server::CopyDesc& c) override { return in_->copy(s, c); }
  Status memset(server::BackendStream& s, DeviceAddress dst, uint64_t pitch, uint64_t width, uint64_t height,
                uint8_t value) override {
    return in_->memset(s, dst, pitch, width, height, value);
  }
  Status write_value(server::BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) override {
    return in_->write_value(s, word, value);
  }
  Status wait(server::BackendStream& s, server::BackendEvent& e) override { return in_->wait(s, e); }
  Status query(server::BackendEvent& e) override { return in_->query(e); }
  Status query(server::BackendStream& s) override { return in_->query(s); }
  Status elapsed_ms(server::BackendEvent& start, server::BackendEvent& end, float& ms) override {
    return in_->elapsed_ms(start, end, ms);
  }
  Status synchronize(server::BackendStream& s) override { return in_->synchronize(s); }
  Status module_load(std::span<const std::byte> image, std::unique_ptr<server::BackendModule>& out) override {
    return in_->module_load(image, out);
  }
  Status kernel_get(server::BackendModule& m, const std::string& name, std::unique_ptr<server::BackendKernel>& out,
                    std::vector<server::ParamLayout>& params, uint32_t& param_bytes) override {
    return in_->kernel_get(m, name, out, params, param_bytes);
  }
  Status global_get(server::BackendModule& m, int device, const std::string& name, DeviceAddress& address,
                    uint64_t& size) override {
    return in_->global_get(m, device, name, address, size);
  }
  Status launch(server::BackendStream& s, server::BackendKernel& k, const server::LaunchDesc& d,
                std::span<const std::byte> params) override {
    return in_->launch(s, k, d, params);
  }
  Status func_attributes(server::BackendKernel& k, int device, ipc::FuncAttributes& out) override {
    return in_->func_attributes(k, device, out);
  }
  Status func_set_attribute(server::BackendKernel& k, int device, uint32_t attribute, int32_t value) override {
    return in_->func_set_attribute(k, device, attribute, value);
  }
  Status occupancy(server::BackendKernel& k, int device, uint32_t block_size, uint64_t dynamic_shared_bytes,
                   uint32_t flags, int& blocks_per_sm) override {
    return in_->occupancy(k, device, block_size, dynamic_shared_bytes, flags, blocks_per_sm);
  }
  Status available_dynamic_smem(server::BackendKernel& k, int device, uint32_t blocks_per_sm, uint32_t block_size,
                                uint64_t& bytes) override {
    return in_->available_dynamic_smem(k, device, blocks_per_sm, block_size, bytes);
  }
  Status max_active_clusters(server::BackendKernel& k, int device, const server::LaunchDesc& d, int& clusters) override {
    return in_->max_active_clusters(k, device, d, clusters);
  }
  Status wait_value(server::BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) override {
    return in_->wait_value(s, word, value);
  }
  Status set_limit(int device, server::Limit limit, uint64_t value) override { return in_->set_limit(device, limit, value); }
  Status get_limit(int device, server::Limit limit, uint64_t& value) override {
    return in_->get_limit(device, limit, value);
  }
  Status reset_device(int device) override { return in_->reset_device(device); }

 private:
  std::unique_ptr<server::Backend> in_;
  std::atomic<uint64_t> records_{0};
};

}  // namespace funnel::test
