#!/usr/bin/env python3
"""One training process of bench/mnist.sh (issue 31): the classic MPS case study, an MLP
784-512-512-10 (ReLU, dropout 0.2) trained with RMSprop (lr 0.001) and cross-entropy, batch 100,
on MNIST-sized synthetic data.

    python3 bench/mnist.py [--epochs 2] [--seed 0] [--batch 100]

The data (60000 x 784 float32 in [0, 1), 10 classes) is made on the CPU from a fixed seed, the
same in every process: each class has its own mean image, and a sample is 0.6 x its class mean +
0.4 x uniform noise, so the classes are learnable.  Nothing is downloaded.  The whole set goes to
the GPU once; each epoch shuffles it with a torch.Generator on the GPU seeded from --seed, which
also seeds the weights and dropout (torch.manual_seed).  Deterministic: cuBLAS with a fixed
workspace (CUBLAS_WORKSPACE_CONFIG=:4096:8), torch.use_deterministic_algorithms(True) (without
its NaN fill of new tensors, kernels the classic run has not), cuDNN benchmark off, TF32 off,
and the loss written out as log_softmax times the one-hot labels (the same cross-entropy, from
elementwise ops and reductions only), so a seed gives the same losses and weights, bit for bit,
natively, under MPS and through funnel.  RMSprop has PyTorch's defaults besides lr (alpha 0.99,
eps 1e-8; Keras's classic run had rho 0.9, eps 1e-7).

Prints ONE JSON line at the end:
  {"pid", "seed", "epochs", "batch", "start_time" (the process's start, seconds since the epoch:
   to line it up with the server's log), "train_s" (the training loop, GPU synchronized at both
   ends), "setup_s" (from the process's start, /proc/self/stat, or the script's start where that
   cannot be read ("setup_from"), to the start of training: interpreter, import of torch, CUDA
   context, data made and moved), "setup_phases" (seconds of the set-up's parts: "start" process
   start to the script, "import" of torch, "cuda" torch.cuda.is_available(), "settings" the
   deterministic and precision settings, "data" made on the CPU and moved to the GPU (the first GPU work: the CUDA context,
   or funnel's attach), "model" the model and optimizer made and the GPU
   synchronized), "cpu" (CPU seconds of the process, its threads' included, and seconds its
   threads waited for a CPU, in the set-up ("setup_cpu_s", "setup_wait_s") and in the training
   loop ("train_cpu_s", "train_wait_s"); the waits count threads alive at the end of each),
   "loss_epoch" (mean batch loss of each epoch), "final_loss"
   (the last batch's loss), "checksum" (the sum of the final weights, in float64)}
"""
import time

T_SCRIPT = time.time()  # before anything heavy is imported

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

N_SAMPLES = 60000
N_FEATURES = 784
N_CLASSES = 10
DATA_SEED = 31


def cpu_now():
    """(CPU seconds of this process so far, user + system, its threads' included; seconds its
    live threads waited for a CPU: /proc/self/task/*/schedstat, 0 where that cannot be read)."""
    t = os.times()
    wait_ns = 0
    try:
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/schedstat") as f:
                    wait_ns += int(f.read().split()[1])
            except (OSError, ValueError, IndexError):
                pass  # a thread that ended meanwhile
    except OSError:
        pass
    return t.user + t.system, wait_ns / 1e9


def process_start():
    """(wall-clock start of this process, "proc"), or (the script's start, "script")."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        # the fields after "(comm)": state is field 3, starttime field 22 (clock ticks after boot)
        start_ticks = int(stat[stat.rindex(")") + 2:].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
        if age < 0 or age > 3600:
            raise ValueError(f"implausible process age {age}")
        return time.time() - age, "proc"
    except (OSError, ValueError, IndexError) as e:
        print(f"mnist.py: process start not read ({e}); setup_s counts from the script's start", file=sys.stderr)
        return T_SCRIPT, "script"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=100)
    args = ap.parse_args()
    t_start, start_from = process_start()

    marks = [("start", T_SCRIPT)]
    import torch
    import torch.nn.functional as F

    marks.append(("import", time.time()))
    if not torch.cuda.is_available():
        print("mnist.py: torch.cuda.is_available() is False", file=sys.stderr)
        return 1
    marks.append(("cuda", time.time()))
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True)
    try:  # no NaN fill of every torch.empty (deterministic mode's default): kernels the classic run has not
        import torch.utils.deterministic
        torch.utils.deterministic.fill_uninitialized_memory = False
    except (ImportError, AttributeError):
        pass
    try:  # torch >= 2.9 has fp32_precision; older versions use allow_tf32
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        torch.backends.cudnn.conv.fp32_precision = "ieee"
    except AttributeError:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    cuda = torch.device("cuda")
    marks.append(("settings", time.time()))

    # The data, the same in every process (its own generator, not --seed).
    gen = torch.Generator().manual_seed(DATA_SEED)
    means = torch.rand(N_CLASSES, N_FEATURES, generator=gen)
    labels = torch.randint(0, N_CLASSES, (N_SAMPLES,), generator=gen)
    x_cpu = torch.rand(N_SAMPLES, N_FEATURES, generator=gen).mul_(0.4).add_(means[labels], alpha=0.6)
    onehot = torch.eye(N_CLASSES)[labels]  # made on the CPU: no scatter on the GPU
    x_all = x_cpu.to(cuda)
    onehot_all = onehot.to(cuda)
    del x_cpu, labels, means, onehot
    torch.cuda.synchronize()
    marks.append(("data", time.time()))

    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(N_FEATURES, 512), torch.nn.ReLU(), torch.nn.Dropout(0.2),
        torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Dropout(0.2),
        torch.nn.Linear(512, N_CLASSES),
    ).to(cuda)
    model.train()
    opt = torch.optim.RMSprop(model.parameters(), lr=0.001)
    shuffle = torch.Generator(device=cuda)
    shuffle.manual_seed(args.seed)
    batches = N_SAMPLES // args.batch

    torch.cuda.synchronize()
    cpu_setup, wait_setup = cpu_now()
    t_train = time.time()
    marks.append(("model", t_train))
    phases = {name: round(t - marks[i - 1][1] if i else t - t_start, 4) for i, (name, t) in enumerate(marks)}
    loss_epoch = []
    loss = None
    for _ in range(args.epochs):
        perm = torch.randperm(N_SAMPLES, device=cuda, generator=shuffle)
        total = torch.zeros((), device=cuda)
        for b in range(batches):
            idx = perm[b * args.batch:(b + 1) * args.batch]
            xb = x_all.index_select(0, idx)
            tb = onehot_all.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            logits = model(xb)
            loss = -(F.log_softmax(logits, dim=1) * tb).sum(dim=1).mean()
            loss.backward()
            opt.step()
            total += loss.detach()
        loss_epoch.append((total / batches).item())
    torch.cuda.synchronize()
    train_s = time.time() - t_train
    cpu_end, wait_end = cpu_now()

    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print(json.dumps({
        "pid": os.getpid(), "seed": args.seed, "epochs": args.epochs, "batch": args.batch,
        "train_s": round(train_s, 4), "setup_s": round(t_train - t_start, 4), "setup_from": start_from,
        "start_time": round(t_start, 3),
        "setup_phases": phases,
        "cpu": {"setup_cpu_s": round(cpu_setup, 3), "setup_wait_s": round(wait_setup, 3),
                "train_cpu_s": round(cpu_end - cpu_setup, 3), "train_wait_s": round(wait_end - wait_setup, 3)},
        "loss_epoch": loss_epoch, "final_loss": float(loss.item()) if loss is not None else None,
        "checksum": checksum,
    }, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
