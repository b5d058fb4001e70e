// An in-process funnel-server (sim backend) in a private /dev/shm directory, and a
// watchdog so that no server test can hang the suite.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "funnel/server/server.hpp"
#include "funnel/server/sim_backend.hpp"
#include "test_client.hpp"

namespace funnel::test {

// Ends the process (with a message) if the test body runs longer than `limit`.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit = std::chrono::seconds(30)) {
    thread_ = std::thread([this, limit] {
      std::unique_lock lk(m_);
      if (!cv_.wait_for(lk, limit, [this] { return done_; })) {
        std::fprintf(stderr, "watchdog: %s took longer than %lld s\n",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                     static_cast<long long>(limit.count()));
        std::fflush(stderr);
        std::_Exit(99);
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard lk(m_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

inline std::filesystem::path make_temp_dir() {
  char tmpl[] = "/dev/shm/funnel-server-test-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  if (d == nullptr) throw std::runtime_error("mkdtemp failed");
  return d;
}

// The server's stats verb, parsed (null when it did not answer).
inline nlohmann::json stats(const std::filesystem::path& run_dir) {
  const std::string s = control(run_dir, "stats");
  return s.empty() ? nlohmann::json{} : nlohmann::json::parse(s);
}

// 20 s by default: it returns as soon as pred() holds, and a sanitizer build on a loaded
// 2-core machine needed more than 5 s to notice a killed client or to stop.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir();
    run_dir_ = dir_ / "run";
  }
  void TearDown() override {
    stop_server();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  server::ServerOptions options() const {
    server::ServerOptions o;
    o.run_dir = run_dir_;
    o.staging_slots = 4;
    o.staging_slot_bytes = 64 * 1024;
    o.ring_capacity = 64 * 1024;
    // The server.pooled run of this suite: every test again with pooled worker threads.
    if (const char* w = std::getenv("FUNNEL_SERVER_WORKERS"); w != nullptr && *w != '\0')
      o.worker_threads = static_cast<uint32_t>(std::strtoul(w, nullptr, 10));
    return o;
  }

  void start_server(server::ServerOptions o, int devices = 2, uint64_t memory = uint64_t{1} << 30) {
    server::SimOptions so;
    so.devices = devices;
    so.memory_bytes = memory;
    so.launch_log = launch_log_;
    so.fault_kernel = fault_kernel_;
    so.stream_write_delay = stream_write_delay_;
    so.kernel_stores = kernel_stores_;
    so.stream_write_value = stream_write_value_;
    so.before_store = before_store_;
    so.store_after_idle = store_after_idle_;
    auto backend = server::make_sim_backend(so);
    backend_ = backend.get();
    server_ = std::make_unique<server::Server>(std::move(o), std::move(backend));
    server_->start();
    thread_ = std::thread([this] {
      try {
        server_->run();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "server run failed: " << e.what();
      }
      finished_ = true;
    });
  }
  void start_server() { start_server(options()); }
  // A server with ServerOptions::gpu_replies set to `mode` (and a client of it).
  void start_server(GpuReplies mode) {
    auto o = options();
    o.gpu_replies = mode;
    start_server(o);
  }
  TestClient start_with_gpu_replies(GpuReplies mode) {
    start_server(mode);
    return TestClient(run_dir_);
  }

  void stop_server() {
    if (server_) server_->request_stop();
    if (thread_.joinable()) thread_.join();
    server_.reset();
    backend_ = nullptr;
  }

  Watchdog watchdog_;
  std::filesystem::path dir_, run_dir_;
  std::unique_ptr<server::Server> server_;
  server::Backend* backend_ = nullptr;  // the server's, while it runs
  std::string launch_log_;              // SimOptions::launch_log of the next start_server
  std::string fault_kernel_;            // SimOptions::fault_kernel of the next start_server
  std::chrono::microseconds stream_write_delay_{0};  // SimOptions::stream_write_delay, likewise
  bool kernel_stores_ = true;                        // SimOptions::kernel_stores, likewise
  std::function<uint32_t(uint32_t)> stream_write_value_;  // SimOptions::stream_write_value, likewise
  std::function<void(uint32_t)> before_store_;             // SimOptions::before_store, likewise
  std::function<bool(uint32_t)> store_after_idle_;         // SimOptions::store_after_idle, likewise
  std::thread thread_;
  std::atomic<bool> finished_{false};
};

}  // namespace funnel::test
