// Kernels for recovery_probe.cpp (nvcc -fatbin).
extern "C" __global__ void inc(int* p) { *p += 1; }
extern "C" __global__ void fault(int* p) { *p = 1; }
