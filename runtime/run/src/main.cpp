// funnel-run [--backend cuda|sim] [--run-dir DIR] [--mpi-hooks auto|1|0] [--] prog args...
//
// Checks the program (a static CUDA runtime needs funnel's client driver), puts the client
// runtime in front of the real libcudart (LD_PRELOAD + LD_LIBRARY_PATH) and the client driver
// in front of NVIDIA's libcuda.so.1 (FUNNEL_CLIENT_DRIVER) and execs the program.  Under an MPI launcher (FUNNEL_MPI_HOOKS) it preloads the MPI hooks as well,
// so that the program's MPI_Init starts the node's funnel-server and its MPI_Finalize
// stops it, as for a program linked with funnel::mpi (doc/mpi.md); otherwise it starts the
// job's server in the background if none answers (the program's start-up hides the server's).
//
// Exit codes: 2 bad settings or arguments, 3 program refused, 4 no server (a run directory
// refused, no fork; a start that fails later fails the program's first CUDA call), 127 exec
// failed.
#include <sys/personality.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "funnel/common/config.hpp"
#include "funnel/common/elf_check.hpp"
#include "funnel/common/launcher.hpp"

namespace fs = std::filesystem;

namespace {

constexpr const char* kUsage = "funnel-run [--backend cuda|sim] [--run-dir DIR] [--mpi-hooks auto|1|0] PROGRAM [ARGS...]";

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

#ifdef FUNNEL_MPI_HOOKS_LIBRARY
// The MPI C library `info` needs directly ("libmpi.so.40", "libmpich.so.12"); "" if none.
std::string mpi_library(const funnel::ElfInfo& info) {
  for (const auto& n : info.needed)
    if (n.starts_with("libmpi.so.") || n.starts_with("libmpich.so.")) return n;
  return "";
}
#endif

struct HooksChoice {
  fs::path library;     // the MPI hooks to preload; empty: none
  std::string problem;  // why hooks that are wanted cannot be preloaded; empty: none
};

// Whether to preload the MPI hooks (libfunnel_mpi.so, found by its soname in `lib_dir`,
// beside the client runtime). A program that is linked with them already gets the same
// one copy (the dynamic linker matches its DT_NEEDED against the preloaded soname). One
// that needs another MPI library than the hooks were built with must not get them: their
// MPI_Init would mix two MPI implementations.
HooksChoice choose_mpi_hooks(const funnel::Settings& s, const std::string& launcher, const fs::path& lib_dir,
                             const std::optional<funnel::ElfInfo>& program) {
  if (s.mpi_hooks == funnel::MpiHooks::Off || (s.mpi_hooks == funnel::MpiHooks::Auto && launcher.empty())) return {};
#ifdef FUNNEL_MPI_HOOKS_LIBRARY
  const fs::path hooks = lib_dir / FUNNEL_MPI_HOOKS_LIBRARY;
  const auto info = funnel::inspect_elf(hooks);
  if (!info) return {{}, fmt::format("the MPI hooks {} are missing or unreadable", hooks.string())};
  const std::string ours = mpi_library(*info);
  const std::string theirs = program ? mpi_library(*program) : "";
  if (!theirs.empty() && theirs != ours)
    return {{}, fmt::format("the program uses {} but the MPI hooks {} were built with {}", theirs, hooks.string(),
                            ours.empty() ? "another MPI" : ours)};
  return {hooks, ""};
#else
  (void)lib_dir;
  (void)program;
  return {{}, "this funnel-run was built without MPI (there is no libfunnel_mpi.so)"};
#endif
}

std::string appended(const char* var, const std::string& item, bool front) {
  const char* old = std::getenv(var);
  if (old == nullptr || *old == '\0') return item;
  return front ? item + ":" + old : std::string(old) + ":" + item;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"funnel-run: run a CUDA program (any CUDA runtime, the driver API, NVIDIA's libraries) on the job's "
               "funnel-server"};
  std::string backend, run_dir, mpi_hooks;
  std::vector<std::string> command;
  app.add_option("--backend", backend, "backend of a server that gets started: cuda or sim (FUNNEL_BACKEND)");
  app.add_option("--run-dir", run_dir, "the job's run directory (FUNNEL_RUN_DIR)");
  app.add_option("--mpi-hooks", mpi_hooks,
                 "preload the MPI hooks, so that MPI_Init starts the server and MPI_Finalize stops it: auto (under "
                 "an MPI launcher), 1 or 0 (FUNNEL_MPI_HOOKS)");
  // Everything from the program on belongs to the program, options included, in order:
  // CLI11's prefix mode leaves it all in remaining() (a positional option would take the
  // program's positionals but leave its options behind).
  app.prefix_command();
  app.footer(fmt::format("usage: {}", kUsage));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  command = app.remaining();
  if (command.empty()) {
    std::fprintf(stderr, "funnel-run: no program given: %s\n", kUsage);
    return 2;
  }
  // Command-line options are environment settings for us and the program alike.
  if (!backend.empty()) ::setenv("FUNNEL_BACKEND", backend.c_str(), 1);
  if (!run_dir.empty()) ::setenv("FUNNEL_RUN_DIR", run_dir.c_str(), 1);
  if (!mpi_hooks.empty()) ::setenv("FUNNEL_MPI_HOOKS", mpi_hooks.c_str(), 1);

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
  const auto program_info = funnel::inspect_elf(program);
  // A program that carries NVIDIA's runtime reaches the GPU through libcuda.so.1: funnel's client
  // driver serves it, NVIDIA's would give it a context of its own.
  if (!settings.client_driver && program_info && funnel::uses_static_cudart(*program_info)) {
    std::fprintf(stderr, "funnel-run: %s\n", funnel::static_cudart_message(command[0]).c_str());
    return 3;
  }

