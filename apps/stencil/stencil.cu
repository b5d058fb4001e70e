// stencil: the strong-scaling MPI + CUDA app of issue 4 -- a 3-D heat equation (explicit
// 7-point Jacobi sweep) on a fixed global n^3 grid, split over all ranks.
//
//   mpirun -np R stencil [--n 256] [--steps 200] [--warmup 20] [--reference FILE]
//                        [--tolerance 1e-10] [--halo host|device] [--host] [--dry-run]
//
// Each step: post the receives, pack the (up to) 6 faces with one kernel each into a device
// buffer, one cudaMemcpy to a pinned host buffer, MPI_Isend, MPI_Waitall, one cudaMemcpy back,
// one unpack kernel per face, the update kernel (--halo host, the default: no CUDA-aware MPI is
// assumed).  --halo device hands the device buffers to MPI instead (receives posted into the
// device buffer, a cudaStreamSynchronize after the pack kernels, as a CUDA-aware MPI requires):
// through funnel's MPI hooks any MPI takes them (doc/mpi.md, "Device buffers").  Ranks get GPUs
// by node-local rank (MPI_Comm_split_type SHARED) modulo the count.
//
// Correctness: the initial state is a function of global coordinates and the update is the same
// expression everywhere, so every point is bit-identical for any decomposition; the checksum
// (sum of all interior values, Neumaier-compensated per rank) differs only by the summation
// order of the per-rank partials.  --reference FILE writes the checksum when FILE does not exist
// (run it with one rank) and otherwise compares against it within --tolerance (relative); a
// mismatch makes every rank exit with 3.
//
// --host runs the same index arithmetic (subdomain.hpp) on the CPU and makes no CUDA call:
// it checks the decomposition and halo exchange without a GPU (compare 1 rank to 8).  --dry-run
// prints each rank's block and neighbours and exits, also without CUDA.
//
// Output: one JSON line from rank 0, {"ranks":..,"n":..,"steps":..,"ms_per_step":..,
// "checksum":..,"max":..,...}; ms_per_step is the slowest rank's time over the timed steps,
// measured after --warmup steps between MPI_Barrier + cudaDeviceSynchronize; "phase_us" and
// "phase_us_max" split a GPU step into its parts (enum Phase), per step, the mean over the ranks
// and the slowest rank's (zeros with --host).
//
// Sizing (why 256^3): the grid is 16.8 M points, two double arrays of 2 x 258^3 x 8 B = 275 MB.
// At 1 rank a step is one update kernel streaming ~270 MB, ~100 us on an H100 (HBM ~3 TB/s),
// and no halo.  At 16 ranks MPI_Dims_create gives 4 x 2 x 2, blocks of 64 x 128 x 128 = 1 M
// points: the update moves ~17 MB (~6 us), faces are 128 x 128 (128 KiB) and 64 x 128 (64 KiB)
// so each pack/unpack kernel is a few us, and each rank issues up to 13 kernels and 2 copies per
// step.  The GPU work per step stays ~100 us in total, but at 16 ranks per GPU it is 200+
// small kernels from 16 processes: launch cost and cross-process concurrency decide the step
// time -- the case NVIDIA MPS exists for, and the one funnel must match (issue 4: <= 1.0x MPS).
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "subdomain.hpp"

// A failed CUDA call aborts the whole job, so that the other ranks do not wait forever.
#define CK(call)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                               \
    }                                                                                             \
  } while (0)

