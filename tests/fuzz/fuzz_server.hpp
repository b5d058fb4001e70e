// The in-process funnel-server (sim backend, two devices of 64 MiB, a 64 KiB ring, 64 KiB
// staging slots) that both fuzz targets run their inputs against, in a private directory
// of /dev/shm; stopped and removed at exit.
#pragma once
#include <signal.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "funnel/server/server.hpp"
#include "funnel/server/sim_backend.hpp"

namespace funnel::fuzz {

struct FuzzServer {
  std::filesystem::path dir;
  std::filesystem::path run_dir;
  std::unique_ptr<server::Server> server;
  std::thread thread;
};

// Reachable until exit: LeakSanitizer does not count what it holds.
inline FuzzServer*& fuzz_server() {
  static FuzzServer* s = nullptr;
  return s;
}

inline void stop_fuzz_server() {
  FuzzServer* s = fuzz_server();
  if (s == nullptr || !s->server) return;
  s->server->request_stop();
  s->thread.join();
  s->server.reset();
  std::error_code ec;
  std::filesystem::remove_all(s->dir, ec);
}

// Directories of fuzzing processes that are gone (killed at a finding).
inline void remove_stale_fuzz_dirs() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("funnel-fuzz-", 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + std::strlen("funnel-fuzz-"), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) std::filesystem::remove_all(e.path(), ec);
  }
}

// Starts the server (`staging_slots` of 64 KiB each) and registers its stop at exit.
inline FuzzServer& start_fuzz_server(uint32_t staging_slots) {
  remove_stale_fuzz_dirs();
  auto* s = new FuzzServer;
  fuzz_server() = s;
  std::string tmpl = "/dev/shm/funnel-fuzz-" + std::to_string(::getpid()) + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "funnel fuzz: mkdtemp in /dev/shm failed: %s\n", std::strerror(errno));
    std::abort();
  }
  s->dir = tmpl;
  s->run_dir = s->dir / "run";
  server::ServerOptions o;
  o.run_dir = s->run_dir;
  o.staging_slots = staging_slots;
  o.staging_slot_bytes = 64 * 1024;
  o.ring_capacity = 64 * 1024;
  o.max_clients = 4096;
  server::SimOptions so;
  so.devices = 2;
  so.memory_bytes = uint64_t{64} << 20;
  s->server = std::make_unique<server::Server>(std::move(o), server::make_sim_backend(so));
  s->server->start();
  s->thread = std::thread([s] { s->server->run(); });
  std::atexit(stop_fuzz_server);
  return *s;
}

}  // namespace funnel::fuzz