  const fs::path lib = client_library();
  const funnel::Settings::Lookup env = funnel::Settings::environment;
  const std::string launcher = funnel::mpi_launcher_variable(env);
  const HooksChoice hooks = choose_mpi_hooks(settings, launcher, lib.parent_path(), program_info);
  if (!hooks.problem.empty()) {
    if (settings.mpi_hooks == funnel::MpiHooks::On) {
      std::fprintf(stderr, "funnel-run: FUNNEL_MPI_HOOKS=1 asks for the MPI hooks, but %s\n", hooks.problem.c_str());
      return 2;
    }
    // Once per node, not once per rank.
    if (funnel::launcher_local_rank(env).rank == 0)
      std::fprintf(stderr,
                   "funnel-run: warning: running under an MPI launcher (%s is set), but %s: funnel-server is not "
                   "stopped at MPI_Finalize but FUNNEL_IDLE_EXIT_MS after the job's last process left "
                   "(FUNNEL_MPI_HOOKS=0 silences this)\n",
                   launcher.c_str(), hooks.problem.c_str());
  }

  // With the hooks, the node's first MPI_Init starts the server (under the run directory's
  // start lock) and its MPI_Finalize stops it -- but only one that it started: a server
  // started here would outlive the job until its idle timer.  Without them a server that does
  // not answer yet is started in the background while the program starts (its interpreter,
  // imports, input): the program's first CUDA call waits for that start (launcher.hpp).
  if (hooks.library.empty()) {
    try {
      funnel::start_server_in_background(settings);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "funnel-run: %s\n", e.what());
      return 4;
    }
  }

  std::string preload = lib.string();
  if (!hooks.library.empty()) preload += ":" + hooks.library.string();
  // After any existing entries: a sanitizer runtime must stay first.
  ::setenv("LD_PRELOAD", appended("LD_PRELOAD", preload, false).c_str(), 1);
  // Our libcudart's folder first, and with FUNNEL_CLIENT_DRIVER=1 our libcuda.so.1's before it: the
  // program and every library it opens find funnel's driver, never NVIDIA's (a server this program
  // starts gets neither: server_environment).
  std::string libs = lib.parent_path().string();
  if (settings.client_driver) {
    const std::string driver = (lib.parent_path() / "funnel-driver").string();
    if (::access((driver + "/libcuda.so.1").c_str(), R_OK) != 0) {
      std::fprintf(stderr,
                   "funnel-run: funnel's client driver %s is missing, so the program's driver calls (and "
                   "NVIDIA's libraries) would reach NVIDIA's driver: build or install it (target funnel_driver), "
                   "or set FUNNEL_CLIENT_DRIVER=0 to run shared-runtime programs without it\n",
                   (driver + "/libcuda.so.1").c_str());
      return 2;
    }
    libs = driver + ":" + libs;
  }
  ::setenv("LD_LIBRARY_PATH", appended("LD_LIBRARY_PATH", libs, true).c_str(), 1);
  ::setenv("FUNNEL_RUN_DIR", settings.run_dir.c_str(), 1);
  ::setenv("FUNNEL_BACKEND", funnel::to_string(settings.backend), 1);
  ::setenv("FUNNEL_SERVER", funnel::server_binary(settings).c_str(), 1);

  // FUNNEL_CLIENT_LAYOUT=low: the program's mappings grow up from a third of the address
  // space, far below the server's device addresses at its top (doc/reliability.md).
  if (settings.client_layout_low) {
    const int current = ::personality(0xffffffff);
    if (current != -1 && ::personality(static_cast<unsigned long>(current) | ADDR_COMPAT_LAYOUT) == -1)
      std::fprintf(stderr, "funnel-run: warning: cannot choose the low memory layout (FUNNEL_CLIENT_LAYOUT): %s\n",
                   std::strerror(errno));
  }
  std::vector<char*> args;
  for (auto& a : command) args.push_back(a.data());
  args.push_back(nullptr);
  ::execv(program.c_str(), args.data());
  std::fprintf(stderr, "funnel-run: cannot execute %s: %s\n", program.c_str(), std::strerror(errno));
  return 127;
}