namespace {

using stencil::Box;

// ---------------------------------------------------------------------------------------------
// Kernels: thin wrappers around subdomain.hpp's per-point functions.

__global__ void init_kernel(double* u, Box b, int n) {
  const int c0 = blockIdx.x * blockDim.x + threadIdx.x;
  const int c1 = blockIdx.y * blockDim.y + threadIdx.y;
  const int c2 = blockIdx.z;
  if (c0 > b.n[0] + 1 || c1 > b.n[1] + 1) return;
  const bool ghost = c0 == 0 || c1 == 0 || c2 == 0 || c0 == b.n[0] + 1 || c1 == b.n[1] + 1 || c2 == b.n[2] + 1;
  // Ghosts start at 0: those inside the global grid are filled by the first exchange (so a
  // missing exchange shows in the checksum), the others are the fixed boundary.
  u[stencil::cell(b, c0, c1, c2)] =
      ghost ? 0.0 : stencil::initial_value(b.offset[0] + c0 - 1, b.offset[1] + c1 - 1, b.offset[2] + c2 - 1, n);
}

__global__ void update_kernel(const double* __restrict__ in, double* __restrict__ out, Box b) {
  const int c0 = blockIdx.x * blockDim.x + threadIdx.x + 1;
  const int c1 = blockIdx.y * blockDim.y + threadIdx.y + 1;
  const int c2 = blockIdx.z + 1;
  if (c0 > b.n[0] || c1 > b.n[1]) return;
  stencil::update_point(in, out, b, c0, c1, c2);
}

__global__ void pack_kernel(const double* __restrict__ u, double* __restrict__ buf, Box b, int f) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  const int q = blockIdx.y * blockDim.y + threadIdx.y;
  const int np = stencil::face_np(b, f);
  if (p >= np || q >= stencil::face_nq(b, f)) return;
  buf[std::size_t(q) * np + p] = u[stencil::face_cell(b, f, false, p, q)];
}

__global__ void unpack_kernel(double* __restrict__ u, const double* __restrict__ buf, Box b, int f) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  const int q = blockIdx.y * blockDim.y + threadIdx.y;
  const int np = stencil::face_np(b, f);
  if (p >= np || q >= stencil::face_nq(b, f)) return;
  u[stencil::face_cell(b, f, true, p, q)] = buf[std::size_t(q) * np + p];
}

const dim3 kBlock3(32, 8, 1);
const dim3 kBlockFace(32, 8, 1);

dim3 face_grid(const Box& b, int f) {
  return dim3(unsigned(stencil::face_np(b, f) + 31) / 32, unsigned(stencil::face_nq(b, f) + 7) / 8, 1);
}

// ---------------------------------------------------------------------------------------------
// Options

struct Args {
  int n = 256;
  int steps = 200;
  int warmup = 20;
  std::string reference;
  double tolerance = 1e-10;
  bool host = false;
  bool dry_run = false;
  bool device_halo = false;  // --halo device
};

[[noreturn]] void usage_error(int rank, const std::string& what) {
  if (rank == 0) {
    std::fprintf(stderr, "stencil: %s\n", what.c_str());
    std::fprintf(stderr,
                 "usage: stencil [--n N] [--steps S] [--warmup W] [--reference FILE] [--tolerance T] "
                 "[--halo host|device] [--host] [--dry-run]\n");
  }
  MPI_Finalize();
  std::exit(2);
}

long parse_long(int rank, const std::string& opt, const char* s, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
    usage_error(rank,
                opt + " needs an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + s + "'");
  return v;
}

Args parse(int argc, char** argv, int rank) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(rank, k + " needs a value");
      return argv[++i];
    };
    if (k == "--n")
      a.n = int(parse_long(rank, k, next(), 1, 4096));
    else if (k == "--steps")
      a.steps = int(parse_long(rank, k, next(), 1, 1000000));
    else if (k == "--warmup")
      a.warmup = int(parse_long(rank, k, next(), 0, 1000000));
    else if (k == "--reference")
      a.reference = next();
    else if (k == "--tolerance") {
      const char* s = next();
      char* end = nullptr;
      a.tolerance = std::strtod(s, &end);
      if (end == s || *end != '\0' || !(a.tolerance >= 0)) usage_error(rank, "--tolerance needs a number >= 0");
    } else if (k == "--halo") {
      const std::string h = next();
      if (h != "host" && h != "device") usage_error(rank, "--halo takes host or device, got '" + h + "'");
      a.device_halo = h == "device";
    } else if (k == "--host")
      a.host = true;
    else if (k == "--dry-run")
      a.dry_run = true;
    else
      usage_error(rank, "unknown option " + k);
  }
  return a;
}

// ---------------------------------------------------------------------------------------------
// Decomposition and halo exchange (host side, shared by the GPU and --host paths)

struct Layout {
  MPI_Comm cart = MPI_COMM_NULL;
  int rank = 0, size = 1;
  int dims[3] = {0, 0, 0};
  int coords[3] = {0, 0, 0};
  int neighbour[6] = {MPI_PROC_NULL, MPI_PROC_NULL, MPI_PROC_NULL, MPI_PROC_NULL, MPI_PROC_NULL, MPI_PROC_NULL};
  Box box{};
  std::vector<int> faces;   // faces with a neighbour, in face order
  std::size_t offset[6]{};  // of each face in the send/receive buffers (in doubles)
  std::size_t halo_points = 0;
};

