// funnel-only: what funnel does not support yet must fail loudly, never silently succeed.
// A runtime call without an implementation returns cudaErrorNotSupported (and names itself
// once on stderr); so does a launch attribute funnel does not pass on.  (__managed__ variables
// in PTX-only fat binaries: scenarios.sh managed-refused.)
// Natively these succeed, so tests/gpu/run.sh does not compare this program with a native run.
#include "check.h"

__global__ void plain() {}

int main() {
  int* d = nullptr;
  CHECK(cudaMalloc(&d, sizeof(int)));
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  std::printf("unsupported: %s\n", cudaGetErrorName(cudaGraphDebugDotPrint(g, "/dev/null", 0)));
  std::printf("unsupported again: %s\n", cudaGetErrorName(cudaGraphDebugDotPrint(g, "/dev/null", 0)));
  CHECK(cudaGraphDestroy(g));
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeMemSyncDomain;
  attr[0].val.memSyncDomain = cudaLaunchMemSyncDomainRemote;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(1);
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  std::printf("launch attribute: %s\n", cudaGetErrorName(cudaLaunchKernelEx(&cfg, plain)));
  CHECK(cudaFree(d));
  CHECK(cudaDeviceSynchronize());
  std::printf("done\n");
  return 0;
}
