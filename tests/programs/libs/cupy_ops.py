#!/usr/bin/env python3
# CuPy on CUDA (issue 31; written for CuPy 14, cupy-cuda13x): ufuncs and cp.ElementwiseKernel,
# reductions (sum, cp.ReductionKernel), matmul (cuBLAS) in float32 and float64, a cp.RawKernel
# (NVRTC), streams and events, pinned host memory, the device memory pool; each result is
# compared with numpy.  CuPy compiles its kernels with NVRTC at run time; its kernel cache is
# kept in memory (CUPY_CACHE_IN_MEMORY=1), so every run compiles them again instead of loading
# what an earlier run left in ~/.cupy.  Prints one line per case ("cupy NAME: ok"); lines starting
# with '# ' are informational (not compared).  Exit 0: all ok, 1: mismatch or error.
# Run: python3 cupy_ops.py
import os
import sys

os.environ.setdefault("CUPY_CACHE_IN_MEMORY", "1")

import numpy as np  # noqa: E402
import cupy as cp  # noqa: E402


def check(name, got, ref, rtol, atol):
    got = cp.asnumpy(got) if isinstance(got, cp.ndarray) else np.asarray(got)
    ref = np.asarray(ref)
    if got.shape != ref.shape or not np.allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol):
        diff = np.abs(got.astype(np.float64) - ref.astype(np.float64)).max() if got.shape == ref.shape else float("nan")
        print(f"FAIL cupy {name}: max abs diff {diff:.3e} (rtol {rtol:g}, atol {atol:g}), shapes {got.shape} vs {ref.shape}")
        sys.exit(1)
    print(f"cupy {name}: ok (rtol {rtol:g}, atol {atol:g})")


def check_true(name, cond, detail=""):
    if not cond:
        print(f"FAIL cupy {name}: {detail}")
        sys.exit(1)
    print(f"cupy {name}: ok")