Layout make_layout(int n) {
  Layout l;
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Dims_create(world, 3, l.dims);
  const int periodic[3] = {0, 0, 0};
  MPI_Cart_create(MPI_COMM_WORLD, 3, l.dims, periodic, /*reorder=*/0, &l.cart);
  MPI_Comm_rank(l.cart, &l.rank);
  MPI_Comm_size(l.cart, &l.size);
  MPI_Cart_coords(l.cart, l.rank, 3, l.coords);
  for (int a = 0; a < 3; ++a) {
    if (l.dims[a] > n) {
      if (l.rank == 0)
        std::fprintf(stderr, "stencil: %d ranks along an axis but only %d points (--n): use a larger --n\n", l.dims[a],
                     n);
      MPI_Finalize();
      std::exit(2);
    }
    stencil::split_axis(n, l.dims[a], l.coords[a], &l.box.n[a], &l.box.offset[a]);
    MPI_Cart_shift(l.cart, a, 1, &l.neighbour[2 * a], &l.neighbour[2 * a + 1]);
  }
  for (int f = 0; f < 6; ++f) {
    if (l.neighbour[f] == MPI_PROC_NULL) continue;
    l.faces.push_back(f);
    l.offset[f] = l.halo_points;
    l.halo_points += stencil::face_points(l.box, f);
  }
  return l;
}

// Face f goes to neighbour[f] with tag f; ghost face f comes from neighbour[f], which sent its
// opposite face (tag f ^ 1).
void post_receives(const Layout& l, double* recv, std::vector<MPI_Request>& req) {
  req.clear();
  for (int f : l.faces)
    MPI_Irecv(recv + l.offset[f], int(stencil::face_points(l.box, f)), MPI_DOUBLE, l.neighbour[f], f ^ 1, l.cart,
              &req.emplace_back());
}

void send_and_wait(const Layout& l, const double* send, std::vector<MPI_Request>& req) {
  for (int f : l.faces)
    MPI_Isend(send + l.offset[f], int(stencil::face_points(l.box, f)), MPI_DOUBLE, l.neighbour[f], f, l.cart,
              &req.emplace_back());
  MPI_Waitall(int(req.size()), req.data(), MPI_STATUSES_IGNORE);
}

// The parts of a GPU step, timed on the host: issuing the pack kernels, the device-to-host
// copy of the packed faces (it waits for them and for the previous step's update), the MPI
// exchange, the host-to-device copy, issuing the unpack and update kernels.
enum Phase { kPack, kD2H, kMpi, kH2D, kUpdate, kPhases };
constexpr const char* kPhaseNames[kPhases] = {"pack", "d2h", "mpi", "h2d", "update"};
using PhaseTimes = std::array<double, kPhases>;

// Sum (compensated) and max of a local array's interior.
struct Partial {
  double sum = 0, max = -INFINITY;
};

Partial interior_sum(const double* u, const Box& b) {
  double s = 0, c = 0;
  double m = -INFINITY;
  for (int c2 = 1; c2 <= b.n[2]; ++c2)
    for (int c1 = 1; c1 <= b.n[1]; ++c1)
      for (int c0 = 1; c0 <= b.n[0]; ++c0) {
        const double v = u[stencil::cell(b, c0, c1, c2)];
        const double t = s + v;  // Neumaier
        c += std::fabs(s) >= std::fabs(v) ? (s - t) + v : (v - t) + s;
        s = t;
        m = std::max(m, v);
      }
  return {s + c, m};
}

// ---------------------------------------------------------------------------------------------
// The two solvers: same interface, run() is a template over them.

