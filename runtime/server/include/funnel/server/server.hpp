// The node-local funnel-server: one listening socket, one worker thread per client.
// run() is the epoll loop; request_stop() may be called from any thread (tests,
// the control verb `shutdown`), SIGTERM/SIGINT do the same when handle_signals is set.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "funnel/server/backend.hpp"

namespace funnel::server {

struct ServerOptions {
  std::filesystem::path run_dir;
  std::optional<std::chrono::milliseconds> idle_exit;  // absent: run until stopped
  uint32_t max_clients = 256;
  uint32_t staging_slots = 4;
  uint64_t staging_slot_bytes = 2u << 20;
  uint64_t ring_capacity = 1u << 20;
  uint32_t reply_slots = 64;
  bool handle_signals = false;  // SIGTERM/SIGINT through a signalfd (the caller blocked them)
};

// A second live server for the same run directory: the caller exits 1.
class AlreadyRunning : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Server {
 public:
  Server(ServerOptions options, std::unique_ptr<Backend> backend);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Prepares the run directory (removing a stale one's files) and listens.  Throws
  // AlreadyRunning or std::exception with a message that says what to do.
  void start();
  // Serves until stopped or idle; tears every client down and removes the files.
  void run();
  void request_stop() noexcept;

  const std::filesystem::path& run_dir() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace funnel::server