def main():
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    print(f"# {name} (CuPy {cp.__version__}, CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}, "
          f"driver {cp.cuda.runtime.driverGetVersion()}, {cp.cuda.runtime.getDeviceCount()} device(s))")
    rng = np.random.default_rng(0)

    # ufuncs (each a kernel CuPy compiles on first use)
    a = rng.standard_normal(4096).astype(np.float32)
    b = rng.standard_normal(4096).astype(np.float32)
    ga, gb = cp.asarray(a), cp.asarray(b)
    check("add 4096", ga + gb, a + b, 1e-6, 1e-6)
    check("multiply 4096", cp.multiply(ga, gb), a * b, 1e-6, 1e-6)
    check("sin 4096", cp.sin(ga), np.sin(a), 1e-5, 1e-6)
    check("exp 4096", cp.exp(ga), np.exp(a), 1e-5, 1e-6)
    check("where/maximum 4096", cp.where(ga > 0, cp.maximum(ga, gb), gb), np.where(a > 0, np.maximum(a, b), b), 0, 0)

    # cp.ElementwiseKernel
    squared_diff = cp.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = (x - y) * (x - y)", "squared_diff")
    check("ElementwiseKernel (x-y)^2", squared_diff(ga, gb), (a - b) * (a - b), 1e-6, 1e-6)
    axpy = cp.ElementwiseKernel("T x, T y, T alpha", "T z", "z = alpha * x + y", "axpy_t")
    ad = rng.standard_normal(1000)
    bd = rng.standard_normal(1000)
    check("ElementwiseKernel generic float64", axpy(cp.asarray(ad), cp.asarray(bd), 2.5), 2.5 * ad + bd, 1e-12, 1e-12)

    # reductions: sum, an axis, integers exactly, cp.ReductionKernel
    check("sum float64 4096", cp.asarray(ad).sum(), ad.sum(), 1e-12, 1e-12)
    m = rng.standard_normal((64, 128)).astype(np.float32)
    gm = cp.asarray(m)
    check("sum axis=1 64x128", gm.sum(axis=1), m.astype(np.float64).sum(axis=1), 1e-5, 1e-5)
    check("max axis=0 64x128", gm.max(axis=0), m.max(axis=0), 0, 0)
    check("argmax axis=0 64x128", gm.argmax(axis=0), m.argmax(axis=0), 0, 0)
    ints = rng.integers(-1000, 1000, size=100000).astype(np.int64)
    check("sum int64 100000", cp.asarray(ints).sum(), ints.sum(), 0, 0)
    l2norm = cp.ReductionKernel("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "l2norm")
    check("ReductionKernel l2norm axis=1", l2norm(gm, axis=1), np.sqrt((m.astype(np.float64) ** 2).sum(axis=1)), 1e-5, 1e-5)

    # matmul (cuBLAS)
    x = rng.standard_normal((256, 256)).astype(np.float32)
    y = rng.standard_normal((256, 256)).astype(np.float32)
    ref = x.astype(np.float64) @ y.astype(np.float64)
    check("matmul 256x256 float32", cp.asarray(x) @ cp.asarray(y), ref, 1e-4, 1e-3)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    check("matmul 256x256 float64", cp.matmul(cp.asarray(xd), cp.asarray(yd)), ref, 1e-10, 1e-9)
    check("dot 4096 float32", cp.dot(ga, gb), np.dot(a.astype(np.float64), b.astype(np.float64)), 1e-4, 1e-3)

    # cp.RawKernel, compiled with NVRTC
    raw = cp.RawKernel(r"""
extern "C" __global__ void scaled_add(const float* x, const float* y, float* out, float s, int n) {
  int i = blockDim.x * blockIdx.x + threadIdx.x;
  if (i < n) out[i] = s * x[i] + y[i];
}
""", "scaled_add")
    n = a.size
    out = cp.empty_like(ga)
    raw(((n + 255) // 256,), (256,), (ga, gb, out, np.float32(1.5), np.int32(n)))
    check("RawKernel scaled_add", out, np.float32(1.5) * a + b, 1e-6, 1e-6)
    module = cp.RawModule(code=r"""
extern "C" __global__ void square(int* v, int n) {
  int i = blockDim.x * blockIdx.x + threadIdx.x;
  if (i < n) v[i] = v[i] * v[i];
}
""")
    iv = cp.arange(1000, dtype=cp.int32)
    module.get_function("square")((4,), (256,), (iv, np.int32(1000)))
    check("RawModule square", iv, np.arange(1000, dtype=np.int64) ** 2, 0, 0)

    # streams: work on two non-blocking streams, an event recorded on one and waited by the other
    s1 = cp.cuda.Stream(non_blocking=True)
    s2 = cp.cuda.Stream(non_blocking=True)
    big = rng.standard_normal((512, 512)).astype(np.float32) / np.float32(512 ** 0.5)
    with s1:
        g1 = cp.asarray(big)
        r1 = g1 @ g1
        r1 = r1 * 2 + 1
        done = s1.record()
    s2.wait_event(done)
    with s2:
        r2 = r1.sum(axis=0)
    s2.synchronize()
    ref1 = big.astype(np.float64) @ big.astype(np.float64) * 2 + 1
    check("stream 1 work, event waited by stream 2", r2, ref1.sum(axis=0), 1e-4, 1e-3)
    check_true("stream done after synchronize", s1.done and s2.done and done.done, "a stream or event is not done")
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record(s1)
    with s1:
        for _ in range(10):
            r1 = r1 @ g1
    end.record(s1)
    end.synchronize()
    ms = cp.cuda.get_elapsed_time(start, end)
    check_true("event elapsed time > 0", ms > 0, f"{ms} ms")
    print(f"# 10 matmuls 512x512 on a stream: {ms:.3f} ms")

    # pinned host memory: async copies in and out on a stream
    pinned_pool = cp.get_default_pinned_memory_pool()
    n = 1 << 20
    hbuf = cp.cuda.alloc_pinned_memory(n * 4)
    host_in = np.frombuffer(hbuf, np.float32, n)
    host_in[...] = np.arange(n, dtype=np.float32)
    hbuf2 = cp.cuda.alloc_pinned_memory(n * 4)
    host_out = np.frombuffer(hbuf2, np.float32, n)
    dev = cp.empty(n, dtype=cp.float32)
    with s1:
        dev.set(host_in, stream=s1)
        dev *= 2
        dev.get(stream=s1, out=host_out)
    s1.synchronize()
    check("pinned async copies on a stream", host_out, np.arange(n, dtype=np.float32) * 2, 0, 0)
    print(f"# pinned pool: {pinned_pool.n_free_blocks()} free block(s)")

    # the device memory pool
    pool = cp.get_default_memory_pool()
    cp.cuda.Device(0).synchronize()
    del r1, r2, g1, out, dev
    pool.free_all_blocks()
    used0 = pool.used_bytes()
    arrays = [cp.full(((k + 1) * 100000,), k, dtype=cp.float32) for k in range(16)]
    want = sum((k + 1) * 100000 * 4 for k in range(16))
    used1, total1 = pool.used_bytes(), pool.total_bytes()
    check_true("memory pool used_bytes grows by the arrays", used1 - used0 >= want, f"{used1 - used0} < {want} bytes")
    check_true("memory pool total_bytes >= used_bytes", total1 >= used1, f"{total1} < {used1}")
    check("memory pool arrays kept their values", cp.stack([arr[:1000] for arr in arrays]),
          np.repeat(np.arange(16, dtype=np.float32)[:, None], 1000, axis=1), 0, 0)
    del arrays
    used2, total2 = pool.used_bytes(), pool.total_bytes()
    check_true("memory pool used_bytes back after free", used2 == used0, f"{used2} vs {used0}")
    check_true("memory pool keeps the freed blocks", total2 >= used1, f"total {total2} < {used1} used before")
    pool.free_all_blocks()
    total3 = pool.total_bytes()
    check_true("free_all_blocks() gives the blocks back", total3 < total2, f"{total2} -> {total3}")
    print(f"# memory pool: used {used0} -> {used1} -> {used2} bytes, total {total1} -> {total2} -> {total3} bytes")

    cp.cuda.Device(0).synchronize()
    print("cupy: all ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
