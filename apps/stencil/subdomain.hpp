// One rank's block of the global n^3 grid and the per-point arithmetic of the solver.
//
// Everything here is a function of global coordinates or of a (local box, face, point) triple,
// and is __host__ __device__, so that the GPU kernels and the --host path of stencil.cu run
// the same index arithmetic: the host path checks the decomposition and the halo exchange on
// a machine without a GPU.
#pragma once

#include <cmath>
#include <cstddef>

#ifndef __CUDACC__
#define __host__
#define __device__
#endif

namespace stencil {

// The local block: n[a] interior points along axis a (0 = x, fastest in memory), one ghost
// layer on each side.  Cell c[a] = 0 and c[a] = n[a] + 1 are ghosts; 1..n[a] are interior.
struct Box {
  int n[3];
  int offset[3];  // global index of interior cell 1 along each axis
};

__host__ __device__ inline std::size_t cells(const Box& b) {
  return std::size_t(b.n[0] + 2) * std::size_t(b.n[1] + 2) * std::size_t(b.n[2] + 2);
}

__host__ __device__ inline std::size_t cell(const Box& b, int c0, int c1, int c2) {
  return std::size_t(c0) + std::size_t(b.n[0] + 2) * (std::size_t(c1) + std::size_t(b.n[1] + 2) * std::size_t(c2));
}

// The block of coordinate `coord` out of `parts` along an axis of n points: sizes differ by at
// most one, the larger blocks first.
inline void split_axis(int n, int parts, int coord, int* size, int* start) {
  const int base = n / parts, extra = n % parts;
  *size = base + (coord < extra ? 1 : 0);
  *start = coord * base + (coord < extra ? coord : extra);
}

// Faces: f = 2 * axis + side, side 0 = low, 1 = high.  A 7-point stencil needs no edges or
// corners, so a face is the interior extent of the two other axes.
__host__ __device__ inline int face_axis(int f) { return f / 2; }
__host__ __device__ inline int face_p_axis(int f) { return face_axis(f) == 0 ? 1 : 0; }
__host__ __device__ inline int face_q_axis(int f) { return face_axis(f) == 2 ? 1 : 2; }
__host__ __device__ inline int face_np(const Box& b, int f) { return b.n[face_p_axis(f)]; }
__host__ __device__ inline int face_nq(const Box& b, int f) { return b.n[face_q_axis(f)]; }
__host__ __device__ inline std::size_t face_points(const Box& b, int f) {
  return std::size_t(face_np(b, f)) * std::size_t(face_nq(b, f));
}

// The cell of face f at (p, q) in the interior layer (what is sent) or the ghost layer (what
// is received).
__host__ __device__ inline std::size_t face_cell(const Box& b, int f, bool ghost, int p, int q) {
  const int a = face_axis(f);
  const bool high = (f % 2) == 1;
  int c[3];
  c[a] = high ? (ghost ? b.n[a] + 1 : b.n[a]) : (ghost ? 0 : 1);
  c[face_p_axis(f)] = p + 1;
  c[face_q_axis(f)] = q + 1;
  return cell(b, c[0], c[1], c[2]);
}

// Initial temperature at global interior point g of an n^3 grid: positive, smooth and with no
// symmetry between the axes, so that a face sent to the wrong neighbour changes the answer.
// The boundary (outside the global grid) is held at 0.
__host__ __device__ inline double initial_value(int g0, int g1, int g2, int n) {
  const double h = 1.0 / double(n + 1);
  const double x = (g0 + 1) * h, y = (g1 + 1) * h, z = (g2 + 1) * h;
  const double bump = 64.0 * x * (1.0 - x) * y * (1.0 - y) * z * (1.0 - z);
  return bump * (1.0 + 0.5 * sin(6.283185307179586 * (x + 2.0 * y + 3.0 * z)));
}

// Explicit heat step (Jacobi sweep of the 7-point Laplacian), stable for r <= 1/6.  The
// expression is the same for every decomposition, so every point gets bit-identical values;
// only the order of the final checksum's summation depends on the number of ranks.
constexpr double kDiffusion = 0.125;

__host__ __device__ inline void update_point(const double* in, double* out, const Box& b, int c0, int c1, int c2) {
  const std::size_t sy = std::size_t(b.n[0] + 2);
  const std::size_t sz = sy * std::size_t(b.n[1] + 2);
  const std::size_t i = cell(b, c0, c1, c2);
  const double u = in[i];
  const double sum = ((in[i - 1] + in[i + 1]) + (in[i - sy] + in[i + sy])) + (in[i - sz] + in[i + sz]);
  out[i] = u + kDiffusion * (sum - 6.0 * u);
}

}  // namespace stencil
