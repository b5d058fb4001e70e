// MPI_Init, MPI_Init_thread and MPI_Finalize over PMPI (doc/mpi.md).
//
// Init: PMPI first; then the rank finds the job's funnel-server or starts it (under the run
// directory's start lock: exactly one rank starts it), attaches, and joins the job's ranks on the
// server (local::init).  No MPI collective: a rank of the job that is not under funnel (an MPMD
// job's other program) calls none of this and keeps nobody waiting.
// Finalize: drain and detach (funnel_detach); the rank whose MPI_Init started the server then asks
// it to stop once every rank has detached (a graceful shutdown: it takes no new clients), after
// the node's ranks of the job have all joined, then PMPI_Finalize.
//
// No exception leaves these functions.  A failure at Init aborts the job with a message
// naming the problem (the program cannot do CUDA work without a server, and most
// programs do not check MPI_Init's result); a failure at Finalize is reported and the
// job finalizes anyway.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "funnel/common/config.hpp"
#include "funnel/common/control_client.hpp"
#include "funnel/funnel.h"
#include "local.hpp"
#include "node_server.hpp"
#include "staging.hpp"

#define FUNNEL_MPI_API extern "C" __attribute__((visibility("default")))

namespace funnel::mpi {
namespace {

struct HookState {
  bool attached = false;
  NodeServer server;
};
HookState g_state;

constexpr int kMessageBytes = 1024;

[[noreturn]] void abort_job(const char* what) noexcept {
  std::fprintf(stderr, "funnel (libfunnel_mpi, pid %d): %s; aborting the job\n", static_cast<int>(::getpid()), what);
  std::fflush(stderr);
  PMPI_Abort(MPI_COMM_WORLD, 1);
  ::_exit(1);
}

// FUNNEL_PRINT_PLAN=1: the node's first rank (by the launcher) prints the server's placement plan
// once the node's ranks of the job have joined.
void print_plan_if_asked() noexcept {
  try {
    const funnel::Settings s = funnel::Settings::from_environment();
    if (!s.print_plan || funnel::launcher_local_rank(&funnel::Settings::environment).rank != 0) return;
    const int ranks = local::settled_ranks();
    std::string text = funnel::server_plan_text(s, static_cast<size_t>(std::max(ranks, 1)));
    std::fprintf(stderr, "funnel (libfunnel_mpi): placement plan of funnel-server in %s, %d rank(s) on this node:\n%s",
                 s.run_dir.c_str(), ranks, text.c_str());
    std::fflush(stderr);
  } catch (const std::exception& e) {
    warn((std::string("FUNNEL_PRINT_PLAN: ") + e.what()).c_str());
  }
}

void after_init() noexcept {
  char message[kMessageBytes];
  try {
    g_state.server = find_or_start_node_server();
  } catch (const std::exception& e) {
    std::snprintf(message, sizeof message, "MPI_Init: cannot find or start funnel-server: %s", e.what());
    abort_job(message);
  } catch (...) {
    abort_job("MPI_Init: cannot find or start funnel-server");
  }
  // Attach now rather than at the first CUDA call: the attach (and any problem with it)
  // belongs to start-up, and the server's accounting shows every rank from the start.
  if (const int e = funnel_attach(); e != 0) {
    std::snprintf(message, sizeof message,
                  "MPI_Init: cannot attach to funnel-server (CUDA error %d; the message above says why)", e);
    abort_job(message);
  }
  g_state.attached = true;
  // The job's ranks on this server; GPU-local messages (FUNNEL_MPI_LOCAL).
  local::init();
  print_plan_if_asked();
}

}  // namespace
}  // namespace funnel::mpi

using funnel::mpi::g_state;

FUNNEL_MPI_API int MPI_Init(int* argc, char*** argv) {
  const int rc = PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) funnel::mpi::after_init();
  return rc;
}

FUNNEL_MPI_API int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) funnel::mpi::after_init();
  return rc;
}

FUNNEL_MPI_API int MPI_Finalize(void) {
  if (g_state.attached) {
    funnel::mpi::local::finish();  // GPU-local messages whose requests the program freed
    // The stop below takes no new clients: first every rank of the node that will attach has
    // (the world settled: as many joined as the launcher put here, or 5 s passed).
    if (g_state.server.started_here) funnel::mpi::local::settled_ranks();
    if (const int e = funnel_detach(); e != 0) {
      char m[160];
      std::snprintf(m, sizeof m, "MPI_Finalize: this rank's outstanding CUDA work ended with CUDA error %d", e);
      funnel::mpi::warn(m);
    }
    g_state.attached = false;
    if (g_state.server.started_here) {
      try {
        funnel::mpi::stop_node_server();
      } catch (const std::exception& e) {
        char m[funnel::mpi::kMessageBytes];
        std::snprintf(m, sizeof m, "MPI_Finalize: cannot stop funnel-server: %s (it exits by itself once idle)",
                      e.what());
        funnel::mpi::warn(m);
      } catch (...) {
        funnel::mpi::warn("MPI_Finalize: cannot stop funnel-server (it exits by itself once idle)");
      }
    }
  }
  return PMPI_Finalize();
}

// Fortran (mpif.h and `use mpi`, gfortran's names): Open MPI's Fortran bindings call
// PMPI_Init/PMPI_Finalize directly, so the C entry points above never see a Fortran
// main program; these do, and go through them.
FUNNEL_MPI_API void mpi_init_(MPI_Fint* ierr) {
  const int rc = MPI_Init(nullptr, nullptr);
  if (ierr != nullptr) *ierr = static_cast<MPI_Fint>(rc);
}

FUNNEL_MPI_API void mpi_init_thread_(MPI_Fint* required, MPI_Fint* provided, MPI_Fint* ierr) {
  int got = 0;
  const int rc = MPI_Init_thread(nullptr, nullptr, static_cast<int>(*required), &got);
  *provided = static_cast<MPI_Fint>(got);
  if (ierr != nullptr) *ierr = static_cast<MPI_Fint>(rc);
}

FUNNEL_MPI_API void mpi_finalize_(MPI_Fint* ierr) {
  const int rc = MPI_Finalize();
  if (ierr != nullptr) *ierr = static_cast<MPI_Fint>(rc);
}

// `use mpi_f08` (Open MPI, gfortran): the module's MPI_Init, MPI_Init_thread and
// MPI_Finalize are the external procedures mpi_init_f08_, mpi_init_thread_f08_ and
// mpi_finalize_f08_ of libmpi_usempif08, which call PMPI_* too.  Same arguments as the
// mpif.h names (default INTEGERs by reference; ierror is OPTIONAL, a null pointer when
// absent), so they are the same functions under a second name.
FUNNEL_MPI_API void mpi_init_f08_(MPI_Fint* ierr) __attribute__((alias("mpi_init_")));
FUNNEL_MPI_API void mpi_init_thread_f08_(MPI_Fint* required, MPI_Fint* provided, MPI_Fint* ierr)
    __attribute__((alias("mpi_init_thread_")));
FUNNEL_MPI_API void mpi_finalize_f08_(MPI_Fint* ierr) __attribute__((alias("mpi_finalize_")));
