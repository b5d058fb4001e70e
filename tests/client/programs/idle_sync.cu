// Idle streams answered in the client (doc/design/channel.md, "Idle streams"), for
// tests/client/idle_sync.sh: prints "ready", waits for a line on stdin, synchronizes and
// queries an idle stream IDLE_CALLS times each, and records an event without timing on it
// and synchronizes or queries that event as often, and the same on an idle blocking stream (doc/design/channel.md, "Records on idle
// streams"; the script counts the server's commands around it: they must be neither round
// trips nor records), prints "idle done", waits for a line again, sets a kernel's dynamic
// shared memory limit to the value it has, SET_CALLS times with the occupancy questions and a
// launch each (the script
// counts the commands: neither sets nor questions; "sets done", a line again), then checks that work
// queued after a stream was found idle is waited for:
//   1. a 64 MiB device-to-host copy queued on the idle stream, then synchronize: the data
//      is there (the copy made the stream busy again);
//   2. streams that share the client's bucket of stream ids (ids 256 apart): one found
//      idle, work queued on the other, then both synchronized: the data is there;
//   3. cudaStreamQuery right after queuing work is not answered "idle" from an old mark.
//   4. an event found complete, recorded again after work on its stream: its synchronize
//      and query wait for that work;
//   5. a blocking stream found idle, work on the legacy stream, an event recorded on the
//      blocking stream: its synchronize waits for the legacy stream's work (a blocking
//      stream's work follows it);
//   6. events with timing on an idle stream are recorded for real: cudaEventElapsedTime
//      answers, >= 0;
//   7. after cudaDeviceSynchronize, the same as 5 with nothing on the legacy stream.
// Prints "ok" at the end; a failure prints FAIL and exits 1.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "check.h"

__global__ void with_dynamic(int* out) {
  extern __shared__ int shared[];
  shared[threadIdx.x] = static_cast<int>(threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) out[0] = shared[31];
}

static void wait_line() {
  std::string line;
  std::getline(std::cin, line);
}

static void expect_filled(const unsigned char* h, size_t n, unsigned char v, const char* what) {
  for (size_t i = 0; i < n; i += 4093)
    if (h[i] != v) {
      std::printf("FAIL %s: byte %zu is %u, not %u (the synchronize did not wait)\n", what, i, h[i], v);
      std::exit(1);
    }
  if (h[n - 1] != v) {
    std::printf("FAIL %s: the last byte is %u, not %u\n", what, h[n - 1], v);
    std::exit(1);
  }
}