class GpuSolver {
 public:
  GpuSolver(const Layout& l, int n, bool device_halo) : l_(l), device_halo_(device_halo) {
    const std::size_t bytes = stencil::cells(l.box) * sizeof(double);
    CK(cudaMalloc(&u_, bytes));
    CK(cudaMalloc(&v_, bytes));
    const std::size_t halo = std::max<std::size_t>(l.halo_points, 1) * sizeof(double);
    CK(cudaMalloc(&send_d_, halo));
    CK(cudaMalloc(&recv_d_, halo));
    CK(cudaMallocHost(&send_h_, halo));
    CK(cudaMallocHost(&recv_h_, halo));
    const Box& b = l.box;
    const dim3 grid(unsigned(b.n[0] + 2 + 31) / 32, unsigned(b.n[1] + 2 + 7) / 8, unsigned(b.n[2] + 2));
    init_kernel<<<grid, kBlock3>>>(u_, b, n);
    CK(cudaGetLastError());
    init_kernel<<<grid, kBlock3>>>(v_, b, n);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
  }
  ~GpuSolver() {
    cudaFreeHost(recv_h_);
    cudaFreeHost(send_h_);
    cudaFree(recv_d_);
    cudaFree(send_d_);
    cudaFree(v_);
    cudaFree(u_);
  }
  GpuSolver(const GpuSolver&) = delete;
  GpuSolver& operator=(const GpuSolver&) = delete;

  void step() {
    const Box& b = l_.box;
    double t = MPI_Wtime();
    auto lap = [&](Phase p) {
      const double now = MPI_Wtime();
      phase_s_[p] += now - t;
      t = now;
    };
    // --halo device: MPI gets the device buffers (the d2h phase is the wait for the packs).
    post_receives(l_, device_halo_ ? recv_d_ : recv_h_, req_);
    const std::size_t halo_bytes = l_.halo_points * sizeof(double);
    for (int f : l_.faces) pack_kernel<<<face_grid(b, f), kBlockFace>>>(u_, send_d_ + l_.offset[f], b, f);
    lap(kPack);
    if (device_halo_ && !l_.faces.empty())
      CK(cudaStreamSynchronize(nullptr));
    else if (halo_bytes != 0)
      CK(cudaMemcpy(send_h_, send_d_, halo_bytes, cudaMemcpyDeviceToHost));
    lap(kD2H);
    send_and_wait(l_, device_halo_ ? send_d_ : send_h_, req_);
    lap(kMpi);
    if (!device_halo_ && halo_bytes != 0) CK(cudaMemcpy(recv_d_, recv_h_, halo_bytes, cudaMemcpyHostToDevice));
    lap(kH2D);
    for (int f : l_.faces) unpack_kernel<<<face_grid(b, f), kBlockFace>>>(u_, recv_d_ + l_.offset[f], b, f);
    const dim3 grid(unsigned(b.n[0] + 31) / 32, unsigned(b.n[1] + 7) / 8, unsigned(b.n[2]));
    update_kernel<<<grid, kBlock3>>>(u_, v_, b);
    lap(kUpdate);
    std::swap(u_, v_);
  }
  // Seconds spent in each part of step() since the last reset (the JSON line's "phase_us").
  const PhaseTimes& phases() const { return phase_s_; }
  void reset_phases() { phase_s_ = {}; }

  void sync() {
    CK(cudaGetLastError());  // a failed launch in step(), which does not check each one
    CK(cudaDeviceSynchronize());
  }

  Partial result() {
    std::vector<double> h(stencil::cells(l_.box));
    CK(cudaMemcpy(h.data(), u_, h.size() * sizeof(double), cudaMemcpyDeviceToHost));
    return interior_sum(h.data(), l_.box);
  }

 private:
  PhaseTimes phase_s_{};
  const Layout& l_;
  bool device_halo_;
  double* u_ = nullptr;
  double* v_ = nullptr;
  double* send_d_ = nullptr;
  double* recv_d_ = nullptr;
  double* send_h_ = nullptr;
  double* recv_h_ = nullptr;
  std::vector<MPI_Request> req_;
};

class HostSolver {
 public:
  HostSolver(const Layout& l, int n)
      : l_(l), u_(stencil::cells(l.box), 0.0), send_(l.halo_points), recv_(l.halo_points) {
    const Box& b = l.box;
    for (int c2 = 1; c2 <= b.n[2]; ++c2)
      for (int c1 = 1; c1 <= b.n[1]; ++c1)
        for (int c0 = 1; c0 <= b.n[0]; ++c0)
          u_[stencil::cell(b, c0, c1, c2)] =
              stencil::initial_value(b.offset[0] + c0 - 1, b.offset[1] + c1 - 1, b.offset[2] + c2 - 1, n);
    v_ = u_;
  }

