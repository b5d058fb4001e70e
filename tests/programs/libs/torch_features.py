#!/usr/bin/env python3
# PyTorch's CUDA features beyond plain ops (issue 31; written for torch 2.11 + cu130), each result
# checked against the CPU or an exact expectation:
#   allocator  the caching allocator: tensors of varied sizes allocated and freed in a loop,
#              memory_allocated() exact on every free, memory_reserved() >= allocated,
#              empty_cache() gives memory back, mem_get_info()
#   pinned     pinned host tensors (pin_memory=True, .pin_memory(), is_pinned()), non_blocking
#              copies host to device and back on a side stream
#   streams    two torch.cuda.Stream with work on each, an event recorded on one and waited by the
#              other, timing events (elapsed_time > 0), query() and synchronize()
#   graphs     a CUDA graph (x*2+1, a matmul) captured after warm-up on a side stream, replayed 3
#              times with new input copied into the static input
#   graphed    torch.cuda.make_graphed_callables on a small nn.Linear, forward and backward
#   jiterator  NVRTC-compiled elementwise kernels (torch.cuda.jiterator._create_jit_fn)
#   linear     nn.Linear(64, 32), MSE loss, SGD steps, against the same on the CPU
# Prints one line per case ("torch-features NAME: ok (K checks)"); a mismatch or an error prints
# "FAIL torch-features NAME: ..." and the other cases still run; lines starting with '# ' are
# informational (not compared with the native run).  TF32 is off, seeds are fixed.
# Environment: CASES (comma list, default all, in the order above); the caller may set
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the line "# expandable_segments" says so).
# jiterator's disk cache is off (USE_PYTORCH_KERNEL_CACHE=0), so NVRTC compiles in every run.
# Exit 0: all ok, 1: a case failed.  Run: python3 torch_features.py
import copy
import os
import random
import sys
import time

os.environ.setdefault("USE_PYTORCH_KERNEL_CACHE", "0")

import torch  # noqa: E402
from torch_ops import disable_tf32  # noqa: E402  (beside this file: the same TF32 switch)

CASE_ORDER = ["allocator", "pinned", "streams", "graphs", "graphed", "jiterator", "linear"]
MiB = 1 << 20


class CaseFailed(Exception):
    pass


class Checks:
    """Counts the checks of one case; the first failing one ends the case."""

    def __init__(self, case):
        self.case = case
        self.n = 0

    def close(self, what, got, ref, rtol, atol):
        self.n += 1
        got = got.detach().cpu()
        ref = ref.detach().cpu() if torch.is_tensor(ref) else torch.tensor(ref)
        wide = torch.complex128 if got.is_complex() or ref.is_complex() else torch.float64
        g, r = got.to(wide), ref.to(wide)
        if g.shape != r.shape or not torch.allclose(g, r, rtol=rtol, atol=atol):
            diff = (g - r).abs().max().item() if g.shape == r.shape else float("nan")
            raise CaseFailed(f"{what}: max abs diff {diff:.3e} (rtol {rtol:g}, atol {atol:g}), "
                             f"shapes {tuple(got.shape)} vs {tuple(ref.shape)}")

    def equal(self, what, got, ref):
        self.n += 1
        got = got.detach().cpu()
        ref = ref.detach().cpu()
        if got.shape != ref.shape or got.dtype != ref.dtype or not torch.equal(got, ref):
            raise CaseFailed(f"{what}: not identical ({got.dtype}{tuple(got.shape)} vs {ref.dtype}{tuple(ref.shape)})")

    def true(self, what, cond):
        self.n += 1
        if not cond:
            raise CaseFailed(what)


