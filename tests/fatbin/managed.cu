// __managed__ variables for funnel::fatbin::patch_managed (tests/fatbin/managed_test.cpp): an
// initialised scalar and an array, used by one kernel.  Compiled to a whole-program cubin and to a
// relocatable (-rdc) one.
__managed__ int counter = 42;
__managed__ float table[16];
__device__ int plain;

__global__ void step(int n) {
  counter += n;
  table[threadIdx.x % 16] = static_cast<float>(counter) * 2.f;
  plain = counter;
}
