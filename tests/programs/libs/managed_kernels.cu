// Managed memory that kernels really read and write (GPU only): the host initialises a
// cudaMallocManaged buffer and a kernel transforms it in place; a kernel reads one managed buffer
// and writes another; ten rounds of the host incrementing and a kernel doubling, with prefetches
// and advice in between; two streams working on the halves of one buffer and on buffers attached
// to each (cudaStreamAttachMemAsync); a managed struct pointing to other managed buffers (a table
// and a linked list the kernel follows); and cuMemAllocManaged memory (the driver API, with
// cuMemPrefetchAsync, cuMemAdvise, cuMemRangeGetAttribute and cuPointerGetAttribute) used by a
// runtime kernel; __managed__ variables (scalars, an array, a struct, with and without initial
// values) that host code and kernels both read and write, with the symbol calls on them.
// Results checked on the CPU; sums printed.
// Build: nvcc -cudart shared managed_kernels.cu -lcuda   (at build time: -L/usr/local/cuda/lib64/stubs)
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "libcheck.h"

static void expect(bool ok, const char* what) { libcheck::expect("managed_kernels", ok, what); }

static const int N = 1 << 16, BLOCK = 256, GRID = (N + BLOCK - 1) / BLOCK;
static const size_t BYTES = N * sizeof(int);

// p[i] = 3 * p[i] + 1
__global__ void times3_plus1(int* p, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = 3 * p[i] + 1;
}

// out[i] = in[i] * in[i] - i
__global__ void square_minus_index(const int* in, int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * in[i] - i;
}

__global__ void twice(int* p, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= 2;
}

__global__ void add_k(int* p, int n, int k) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += k;
}

// A managed struct whose pointers lead to other managed buffers.
struct Node {
  int value;
  Node* next;
};
struct Table {
  int n;
  const int* data;  // n ints
  const int* index;  // n indices into data
  int* out;  // n ints: data[index[i]] + i
  Node* head;  // a linked list
  long long list_sum;  // written by the kernel: the sum of the list's values
  int list_len;
};

__global__ void gather(Table* t) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < t->n) t->out[i] = t->data[t->index[i]] + i;
  if (i == 0) {
    long long s = 0;
    int len = 0;
    for (const Node* p = t->head; p != nullptr; p = p->next) {
      s += p->value;
      ++len;
    }
    t->list_sum = s;
    t->list_len = len;
  }
}

static long long sum(const int* p, int n) {
  long long s = 0;
  for (int i = 0; i < n; ++i) s += p[i];
  return s;
}

static cudaMemLocation device0() {
  cudaMemLocation l{};
  l.type = cudaMemLocationTypeDevice;
  l.id = 0;
  return l;
}

static cudaMemLocation host() {
  cudaMemLocation l{};
  l.type = cudaMemLocationTypeHost;
  l.id = 0;
  return l;
}

// a) In place: host initialises, the kernel transforms, the host reads after a synchronisation.
static void in_place() {
  int* a;
  CUDA_CHECK(cudaMallocManaged(&a, BYTES));
  for (int i = 0; i < N; ++i) a[i] = i % 1000 - 500;
  times3_plus1<<<GRID, BLOCK>>>(a, N);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  bool ok = true;
  for (int i = 0; i < N; ++i) ok = ok && a[i] == 3 * (i % 1000 - 500) + 1;
  std::printf("managed_kernels in place: sum %lld\n", sum(a, N));
  expect(ok, "a kernel transforms managed memory in place");
  CUDA_CHECK(cudaFree(a));
}

// b) One managed buffer read, another written.
static void two_buffers() {
  int *in, *out;
  CUDA_CHECK(cudaMallocManaged(&in, BYTES));
  CUDA_CHECK(cudaMallocManaged(&out, BYTES));
  for (int i = 0; i < N; ++i) {
    in[i] = i % 200 - 100;
    out[i] = -1;
  }
  square_minus_index<<<GRID, BLOCK>>>(in, out, N);
  CUDA_CHECK(cudaDeviceSynchronize());
  bool ok = true;
  for (int i = 0; i < N; ++i) ok = ok && out[i] == (i % 200 - 100) * (i % 200 - 100) - i && in[i] == i % 200 - 100;
  std::printf("managed_kernels read one, write another: sum %lld\n", sum(out, N));
  expect(ok, "a kernel reads one managed buffer and writes another");
  CUDA_CHECK(cudaFree(in));
  CUDA_CHECK(cudaFree(out));
}

