// Links funnel::mpi only: the hooks, the client runtime and MPI come with it.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cstdio>

#include "funnel/funnel.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int value = 1000 + rank, back = 0;
  void* d = nullptr;
  if (cudaMalloc(&d, sizeof value) != cudaSuccess ||
      cudaMemcpy(d, &value, sizeof value, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(&back, d, sizeof back, cudaMemcpyDeviceToHost) != cudaSuccess || back != value) {
    std::printf("rank %d FAIL\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::printf("rank %d ok attached=%d\n", rank, funnel_is_attached());
  cudaFree(d);
  MPI_Finalize();
  return 0;
}
