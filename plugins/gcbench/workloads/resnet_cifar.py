"""ResNet-50 trained on CIFAR-10 under a fixed compute budget, on 1..N GPUs.

The multi-GPU scaling study: every configuration (GPUs x precision x power cap) trains
on the **same number of samples with the same global batch**, so they differ only in
how the work is spread, at what precision and under which power limit. Energy per
configuration is then directly comparable, and the final test accuracy shows whether a
cap or AMP costs quality.

Method:
* Model: :func:`gcbench.workloads.resnet.resnet50` (He et al. 2016, torchvision's
  v1.5 layout; 23,528,522 parameters with the ImageNet stem).
* Data: CIFAR-10 in its python-pickle format (:mod:`gcbench.workloads.cifar`), held in
  device memory as uint8 and normalised per batch on the device (no data-loader
  processes, no augmentation), so the window measures training, not input pipelines.
* Optimiser: SGD with momentum and weight decay, constant learning rate.
* Order: one seeded permutation per epoch; global batch ``s`` takes the next
  ``global_batch`` indices and rank ``r`` of ``gpus`` takes its contiguous
  ``global_batch / gpus`` slice. ``train_samples // global_batch`` steps are run.
* Warm-up: ``spec.warmup`` steps (seconds are not supported here), then the model,
  optimiser and scaler are put back to their initial state, so the measured run is
  the same whatever the warm-up.
* Multi-GPU: DistributedDataParallel in ``gpus`` processes launched by torchrun
  (``python -m torch.distributed.run --standalone --nproc-per-node N -m
  gcbench.workloads.resnet_cifar --worker CONFIG``); NCCL on CUDA, gloo on CPU. Rank 0
  asks this (the trial) process over a localhost socket to open and close the measured
  windows, with barriers on both sides, so process start-up, data loading and warm-up
  stay outside the window while every rank's work is inside it.
* Power cap: the plan's ``power_cap_w`` is applied by the trial process around the
  workload, for every kind (:class:`gcbench.energy.powercap.TrialPowerCap`), so it holds
  from before the launch until after evaluation; nothing here touches it.
* Precision: ``fp32`` (TF32 off unless ``allow_tf32``), or ``amp``: float16 autocast
  with a gradient scaler on CUDA; on CPU bfloat16 autocast (``torch.autocast("cpu")``),
  reported as ``precision_effective = "amp-bf16-cpu"``.

Windows: ``main`` (training of the whole budget), ``eval`` (test-set accuracy on rank 0).
``spec.window`` is not used: the budget is ``train_samples``.

Settings (defaults): gpus 1, precision ``fp32``, global_batch 256, train_samples 50000, stem ``imagenet``, dataset ``cifar10`` |
``synthetic``, data_dir None (``$GCBENCH_DATA_DIR/cifar10`` or
``~/.cache/gcbench/cifar10``), download False, synthetic_train_per_batch 1000,
synthetic_test 1000, test_samples None (all), eval_batch 500, lr 0.1, momentum 0.9,
weight_decay 5e-4, allow_tf32 False, launch_timeout_s 900.

Returns (units in names): samples (trained in ``main``), steps, global_batch,
per_gpu_batch, gpus, world_size, train_samples_requested, loss (mean training loss of
the last step over all ranks), loss_mean (over the window), accuracy (test, 0..1),
test_samples, parameters, stem, precision, precision_effective, allow_tf32,
device_kind, backend, dataset; settings_effective and settings_not_in_effect
(:func:`settings_in_effect`).

Raises:
    ValueError: inconsistent settings (batch not divisible by gpus, budget below one
        global batch, unknown precision or stem, more GPUs than visible).
    FileNotFoundError: CIFAR-10 not found and ``download`` is off.
    RuntimeError: a DDP worker failed (with the tail of its log).
"""

from __future__ import annotations

import copy
import json
import math
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import Any

from gcbench.kinds import WorkloadKind
from gcbench.spec import TrialSpec
from gcbench.workloads import TrialContext, settings

DEFAULTS: dict[str, Any] = {
    "gpus": 1,
    "precision": "fp32",
    "global_batch": 256,
    "train_samples": 50_000,
    "stem": "imagenet",
    "dataset": "cifar10",
    "data_dir": None,
    "download": False,
    "synthetic_train_per_batch": 1000,
    "synthetic_test": 1000,
    "test_samples": None,
    "eval_batch": 500,
    "lr": 0.1,
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "allow_tf32": False,
    "launch_timeout_s": 900,
}

