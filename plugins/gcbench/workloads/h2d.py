"""Host-to-device copies from pinned or pageable host memory.

The regime study's copy experiment: the same buffer copied host -> GPU repeatedly,
from page-locked ("pinned") memory, which the GPU's DMA engine reads directly, or
from ordinary pageable memory, which the CUDA driver first stages through its own
pinned buffer in chunks (CUDA C++ Best Practices Guide, "Pinned Memory"). On the
H200 of ARCHITECTURE.md pinned copies ran at 55 GB/s against 6.5-7.4 GB/s pageable.
The trial derives GB/s and J/GB from ``bytes`` and the window's time and energy.

Settings:
    memory: ``pinned`` | ``pageable`` (default ``pinned``).
    size_bytes: bytes per copy, 1 MiB .. 1 GiB (default 64 MiB).
    pin_inside_window: when True the source buffer is allocated and pinned inside
        the main window (its cost is counted once, before the copies); when False
        (default) pinning happens before the window. Always echoed in the metrics.
        Without effect for pageable memory.

Window: steps = copies; seconds = copies until the time is reached (the clock is
checked after batches of about 64 MiB so that synchronising does not dominate small
copies). Every copy is finished (``torch.cuda.synchronize``) when the window closes.

Without CUDA (``ctx.device == "cpu"``) the workload does the host-side copy it can,
``dst.copy_(src)`` into a preallocated host tensor, and says so: ``device_kind`` is
``cpu`` and ``memory_effective`` is ``pageable`` (torch cannot pin memory without a
CUDA driver). Such figures are host memcpy bandwidth, never a GPU copy.

Returns:
    bytes: bytes copied in the main window (copies x size_bytes).
    copies: number of copies in the main window.
    size_bytes: bytes per copy.
    memory: requested memory kind; memory_effective: what was used.
    pin_inside_window: as set; pin_s: seconds spent pinning inside the window
        (None when pinning was outside or not done).
    device_kind: ``cuda`` or ``cpu``; copy_target: ``gpu`` or ``host``; device_busy_s: on a
    CPU device, the time spent in the copies (the trial's own busy time), else None.
    note: why the effective setting differs from the requested one, or None.
    settings_effective, settings_not_in_effect: see :func:`gcbench.workloads.effective`;
        ``memory`` is not in effect when pinned memory was asked for without CUDA, and
        ``pin_inside_window`` when pinning inside the window was asked for but nothing
        was pinned (pageable memory, or no CUDA).

Raises:
    ValueError: unknown memory kind, size outside 1 MiB .. 1 GiB.
"""

from __future__ import annotations

import time

from gcbench.kinds import WorkloadKind
from gcbench.spec import TrialSpec
from gcbench.workloads import TrialContext, effective, settings
from gcbench.workloads._loop import device_kind, run_steps, seed_everything, synchronizer

MIB = 1 << 20
GIB = 1 << 30
DEFAULTS = {"memory": "pinned", "size_bytes": 64 * MIB, "pin_inside_window": False}
CHECK_BYTES = 64 * MIB
"""In a seconds window, look at the clock after about this many bytes of copies."""
PINNED_UNAVAILABLE = "no CUDA device: pinned memory unavailable, host-to-host copy of pageable memory"
"""Why pinned memory requested on a machine without CUDA is not in effect."""


def check_settings(cfg: dict) -> None:
    """Raise ValueError on a memory kind other than pinned/pageable or a size outside 1 MiB..1 GiB."""
    if cfg["memory"] not in ("pinned", "pageable"):
        raise ValueError(f"h2d setting memory must be pinned or pageable, got {cfg['memory']!r}")
    size = cfg["size_bytes"]
    if isinstance(size, bool) or not isinstance(size, int) or not MIB <= size <= GIB:
        raise ValueError(f"h2d setting size_bytes must be an integer in 1 MiB..1 GiB, got {size!r}")


