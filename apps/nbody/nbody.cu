// nbody: a compute-bound all-pairs n-body simulation (softened gravity, leapfrog; float4
// positions in shared-memory tiles, rsqrtf), the compute-heavy app of issue 7: bench/run.sh runs
// N copies at once on one GPU (natively, under NVIDIA MPS, through funnel-run) and adds up
// their steps per second.
//
//   nbody [--bodies B] [--seconds S] [--warmup W] [--sync-every K] [--barrier DIR --clients N]
//
// After W untimed steps (default 5) the copy marks itself ready in DIR and waits until N copies
// are (the start barrier of apps/kernelbench), then runs steps for S seconds (default 2),
// synchronising every K steps (default 1, as a simulation loop that looks at its state does).
// One step is one forces kernel and one integration kernel.  The first step's forces are
// checked against a double-precision CPU sum on 64 bodies and momentum must stay conserved.
// Output: one JSON line
//   {"bench":"nbody","bodies":B,"steps":..,"seconds":..,"ms_per_step":..,"steps_per_s":..,"ok":true}
// Exit 0 when ok, 1 on a wrong result, 2 on a CUDA or usage error.
// Default 16384 bodies: 64 blocks of 256 threads, half of an H100's SMs per copy, so copies
// that run side by side (MPS, funnel) can fill the GPU while time-sliced contexts cannot.
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_check.h"
#include "nbody_kernels.cuh"

using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  int bodies = 16384;
  double seconds = 2.0;
  int warmup = 5;
  int sync_every = 1;
  std::string barrier;
  int clients = 1;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "nbody: %s\nusage: nbody [--bodies B] [--seconds S] [--warmup W] [--sync-every K] "
               "[--barrier DIR --clients N]\n",
               why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage((k + " needs a value").c_str());
    const char* v = argv[++i];
    if (k == "--bodies") a.bodies = std::atoi(v);
    else if (k == "--seconds") a.seconds = std::atof(v);
    else if (k == "--warmup") a.warmup = std::atoi(v);
    else if (k == "--sync-every") a.sync_every = std::atoi(v);
    else if (k == "--barrier") a.barrier = v;
    else if (k == "--clients") a.clients = std::atoi(v);
    else usage(("unknown option " + k).c_str());
  }
  if (a.bodies < 64 || a.seconds <= 0 || a.warmup < 1 || a.sync_every < 1 || a.clients < 1)
    usage("--bodies >= 64, --seconds > 0, --warmup >= 1, --sync-every >= 1, --clients >= 1");
  return a;
}

int count_ready(const std::string& dir) {
  int n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, "ready.", 6) == 0) ++n;
    closedir(d);
  }
  return n;
}

