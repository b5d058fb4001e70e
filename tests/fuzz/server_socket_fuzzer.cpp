// libFuzzer target over the server's socket side (doc/reliability.md, "Fuzzing"): the hello,
// control verbs and their arguments, the mapped message, raw bytes.  One funnel::server::Server
// (sim backend) runs in this process for the whole session.  An input is a sequence of steps,
//   uint8_t  op        op % 4: 0 raw message on a new connection, 1 control request (a valid
//                      control hello, then the bytes as verb and argument), 2 client hello (a
//                      valid head, the bytes over the rest; then a mapped message from the
//                      reply), 3 raw message on the last connection
//   uint16_t len       little endian, clamped to what is left
//   len bytes
// What must hold, else the target aborts: every control request is answered with JSON; the
// server keeps running (a "stats" request after the input answers, with no client left); and
// ASan, UBSan and LeakSanitizer watch the server code.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "funnel/ipc/protocol.hpp"
#include "funnel/ipc/socket.hpp"
#include "funnel/server/server.hpp"
#include "fuzz_server.hpp"
#include "test_client.hpp"

namespace {

using namespace funnel;

[[noreturn]] void broken(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "\nfunnel socket fuzz: %s %s\n", what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

const std::filesystem::path* run_dir = nullptr;  // the fuzz server's

ipc::UniqueFd connect() {
  int err = 0;
  auto fd = ipc::connect_seqpacket(*run_dir / ipc::kSocketName, err);
  if (!fd) broken("cannot connect:", std::strerror(err));
  return fd;
}

ipc::HelloMsg valid_hello(ipc::Role role) {
  ipc::HelloMsg h{};
  h.magic = ipc::kSocketMagic;
  h.version = ipc::kProtocolVersion;
  h.role = role;
  h.pid = ::getpid();
  return h;
}

// Whatever the server sends within `wait` (a reply or a hang-up); -1: nothing.
ssize_t drain(int fd, std::chrono::milliseconds wait) {
  std::vector<char> buf(ipc::kMaxControlReply + 1);
  return ipc::recv_message(fd, buf.data(), buf.size(), wait);
}

void control_step(std::string_view bytes) {
  auto fd = connect();
  const auto h = valid_hello(ipc::Role::Control);
  ipc::ControlRequest req{};
  const size_t verb_len = std::min(bytes.size(), sizeof req.verb - 1);
  std::memcpy(req.verb, bytes.data(), verb_len);
  bytes.remove_prefix(verb_len);
  std::memcpy(req.arg, bytes.data(), std::min(bytes.size(), sizeof req.arg - 1));
  // The one verb that ends the session: the server stops at exit (stop_fuzz_server).
  if (std::strncmp(req.verb, "shutdown", sizeof req.verb) == 0) req.verb[0] = 'S';
  if (!ipc::send_message(fd.get(), &h, sizeof h) || !ipc::send_message(fd.get(), &req, sizeof req))
    broken("cannot send a control request");
  std::string answer(ipc::kMaxControlReply, '\0');
  const ssize_t n = ipc::recv_message(fd.get(), answer.data(), answer.size(), std::chrono::seconds(5));
  if (n <= 0) broken("a control request was not answered; verb bytes:", std::to_string(verb_len));
  answer.resize(static_cast<size_t>(n));
  if (nlohmann::json::parse(answer, nullptr, false).is_discarded()) broken("a control answer is not JSON:", answer);
}

void client_step(std::string_view bytes) {
  auto fd = connect();
  auto h = valid_hello(ipc::Role::Client);
  // The fields after the role (pid, rank, command, limits, fraction, placement, priority).
  constexpr size_t kHead = offsetof(ipc::HelloMsg, pid);
  std::memcpy(reinterpret_cast<char*>(&h) + kHead, bytes.data(), std::min(bytes.size(), sizeof h - kHead));
  if (!ipc::send_message(fd.get(), &h, sizeof h)) broken("cannot send a hello");
  ipc::AttachReply rep{};
  const ssize_t n = ipc::recv_message(fd.get(), &rep, sizeof rep, std::chrono::seconds(5));
  if (n != static_cast<ssize_t>(sizeof rep)) broken("a client hello was not answered");
  if (rep.status != 0 || bytes.size() < sizeof h - kHead + 4) return;
  // A mapped message, its home device from the input (out of range too), then a hang-up.
  ipc::MappedMsg m{rep.client_id, 0};
  std::memcpy(&m.home_device, bytes.data() + (sizeof h - kHead), sizeof m.home_device);
  ipc::send_message(fd.get(), &m, sizeof m);
}

void run_input(const uint8_t* data, size_t size) {
  std::vector<ipc::UniqueFd> open;
  size_t at = 0;
  while (size - at >= 3) {
    const uint8_t op = data[at] % 4;
    size_t len = static_cast<size_t>(data[at + 1]) | (static_cast<size_t>(data[at + 2]) << 8);
    at += 3;
    len = std::min(len, size - at);
    const std::string_view bytes(reinterpret_cast<const char*>(data + at), len);
    at += len;
    switch (op) {
      case 0:
        open.push_back(connect());
        [[fallthrough]];
      case 3:
        if (open.empty()) open.push_back(connect());
        if (bytes.size() == sizeof(ipc::ControlRequest) && bytes.starts_with("shutdown")) {
          std::string copy(bytes);  // a control request after a raw control hello: not this one
          copy[0] = 'S';
          ::send(open.back().get(), copy.data(), copy.size(), MSG_NOSIGNAL);
        } else {
          ::send(open.back().get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
        }
        drain(open.back().get(), std::chrono::milliseconds(20));
        break;
      case 1:
        control_step(bytes);
        break;
      default:
        client_step(bytes);
        break;
    }
  }
  open.clear();
  // Still serving, and every client of this input gone.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const auto j = nlohmann::json::parse(test::control(*run_dir, "stats"), nullptr, false);
    if (j.is_discarded() || !j.contains("server")) broken("the server stopped answering stats");
    if (j["server"]["clients"] == 0) break;
    if (std::chrono::steady_clock::now() > until) broken("clients of an ended input are still attached");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(std::getenv("FUNNEL_FUZZ_VERBOSE") != nullptr ? spdlog::level::debug : spdlog::level::off);
  ::signal(SIGPIPE, SIG_IGN);
  run_dir = &fuzz::start_fuzz_server(2).run_dir;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  run_input(data, size);
  return 0;
}
