"""Step loops shared by the workloads: warm-up and measured window in steps or seconds.

A plan gives ``warmup`` and ``window`` either as a number of steps or as seconds
(:class:`gcbench.spec.Amount`). A *step* is the workload's unit of work (one batch,
one copy). For a window in seconds the loop runs whole steps until the time is
reached, so the last step may end a little after it; the window's real edges are
what the trial records, and the step count is exact.

For asynchronous devices, ``sync`` (e.g. ``torch.cuda.synchronize``) is called when
the loop checks the clock in a seconds window and once at the end, so that the
counted steps are finished work when the window closes.

Inside a measured window (``ctx.window()`` makes a :class:`gcbench.stability.Progress`
current through :func:`recording`) the loop reports its progress: after every step,
or after every synchronisation when ``sync`` is given (steps queued on a device are
done only then); in a steps window the loop then also synchronises every
``check_every`` steps, as a seconds window does, so that the window's throughput can
be followed. A loop of its own calls :func:`progress_marker`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from gcbench.spec import Amount

if TYPE_CHECKING:
    from gcbench.stability import Progress

_PROGRESS: ContextVar[Progress | None] = ContextVar("gcbench_progress", default=None)
_WARMUPS: ContextVar[list[dict] | None] = ContextVar("gcbench_warmups", default=None)


@contextmanager
def warmup_log() -> Iterator[list[dict]]:
    """Collect the outcome of every ``until_stable`` warm-up run inside the block (the
    trial stores them in result.json as ``warmup``)."""
    log: list[dict] = []
    token = _WARMUPS.set(log)
    try:
        yield log
    finally:
        _WARMUPS.reset(token)


def warm_until_stable(
    rule,
    step: Callable[[int], object],
    sync: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> dict:
    """Run ``step`` until the step time settles (:class:`gcbench.spec.StableWarmup`).

    Each step is timed (after ``sync`` when given). Done when the last ``rule.steps``
    step times have a coefficient of variation of at most ``rule.cv_max``, or when
    ``rule.max_seconds`` have passed (the cap).

    Returns:
        ``{"steps", "seconds", "cv", "settled", "capped", "cv_max", "judged_steps",
        "max_seconds"}``: ``cv`` is that of the last judged step times (None with
        fewer than ``rule.steps`` steps).
    """
    import statistics

    t0 = clock()
    times: list[float] = []
    n = 0
    cv = None
    settled = False
    while True:
        a = clock()
        step(n)
        if sync is not None:
            sync()
        b = clock()
        n += 1
        times.append(b - a)
        if len(times) >= rule.steps:
            recent = times[-rule.steps :]
            mean = statistics.fmean(recent)
            cv = statistics.pstdev(recent) / mean if mean > 0 else 0.0
            if cv <= rule.cv_max:
                settled = True
                break
        if b - t0 >= rule.max_seconds:
            break
    out = {
        "steps": n,
        "seconds": clock() - t0,
        "cv": cv,
        "settled": settled,
        "capped": not settled,
        "cv_max": rule.cv_max,
        "judged_steps": rule.steps,
        "max_seconds": rule.max_seconds,
    }
    log = _WARMUPS.get()
    if log is not None:
        log.append(out)
    return out


@contextmanager
def recording(progress: Progress) -> Iterator[Progress]:
    """Make ``progress`` the recorder of the step loops run inside the ``with`` block."""
    token = _PROGRESS.set(progress)
    try:
        yield progress
    finally:
        _PROGRESS.reset(token)


def progress_marker() -> Callable[[int], None] | None:
    """``done(steps)`` of the current window's recorder, or None outside a window.

    For workloads with a step loop of their own: call it with the number of steps
    finished each time they are known to be finished.
    """
    progress = _PROGRESS.get()
    return progress.done if progress is not None else None


def run_steps(
    amount: Amount,
    step: Callable[[int], object],
    default_steps: int,
    sync: Callable[[], None] | None = None,
    check_every: int = 1,
) -> int:
    """Run ``step(i)`` for ``amount`` (steps or seconds); returns the steps run.

    Args:
        amount: steps, or seconds of wall time (monotonic clock), or (a warm-up)
            until the step time settles (:func:`warm_until_stable`).
        step: the unit of work; gets the 0-based step index.
        default_steps: steps when ``amount`` sets neither.
        sync: waits for the device's queued work; called before each clock check of a
            seconds loop and once at the end.
        check_every: in a seconds loop, look at the clock (and sync) every this many
            steps, to keep synchronisation off very short steps; with ``sync`` inside
            a measured window, a steps loop synchronises as often, to report progress.
    """
    if amount.until_stable is not None:
        return warm_until_stable(amount.until_stable, step, sync)["steps"]
    n = 0
    mark = progress_marker()
    marked = 0

    def report() -> None:
        nonlocal marked
        if mark is not None and n > marked:
            mark(n - marked)
            marked = n

    if amount.seconds is not None:
        deadline = time.monotonic() + amount.seconds
        if amount.seconds > 0:
            while True:
                step(n)
                n += 1
                if sync is None:
                    report()
                if n % check_every == 0:
                    if sync is not None:
                        sync()
                        report()
                    if time.monotonic() >= deadline:
                        break
    else:
        steps = amount.steps if amount.steps is not None else default_steps
        while n < steps:
            step(n)
            n += 1
            if sync is None:
                report()
            elif mark is not None and n % check_every == 0:
                sync()
                report()
    if sync is not None:
        sync()
    report()
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
