// An MPI + CUDA program for the mpi tests (sim backend: copies and memsets only).
//   mpi_cuda [normal|before-init|abort|kill|hold]
// normal:      MPI_Init, round trips, MPI_Finalize
// before-init: a round trip before MPI_Init too (the client runtime starts the server)
// abort:       rank 1 calls MPI_Abort after its round trip
// kill:        rank 1 SIGKILLs itself after its round trip
// hold:        round trips and barriers until killed (mpirun is, by the test)
#include <dlfcn.h>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "round_trip.h"

namespace {

// hold: round trips and barriers until the job is killed from outside (mpi.mpirun-killed);
// a rank still running after 60 s gives up, so that a failed test leaves no rank behind.
[[noreturn]] void hold(int rank) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int round = 2; std::chrono::steady_clock::now() < end; ++round) {
    if (round_trip(rank, round) != 0) std::exit(1);
    MPI_Barrier(MPI_COMM_WORLD);
    ::usleep(10 * 1000);
  }
  std::printf("FAIL rank %d: still running 60 s after MPI_Init\n", rank);
  std::exit(1);
}

int world_rank_from_env() {
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  return r != nullptr ? std::atoi(r) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "normal";
  int failed = 0;  // round trips that came back wrong
  if (std::strcmp(mode, "before-init") == 0) {
    CHECK(cudaSetDevice(0));
    failed += round_trip(world_rank_from_env(), 0);
  }
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  failed += round_trip(rank, 1);
  if (rank == 1 && std::strcmp(mode, "abort") == 0) MPI_Abort(MPI_COMM_WORLD, 3);
  if (rank == 1 && std::strcmp(mode, "kill") == 0) ::raise(SIGKILL);
  MPI_Barrier(MPI_COMM_WORLD);
  if (std::strcmp(mode, "hold") == 0) hold(rank);
  failed += round_trip(rank, 2);
  // With funnel's MPI hooks (linked with funnel::mpi or preloaded), the program's libcuda.so.1 is
  // funnel's client driver (the hooks' DT_NEEDED), whatever launched it.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (dlopen("libfunnel_mpi.so.0", RTLD_NOW | RTLD_NOLOAD) != nullptr &&
      (driver == nullptr || dlsym(driver, "funnel_client_driver") == nullptr)) {
    std::printf("FAIL rank %d: libcuda.so.1 is %s\n", rank, driver == nullptr ? "not loaded" : "not funnel's client driver");
    ++failed;
  }
  int ok = failed == 0 ? 1 : 0, all = 0;
  MPI_Reduce(&ok, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%d of %d ranks ok\n", all, size);
  MPI_Finalize();
  return 0;
}