int main() {
  const int calls = std::getenv("IDLE_CALLS") ? std::atoi(std::getenv("IDLE_CALLS")) : 20000;
  constexpr size_t n = size_t{64} << 20;
  unsigned char* d = nullptr;
  unsigned char* h = nullptr;
  CHECK(cudaMalloc(&d, n));
  CHECK(cudaMallocHost(&h, n));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaMemsetAsync(d, 1, n, s));
  CHECK(cudaStreamSynchronize(s));
  cudaEvent_t ev, evb;
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&evb, cudaEventDisableTiming));
  // A blocking stream, found idle, with nothing ever queued on the legacy stream.
  cudaStream_t bs;
  CHECK(cudaStreamCreate(&bs));
  CHECK(cudaStreamSynchronize(bs));
  std::printf("ready\n");
  std::fflush(stdout);
  wait_line();
  for (int i = 0; i < calls; ++i) {
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamQuery(s));
    CHECK(cudaEventRecord(ev, s));
    CHECK(cudaEventSynchronize(ev));
    CHECK(cudaEventRecord(ev, s));
    cudaError_t q;
    while ((q = cudaEventQuery(ev)) == cudaErrorNotReady) {
    }
    CHECK(q);
    CHECK(cudaEventRecord(evb, bs));
    CHECK(cudaEventSynchronize(evb));
  }
  std::printf("idle done\n");
  std::fflush(stdout);
  wait_line();

  // Attribute sets that change nothing (libraries set a kernel's dynamic shared memory limit
  // before each of its launches): SET_CALLS sets and launches after the first, counted by the
  // script, must not reach the server as sets or as questions about the kernel's limits; a set
  // that changes the limit holds for the launches' checks at once.
  {
    int* out = nullptr;
    CHECK(cudaMalloc(&out, sizeof(int)));
    const int sets = std::getenv("SET_CALLS") ? std::atoi(std::getenv("SET_CALLS")) : 2000;
    int first_blocks = -1, first_min_grid = -1, first_block = -1;
    for (int i = 0; i < sets; ++i) {
      CHECK(cudaFuncSetAttribute(with_dynamic, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
      // and the occupancy questions libraries ask before a launch to size its grid
      int blocks = 0, min_grid = 0, block = 0;
      CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, with_dynamic, 128, 0));
      CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, with_dynamic, 0, 0));
      if (i == 0) first_blocks = blocks, first_min_grid = min_grid, first_block = block;
      if (blocks != first_blocks || blocks <= 0 || min_grid != first_min_grid || block != first_block) {
        std::printf("FAIL occupancy answers changed: %d blocks, grid %d, block %d (first %d, %d, %d)\n", blocks, min_grid,
                    block, first_blocks, first_min_grid, first_block);
        return 1;
      }
      with_dynamic<<<1, 32, 64 * 1024>>>(out);
      CHECK(cudaGetLastError());
    }
    std::printf("sets done\n");
    std::fflush(stdout);
    wait_line();
    CHECK(cudaFuncSetAttribute(with_dynamic, cudaFuncAttributeMaxDynamicSharedMemorySize, 32 * 1024));
    with_dynamic<<<1, 32, 40 * 1024>>>(out);
    if (cudaGetLastError() != cudaErrorInvalidValue) {
      std::printf("FAIL a launch above the lowered dynamic shared memory limit was not refused\n");
      return 1;
    }
    with_dynamic<<<1, 32, 32 * 1024>>>(out);
    CHECK(cudaGetLastError());
    CHECK(cudaFuncSetAttribute(with_dynamic, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    with_dynamic<<<1, 32, 64 * 1024>>>(out);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(out));
  }

  // 1. Work after the idle answers.
  std::memset(h, 0, n);
  CHECK(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  expect_filled(h, n, 1, "copy queued on a stream found idle");

  // 2. Streams of one bucket: ids are consecutive, so the 257th stream after `a` shares it.
  std::vector<cudaStream_t> more(256);
  cudaStream_t a;
  CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  for (auto& m : more) CHECK(cudaStreamCreateWithFlags(&m, cudaStreamNonBlocking));
  cudaStream_t b = more.back();
  CHECK(cudaStreamSynchronize(a));  // a found idle
  CHECK(cudaStreamSynchronize(b));  // b found idle: the bucket's mark is b's now
  CHECK(cudaStreamSynchronize(a));  // a again
  CHECK(cudaMemsetAsync(d, 2, n, b));
  std::memset(h, 0, n);
  CHECK(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, b));
  CHECK(cudaStreamSynchronize(a));
  CHECK(cudaStreamSynchronize(b));
  expect_filled(h, n, 2, "copy queued on a stream that shares its bucket with one found idle");

  // 3. A query right after queued work: NotReady or Success, never an old "idle".
  std::memset(h, 0, n);
  CHECK(cudaMemsetAsync(d, 3, n, s));
  CHECK(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s));
  cudaError_t q;
  while ((q = cudaStreamQuery(s)) == cudaErrorNotReady) {
  }
  CHECK(q);
  expect_filled(h, n, 3, "cudaStreamQuery Success with a copy queued");

  // 4. An event known complete, recorded again after work: its calls wait for the work.
  CHECK(cudaEventSynchronize(ev));
  std::memset(h, 0, n);
  CHECK(cudaMemsetAsync(d, 4, n, s));
  CHECK(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s));
  CHECK(cudaEventRecord(ev, s));
  CHECK(cudaEventSynchronize(ev));
  expect_filled(h, n, 4, "cudaEventSynchronize of an event recorded after a copy");
  std::memset(h, 0, n);
  CHECK(cudaMemsetAsync(d, 5, n, s));
  CHECK(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s));
  CHECK(cudaEventRecord(ev, s));
  while ((q = cudaEventQuery(ev)) == cudaErrorNotReady) {
  }
  CHECK(q);
  expect_filled(h, n, 5, "cudaEventQuery Success of an event recorded after a copy");

  // 5. A blocking stream found idle; work on the legacy stream; a record on the blocking
  // stream follows that work.
  CHECK(cudaStreamSynchronize(bs));
  CHECK(cudaEventSynchronize(ev));
  std::memset(h, 0, n);
  CHECK(cudaMemsetAsync(d, 6, n, 0));
  CHECK(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, 0));
  CHECK(cudaEventRecord(ev, bs));
  CHECK(cudaEventSynchronize(ev));
  expect_filled(h, n, 6, "an event recorded on a blocking stream after legacy-stream work");

  // 6. Events with timing are recorded even on an idle stream.
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaEventRecord(t0, s));
  CHECK(cudaEventRecord(t1, s));
  CHECK(cudaEventSynchronize(t1));
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, t0, t1));
  if (!(ms >= 0)) {
    std::printf("FAIL cudaEventElapsedTime of two records on an idle stream: %f\n", double(ms));
    return 1;
  }

  // 7. Nothing pending anywhere: a record on the blocking stream is complete.
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaStreamSynchronize(bs));
  CHECK(cudaEventRecord(ev, bs));
  CHECK(cudaEventSynchronize(ev));
  CHECK(cudaEventDestroy(evb));
  CHECK(cudaEventDestroy(t0));
  CHECK(cudaEventDestroy(t1));
  CHECK(cudaEventDestroy(ev));
  CHECK(cudaStreamDestroy(bs));

  for (auto& m : more) CHECK(cudaStreamDestroy(m));
  CHECK(cudaStreamDestroy(a));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeHost(h));
  CHECK(cudaFree(d));
  std::printf("ok\n");
  return 0;
}