// c) Ten rounds: the host adds 1 to every element, a kernel doubles it; prefetches to the device
// before each kernel and back to the host after it, advice set and changed on the way.
static void alternate() {
  const int n = 4096;
  int* x;
  CUDA_CHECK(cudaMallocManaged(&x, n * sizeof(int)));
  long long ref[4096];
  for (int i = 0; i < n; ++i) ref[i] = x[i] = i % 10;
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_CHECK(cudaMemAdvise(x, n * sizeof(int), cudaMemAdviseSetPreferredLocation, device0()));
  CUDA_CHECK(cudaMemAdvise(x, n * sizeof(int), cudaMemAdviseSetAccessedBy, device0()));
  for (int r = 0; r < 10; ++r) {
    for (int i = 0; i < n; ++i) {
      x[i] += 1;
      ref[i] = 2 * (ref[i] + 1);
    }
    if (r == 5) CUDA_CHECK(cudaMemAdvise(x, n * sizeof(int), cudaMemAdviseSetReadMostly, device0()));
    CUDA_CHECK(cudaMemPrefetchAsync(x, n * sizeof(int), device0(), 0, s));
    twice<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, s>>>(x, n);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemPrefetchAsync(x, n * sizeof(int), host(), 0, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
  int read_mostly = -1, preferred = -99;
  CUDA_CHECK(cudaMemRangeGetAttribute(&read_mostly, sizeof read_mostly, cudaMemRangeAttributeReadMostly, x,
                                      n * sizeof(int)));
  CUDA_CHECK(cudaMemRangeGetAttribute(&preferred, sizeof preferred, cudaMemRangeAttributePreferredLocation, x,
                                      n * sizeof(int)));
  bool ok = true;
  for (int i = 0; i < n; ++i) ok = ok && x[i] == ref[i];
  std::printf("managed_kernels 10 rounds host +1, kernel x2: sum %lld, x[0] %d, x[9] %d\n", sum(x, n), x[0], x[9]);
  std::printf("managed_kernels advice after the rounds: read mostly %d, preferred location %d\n", read_mostly,
              preferred);
  expect(ok, "host and kernels alternate on managed memory, with prefetches and advice");
  CUDA_CHECK(cudaStreamDestroy(s));
  CUDA_CHECK(cudaFree(x));
}

// d) Two streams: each adds to its half of one buffer (20 launches each, the streams running
// concurrently); then buffers attached to one stream each (cudaMemAttachHost at allocation,
// cudaMemAttachSingle on the stream) used by that stream while the host reads the other.
static void two_streams() {
  int* a;
  CUDA_CHECK(cudaMallocManaged(&a, BYTES));
  for (int i = 0; i < N; ++i) a[i] = i;
  cudaStream_t s1, s2;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  const int h = N / 2;
  for (int k = 0; k < 20; ++k) {
    add_k<<<(h + BLOCK - 1) / BLOCK, BLOCK, 0, s1>>>(a, h, 1);
    add_k<<<(h + BLOCK - 1) / BLOCK, BLOCK, 0, s2>>>(a + h, h, 3);
  }
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamSynchronize(s1));
  CUDA_CHECK(cudaStreamSynchronize(s2));
  bool ok = true;
  for (int i = 0; i < N; ++i) ok = ok && a[i] == i + (i < h ? 20 : 60);
  std::printf("managed_kernels two streams on one buffer: sum %lld\n", sum(a, N));
  expect(ok, "two streams' kernels on the halves of one managed buffer");

  int *b1, *b2;
  CUDA_CHECK(cudaMallocManaged(&b1, BYTES, cudaMemAttachHost));
  CUDA_CHECK(cudaMallocManaged(&b2, BYTES, cudaMemAttachHost));
  for (int i = 0; i < N; ++i) b1[i] = b2[i] = i % 7;
  CUDA_CHECK(cudaStreamAttachMemAsync(s1, b1, 0, cudaMemAttachSingle));
  CUDA_CHECK(cudaStreamAttachMemAsync(s2, b2, 0, cudaMemAttachSingle));
  CUDA_CHECK(cudaStreamSynchronize(s1));
  CUDA_CHECK(cudaStreamSynchronize(s2));
  times3_plus1<<<GRID, BLOCK, 0, s1>>>(b1, N);
  CUDA_CHECK(cudaStreamSynchronize(s1));
  twice<<<GRID, BLOCK, 0, s2>>>(b2, N);
  CUDA_CHECK(cudaGetLastError());
  long long s_b1 = sum(b1, N);  // b1's stream is idle; b2's may still be working
  CUDA_CHECK(cudaStreamSynchronize(s2));
  ok = true;
  for (int i = 0; i < N; ++i) ok = ok && b1[i] == 3 * (i % 7) + 1 && b2[i] == 2 * (i % 7);
  std::printf("managed_kernels buffers attached to one stream each: sums %lld %lld\n", s_b1, sum(b2, N));
  expect(ok, "managed buffers attached to single streams (cudaStreamAttachMemAsync)");
  CUDA_CHECK(cudaStreamDestroy(s1));
  CUDA_CHECK(cudaStreamDestroy(s2));
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(b1));
  CUDA_CHECK(cudaFree(b2));
}

