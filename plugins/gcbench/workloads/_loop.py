"""Step loops shared by the workloads: warm-up and measured window in steps or seconds.

A plan gives ``warmup`` and ``window`` either as a number of steps or as seconds
(:class:`gcbench.spec.Amount`). A *step* is the workload's unit of work (one batch,
one copy). For a window in seconds the loop runs whole steps until the time is
reached, so the last step may end a little after it; the window's real edges are
what the trial records, and the step count is exact.

For asynchronous devices, ``sync`` (e.g. ``torch.cuda.synchronize``) is called when
the loop checks the clock in a seconds window and once at the end, so that the
counted steps are finished work when the window closes.
"""

from __future__ import annotations

import time
from typing import Callable

from gcbench.spec import Amount


def run_steps(
    amount: Amount,
    step: Callable[[int], object],
    default_steps: int,
    sync: Callable[[], None] | None = None,
    check_every: int = 1,
) -> int:
    """Run ``step(i)`` for ``amount`` (steps or seconds); returns the steps run.

    Args:
        amount: steps, or seconds of wall time (monotonic clock).
        step: the unit of work; gets the 0-based step index.
        default_steps: steps when ``amount`` sets neither.
        sync: waits for the device's queued work; called before each clock check of a
            seconds loop and once at the end.
        check_every: in a seconds loop, look at the clock (and sync) every this many
            steps, to keep synchronisation off very short steps.
    """
    n = 0
    if amount.seconds is not None:
        deadline = time.monotonic() + amount.seconds
        if amount.seconds > 0:
            while True:
                step(n)
                n += 1
                if n % check_every == 0:
                    if sync is not None:
                        sync()
                    if time.monotonic() >= deadline:
                        break
    else:
        steps = amount.steps if amount.steps is not None else default_steps
        for n in range(steps):
            step(n)
        n = steps
    if sync is not None:
        sync()
    return n


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators (torch imported here, lazily)."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def device_kind(device: str) -> str:
    """``cuda`` or ``cpu`` from a torch device string."""
    return "cuda" if str(device).startswith("cuda") else "cpu"


def synchronizer(device: str) -> Callable[[], None] | None:
    """``torch.cuda.synchronize`` bound to ``device`` on CUDA, else None."""
    if device_kind(device) != "cuda":
        return None
    import torch

    dev = torch.device(device)
    return lambda: torch.cuda.synchronize(dev)