PhaseFactory = Callable[[str], AbstractContextManager[None]]


def check_settings(cfg: dict[str, Any]) -> None:
    """Raise ValueError on settings that cannot describe a fixed-budget run."""
    gpus, gb = int(cfg["gpus"]), int(cfg["global_batch"])
    if gpus < 1:
        raise ValueError(f"resnet_cifar setting gpus must be >= 1, got {gpus}")
    if gb < gpus or gb % gpus:
        raise ValueError(f"resnet_cifar global_batch {gb} must be a positive multiple of gpus {gpus}")
    if int(cfg["train_samples"]) < gb:
        raise ValueError(f"resnet_cifar train_samples {cfg['train_samples']} is less than one global batch ({gb})")
    if cfg["precision"] not in ("fp32", "amp"):
        raise ValueError(f"resnet_cifar precision must be fp32 or amp, got {cfg['precision']!r}")
    if cfg["stem"] not in ("imagenet", "cifar"):
        raise ValueError(f"resnet_cifar stem must be imagenet or cifar, got {cfg['stem']!r}")
    if cfg["dataset"] not in ("cifar10", "synthetic"):
        raise ValueError(f"resnet_cifar dataset must be cifar10 or synthetic, got {cfg['dataset']!r}")


def data_folder(cfg: dict[str, Any], outdir: Path, seed: int) -> Path:
    """The CIFAR-10 batch folder for this trial (generated or downloaded when asked)."""
    from gcbench.workloads import cifar

    if cfg["dataset"] == "synthetic":
        root = Path(cfg["data_dir"]) if cfg["data_dir"] else outdir / "cifar-synthetic"
        return cifar.generate(root, int(cfg["synthetic_train_per_batch"]), int(cfg["synthetic_test"]), seed)
    root = Path(
        cfg["data_dir"] or Path(os.environ.get("GCBENCH_DATA_DIR", Path.home() / ".cache" / "gcbench")) / "cifar10"
    )
    try:
        return cifar.dataset_folder(root)
    except FileNotFoundError:
        if not cfg["download"]:
            raise FileNotFoundError(
                f"CIFAR-10 not found under {root}: set data_dir, download: true, or dataset: synthetic"
            ) from None
        return cifar.download(root)


# ----------------------------------------------------------------------------------
# Training, shared by the in-process (1 GPU) and the DDP worker paths
# ----------------------------------------------------------------------------------