// e) A managed struct with pointers to other managed buffers: a gather through an index table
// and a walk of a linked list of managed nodes (linked in a scrambled order).
static void pointer_chasing() {
  const int n = 1000, nodes = 500;
  Table* t;
  int *data, *index, *out;
  Node* list;
  CUDA_CHECK(cudaMallocManaged(&t, sizeof(Table)));
  CUDA_CHECK(cudaMallocManaged(&data, n * sizeof(int)));
  CUDA_CHECK(cudaMallocManaged(&index, n * sizeof(int)));
  CUDA_CHECK(cudaMallocManaged(&out, n * sizeof(int)));
  CUDA_CHECK(cudaMallocManaged(&list, nodes * sizeof(Node)));
  for (int i = 0; i < n; ++i) {
    data[i] = 10 * i;
    index[i] = (i * 37 + 11) % n;
    out[i] = -1;
  }
  // Node k's successor is node (k + 7) % nodes (7 and 500 coprime: one cycle), cut after 499 steps.
  long long list_ref = 0;
  int k = 0;
  for (int step = 0; step < nodes; ++step) {
    list[k].value = k * k % 101;
    list_ref += list[k].value;
    const int next = (k + 7) % nodes;
    list[k].next = step == nodes - 1 ? nullptr : &list[next];
    k = next;
  }
  t->n = n;
  t->data = data;
  t->index = index;
  t->out = out;
  t->head = &list[0];
  t->list_sum = -1;
  t->list_len = -1;
  gather<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(t);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  bool ok = true;
  for (int i = 0; i < n; ++i) ok = ok && out[i] == 10 * ((i * 37 + 11) % n) + i;
  std::printf("managed_kernels pointer chasing: gather sum %lld, list of %d nodes sums to %lld\n", sum(out, n),
              t->list_len, t->list_sum);
  expect(ok && t->list_len == nodes && t->list_sum == list_ref,
         "a kernel follows pointers stored in managed memory to other managed buffers");
  CUDA_CHECK(cudaFree(t));
  CUDA_CHECK(cudaFree(data));
  CUDA_CHECK(cudaFree(index));
  CUDA_CHECK(cudaFree(out));
  CUDA_CHECK(cudaFree(list));
}

// f) The driver API: cuMemAllocManaged memory, advised and prefetched through the driver, used by
// a runtime kernel and read by the host; its pointer attributes.
static void driver_api() {
  CU_CHECK(cuInit(0));
  CUdeviceptr dp = 0;
  CU_CHECK(cuMemAllocManaged(&dp, BYTES, CU_MEM_ATTACH_GLOBAL));
  int* p = reinterpret_cast<int*>(dp);
  for (int i = 0; i < N; ++i) p[i] = i % 50;
  unsigned is_managed = 0;
  CU_CHECK(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, dp));
  CUmemLocation dev{};
  dev.type = CU_MEM_LOCATION_TYPE_DEVICE;
  dev.id = 0;
  CUmemLocation hst{};
  hst.type = CU_MEM_LOCATION_TYPE_HOST;
  hst.id = 0;
  CU_CHECK(cuMemAdvise(dp, BYTES, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, dev));
  int preferred = -99;
  CU_CHECK(cuMemRangeGetAttribute(&preferred, sizeof preferred, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, dp,
                                  BYTES));
  CUstream cs;
  CU_CHECK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
  CU_CHECK(cuMemPrefetchAsync(dp, BYTES, dev, 0, cs));
  times3_plus1<<<GRID, BLOCK, 0, reinterpret_cast<cudaStream_t>(cs)>>>(p, N);
  CUDA_CHECK(cudaGetLastError());
  CU_CHECK(cuMemPrefetchAsync(dp, BYTES, hst, 0, cs));
  CU_CHECK(cuStreamSynchronize(cs));
  bool ok = true;
  for (int i = 0; i < N; ++i) ok = ok && p[i] == 3 * (i % 50) + 1;
  // The host changes it, the runtime kernel runs again on the legacy stream.
  for (int i = 0; i < N; i += 2) p[i] = -p[i];
  twice<<<GRID, BLOCK>>>(p, N);
  CUDA_CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < N; ++i) ok = ok && p[i] == (i % 2 == 0 ? -2 : 2) * (3 * (i % 50) + 1);
  std::printf("managed_kernels cuMemAllocManaged: is managed %u, preferred location %d, sum %lld\n", is_managed,
              preferred, sum(p, N));
  expect(ok, "runtime kernels on cuMemAllocManaged memory");
  CU_CHECK(cuStreamDestroy(cs));
  CU_CHECK(cuMemFree(dp));
}

