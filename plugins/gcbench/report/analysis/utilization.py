"""Why a J/token differs: the GPU's busy and idle share per group.

Each trial stores the main window's ``gpu_busy_share`` (0..1: the share of the window in
which its GPUs ran work), ``gpu_idle_share`` (1 - busy) and ``gpu_busy_method`` (how the
share was found; :meth:`gcbench.energy.backend.Facts.busy_method`). A group's figures
are summarised like every metric (median of its valid trials, :mod:`.groups`); this
module adds what the report says about them: which methods gave them, and whether a
group's GPU was mostly waiting. A J/token that comes with a large idle share is the
energy of a starved GPU (the input pipeline, the host), not of its work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gcbench.report.analysis.groups import Group
from gcbench.report.metrics import BUSY_SHARE_METRICS

BUSY_METRICS = BUSY_SHARE_METRICS
"""The trial metrics of the busy share (fractions of the main window)."""

STARVED_IDLE_SHARE = 0.5
"""A group whose median idle share exceeds this waited more than it worked: its J/token
is mostly the energy of an idle GPU."""

BUSY_METHOD_TEXT = {
    "nvml-utilization-sampled": (
        "NVML utilization (nvmlDeviceGetUtilizationRates: the share of each sample period, "
        "1/6 s to 1 s by product, in which one or more kernels ran), read with the power "
        "samples and averaged over the window"
    ),
    "simulated-trial-busy-time": (
        "the trial's own busy time on the simulated device: the time its steps spent in "
        "copies and model work (timed by the host on a CPU device) over the window's length; "
        "a measured time share, not a power-model figure"
    ),
}
"""What each busy-share method label means."""


def describe_busy_method(method: str) -> str:
    """A sentence for a busy-share method label (any ``<backend>-utilization-sampled``)."""
    if method in BUSY_METHOD_TEXT:
        return BUSY_METHOD_TEXT[method]
    if method.endswith("-utilization-sampled"):
        return f"{method.removesuffix('-utilization-sampled')} GPU utilization, sampled and averaged over the window"
    return method


@dataclass(frozen=True)
class BusyShare:
    """One group's busy and idle share over its valid trials.

    Attributes:
        busy: median busy share (0..1) of the trials where it is known; None if none.
        idle: median idle share, likewise.
        n: trials with a known busy share.
        methods: the distinct methods of those trials, sorted.
        starved: the median idle share is above :data:`STARVED_IDLE_SHARE`.
    """

    busy: float | None
    idle: float | None
    n: int
    methods: tuple[str, ...]
    starved: bool


def group_busy(g: Group) -> BusyShare:
    """The :class:`BusyShare` of a group (its valid trials, as in its summaries)."""
    busy, idle = g.known("gpu_busy_share"), g.known("gpu_idle_share")
    methods: tuple[str, ...] = ()
    used = g._used
    if used is not None and "gpu_busy_method" in used.columns and "gpu_busy_share" in used.columns:
        known = used["gpu_busy_share"].notna().to_numpy()
        methods = tuple(sorted({str(m) for m in used["gpu_busy_method"][known] if isinstance(m, str) and m}))
    b = float(np.median(busy)) if busy.size else None
    i = float(np.median(idle)) if idle.size else None
    return BusyShare(b, i, int(busy.size), methods, i is not None and i > STARVED_IDLE_SHARE)


def busy_methods(groups: list[Group]) -> tuple[str, ...]:
    """Every busy-share method among ``groups``' valid trials, sorted."""
    return tuple(sorted({m for g in groups for m in group_busy(g).methods}))


def starved_groups(groups: list[Group]) -> list[str]:
    """Variants whose GPU was idle more than :data:`STARVED_IDLE_SHARE` of the window (median)."""
    return [g.variant for g in groups if group_busy(g).starved]
