#!/usr/bin/env python3
# PyTorch on CUDA (written for torch 2.11 + cu130): elementwise ops and reductions, matmul
# 256x256 in float32 and float16, Conv2d forward + backward with an SGD step, torch.fft.fft;
# each result is compared with the same computation on the CPU. TF32 is switched off so float32
# results match the CPU closely. Prints one line per case; lines starting with '# ' are
# informational (not compared). Exit 0: all ok, 1: mismatch. Run: python3 torch_ops.py
import copy
import sys

import torch


def check(name, got, ref, rtol, atol):
    got = got.detach().cpu()
    ref = ref.detach().cpu()
    if got.dtype != ref.dtype:
        got, ref = got.to(torch.float64), ref.to(torch.float64)
    if got.shape != ref.shape or not torch.allclose(got, ref, rtol=rtol, atol=atol):
        wide = torch.complex128 if got.is_complex() else torch.float64
        diff = (got.to(wide) - ref.to(wide)).abs().max().item() if got.shape == ref.shape else float("nan")
        print(f"FAIL torch {name}: max abs diff {diff:.3e} (rtol {rtol:g}, atol {atol:g}), "
              f"shapes {tuple(got.shape)} vs {tuple(ref.shape)}")
        sys.exit(1)
    print(f"torch {name}: ok (rtol {rtol:g}, atol {atol:g})")


def disable_tf32():
    # torch >= 2.9 has fp32_precision; older versions use allow_tf32.
    try:
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        torch.backends.cudnn.conv.fp32_precision = "ieee"
    except AttributeError:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def main():
    if not torch.cuda.is_available():
        print("FAIL torch: torch.cuda.is_available() is False")
        sys.exit(1)
    print(f"# {torch.cuda.get_device_name(0)} (torch {torch.__version__})")
    disable_tf32()
    torch.manual_seed(0)
    cuda = torch.device("cuda")

    # Elementwise ops and reductions (inputs made on the CPU, so both sides see the same data).
    a = torch.randn(4096)
    b = torch.randn(4096)
    ga, gb = a.to(cuda), b.to(cuda)
    check("add 4096", ga + gb, a + b, 1e-6, 1e-6)
    check("mul 4096", ga * gb, a * b, 1e-6, 1e-6)
    check("sum 4096", (ga * gb).sum(), (a.double() * b.double()).sum().float(), 1e-4, 1e-3)
    m = torch.randn(64, 128)
    gm = m.to(cuda)
    check("mean dim=1 64x128", gm.mean(dim=1), m.mean(dim=1), 1e-5, 1e-5)
    check("max dim=0 64x128", gm.max(dim=0).values, m.max(dim=0).values, 0, 0)
    check("argmax dim=0 64x128", gm.argmax(dim=0), m.argmax(dim=0), 0, 0)
    check("norm 64x128", gm.norm(), m.double().norm().float(), 1e-5, 1e-5)

    # Matmul 256x256: float32 against a float64 CPU product, float16 against the same in float64.
    x = torch.randn(256, 256)
    y = torch.randn(256, 256)
    ref = x.double() @ y.double()
    check("matmul 256x256 float32", x.to(cuda) @ y.to(cuda), ref, 1e-4, 1e-3)
    xh, yh = x.half(), y.half()
    ref_h = xh.double() @ yh.double()
    check("matmul 256x256 float16", (xh.to(cuda) @ yh.to(cuda)).double(), ref_h, 1e-2, 1e-1)

    # Conv2d forward + backward + SGD step, CPU model vs a copy on the GPU.
    conv_cpu = torch.nn.Conv2d(3, 8, kernel_size=3, padding=1)
    conv_gpu = copy.deepcopy(conv_cpu).to(cuda)
    inp = torch.randn(2, 3, 16, 16)
    opt_cpu = torch.optim.SGD(conv_cpu.parameters(), lr=0.1, momentum=0.9)
    opt_gpu = torch.optim.SGD(conv_gpu.parameters(), lr=0.1, momentum=0.9)
    out_cpu = conv_cpu(inp)
    out_gpu = conv_gpu(inp.to(cuda))
    check("conv2d forward 2x3x16x16 -> 8 ch 3x3", out_gpu, out_cpu, 1e-4, 1e-5)
    loss_cpu = (out_cpu ** 2).mean()
    loss_gpu = (out_gpu ** 2).mean()
    check("conv2d loss", loss_gpu, loss_cpu, 1e-4, 1e-6)
    opt_cpu.zero_grad()
    opt_gpu.zero_grad()
    loss_cpu.backward()
    loss_gpu.backward()
    check("conv2d backward weight grad", conv_gpu.weight.grad, conv_cpu.weight.grad, 1e-4, 1e-5)
    check("conv2d backward bias grad", conv_gpu.bias.grad, conv_cpu.bias.grad, 1e-4, 1e-5)
    opt_cpu.step()
    opt_gpu.step()
    check("sgd step weight", conv_gpu.weight, conv_cpu.weight, 1e-4, 1e-5)
    check("sgd step bias", conv_gpu.bias, conv_cpu.bias, 1e-4, 1e-5)
    with torch.no_grad():
        check("conv2d forward after step", conv_gpu(inp.to(cuda)), conv_cpu(inp), 1e-4, 1e-5)

    # FFT: complex batch and a real signal.
    z = torch.randn(4, 64, dtype=torch.complex64)
    check("fft complex 4x64", torch.fft.fft(z.to(cuda)), torch.fft.fft(z), 1e-4, 1e-4)
    r = torch.randn(64)
    check("rfft real 64", torch.fft.rfft(r.to(cuda)), torch.fft.rfft(r), 1e-4, 1e-4)
    check("ifft(fft(x)) 4x64", torch.fft.ifft(torch.fft.fft(z.to(cuda))), z, 1e-4, 1e-5)

    torch.cuda.synchronize()
    print("torch: all ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
