// MPI_Init, MPI_Init_thread and MPI_Finalize over PMPI (doc/mpi.md).
//
// Init: PMPI first; the node's ranks (MPI_COMM_TYPE_SHARED); node rank 0 finds or
// starts the job's funnel-server; a broadcast from it is the readiness signal and
// carries its outcome; then every rank attaches.
// Finalize: drain and detach (funnel_detach), a barrier of the node, node rank 0
// stops the server if its MPI_Init started it, then PMPI_Finalize.
//
// No exception leaves these functions.  A failure at Init aborts the job with a message
// naming the problem (the program cannot do CUDA work without a server, and most
// programs do not check MPI_Init's result); a failure at Finalize is reported and the
// job finalizes anyway.
#include <mpi.h>
#include <unistd.h>

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
  MPI_Comm node = MPI_COMM_NULL;
  int node_rank = -1;
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

// Node rank 0's outcome as text ("" when the server runs), so that every rank of the
// node reports the same reason.
void start_on_node_rank0(char (&message)[kMessageBytes]) noexcept {
  message[0] = '\0';
  try {
    g_state.server = find_or_start_node_server();
  } catch (const std::exception& e) {
    std::snprintf(message, sizeof message, "MPI_Init: node rank 0 cannot find or start funnel-server: %s", e.what());
  } catch (...) {
    std::snprintf(message, sizeof message, "MPI_Init: node rank 0 cannot find or start funnel-server");
  }
}

// FUNNEL_PRINT_PLAN=1: node rank 0 prints the server's placement plan once every rank of
// the node has attached (the barrier; the server has them all within milliseconds).
void print_plan_if_asked() noexcept {
  try {
    const funnel::Settings s = funnel::Settings::from_environment();
    if (!s.print_plan) return;
    int node_size = 1;
    PMPI_Comm_size(g_state.node, &node_size);
    PMPI_Barrier(g_state.node);
    if (g_state.node_rank != 0) return;
    std::string text = funnel::server_plan_text(s, static_cast<size_t>(node_size));
    std::fprintf(stderr, "funnel (libfunnel_mpi): placement plan of funnel-server in %s, %d rank(s) on this node:\n%s",
                 s.run_dir.c_str(), node_size, text.c_str());
    std::fflush(stderr);
  } catch (const std::exception& e) {
    warn((std::string("FUNNEL_PRINT_PLAN: ") + e.what()).c_str());
  }
}

void after_init() noexcept {
  if (PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &g_state.node) != MPI_SUCCESS ||
      PMPI_Comm_rank(g_state.node, &g_state.node_rank) != MPI_SUCCESS)
    abort_job("MPI_Init: cannot find this node's ranks (MPI_Comm_split_type MPI_COMM_TYPE_SHARED failed)");
  char message[kMessageBytes];
  if (g_state.node_rank == 0) start_on_node_rank0(message);
  // The readiness signal: no rank attaches before node rank 0 has a server running.
  if (PMPI_Bcast(message, kMessageBytes, MPI_CHAR, 0, g_state.node) != MPI_SUCCESS)
    abort_job("MPI_Init: the node's readiness broadcast failed");
  message[kMessageBytes - 1] = '\0';
  if (message[0] != '\0') abort_job(message);
  // Attach now rather than at the first CUDA call: the attach (and any problem with it)
  // belongs to start-up, and the server's accounting shows every rank from the start.
  if (const int e = funnel_attach(); e != 0) {
    std::snprintf(message, sizeof message,
                  "MPI_Init: cannot attach to funnel-server (CUDA error %d; the message above says why)", e);
    abort_job(message);
  }
  // GPU-local messages (FUNNEL_MPI_LOCAL): which ranks share this server (collective).
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
  if (g_state.node != MPI_COMM_NULL) {
    funnel::mpi::local::finish();  // GPU-local messages whose requests the program freed
    if (const int e = funnel_detach(); e != 0) {
      char m[160];
      std::snprintf(m, sizeof m, "MPI_Finalize: this rank's outstanding CUDA work ended with CUDA error %d", e);
      funnel::mpi::warn(m);
    }
    // The server stops only after every rank of the node has left it.
    PMPI_Barrier(g_state.node);
    if (g_state.node_rank == 0 && g_state.server.started_here) {
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
    PMPI_Comm_free(&g_state.node);
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
