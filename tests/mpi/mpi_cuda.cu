// An MPI + CUDA program for the mpi tests (sim backend: copies and memsets only).
//   mpi_cuda [normal|before-init|abort|kill]
// normal:      MPI_Init, round trips, MPI_Finalize
// before-init: a round trip before MPI_Init too (the client runtime starts the server)
// abort:       rank 1 calls MPI_Abort after its round trip
// kill:        rank 1 SIGKILLs itself after its round trip
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"

namespace {

// Writes a rank-specific pattern, memsets the middle on the device, reads it back.
void round_trip(int rank, int round) {
  const size_t n = (1u << 20) + 7 * static_cast<size_t>(rank);  // odd sizes: staged in pieces
  std::vector<unsigned char> in(n), out(n, 0);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<unsigned char>(i * 31 + rank * 7 + round);
  void* d = nullptr;
  CHECK(cudaMalloc(&d, n));
  CHECK(cudaMemcpy(d, in.data(), n, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(static_cast<char*>(d) + n / 4, 0xAB, n / 2));
  CHECK(cudaMemcpy(out.data(), d, n, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) {
    const unsigned char want = (i >= n / 4 && i < n / 4 + n / 2) ? 0xAB : in[i];
    if (out[i] != want) {
      std::printf("FAIL rank %d round %d: byte %zu is %d, expected %d\n", rank, round, i, out[i], want);
      std::exit(1);
    }
  }
  CHECK(cudaFree(d));
}

int world_rank_from_env() {
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  return r != nullptr ? std::atoi(r) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "normal";
  if (std::strcmp(mode, "before-init") == 0) {
    CHECK(cudaSetDevice(0));
    round_trip(world_rank_from_env(), 0);
  }
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  round_trip(rank, 1);
  if (rank == 1 && std::strcmp(mode, "abort") == 0) MPI_Abort(MPI_COMM_WORLD, 3);
  if (rank == 1 && std::strcmp(mode, "kill") == 0) ::raise(SIGKILL);
  MPI_Barrier(MPI_COMM_WORLD);
  round_trip(rank, 2);
  int ok = 1, all = 0;
  MPI_Reduce(&ok, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%d of %d ranks ok\n", all, size);
  MPI_Finalize();
  return 0;
}
