// The rank not under funnel of tests/mpi/mixed.sh (the last world rank): MPI only, host buffers,
// no funnel and no CUDA; the other side of every exchange in tests/mpi/mixed.cu.  Prints
// "rank R: all ok" or FAIL lines.
#include <mpi.h>

#include <cstdio>
#include <vector>

namespace {

int g_rank = 0, g_failed = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAIL rank %d: %s\n", g_rank, what);
    ++g_failed;
  }
}

// As tests/mpi/device_ints.h makes them.
std::vector<int> values(int rank, size_t n, int salt) {
  std::vector<int> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = rank * 100000 + salt * 1000 + static_cast<int>(i);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const size_t n = 2048;
  const int funnel_ranks = size - 1;
  for (int r = 0; r < funnel_ranks; ++r) {
    std::vector<int> got(n, -1);
    MPI_Recv(got.data(), int(n), MPI_INT, r, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    expect(got == values(r, n, 2), "MPI_Recv of a funnel rank's device buffer");
    const std::vector<int> mine = values(g_rank, n, 3);
    MPI_Send(mine.data(), int(n), MPI_INT, r, 3, MPI_COMM_WORLD);
  }
  {
    std::vector<std::vector<int>> in(funnel_ranks, std::vector<int>(n, -1));
    const std::vector<int> out = values(g_rank, n, 6);
    std::vector<MPI_Request> req;
    for (int r = 0; r < funnel_ranks; ++r) {
      req.emplace_back();
      MPI_Irecv(in[r].data(), int(n), MPI_INT, r, 5, MPI_COMM_WORLD, &req.back());
      req.emplace_back();
      MPI_Isend(out.data(), int(n), MPI_INT, r, 6, MPI_COMM_WORLD, &req.back());
    }
    MPI_Waitall(int(req.size()), req.data(), MPI_STATUSES_IGNORE);
    for (int r = 0; r < funnel_ranks; ++r) expect(in[r] == values(r, n, 5), "MPI_Irecv of a funnel rank's device buffer");
  }
  {
    std::vector<int> v = values(g_rank, n, 7), want(n, 0);
    MPI_Allreduce(MPI_IN_PLACE, v.data(), int(n), MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int r = 0; r < size; ++r)
      for (size_t i = 0; i < n; ++i) want[i] += values(r, n, 7)[i];
    expect(v == want, "MPI_Allreduce with the funnel ranks' device buffers");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_failed == 0) std::printf("rank %d: all ok\n", g_rank);
  MPI_Finalize();
  return g_failed == 0 ? 0 : 1;
}