def round512(nbytes):
    return max(512, (nbytes + 511) // 512 * 512)


def case_allocator(c):
    cuda = torch.device("cuda")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base_alloc = torch.cuda.memory_allocated()
    base_res = torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    rng = random.Random(1)
    # float32 elements: small-pool sizes (<= 1 MiB), large ones, and odd ones
    sizes = [1, 7, 100, 1000, 4096, 65536, 1 << 18, (1 << 18) + 3, 1 << 20, (3 << 20) + 5, 1 << 22]
    live = []  # (tensor, fill value, bytes it added to memory_allocated)

    def free_one(idx):
        t, v, delta = live.pop(idx)
        c.true(f"tensor of {t.numel()} filled with {v} kept its values", bool((t == v).all()))
        before = torch.cuda.memory_allocated()
        del t
        after = torch.cuda.memory_allocated()
        c.true(f"free gives back what the allocation took ({before - after} vs {delta} bytes)",
               before - after == delta)

    steps = 500
    for i in range(steps):
        if live and (len(live) >= 24 or rng.random() < 0.45):
            free_one(rng.randrange(len(live)))
            continue
        n = rng.choice(sizes)
        v = float(i % 977)
        before = torch.cuda.memory_allocated()
        t = torch.full((n,), v, device=cuda)
        delta = torch.cuda.memory_allocated() - before
        need = round512(n * 4)
        c.true(f"allocation of {n * 4} bytes took {delta} bytes (at least {need})",
               need <= delta <= need + 2 * MiB)
        c.true("memory_reserved() >= memory_allocated()",
               torch.cuda.memory_reserved() >= torch.cuda.memory_allocated())
        live.append((t, v, delta))
        del t
    while live:
        free_one(len(live) - 1)
    torch.cuda.synchronize()
    c.true(f"memory_allocated() back at its start ({torch.cuda.memory_allocated()} vs {base_alloc})",
           torch.cuda.memory_allocated() == base_alloc)
    peak = torch.cuda.max_memory_allocated()
    c.true("max_memory_allocated() above the start", peak > base_alloc)
    res_before = torch.cuda.memory_reserved()
    c.true("the loop reserved memory", res_before > base_res)
    torch.cuda.empty_cache()
    res_after = torch.cuda.memory_reserved()
    c.true(f"empty_cache() gave memory back ({res_before} -> {res_after} bytes)", res_after < res_before)
    c.true("memory_reserved() >= memory_allocated() after empty_cache()", res_after >= torch.cuda.memory_allocated())
    free, total = torch.cuda.mem_get_info()
    c.true(f"mem_get_info() sane (free {free}, total {total})", 0 < free <= total)
    stats = torch.cuda.memory_stats()
    print(f"# allocator: {steps} steps, peak {(peak - base_alloc) / MiB:.1f} MiB allocated, reserved "
          f"{res_before / MiB:.1f} MiB before empty_cache, {res_after / MiB:.1f} MiB after; "
          f"segments {stats.get('segment.all.allocated', '?')} made, {stats.get('segment.all.freed', '?')} freed, "
          f"{stats.get('num_alloc_retries', '?')} retries; mem_get_info free {free / MiB:.0f} of {total / MiB:.0f} MiB")


def case_pinned(c):
    n = 1 << 21  # 8 MiB of float32
    ref = torch.arange(n, dtype=torch.float32)
    src = torch.empty(n, dtype=torch.float32, pin_memory=True)
    c.true("torch.empty(pin_memory=True).is_pinned()", src.is_pinned())
    c.true("a pageable tensor is not pinned", not ref.is_pinned())
    src.copy_(ref)
    also = torch.ones(1000).pin_memory()
    c.true("Tensor.pin_memory().is_pinned()", also.is_pinned())
    back = torch.empty(n, dtype=torch.float32, pin_memory=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        d = src.to("cuda", non_blocking=True)
        d.mul_(2).add_(1)
        back.copy_(d, non_blocking=True)
        back2 = (d - 1).to("cpu", non_blocking=True)
    side.synchronize()
    c.equal("h2d + d2h non_blocking on a side stream", back, ref * 2 + 1)
    c.equal("to('cpu', non_blocking=True) on a side stream", back2, ref * 2)
    # Several chunks in flight at once, each copied in and out without a wait in between.
    chunks = [torch.empty(1 << 18, pin_memory=True).fill_(float(k)) for k in range(8)]
    outs = [torch.empty(1 << 18, pin_memory=True) for _ in range(8)]
    with torch.cuda.stream(side):
        for k in range(8):
            g = chunks[k].to("cuda", non_blocking=True)
            g.mul_(3)
            outs[k].copy_(g, non_blocking=True)
    side.synchronize()
    for k in range(8):
        c.equal(f"chunk {k} through the side stream", outs[k], torch.full((1 << 18,), 3.0 * k))
    del d


def case_streams(c):
    cuda = torch.device("cuda")
    torch.manual_seed(2)
    x = torch.randn(512, 512) / 512 ** 0.5
    y = torch.randn(512, 512) * (0.25 / 512 ** 0.5)  # spectral norm about 0.5: the chain below stays bounded
    gx, gy = x.to(cuda), y.to(cuda)
    torch.cuda.synchronize()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    c.true("two streams are distinct", s1 != s2 and s1.cuda_stream != s2.cuda_stream)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ready = torch.cuda.Event()
    with torch.cuda.stream(s1):
        start.record(s1)
        a = gx @ gy
        for _ in range(20):
            a = a @ gy + gx  # enough work that the time between the events is measurable
        end.record(s1)
        ready.record(s1)
    with torch.cuda.stream(s2):
        other = gy * 3 - 1  # independent work on the other stream
        s2.wait_event(ready)
        b = a.sum(dim=0) + other.sum(dim=0)
    a.record_stream(s2)
    s2.synchronize()
    c.true("event.query() after its stream synchronized", ready.query())
    end.synchronize()
    c.true("end.query() after end.synchronize()", end.query())
    ms = start.elapsed_time(end)
    c.true(f"elapsed_time > 0 ({ms} ms)", ms > 0)
    c.true("stream.query() after synchronize", s1.query() and s2.query())
    xd, yd = x.double(), y.double()
    ad = xd @ yd
    for _ in range(20):
        ad = ad @ yd + xd
    c.close("work on stream 1, waited by stream 2", b, ad.sum(dim=0) + (yd * 3 - 1).sum(dim=0), 1e-4, 1e-3)
    # record_event / wait_stream, the other spellings
    with torch.cuda.stream(s1):
        z = gx * 2
        ev = s1.record_event()
    torch.cuda.current_stream().wait_event(ev)
    z2 = z + 1
    torch.cuda.current_stream().wait_stream(s2)
    c.close("record_event + wait_event on the current stream", z2, x * 2 + 1, 1e-6, 1e-6)
    torch.cuda.synchronize()
    print(f"# streams: 21 matmuls 512x512 on stream 1 in {ms:.3f} ms")


def case_graphs(c):
    cuda = torch.device("cuda")
    torch.manual_seed(3)
    w_cpu = torch.randn(64, 32)
    w = w_cpu.to(cuda)
    static_in = torch.zeros(16, 64, device=cuda)

    def f(x):
        return (x * 2 + 1) @ w

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up (cuBLAS handle and workspace) before the capture
            f(static_in)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = f(static_in)
    c.true("not capturing after the capture", not torch.cuda.is_current_stream_capturing())
    for k in range(3):
        data = torch.randn(16, 64)
        static_in.copy_(data)
        g.replay()
        torch.cuda.synchronize()
        c.close(f"replay {k + 1}", static_out, (data.double() * 2 + 1) @ w_cpu.double(), 1e-4, 1e-4)
    g.reset()


def case_graphed(c):
    cuda = torch.device("cuda")
    torch.manual_seed(4)
    lin_cpu = torch.nn.Linear(16, 8)
    lin_gpu = copy.deepcopy(lin_cpu).to(cuda)
    sample = torch.randn(4, 16, device=cuda)
    graphed = torch.cuda.make_graphed_callables(lin_gpu, (sample,))
    x = torch.randn(4, 16)
    out_gpu = graphed(x.to(cuda))
    out_cpu = lin_cpu(x)
    c.close("graphed forward", out_gpu, out_cpu, 1e-5, 1e-5)
    out_gpu.pow(2).sum().backward()
    out_cpu.pow(2).sum().backward()
    torch.cuda.synchronize()
    c.close("graphed backward weight grad", lin_gpu.weight.grad, lin_cpu.weight.grad, 1e-4, 1e-5)
    c.close("graphed backward bias grad", lin_gpu.bias.grad, lin_cpu.bias.grad, 1e-4, 1e-5)
    x2 = torch.randn(4, 16)
    c.close("graphed forward, second input", graphed(x2.to(cuda)), lin_cpu(x2), 1e-5, 1e-5)


def case_jiterator(c):
    cuda = torch.device("cuda")
    torch.manual_seed(5)
    a = torch.rand(10000)
    b = torch.rand(10000)
    ga, gb = a.to(cuda), b.to(cuda)
    code = "template <typename T> T axpby(T x, T y, T alpha, T beta) { return alpha * x + beta * y; }"
    fn = torch.cuda.jiterator._create_jit_fn(code, alpha=1.0, beta=1.0)
    c.close("alpha*x + beta*y (defaults)", fn(ga, gb), a + b, 1e-6, 1e-6)
    c.close("alpha*x + beta*y (alpha 3.5, beta -2)", fn(ga, gb, alpha=3.5, beta=-2.0), 3.5 * a - 2.0 * b, 1e-6, 1e-6)
    code2 = ("template <typename T> T util_fn(T x, T y) { return ::sin(x) + ::cos(y); }"
             "template <typename T> T sincos_min(T x, T y, T val) { return ::min(val, util_fn(x, y)); }")
    fn2 = torch.cuda.jiterator._create_jit_fn(code2, val=1.5)
    c.close("min(val, sin(x) + cos(y))", fn2(ga, gb), torch.clamp(torch.sin(a) + torch.cos(b), max=1.5), 1e-5, 1e-6)
    # broadcasting and a non-contiguous input
    m = torch.rand(64, 128)
    row = torch.rand(64)
    gm = m.to(cuda)
    c.close("broadcast + transposed input", fn(gm.t(), row.to(cuda)), m.t() + row, 1e-6, 1e-6)


def case_linear(c):
    cuda = torch.device("cuda")
    torch.manual_seed(6)
    lin_cpu = torch.nn.Linear(64, 32)
    lin_gpu = copy.deepcopy(lin_cpu).to(cuda)
    opt_cpu = torch.optim.SGD(lin_cpu.parameters(), lr=0.05, momentum=0.9)
    opt_gpu = torch.optim.SGD(lin_gpu.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(128, 64)
    target = torch.randn(128, 32)
    gx, gt = x.to(cuda), target.to(cuda)
    loss_fn = torch.nn.MSELoss()
    for step in range(5):
        opt_cpu.zero_grad()
        opt_gpu.zero_grad()
        loss_cpu = loss_fn(lin_cpu(x), target)
        loss_gpu = loss_fn(lin_gpu(gx), gt)
        c.close(f"loss at step {step}", loss_gpu, loss_cpu, 1e-4, 1e-6)
        loss_cpu.backward()
        loss_gpu.backward()
        c.close(f"weight grad at step {step}", lin_gpu.weight.grad, lin_cpu.weight.grad, 1e-4, 1e-5)
        c.close(f"bias grad at step {step}", lin_gpu.bias.grad, lin_cpu.bias.grad, 1e-4, 1e-5)
        opt_cpu.step()
        opt_gpu.step()
    c.close("weight after 5 SGD steps", lin_gpu.weight, lin_cpu.weight, 1e-4, 1e-5)
    c.close("bias after 5 SGD steps", lin_gpu.bias, lin_cpu.bias, 1e-4, 1e-5)
    with torch.no_grad():
        c.close("forward after the steps", lin_gpu(gx), lin_cpu(x), 1e-4, 1e-5)


CASES = {name: globals()["case_" + name] for name in CASE_ORDER}


def main():
    t0 = time.time()
    wanted = [w.strip() for w in os.environ.get("CASES", "").split(",") if w.strip()] or CASE_ORDER
    unknown = [w for w in wanted if w not in CASES]
    if unknown:
        print(f"FAIL torch-features: unknown case(s) {','.join(unknown)} (known: {','.join(CASE_ORDER)})")
        return 1
    if not torch.cuda.is_available():
        print("FAIL torch-features: torch.cuda.is_available() is False")
        return 1
    print(f"# {torch.cuda.get_device_name(0)} (torch {torch.__version__}, CUDA {torch.version.cuda})")
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + "," + os.environ.get("PYTORCH_ALLOC_CONF", "")
    if "expandable_segments:true" in conf.replace(" ", "").lower():
        print("# expandable_segments")
    disable_tf32()
    failed = []
    for name in wanted:
        c = Checks(name)
        t = time.time()
        try:
            CASES[name](c)
            torch.cuda.synchronize()
        except CaseFailed as e:
            print(f"FAIL torch-features {name}: {e}")
            failed.append(name)
        except Exception as e:  # an error of PyTorch or CUDA: the case fails, the others still run
            msg = str(e).strip().splitlines()
            print(f"FAIL torch-features {name}: {type(e).__name__}: {msg[0] if msg else ''}"[:400])
            failed.append(name)
        else:
            print(f"torch-features {name}: ok ({c.n} checks)")
        print(f"# {name}: {time.time() - t:.2f} s")
        sys.stdout.flush()
    print(f"# total {time.time() - t0:.1f} s")
    if failed:
        print(f"FAIL torch-features: {len(failed)} of {len(wanted)} failed: {' '.join(failed)}")
        return 1
    print("torch-features: all ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