  void step() {
    const Box& b = l_.box;
    post_receives(l_, recv_.data(), req_);
    for (int f : l_.faces)
      for (int q = 0; q < stencil::face_nq(b, f); ++q)
        for (int p = 0; p < stencil::face_np(b, f); ++p)
          send_[l_.offset[f] + std::size_t(q) * stencil::face_np(b, f) + p] = u_[stencil::face_cell(b, f, false, p, q)];
    send_and_wait(l_, send_.data(), req_);
    for (int f : l_.faces)
      for (int q = 0; q < stencil::face_nq(b, f); ++q)
        for (int p = 0; p < stencil::face_np(b, f); ++p)
          u_[stencil::face_cell(b, f, true, p, q)] = recv_[l_.offset[f] + std::size_t(q) * stencil::face_np(b, f) + p];
    for (int c2 = 1; c2 <= b.n[2]; ++c2)
      for (int c1 = 1; c1 <= b.n[1]; ++c1)
        for (int c0 = 1; c0 <= b.n[0]; ++c0) stencil::update_point(u_.data(), v_.data(), b, c0, c1, c2);
    std::swap(u_, v_);
  }

  void sync() {}
  Partial result() { return interior_sum(u_.data(), l_.box); }
  const PhaseTimes& phases() const { return phase_s_; }  // not measured on the host: zeros
  void reset_phases() {}

 private:
  const Layout& l_;
  std::vector<double> u_, v_, send_, recv_;
  std::vector<MPI_Request> req_;
  PhaseTimes phase_s_{};
};

// ---------------------------------------------------------------------------------------------

void print_layout(const Layout& l, int n) {
  char line[256];
  const Box& b = l.box;
  auto nb = [&](int f) { return l.neighbour[f] == MPI_PROC_NULL ? std::string("-") : std::to_string(l.neighbour[f]); };
  std::snprintf(line, sizeof line,
                "rank %d coords (%d,%d,%d) block %dx%dx%d at (%d,%d,%d) neighbours -x %s +x %s -y %s +y %s -z %s +z %s "
                "halo %zu points",
                l.rank, l.coords[0], l.coords[1], l.coords[2], b.n[0], b.n[1], b.n[2], b.offset[0], b.offset[1],
                b.offset[2], nb(0).c_str(), nb(1).c_str(), nb(2).c_str(), nb(3).c_str(), nb(4).c_str(), nb(5).c_str(),
                l.halo_points);
  std::vector<char> all(l.rank == 0 ? sizeof line * std::size_t(l.size) : 0);
  MPI_Gather(line, sizeof line, MPI_CHAR, all.data(), sizeof line, MPI_CHAR, 0, l.cart);
  // The blocks must tile the grid exactly: their volumes add up to n^3 and no block is empty.
  long long points = 1LL * b.n[0] * b.n[1] * b.n[2], total = 0;
  MPI_Reduce(&points, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, l.cart);
  if (l.rank != 0) return;
  std::printf("dims %dx%dx%d over %d ranks, grid %d^3\n", l.dims[0], l.dims[1], l.dims[2], l.size, n);
  for (int r = 0; r < l.size; ++r) std::printf("%s\n", &all[sizeof line * std::size_t(r)]);
  std::printf("points covered %lld of %lld: %s\n", total, 1LL * n * n * n, total == 1LL * n * n * n ? "ok" : "WRONG");
}

// Writes the reference when `path` does not exist, else compares with it.  Rank 0 only;
// returns "written", "match" or "mismatch: ...".
std::string check_reference(const Args& a, const char* mode, double checksum, double max) {
  const int total_steps = a.warmup + a.steps;
  if (FILE* f = std::fopen(a.reference.c_str(), "r")) {
    char ref_mode[16] = {};
    int ref_n = 0, ref_steps = 0;
    double ref_sum = 0, ref_max = 0;
    const int got = std::fscanf(f, "stencil-reference mode=%15s n=%d steps=%d checksum=%lf max=%lf", ref_mode, &ref_n,
                                &ref_steps, &ref_sum, &ref_max);
    std::fclose(f);
    if (got != 5) return "mismatch: unreadable reference file";
    if (std::strcmp(ref_mode, mode) != 0 || ref_n != a.n || ref_steps != total_steps)
      return "mismatch: reference is for mode=" + std::string(ref_mode) + " n=" + std::to_string(ref_n) +
             " steps=" + std::to_string(ref_steps);
    auto close = [&](double x, double ref) { return std::fabs(x - ref) <= a.tolerance * std::fabs(ref); };
    if (!close(checksum, ref_sum) || !close(max, ref_max)) {
      char why[160];
      std::snprintf(why, sizeof why, "mismatch: reference checksum %.17g max %.17g", ref_sum, ref_max);
      return why;
    }
    return "match";
  }
  FILE* f = std::fopen(a.reference.c_str(), "w");
  if (f == nullptr) return "mismatch: cannot write " + a.reference + ": " + std::strerror(errno);
  std::fprintf(f, "stencil-reference mode=%s n=%d steps=%d checksum=%.17g max=%.17g\n", mode, a.n, total_steps,
               checksum, max);
  std::fclose(f);
  return "written";
}

