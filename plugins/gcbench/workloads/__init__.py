"""Workloads: the measured work of a trial, one module per kind.

Each workload module exposes::

    def run(spec: TrialSpec, ctx: TrialContext) -> dict[str, float | int | str | None]

It prepares its data and model outside the measured window, runs the warm-up
(``spec.warmup``), then does the measured part inside ``with ctx.window():`` and
returns its counts (``tokens``, ``bytes``, ``samples``, ...) and any extra metrics
(``accuracy``, ``loss``, phase durations). ``gcbench.trial`` adds the energy and the
derived figures (J/token, GB/s, J/GB, ...). A workload never measures energy itself.

Workload modules import torch lazily inside ``run`` so that importing this package
stays cheap for Airflow's DAG processor.
"""

from __future__ import annotations

import importlib
from contextlib import AbstractContextManager
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from gcbench.spec import TrialSpec

WORKLOADS: dict[str, str] = {
    "noop": "gcbench.workloads.noop",
    "tinylm": "gcbench.workloads.tinylm",
    "h2d": "gcbench.workloads.h2d",
    "resnet_cifar": "gcbench.workloads.resnet_cifar",
}
"""Workload kind -> module implementing ``run(spec, ctx)``."""


class TrialContext(Protocol):
    """What a workload gets from the trial process.

    Attributes:
        spec: the trial spec.
        outdir: the trial's output folder (writable).
        device: torch device string for the trial's first GPU (``cuda:0`` after
            CUDA_VISIBLE_DEVICES is applied) or ``cpu`` on a machine without one.
    """

    spec: TrialSpec
    outdir: Path
    device: str

    def window(self, key: str = "main") -> AbstractContextManager[None]:
        """Measured window ``key``; ``main`` is the trial's primary window."""

    def log(self, message: str) -> None:
        """A line in the trial log (trial.log)."""


def load(kind: str) -> ModuleType:
    """The module of workload ``kind``; raises KeyError for an unknown kind."""
    return importlib.import_module(WORKLOADS[kind])


def window_steps(spec: TrialSpec, default: int = 10) -> int:
    """Steps in the measured window when it is given in steps, else ``default``."""
    return spec.window.steps if spec.window.steps is not None else default


def settings(spec: TrialSpec, defaults: dict[str, Any]) -> dict[str, Any]:
    """``defaults`` overlaid with the spec's settings; unknown keys raise ValueError."""
    unknown = set(spec.settings) - set(defaults)
    if unknown:
        raise ValueError(f"unknown {spec.kind} settings: {', '.join(sorted(unknown))}")
    return {**defaults, **spec.settings}


def defaults_for(kind: str) -> dict[str, Any] | None:
    """The settings a workload kind accepts with their defaults (its ``DEFAULTS``), or None.

    Workload modules import torch lazily, so this is cheap enough for DAG parsing.
    """
    module = load(kind)
    return getattr(module, "DEFAULTS", None)