// g) __managed__ variables: the host reads their initial values, then host code and kernels take
// turns changing them; the symbol calls reach the same storage.
__managed__ int mv_count = 42;
__managed__ float mv_table[64] = {1.f, 2.f, 3.f};
__managed__ unsigned long long mv_total;
struct MvPair {
  int a;
  double b;
};
__managed__ MvPair mv_pair = {7, 2.5};

__global__ void mv_step(int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 64) mv_table[i] = mv_table[i] * 2.f + static_cast<float>(i);
  if (i == 0) {
    mv_count += n;
    mv_pair.a += 1;
    mv_pair.b *= 2;
  }
  atomicAdd(&mv_total, static_cast<unsigned long long>(i));
}

// Reads a variable through the pointer cudaGetSymbolAddress gave.
__global__ void mv_read(const int* count, int* out) { *out = *count * 3; }

static void managed_variables() {
  bool ok = mv_count == 42 && mv_table[0] == 1.f && mv_table[2] == 3.f && mv_table[10] == 0.f && mv_pair.a == 7 &&
            mv_pair.b == 2.5 && mv_total == 0;
  expect(ok, "__managed__ initial values read by the host");
  float table[64];
  for (int i = 0; i < 64; ++i) table[i] = mv_table[i];
  for (int r = 0; r < 5; ++r) {
    mv_count += 1;
    mv_step<<<4, 64>>>(r);
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 64; ++i) table[i] = table[i] * 2.f + static_cast<float>(i);
  }
  bool same = true;
  for (int i = 0; i < 64; ++i) same = same && mv_table[i] == table[i];
  ok = mv_count == 57 && mv_pair.a == 12 && mv_pair.b == 80.0 && mv_total == 5ull * 32640 && same;
  std::printf("managed_kernels __managed__: count %d, pair %d %.1f, total %llu, table[63] %.0f\n", mv_count, mv_pair.a,
              mv_pair.b, mv_total, mv_table[63]);
  expect(ok, "__managed__ variables changed in turn by host code and kernels");
  // The symbol calls: the variable's own storage.
  void* address = nullptr;
  size_t size = 0;
  CUDA_CHECK(cudaGetSymbolAddress(&address, mv_count));
  CUDA_CHECK(cudaGetSymbolSize(&size, mv_table));
  const int v = 1000;
  CUDA_CHECK(cudaMemcpyToSymbol(mv_count, &v, sizeof v));
  int* out = nullptr;
  CUDA_CHECK(cudaMalloc(&out, sizeof(int)));
  mv_read<<<1, 1>>>(static_cast<const int*>(address), out);
  int tripled = 0;
  CUDA_CHECK(cudaMemcpy(&tripled, out, sizeof tripled, cudaMemcpyDeviceToHost));
  MvPair pair{};
  CUDA_CHECK(cudaMemcpyFromSymbol(&pair, mv_pair, sizeof pair));
  ok = address == static_cast<void*>(&mv_count) && size == sizeof mv_table && mv_count == 1000 && tripled == 3000 &&
       pair.a == 12 && pair.b == 80.0;
  std::printf("managed_kernels __managed__ symbols: address is the variable %s, size %zu, read by a kernel %d\n",
              address == static_cast<void*>(&mv_count) ? "yes" : "no", size, tripled);
  expect(ok, "the symbol calls on __managed__ variables");
  CUDA_CHECK(cudaFree(out));
}

int main() {
  in_place();
  two_buffers();
  alternate();
  two_streams();
  pointer_chasing();
  driver_api();
  managed_variables();
  std::printf("managed_kernels: all ok\n");
  return 0;
}