def train(
    cfg: dict[str, Any],
    folder: Path,
    seed: int,
    warmup_steps: int,
    rank: int,
    world: int,
    device: str,
    phase: PhaseFactory,
    barrier: Callable[[], None] = lambda: None,
    all_reduce_sum: Callable[[Any], None] = lambda t: None,
) -> dict[str, Any]:
    """Train the fixed budget on this rank, evaluate on rank 0; returns the metrics.

    ``phase(name)`` opens the measured window ``name`` (only rank 0's matters);
    ``barrier`` and ``all_reduce_sum`` are no-ops in a single process.
    """
    import numpy as np
    import torch
    import torch.nn.functional as F

    from gcbench.workloads import cifar
    from gcbench.workloads._loop import progress_marker, seed_everything
    from gcbench.workloads.resnet import count_parameters, resnet50

    seed_everything(seed)
    dev = torch.device(device)
    on_cuda = dev.type == "cuda"
    if on_cuda:
        torch.backends.cuda.matmul.allow_tf32 = bool(cfg["allow_tf32"])
        torch.backends.cudnn.allow_tf32 = bool(cfg["allow_tf32"])
        torch.backends.cudnn.benchmark = True

    x_train_np, y_train_np, x_test_np, y_test_np = cifar.load(folder)
    n_train = len(y_train_np)
    x_train = torch.from_numpy(x_train_np).to(dev)
    y_train = torch.from_numpy(y_train_np).to(dev)
    mean = torch.tensor(cifar.MEAN, device=dev).view(1, 3, 1, 1)
    std = torch.tensor(cifar.STD, device=dev).view(1, 3, 1, 1)

    def batch(x_u8: torch.Tensor) -> torch.Tensor:
        return (x_u8.float().div_(255.0) - mean) / std

    gb = int(cfg["global_batch"])
    local_b = gb // world
    steps = int(cfg["train_samples"]) // gb
    # Same permutation on every rank: epoch e uses a permutation seeded by (seed, e).
    order = np.concatenate(
        [
            np.random.default_rng([seed, e]).permutation(n_train)
            for e in range(math.ceil((steps + warmup_steps) * gb / n_train))
        ]
    )

    def indices(step: int) -> torch.Tensor:
        start = step * gb + rank * local_b
        return torch.from_numpy(order[start : start + local_b]).to(dev)

    net = resnet50(num_classes=10, stem=cfg["stem"]).to(dev)
    n_params = count_parameters(net)
    model: torch.nn.Module = net  # what trains: the network, or DDP around it on several GPUs
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(net, device_ids=[dev.index] if on_cuda else None)
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=float(cfg["lr"]),
        momentum=float(cfg["momentum"]),
        weight_decay=float(cfg["weight_decay"]),
    )
    amp = cfg["precision"] == "amp"
    if amp and on_cuda:
        precision_effective = "amp-fp16"
        autocast: Callable[[], AbstractContextManager[Any]] = partial(torch.autocast, "cuda", dtype=torch.float16)
    elif amp:
        precision_effective = "amp-bf16-cpu"
        autocast = partial(torch.autocast, "cpu", dtype=torch.bfloat16)
    else:
        precision_effective = "fp32-tf32" if on_cuda and cfg["allow_tf32"] else "fp32"
        autocast = nullcontext
    scaler = torch.amp.GradScaler("cuda", enabled=amp and on_cuda)

    loss_sum = torch.zeros((), device=dev, dtype=torch.float64)
    last_loss = torch.zeros((), device=dev, dtype=torch.float64)

    def step(s: int) -> None:
        idx = indices(s)
        with autocast():
            loss = F.cross_entropy(model(batch(x_train[idx])), y_train[idx])
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        d = loss.detach().double()
        loss_sum.add_(d)
        last_loss.copy_(d)

    model.train()
    if warmup_steps:
        initial = (copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict()))
        for s in range(warmup_steps):
            step(steps + s)  # batches after the budget, so the measured run sees its own data
        model.load_state_dict(initial[0])
        optimizer.load_state_dict(initial[1])
        scaler = torch.amp.GradScaler("cuda", enabled=amp and on_cuda)
        loss_sum.zero_()
    sync = (lambda: torch.cuda.synchronize(dev)) if on_cuda else (lambda: None)
    sync()
    barrier()
    with phase("main"):
        barrier()  # every rank starts once the window is open
        mark = progress_marker()  # None in a DDP worker: its window is opened by the trial process
        for s in range(steps):
            step(s)
            if mark is not None:
                mark(1)
        sync()
        barrier()  # the window closes after the slowest rank
    stats = torch.stack([loss_sum, last_loss])
    all_reduce_sum(stats)
    loss_mean = float(stats[0]) / (steps * world)
    loss_last = float(stats[1]) / world

    accuracy = None
    limit = cfg["test_samples"]
    n_test = len(y_test_np) if limit is None else min(int(limit), len(y_test_np))
    if rank == 0:
        net.eval()  # DDP's .module is this same network
        correct = 0
        with phase("eval"), torch.no_grad():
            for i in range(0, n_test, int(cfg["eval_batch"])):
                xb = torch.from_numpy(x_test_np[i : min(i + int(cfg["eval_batch"]), n_test)]).to(dev)
                yb = torch.from_numpy(y_test_np[i : i + len(xb)]).to(dev)
                with autocast():
                    logits = net(batch(xb))
                correct += int((logits.argmax(1) == yb).sum())
            sync()
        accuracy = correct / n_test if n_test else None
    barrier()
    return {
        "samples": steps * gb,
        "steps": steps,
        "global_batch": gb,
        "per_gpu_batch": local_b,
        "world_size": world,
        "train_samples_requested": int(cfg["train_samples"]),
        "loss": loss_last,
        "loss_mean": loss_mean,
        "accuracy": accuracy,
        "test_samples": n_test,
        "parameters": n_params,
        "stem": cfg["stem"],
        "precision": cfg["precision"],
        "precision_effective": precision_effective,
        "allow_tf32": bool(cfg["allow_tf32"]) if on_cuda else None,
        "device_kind": dev.type,
    }


# ----------------------------------------------------------------------------------
# The workload entry point (trial process)
# ----------------------------------------------------------------------------------


