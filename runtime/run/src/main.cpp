// funnel-run [--backend cuda|sim] [--run-dir DIR] [--] prog args...
//
// Checks the program (a static CUDA runtime cannot be intercepted), makes sure the
// job's funnel-server runs (so the program's first CUDA call is fast), puts the
// client runtime in front of the real libcudart (LD_PRELOAD + LD_LIBRARY_PATH) and
// execs the program.
//
// Exit codes: 2 bad settings or arguments, 3 program refused, 4 no server, 127 exec failed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "funnel/common/config.hpp"
#include "funnel/common/elf_check.hpp"
#include "funnel/common/launcher.hpp"

namespace fs = std::filesystem;

namespace {

// `prog` as execvp would find it.
fs::path resolve_program(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return prog;
  const char* path = std::getenv("PATH");
  std::string_view rest = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const auto colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / prog;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) break;
    rest = rest.substr(colon + 1);
  }
  return {};
}

// Our lib directory: ../lib beside this executable (the build tree and an install
// have the same shape).
fs::path client_library() {
  const fs::path self = funnel::own_file();
  for (const auto& c : {self.parent_path() / ".." / "lib" / "libcudart.so.13", self.parent_path() / "libcudart.so.13"}) {
    if (::access(c.c_str(), R_OK) == 0) return fs::weakly_canonical(c);
  }
  return fs::weakly_canonical(self.parent_path() / ".." / "lib" / "libcudart.so.13");
}

std::string appended(const char* var, const std::string& item, bool front) {
  const char* old = std::getenv(var);
  if (old == nullptr || *old == '\0') return item;
  return front ? item + ":" + old : std::string(old) + ":" + item;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"funnel-run: run a CUDA program (built with `nvcc -cudart shared`) on the job's funnel-server"};
  std::string backend, run_dir;
  std::vector<std::string> command;
  app.add_option("--backend", backend, "backend of a server that gets started: cuda or sim (FUNNEL_BACKEND)");
  app.add_option("--run-dir", run_dir, "the job's run directory (FUNNEL_RUN_DIR)");
  // Everything from the program on belongs to the program, options included, in order:
  // CLI11's prefix mode leaves it all in remaining() (a positional option would take the
  // program's positionals but leave its options behind).
  app.prefix_command();
  app.footer("usage: funnel-run [--backend cuda|sim] [--run-dir DIR] PROGRAM [ARGS...]");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  command = app.remaining();
  if (command.empty()) {
    std::fprintf(stderr, "funnel-run: no program given: funnel-run [--backend cuda|sim] [--run-dir DIR] PROGRAM [ARGS...]\n");
    return 2;
  }
  // Command-line options are environment settings for us and the program alike.
  if (!backend.empty()) ::setenv("FUNNEL_BACKEND", backend.c_str(), 1);
  if (!run_dir.empty()) ::setenv("FUNNEL_RUN_DIR", run_dir.c_str(), 1);

  funnel::Settings settings;
  try {
    settings = funnel::Settings::from_environment();
  } catch (const funnel::ConfigError& e) {
    std::fprintf(stderr, "funnel-run: %s\n", e.what());
    return 2;
  }

  const fs::path program = resolve_program(command[0]);
  if (program.empty()) {
    std::fprintf(stderr, "funnel-run: %s: command not found\n", command[0].c_str());
    return 127;
  }
  if (auto info = funnel::inspect_elf(program); info && funnel::uses_static_cudart(*info)) {
    std::fprintf(stderr, "funnel-run: %s\n", funnel::static_cudart_message(command[0]).c_str());
    return 3;
  }

  try {
    // The connection only proves the server is up; the program attaches by itself.
    (void)funnel::connect_or_start_server(settings);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "funnel-run: %s\n", e.what());
    return 4;
  }

  const fs::path lib = client_library();
  // After any existing entries: a sanitizer runtime must stay first.
  ::setenv("LD_PRELOAD", appended("LD_PRELOAD", lib.string(), false).c_str(), 1);
  ::setenv("LD_LIBRARY_PATH", appended("LD_LIBRARY_PATH", lib.parent_path().string(), true).c_str(), 1);
  ::setenv("FUNNEL_RUN_DIR", settings.run_dir.c_str(), 1);
  ::setenv("FUNNEL_BACKEND", funnel::to_string(settings.backend), 1);
  ::setenv("FUNNEL_SERVER", funnel::server_binary(settings).c_str(), 1);

  std::vector<char*> args;
  for (auto& a : command) args.push_back(a.data());
  args.push_back(nullptr);
  ::execv(program.c_str(), args.data());
  std::fprintf(stderr, "funnel-run: cannot execute %s: %s\n", program.c_str(), std::strerror(errno));
  return 127;
}
