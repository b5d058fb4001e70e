// pingpong: latency and bandwidth of MPI messages between two ranks whose data lives in device
// memory (issue 32; bench/pingpong.sh runs it natively, under MPS and through funnel).
//
//   mpirun -np 2 pingpong [--mode device|staged|host] [--min 4] [--max 67108864] [--iters N]
//
//   device  the device buffers go to MPI as they are: a CUDA-aware MPI, or funnel's MPI hooks
//           (which stage them today; doc/mpi.md, "Device buffers")
//   staged  the program stages: cudaMemcpy to a pinned host buffer, MPI on it, cudaMemcpy back
//           (what a program does with an MPI that is not CUDA-aware)
//   host    host buffers only, no CUDA in the loop: MPI's own floor
// Rank 0 sends, rank 1 sends it back; sizes double from --min to --max.  Before timing, one
// exchange of each size is checked byte for byte (the data is a function of the size and the
// position) on both ranks.  Output: one JSON line per size from rank 0,
// {"mode":..,"bytes":..,"iters":..,"half_rtt_us":..,"gbps":..} (gbps: bytes / half round trip).
// Exit 0, 1 on a wrong byte, 2 on a usage or CUDA error.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void fail(int code, const char* what) {
  std::fprintf(stderr, "pingpong: %s\n", what);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::string m = std::string(what) + ": " + cudaGetErrorName(e);
    fail(2, m.c_str());
  }
}

unsigned char pattern(size_t bytes, size_t i) { return static_cast<unsigned char>((i * 131 + bytes * 7 + 11) & 0xff); }

struct Args {
  std::string mode = "device";
  size_t min = 4, max = size_t{64} << 20;
  int iters = 0;  // 0: by size
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) fail(2, ("missing value after " + k).c_str());
    const char* v = argv[++i];
    if (k == "--mode") {
      a.mode = v;
      if (a.mode != "device" && a.mode != "staged" && a.mode != "host") fail(2, "--mode takes device, staged or host");
    } else if (k == "--min") {
      a.min = std::strtoull(v, nullptr, 10);
    } else if (k == "--max") {
      a.max = std::strtoull(v, nullptr, 10);
    } else if (k == "--iters") {
      a.iters = std::atoi(v);
    } else {
      fail(2, ("unknown option " + k).c_str());
    }
  }
  if (a.min == 0 || a.max < a.min) fail(2, "need 0 < --min <= --max");
  return a;
}

// One round trip of `bytes` from rank 0 to rank 1 and back.
struct Buffers {
  unsigned char* dev = nullptr;   // device modes
  unsigned char* host = nullptr;  // pinned (staged) or pageable (host)
};

void exchange(const Args& a, int rank, Buffers& b, size_t bytes) {
  const int peer = 1 - rank;
  const int n = static_cast<int>(bytes);
  auto send = [&] {
    if (a.mode == "device") {
      MPI_Send(b.dev, n, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
    } else if (a.mode == "staged") {
      ck(cudaMemcpy(b.host, b.dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
      MPI_Send(b.host, n, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
    } else {
      MPI_Send(b.host, n, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
    }
  };
  auto recv = [&] {
    if (a.mode == "device") {
      MPI_Recv(b.dev, n, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (a.mode == "staged") {
      MPI_Recv(b.host, n, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      ck(cudaMemcpy(b.dev, b.host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    } else {
      MPI_Recv(b.host, n, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
  };
  if (rank == 0) {
    send();
    recv();
  } else {
    recv();
    send();
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) fail(2, "run with exactly 2 ranks");
  const Args a = parse(argc, argv);
  Buffers b;
  const bool cuda = a.mode != "host";
  if (cuda) {
    ck(cudaSetDevice(0), "cudaSetDevice");
    ck(cudaMalloc(&b.dev, a.max), "cudaMalloc");
    if (a.mode == "staged") ck(cudaMallocHost(&b.host, a.max), "cudaMallocHost");
  } else {
    b.host = static_cast<unsigned char*>(std::malloc(a.max));
  }
  std::vector<unsigned char> ref(a.max), got(a.max);
  int bad = 0;
  for (size_t bytes = a.min; bytes <= a.max; bytes *= 2) {
    // Checked once: rank 0 fills, the message goes there and back, both ranks compare.
    for (size_t i = 0; i < bytes; ++i) ref[i] = pattern(bytes, i);
    if (rank == 0) {
      if (cuda) ck(cudaMemcpy(b.dev, ref.data(), bytes, cudaMemcpyHostToDevice), "fill");
      else std::memcpy(b.host, ref.data(), bytes);
    } else {
      if (cuda) ck(cudaMemset(b.dev, 0, bytes), "clear");
      else std::memset(b.host, 0, bytes);
    }
    exchange(a, rank, b, bytes);
    if (cuda) ck(cudaMemcpy(got.data(), b.dev, bytes, cudaMemcpyDeviceToHost), "check");
    else std::memcpy(got.data(), b.host, bytes);
    if (std::memcmp(got.data(), ref.data(), bytes) != 0) {
      std::fprintf(stderr, "pingpong: rank %d: wrong bytes after the exchange of %zu bytes\n", rank, bytes);
      bad = 1;
    }
    const int iters = a.iters > 0 ? a.iters : bytes <= (size_t{1} << 16) ? 1000 : bytes <= (size_t{1} << 22) ? 100 : 20;
    for (int i = 0; i < iters / 10 + 1; ++i) exchange(a, rank, b, bytes);  // warm-up
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) exchange(a, rank, b, bytes);
    const double half_rtt = (MPI_Wtime() - t0) / iters / 2;
    if (rank == 0)
      std::printf("{\"mode\":\"%s\",\"bytes\":%zu,\"iters\":%d,\"half_rtt_us\":%.3f,\"gbps\":%.4f}\n", a.mode.c_str(),
                  bytes, iters, half_rtt * 1e6, static_cast<double>(bytes) / half_rtt / 1e9);
    std::fflush(stdout);
  }
  int any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (cuda) {
    cudaFree(b.dev);
    if (b.host != nullptr) cudaFreeHost(b.host);
  } else {
    std::free(b.host);
  }
  MPI_Finalize();
  return any_bad != 0 ? 1 : 0;
}
