#include "funnel/common/control_client.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "funnel/common/launcher.hpp"
#include "funnel/ipc/channel_layout.hpp"
#include "funnel/ipc/protocol.hpp"

namespace funnel {

std::string control_request(const Settings& s, const std::string& verb, const std::string& arg) {
  if (verb.size() >= sizeof ipc::ControlRequest::verb || arg.size() >= sizeof ipc::ControlRequest::arg)
    throw std::runtime_error(fmt::format("the control request '{} {}' is too long", verb, arg));
  auto fd = connect_server(s);
  if (!fd)
    throw std::runtime_error(fmt::format("no funnel-server answers in {} (FUNNEL_RUN_DIR): {}", s.run_dir.string(),
                                         std::strerror(errno)));
  ipc::HelloMsg hello{};
  hello.magic = ipc::kSocketMagic;
  hello.version = ipc::kProtocolVersion;
  hello.role = ipc::Role::Control;
  hello.pid = static_cast<int32_t>(::getpid());
  hello.mpi_rank = -1;
  std::snprintf(hello.command, sizeof hello.command, "funnelctl %s", verb.c_str());
  ipc::ControlRequest req{};
  std::snprintf(req.verb, sizeof req.verb, "%s", verb.c_str());
  std::snprintf(req.arg, sizeof req.arg, "%s", arg.c_str());
  if (!ipc::send_message(fd.get(), &hello, sizeof hello) || !ipc::send_message(fd.get(), &req, sizeof req))
    throw std::runtime_error(fmt::format("cannot talk to funnel-server in {}: {}", s.run_dir.string(),
                                         std::strerror(errno)));
  std::vector<char> buf(ipc::kMaxControlReply + 1);
  const ssize_t n = ipc::recv_message(fd.get(), buf.data(), ipc::kMaxControlReply, std::chrono::milliseconds(10000));
  if (n <= 0)
    throw std::runtime_error(fmt::format("funnel-server in {} did not answer '{}': {}", s.run_dir.string(), verb,
                                         n == 0 ? "it hung up" : std::strerror(errno)));
  return std::string(buf.data(), static_cast<size_t>(n));
}

std::string server_plan_text(const Settings& settings, size_t min_clients) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    const auto j = nlohmann::json::parse(control_request(settings, "plan"), nullptr, false);
    if (j.is_discarded() || !j.is_object())
      throw std::runtime_error(fmt::format("funnel-server in {} answered 'plan' with malformed JSON", settings.run_dir.string()));
    if (j.contains("error"))
      throw std::runtime_error(fmt::format("funnel-server in {}: {}", settings.run_dir.string(), j["error"].dump()));
    if (j.value("clients", nlohmann::json::array()).size() >= min_clients || std::chrono::steady_clock::now() >= until)
      return j.value("text", "");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace funnel
