// A rank not under funnel in the same job (tests/mpi/mixed.sh): `mpirun -np 2 mixed : -np 1
// plain_peer`, where this program (linked with funnel's hooks, FUNNEL_MPI_LOCAL=1) is world ranks
// 0 and 1 and tests/mpi/plain_peer.cpp (MPI only, no funnel, no CUDA) is the last rank.  Neither
// MPI_Init nor MPI_Finalize may wait for the plain rank (the hooks make no MPI collective); the
// two funnel ranks exchange device buffers GPU-locally, and their device-buffer messages to and
// from the plain rank, and a collective over all three, are staged through host memory.  Prints
// "rank R: all ok" or FAIL lines.
#include <mpi.h>

#include "device_ints.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const int plain = g_size - 1, partner = 1 - g_rank;
  const size_t n = 2048;

  // Device to device between the two funnel ranks (GPU-local: the job report counts them).
  {
    int* s = device_ints(values(g_rank, n, 1));
    int* r = device_ints(std::vector<int>(n, -1));
    MPI_Sendrecv(s, int(n), MPI_INT, partner, 1, r, int(n), MPI_INT, partner, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    expect(host_of(r, n) == values(partner, n, 1), "MPI_Sendrecv of device buffers between the funnel ranks");
    CHECK(cudaFree(s));
    CHECK(cudaFree(r));
  }
  // A device buffer to the plain rank, and one from it (staged: it has no server).
  {
    int* s = device_ints(values(g_rank, n, 2));
    MPI_Send(s, int(n), MPI_INT, plain, 2, MPI_COMM_WORLD);
    int* r = device_ints(std::vector<int>(n, -1));
    MPI_Status st;
    MPI_Recv(r, int(n), MPI_INT, plain, 3, MPI_COMM_WORLD, &st);
    int count = -1;
    MPI_Get_count(&st, MPI_INT, &count);
    expect(host_of(r, n) == values(plain, n, 3) && count == int(n) && st.MPI_SOURCE == plain,
           "MPI_Recv into a device buffer from the rank not under funnel");
    CHECK(cudaFree(s));
    CHECK(cudaFree(r));
  }
  // Non-blocking, mixed: a GPU-local pair and a staged pair in one MPI_Waitall.
  {
    int* to_partner = device_ints(values(g_rank, n, 4));
    int* from_partner = device_ints(std::vector<int>(n, -1));
    int* to_plain = device_ints(values(g_rank, n, 5));
    int* from_plain = device_ints(std::vector<int>(n, -1));
    MPI_Request req[4];
    MPI_Irecv(from_partner, int(n), MPI_INT, partner, 4, MPI_COMM_WORLD, &req[0]);
    MPI_Irecv(from_plain, int(n), MPI_INT, plain, 6, MPI_COMM_WORLD, &req[1]);
    MPI_Isend(to_partner, int(n), MPI_INT, partner, 4, MPI_COMM_WORLD, &req[2]);
    MPI_Isend(to_plain, int(n), MPI_INT, plain, 5, MPI_COMM_WORLD, &req[3]);
    MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
    expect(host_of(from_partner, n) == values(partner, n, 4) && host_of(from_plain, n) == values(plain, n, 6),
           "MPI_Isend/MPI_Irecv to the funnel rank (GPU-local) and the plain rank (staged), one MPI_Waitall");
    for (int* p : {to_partner, from_partner, to_plain, from_plain}) CHECK(cudaFree(p));
  }
  // A collective over all three: device buffers here, host buffers there.
  {
    int* d = device_ints(values(g_rank, n, 7));
    MPI_Allreduce(MPI_IN_PLACE, d, int(n), MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    std::vector<int> want(n, 0);
    for (int r = 0; r < g_size; ++r)
      for (size_t i = 0; i < n; ++i) want[i] += values(r, n, 7)[i];
    expect(host_of(d, n) == want, "MPI_Allreduce (MPI_IN_PLACE) of a device buffer with the plain rank's host one");
    CHECK(cudaFree(d));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_failed == 0) std::printf("rank %d: all ok\n", g_rank);
  MPI_Finalize();
  return g_failed == 0 ? 0 : 1;
}