def run(spec: TrialSpec, ctx: TrialContext) -> dict:
    """Copy a ``size_bytes`` host buffer to the device; see the module docstring."""
    cfg = settings(spec, DEFAULTS)
    check_settings(cfg)
    memory = cfg["memory"]
    size = int(cfg["size_bytes"])
    pin_inside = bool(cfg["pin_inside_window"])

    import torch

    seed_everything(spec.seed)
    kind = device_kind(ctx.device)
    sync = synchronizer(ctx.device)
    note = None
    pin = memory == "pinned" and kind == "cuda"
    if memory == "pinned" and kind != "cuda":
        note = PINNED_UNAVAILABLE
    elif kind != "cuda":
        note = "no CUDA device: host-to-host copy into a preallocated tensor"

    def make_source() -> torch.Tensor:
        # pin_memory=True allocates page-locked memory directly (cudaHostAlloc);
        # fill_ touches every page so no page fault lands inside the copies.
        src = torch.empty(size, dtype=torch.uint8, pin_memory=pin)
        src.fill_(spec.seed % 251)
        return src

    dst = torch.empty(size, dtype=torch.uint8, device=ctx.device)
    dst.fill_(0)
    src = None if (pin and pin_inside) else make_source()

    busy = {"s": 0.0}  # time in copies; on a CPU device the trial's own busy time

    def copy(_: int) -> None:
        assert src is not None  # made before the warm-up, or at the window's start
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=pin)
        busy["s"] += time.perf_counter() - t0

    if src is not None:
        run_steps(spec.warmup, copy, default_steps=0, sync=sync)
    else:
        # Warm the copy path with a pageable buffer so the window's pinning is cold
        # but the driver and the destination are not.
        warm_src = torch.empty(size, dtype=torch.uint8)
        warm_src.fill_(1)
        run_steps(spec.warmup, lambda _: dst.copy_(warm_src), default_steps=0, sync=sync)
        del warm_src

    check_every = max(1, CHECK_BYTES // size)
    pin_s = None
    busy["s"] = 0.0
    with ctx.window():
        if src is None:
            t0 = time.monotonic()
            src = make_source()
            pin_s = time.monotonic() - t0
        copies = run_steps(spec.window, copy, default_steps=10, sync=sync, check_every=check_every)

    if copies and int(dst[size - 1]) != spec.seed % 251:
        raise RuntimeError("h2d: destination does not hold the copied data")
    not_in_effect: dict[str, str] = {}
    if memory == "pinned" and not pin:
        not_in_effect["memory"] = PINNED_UNAVAILABLE
    if pin_inside and not pin:
        not_in_effect["pin_inside_window"] = (
            "nothing was pinned (pageable memory)" if memory == "pageable" else "no CUDA device: nothing was pinned"
        )
    used = {"memory": "pinned" if pin else "pageable", "pin_inside_window": pin_inside and pin}
    return {
        "bytes": copies * size,
        "copies": copies,
        "size_bytes": size,
        "memory": memory,
        "memory_effective": "pinned" if pin else "pageable",
        "pin_inside_window": pin_inside,
        "pin_s": pin_s,
        "device_kind": kind,
        "copy_target": "gpu" if kind == "cuda" else "host",
        "device_busy_s": busy["s"] if kind == "cpu" else None,
        "note": note,
        **effective(cfg, used, not_in_effect),
    }


KIND = WorkloadKind(
    name="h2d",
    run="gcbench.workloads.h2d:run",
    description="host-to-device copies from pinned or pageable memory (the regime study's H2D part)",
    defaults=DEFAULTS,
    check_settings=check_settings,
    unit="bytes",
    primary_metrics=("gpu_j_per_gb",),
    metrics=("gpu_j_per_gb", "gb_per_s", "cpu_j_per_gb"),
    compared=("gpu_j_per_gb", "gb_per_s"),
    paired=("gpu_j_per_gb", "gb_per_s"),
    energy_time=(("gpu_j_per_gb",), "s_per_gb"),
    study="regime-h2d",
)
"""The kind's registration (entry point ``h2d`` of group ``gcbench.workloads``)."""