// Marks this copy ready and waits (at most 2 minutes) until `clients` copies are.
void barrier(const Args& a) {
  if (a.barrier.empty()) return;
  const std::string mine = a.barrier + "/ready." + std::to_string(getpid());
  if (FILE* f = std::fopen(mine.c_str(), "w")) std::fclose(f);
  const auto give_up = Clock::now() + std::chrono::minutes(2);
  while (count_ready(a.barrier) < a.clients) {
    if (Clock::now() > give_up) {
      std::fprintf(stderr, "nbody: barrier timed out\n");
      std::exit(2);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

float rnd(unsigned i) {  // deterministic in [-1, 1)
  unsigned x = i * 2654435761u + 12345u;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return static_cast<float>(x & 0xffffff) / float(0x800000) - 1.0f;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const int n = a.bodies;
  const float dt = 0.001f;
  std::vector<float4> pos(static_cast<size_t>(n));
  std::vector<float3> vel(static_cast<size_t>(n), make_float3(0, 0, 0));
  for (int i = 0; i < n; ++i)
    pos[static_cast<size_t>(i)] = make_float4(rnd(3u * i), rnd(3u * i + 1), rnd(3u * i + 2), 1.0f / float(n));
  float4* dpos = nullptr;
  float3 *dvel = nullptr, *dacc = nullptr;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaMalloc(&dpos, size_t(n) * sizeof(float4)));
  CK(cudaMalloc(&dvel, size_t(n) * sizeof(float3)));
  CK(cudaMalloc(&dacc, size_t(n) * sizeof(float3)));
  CK(cudaMemcpy(dpos, pos.data(), size_t(n) * sizeof(float4), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dvel, vel.data(), size_t(n) * sizeof(float3), cudaMemcpyHostToDevice));
  const int blocks = (n + kTile - 1) / kTile;

  // The first forces, checked against the CPU in double precision on 64 bodies.
  forces<<<blocks, kTile, 0, s>>>(dpos, dacc, n);
  CK(cudaGetLastError());
  std::vector<float3> acc(static_cast<size_t>(n));
  CK(cudaMemcpyAsync(acc.data(), dacc, size_t(n) * sizeof(float3), cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  int bad = 0;
  for (int i = 0; i < n; i += n / 64) {
    double ax = 0, ay = 0, az = 0;
    const float4 pi = pos[static_cast<size_t>(i)];
    for (const float4& pj : pos) {
      const double dx = double(pj.x) - pi.x, dy = double(pj.y) - pi.y, dz = double(pj.z) - pi.z;
      const double inv = 1.0 / std::sqrt(dx * dx + dy * dy + dz * dz + double(kSoft2));
      ax += dx * pj.w * inv * inv * inv;
      ay += dy * pj.w * inv * inv * inv;
      az += dz * pj.w * inv * inv * inv;
    }
    // float sums of n terms against double ones: compare with the size of the whole vector, so
    // that a component that nearly cancels does not fail on rounding
    const float3 g = acc[static_cast<size_t>(i)];
    const double tol = 1e-3 * (std::sqrt(ax * ax + ay * ay + az * az) + 1e-2);
    bad += std::fabs(g.x - ax) > tol || std::fabs(g.y - ay) > tol || std::fabs(g.z - az) > tol;
  }

  auto one_step = [&] {
    forces<<<blocks, kTile, 0, s>>>(dpos, dacc, n);
    integrate<<<blocks, kTile, 0, s>>>(dpos, dvel, dacc, n, dt);
  };
  for (int w = 0; w < a.warmup; ++w) one_step();
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(s));

  barrier(a);
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
  long long steps = 0;
  do {
    for (int k = 0; k < a.sync_every; ++k) one_step();
    steps += a.sync_every;
    CK(cudaStreamSynchronize(s));
  } while (Clock::now() < until);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  CK(cudaGetLastError());

  CK(cudaMemcpy(pos.data(), dpos, size_t(n) * sizeof(float4), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(vel.data(), dvel, size_t(n) * sizeof(float3), cudaMemcpyDeviceToHost));
  double px = 0, py = 0, pz = 0, kinetic = 0;
  bool finite = true;
  for (size_t i = 0; i < pos.size(); ++i) {
    px += double(vel[i].x) * pos[i].w;
    py += double(vel[i].y) * pos[i].w;
    pz += double(vel[i].z) * pos[i].w;
    kinetic += 0.5 * pos[i].w * (double(vel[i].x) * vel[i].x + double(vel[i].y) * vel[i].y + double(vel[i].z) * vel[i].z);
    finite = finite && std::isfinite(pos[i].x) && std::isfinite(vel[i].x);
  }
  // Momentum is conserved up to float rounding of the pairwise forces.
  const bool ok = bad == 0 && finite && kinetic > 0 && std::fabs(px) + std::fabs(py) + std::fabs(pz) < 1e-2;
  std::printf(
      "{\"bench\":\"nbody\",\"bodies\":%d,\"steps\":%lld,\"seconds\":%.4f,\"ms_per_step\":%.5f,\"steps_per_s\":%.3f,"
      "\"force_mismatches\":%d,\"momentum\":%.3e,\"kinetic\":%.6e,\"ok\":%s}\n",
      n, steps, secs, secs * 1e3 / double(steps), double(steps) / secs, bad, std::fabs(px) + std::fabs(py) + std::fabs(pz),
      kinetic, ok ? "true" : "false");
  CK(cudaFree(dpos));
  CK(cudaFree(dvel));
  CK(cudaFree(dacc));
  CK(cudaStreamDestroy(s));
  return ok ? 0 : 1;
}