def run(spec: TrialSpec, ctx: TrialContext) -> dict:
    """Train ResNet-50 on CIFAR-10 for the fixed budget; see the module docstring."""
    cfg = settings(spec, DEFAULTS)
    check_settings(cfg)
    if spec.warmup.seconds is not None or spec.warmup.until_stable is not None:
        raise ValueError("resnet_cifar warm-up must be given in steps")
    warmup_steps = spec.warmup.steps or 0
    folder = data_folder(cfg, Path(ctx.outdir), spec.seed)
    gpus = int(cfg["gpus"])
    on_cuda = str(ctx.device).startswith("cuda")
    if on_cuda:
        import torch

        if gpus > torch.cuda.device_count():
            raise ValueError(f"resnet_cifar gpus={gpus} but {torch.cuda.device_count()} CUDA device(s) visible")

    if gpus == 1:
        out = train(cfg, folder, spec.seed, warmup_steps, 0, 1, str(ctx.device), ctx.window)
        out["backend"] = None
    else:
        out = _run_distributed(cfg, folder, spec, warmup_steps, ctx, on_cuda)
    out.update({"gpus": gpus, "dataset": cfg["dataset"]})
    out.update(settings_in_effect(cfg, on_cuda))
    return out


def settings_in_effect(cfg: dict[str, Any], on_cuda: bool) -> dict[str, Any]:
    """``settings_effective`` and ``settings_not_in_effect`` of a trial that ran
    (:func:`gcbench.workloads.effective`).

    Without CUDA, ``gpus`` is not in effect (the work ran in that many CPU processes,
    no GPU), nor is ``precision: amp`` (bfloat16 autocast on the CPU, not float16 AMP)
    or ``allow_tf32: true`` (TF32 exists only on a GPU). A power cap is the trial's
    (:class:`gcbench.energy.powercap.TrialPowerCap`), not recorded here.
    """
    from gcbench.workloads import AMP_ON_CPU, effective

    if on_cuda:
        return effective(cfg)
    gpus = int(cfg["gpus"])
    procs = "1 CPU process" if gpus == 1 else f"{gpus} CPU processes (DDP over gloo)"
    used: dict[str, Any] = {"gpus": 0}
    not_in_effect = {"gpus": f"no CUDA device: {gpus} GPU{'s' if gpus > 1 else ''} requested, ran in {procs}"}
    if cfg["precision"] == "amp":
        used["precision"] = "amp-bf16-cpu"
        not_in_effect["precision"] = AMP_ON_CPU
    if cfg["allow_tf32"]:
        used["allow_tf32"] = False
        not_in_effect["allow_tf32"] = "no CUDA device: TF32 exists only on a GPU"
    return effective(cfg, used, not_in_effect)


def _package_root() -> str:
    import gcbench

    return str(Path(gcbench.__file__).resolve().parent.parent)


