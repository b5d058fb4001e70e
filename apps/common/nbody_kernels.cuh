// All-pairs N-body kernels (softened gravity, leapfrog): a compute-bound float workload with
// shared-memory tiles and rsqrtf.  Used by apps/nbody (the benchmark) and by the
// compatibility program tests/programs/compat/nbody.cu (checked against the CPU).
#pragma once

#include <cuda_runtime.h>

constexpr int kTile = 256;
constexpr float kSoft2 = 0.01f;

__global__ void forces(const float4* pos, float3* acc, int n) {
  __shared__ float4 tile[kTile];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const float4 p = i < n ? pos[i] : make_float4(0, 0, 0, 0);
  float3 a = make_float3(0, 0, 0);
  for (int t = 0; t < n; t += kTile) {
    tile[threadIdx.x] = t + threadIdx.x < n ? pos[t + threadIdx.x] : make_float4(0, 0, 0, 0);
    __syncthreads();
#pragma unroll 8
    for (int j = 0; j < kTile; ++j) {
      const float dx = tile[j].x - p.x, dy = tile[j].y - p.y, dz = tile[j].z - p.z;
      const float inv = rsqrtf(dx * dx + dy * dy + dz * dz + kSoft2);
      const float s = tile[j].w * inv * inv * inv;
      a.x += dx * s;
      a.y += dy * s;
      a.z += dz * s;
    }
    __syncthreads();
  }
  if (i < n) acc[i] = a;
}

__global__ void integrate(float4* pos, float3* vel, const float3* acc, int n, float dt) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  vel[i].x += acc[i].x * dt;
  vel[i].y += acc[i].y * dt;
  vel[i].z += acc[i].z * dt;
  pos[i].x += vel[i].x * dt;
  pos[i].y += vel[i].y * dt;
  pos[i].z += vel[i].z * dt;
}
