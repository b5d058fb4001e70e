#!/usr/bin/env python3
# JAX probe (issue 31): a report of how far JAX gets on the GPU, not a pass/fail gate.  Steps, in
# order, each in its own try: import, devices (a CUDA device is there), add (jnp), jit (a jitted
# function), matmul (float32, highest precision), grad (jax.grad of a small function); each
# result is compared with numpy.  Prints "jax NAME: ok" or "jax NAME: error <one line>" per step;
# lines starting with '# ' are informational.  XLA's preallocation of 75% of the GPU memory is
# switched off (XLA_PYTHON_CLIENT_PREALLOCATE=false) and JAX is held to CUDA
# (JAX_PLATFORMS=cuda unless the caller set it), so that a GPU it cannot use is an error, not a
# quiet fall back to the CPU.  Exit 0: every step ok, 1 otherwise.  Run: python3 jax_probe.py
import os
import sys

os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
os.environ.setdefault("JAX_PLATFORMS", "cuda")

import numpy as np  # noqa: E402

results = []


def one_line(e):
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}"[:300]


def step(name, fn):
    try:
        fn()
    except Exception as e:  # a report: every step's error is printed, the next step still runs
        results.append(False)
        print(f"jax {name}: error {one_line(e)}")
    else:
        results.append(True)
        print(f"jax {name}: ok")
    sys.stdout.flush()


def close(got, ref, rtol, atol):
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape or not np.allclose(got, ref, rtol=rtol, atol=atol):
        diff = np.abs(got - ref).max() if got.shape == ref.shape else float("nan")
        raise AssertionError(f"wrong result: max abs diff {diff:.3e} (rtol {rtol:g}, atol {atol:g}), "
                             f"shapes {got.shape} vs {ref.shape}")


def main():
    mods = {}

    def do_import():
        import jax
        import jax.numpy as jnp
        mods["jax"], mods["jnp"] = jax, jnp
        print(f"# jax {jax.__version__}, JAX_PLATFORMS={os.environ.get('JAX_PLATFORMS')}")

    step("import", do_import)
    if "jax" not in mods:
        return 1
    jax, jnp = mods["jax"], mods["jnp"]

    def devices():
        devs = jax.devices()
        print(f"# devices: {devs}; default backend {jax.default_backend()}")
        if not any(d.platform in ("gpu", "cuda") for d in devs):
            raise RuntimeError(f"no GPU device: {devs}")

    step("devices", devices)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1000).astype(np.float32)

    def add():
        y = jnp.asarray(x) + 1.0
        y.block_until_ready()
        print(f"# add ran on {sorted(str(d) for d in y.devices())}")
        close(y, x + 1.0, 1e-6, 1e-6)

    def jit():
        f = jax.jit(lambda v: jnp.sin(v) * 2.0 + v)
        close(f(jnp.asarray(x)).block_until_ready(), np.sin(x) * 2.0 + x, 1e-5, 1e-5)
        close(f(jnp.asarray(x[:500])).block_until_ready(), np.sin(x[:500]) * 2.0 + x[:500], 1e-5, 1e-5)

    def matmul():
        a = rng.standard_normal((256, 256)).astype(np.float32)
        b = rng.standard_normal((256, 256)).astype(np.float32)
        got = jnp.matmul(jnp.asarray(a), jnp.asarray(b), precision=jax.lax.Precision.HIGHEST)
        close(got.block_until_ready(), a.astype(np.float64) @ b.astype(np.float64), 1e-4, 1e-3)

    def grad():
        g = jax.grad(lambda v: jnp.sum(v ** 3 + 2.0 * v))
        close(g(jnp.asarray(x)).block_until_ready(), 3.0 * x.astype(np.float64) ** 2 + 2.0, 1e-5, 1e-5)

    for name, fn in (("add", add), ("jit", jit), ("matmul", matmul), ("grad", grad)):
        step(name, fn)
    ok = all(results)
    print(f"jax: {sum(results)} of {len(results)} steps ok")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