def _run_distributed(
    cfg: dict[str, Any], folder: Path, spec: TrialSpec, warmup_steps: int, ctx: TrialContext, on_cuda: bool
) -> dict[str, Any]:
    outdir = Path(ctx.outdir)
    gpus = int(cfg["gpus"])
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    config_path = outdir / "resnet_ddp_config.json"
    result_path = outdir / "resnet_ddp_result.json"
    result_path.unlink(missing_ok=True)
    config_path.write_text(
        json.dumps(
            {
                "settings": cfg,
                "folder": str(folder),
                "seed": spec.seed,
                "warmup_steps": warmup_steps,
                "port": port,
                "cuda": on_cuda,
                "result": str(result_path),
            }
        )
    )
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(gpus),
        "-m",
        "gcbench.workloads.resnet_cifar",
        "--worker",
        str(config_path),
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH")) if p)
    # the DDP processes share the trial's CPU set (gcbench.energy.cpuset): its threads split among them
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        given = env.get(name, "")
        env[name] = str(max(1, int(given) // gpus)) if given.isdigit() else "1"
    log_path = outdir / "torchrun.log"
    ctx.log(f"launching {gpus} DDP processes: {' '.join(argv)}")
    deadline = time.monotonic() + float(cfg["launch_timeout_s"])

    def log_tail() -> str:
        return log_path.read_text(errors="replace")[-3000:]

    with open(log_path, "wb") as log_f, ExitStack() as windows:
        proc = subprocess.Popen(argv, env=env, stdout=log_f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            _serve_windows(server, proc, ctx, windows, deadline)
            rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except (RuntimeError, TimeoutError, subprocess.TimeoutExpired) as exc:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"DDP training failed: {exc}; log tail:\n{log_tail()}") from exc
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            server.close()
    if rc != 0 or not result_path.exists():
        raise RuntimeError(f"DDP training failed (torchrun exit {rc}); log tail:\n{log_tail()}")
    out = json.loads(result_path.read_text())
    out["backend"] = "nccl" if on_cuda else "gloo"
    return out


def _serve_windows(
    server: socket.socket, proc: subprocess.Popen, ctx: TrialContext, windows: ExitStack, deadline: float
) -> None:
    """Open and close ``ctx`` windows as rank 0 asks ("begin KEY" / "end KEY" lines)."""
    server.settimeout(0.2)
    conn = None
    while conn is None:
        if proc.poll() is not None:
            return  # died before connecting; the caller reports the log
        if time.monotonic() > deadline:
            raise TimeoutError("DDP workers did not connect before launch_timeout_s")
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
    open_windows: dict[str, ExitStack] = {}
    with conn, conn.makefile("rwb", buffering=0) as f:
        while True:
            ready, _, _ = select.select([conn], [], [], 0.5)
            if not ready:
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                continue
            line = f.readline()
            if not line:
                break
            verb, _, key = line.decode().strip().partition(" ")
            if verb == "begin":
                stack = ExitStack()
                stack.enter_context(ctx.window(key))
                open_windows[key] = stack
                windows.push(stack.__exit__)  # closed by the caller if the workers die
            elif verb == "end":
                open_windows.pop(key).close()
            f.write(b"ok\n")
    if open_windows:
        raise RuntimeError(f"DDP workers stopped inside window(s) {', '.join(open_windows)}")


# ----------------------------------------------------------------------------------
# DDP worker (one per rank, started by torchrun)
# ----------------------------------------------------------------------------------


class _ParentLink:
    """Rank 0's line protocol to the trial process: begin/end of measured windows."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=600)
        self.f = self.sock.makefile("rwb", buffering=0)

    def _say(self, line: str) -> None:
        self.f.write((line + "\n").encode())
        if self.f.readline().strip() != b"ok":
            raise RuntimeError(f"trial process did not acknowledge {line!r}")

    @contextmanager
    def window(self, key: str) -> Iterator[None]:
        self._say(f"begin {key}")
        try:
            yield
        finally:
            self._say(f"end {key}")

    def close(self) -> None:
        self.f.close()
        self.sock.close()


def _worker(config_path: str) -> int:
    import torch
    import torch.distributed as dist

    conf = json.loads(Path(config_path).read_text())
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    if conf["cuda"]:
        torch.cuda.set_device(local_rank)
        device, backend = f"cuda:{local_rank}", "nccl"
    else:
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        device, backend = "cpu", "gloo"
    dist.init_process_group(backend)
    link = _ParentLink(conf["port"]) if rank == 0 else None
    phase: PhaseFactory = link.window if link is not None else (lambda key: nullcontext())
    try:
        out = train(
            conf["settings"],
            Path(conf["folder"]),
            conf["seed"],
            conf["warmup_steps"],
            rank,
            world,
            device,
            phase,
            barrier=dist.barrier,
            all_reduce_sum=lambda t: dist.all_reduce(t, op=dist.ReduceOp.SUM),
        )
        if rank == 0:
            tmp = Path(conf["result"] + ".tmp")
            tmp.write_text(json.dumps(out))
            tmp.replace(conf["result"])
    finally:
        if link is not None:
            link.close()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--worker":
        print("usage: python -m gcbench.workloads.resnet_cifar --worker CONFIG.json", file=sys.stderr)
        sys.exit(2)
    sys.exit(_worker(sys.argv[2]))


KIND = WorkloadKind(
    name="resnet_cifar",
    run="gcbench.workloads.resnet_cifar:run",
    description="ResNet-50 on CIFAR-10 under a fixed compute budget, 1-N GPUs, FP32/AMP, power caps (study 2)",
    defaults=DEFAULTS,
    check_settings=check_settings,
    unit="samples",
    primary_metrics=("gpu_energy_j",),
    metrics=("gpu_energy_j", "total_energy_j", "accuracy", "codecarbon_rel_error"),
    compared=("gpu_energy_j", "total_energy_j", "duration_s"),
    tradeoff_always=True,
    power_cap=True,
    study="multigpu-co2e",
)
"""The kind's registration (entry point ``resnet_cifar`` of group ``gcbench.workloads``)."""