template <class Solver>
int run(const Args& a, const Layout& l, Solver& s, const char* mode) {
  for (int i = 0; i < a.warmup; ++i) s.step();
  s.sync();
  s.reset_phases();
  MPI_Barrier(l.cart);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < a.steps; ++i) s.step();
  s.sync();
  const double local_s = MPI_Wtime() - t0;
  MPI_Barrier(l.cart);
  double slowest_s = 0;
  MPI_Reduce(&local_s, &slowest_s, 1, MPI_DOUBLE, MPI_MAX, 0, l.cart);
  PhaseTimes phase_sum{}, phase_max{};
  MPI_Reduce(s.phases().data(), phase_sum.data(), kPhases, MPI_DOUBLE, MPI_SUM, 0, l.cart);
  MPI_Reduce(s.phases().data(), phase_max.data(), kPhases, MPI_DOUBLE, MPI_MAX, 0, l.cart);

  const Partial p = s.result();
  double checksum = 0, max = 0;
  MPI_Reduce(&p.sum, &checksum, 1, MPI_DOUBLE, MPI_SUM, 0, l.cart);
  MPI_Reduce(&p.max, &max, 1, MPI_DOUBLE, MPI_MAX, 0, l.cart);

  int status = 0;
  if (l.rank == 0) {
    std::string ref = "none";
    if (!a.reference.empty()) ref = check_reference(a, mode, checksum, max);
    if (ref.rfind("mismatch", 0) == 0) status = 3;
    // Per step, in microseconds: the mean over the ranks and the slowest rank's.
    auto object = [](const char* name, const PhaseTimes& v, double scale) {
      std::string o = std::string(",\"") + name + "\":{";
      for (int p = 0; p < kPhases; ++p) {
        char item[48];
        std::snprintf(item, sizeof item, "%s\"%s\":%.2f", p != 0 ? "," : "", kPhaseNames[p], v[p] * scale);
        o += item;
      }
      return o + "}";
    };
    const double per_step_us = 1e6 / a.steps;
    const std::string phases =
        object("phase_us", phase_sum, per_step_us / l.size) + object("phase_us_max", phase_max, per_step_us);
    std::printf(
        "{\"ranks\":%d,\"n\":%d,\"steps\":%d,\"warmup\":%d,\"dims\":[%d,%d,%d],\"mode\":\"%s\",\"halo\":\"%s\","
        "\"ms_per_step\":%.6f,\"checksum\":%.17g,\"max\":%.17g,\"reference\":\"%s\"%s}\n",
        l.size, a.n, a.steps, a.warmup, l.dims[0], l.dims[1], l.dims[2], mode, a.device_halo ? "device" : "host",
        slowest_s * 1e3 / a.steps, checksum, max, ref.c_str(), phases.c_str());
    std::fflush(stdout);
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, l.cart);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const Args a = parse(argc, argv, world_rank);
  Layout l = make_layout(a.n);

  int status = 0;
  if (a.dry_run) {
    print_layout(l, a.n);
  } else if (a.host) {
    HostSolver s(l, a.n);
    status = run(a, l, s, "host");
  } else {
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
    int local_rank = 0;
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_free(&node);
    int devices = 0;
    CK(cudaGetDeviceCount(&devices));
    CK(cudaSetDevice(local_rank % devices));
    GpuSolver s(l, a.n, a.device_halo);
    status = run(a, l, s, "gpu");  // the same reference checksum for both halos
  }
  MPI_Comm_free(&l.cart);
  MPI_Finalize();
  return status;
}
