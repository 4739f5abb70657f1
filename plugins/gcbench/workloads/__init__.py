"""Workloads: the measured work of a trial, one module per kind.

The kinds are registered in :mod:`gcbench.kinds` (entry-point group
``gcbench.workloads``): each module declares its :class:`~gcbench.kinds.WorkloadKind`
as ``KIND``. Besides the built-in studies' kinds, ``python`` (:mod:`.pyfunc`),
``command`` (:mod:`.command`) and ``container`` (:mod:`.container`) run a user's own
work, marked through the control channel (:mod:`.control`, :mod:`.program`).

Each workload module exposes::

    def run(spec: TrialSpec, ctx: TrialContext) -> dict[str, float | int | str | None]

It prepares its data and model outside the measured window, runs the warm-up
(``spec.warmup``), then does the measured part inside ``with ctx.window():`` and
returns its counts (``tokens``, ``bytes``, ``samples``, ...) and any extra metrics
(``accuracy``, ``loss``, phase durations). ``gcbench.trial`` adds the energy and the
derived figures (J/token, GB/s, J/GB, ...). A workload never measures energy itself.

Every workload also says what ran (:func:`effective`): ``settings_effective`` (each
setting as it ran) and ``settings_not_in_effect`` (``{setting: reason}`` for a requested
level that did not run as asked, e.g. pinned memory or float16 AMP without a CUDA
device); the trial writes both at the top of ``result.json``. A workload that cannot run
a requested level at all raises :class:`gcbench.errors.SkipTrial` with
``not_in_effect={setting: reason}``.

Workload modules import torch lazily inside ``run`` so that importing this package
stays cheap for Airflow's DAG processor.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from gcbench import kinds
from gcbench.spec import TrialSpec


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

    def count(self, window: str | None = None, **units: int | float) -> None:
        """Units of work (``tokens=4096``) done in the innermost open window."""

    def step(self, n: int = 1, at_s: float | None = None) -> None:
        """``n`` steps finished in the innermost open window."""

    def metric(self, name: str, value: float) -> None:
        """A figure of the workload's own, stored with the trial."""


def load(kind: str) -> Callable[..., Any]:
    """The ``run(spec, ctx)`` function of workload ``kind``.

    Raises:
        gcbench.kinds.UnknownKind: no installed package registers ``kind``.
        gcbench.kinds.KindRegistryError: its module cannot be imported.
    """
    return kinds.get(kind).load_run()


def window_steps(spec: TrialSpec, default: int = 10) -> int:
    """Steps in the measured window when it is given in steps, else ``default``."""
    return spec.window.steps if spec.window.steps is not None else default


def settings(spec: TrialSpec, defaults: dict[str, Any]) -> dict[str, Any]:
    """``defaults`` overlaid with the spec's settings; unknown keys raise ValueError.

    The trial-level settings (:data:`gcbench.spec.TRIAL_SETTINGS`, e.g. ``power_cap_w``)
    are applied by the trial process around every kind: accepted here and left out,
    unless the kind lists one itself."""
    from gcbench.spec import TRIAL_SETTINGS

    unknown = set(spec.settings) - set(defaults) - set(TRIAL_SETTINGS)
    if unknown:
        raise ValueError(f"unknown {spec.kind} settings: {', '.join(sorted(unknown))}")
    return {**defaults, **{k: v for k, v in spec.settings.items() if k in defaults}}


SETTINGS_EFFECTIVE = "settings_effective"
SETTINGS_NOT_IN_EFFECT = "settings_not_in_effect"
"""The two keys every workload returns (and ``result.json`` carries at its top level)
to say which of the requested settings ran as asked."""

AMP_ON_CPU = "no CUDA device: float16 AMP unavailable, bfloat16 autocast on the CPU instead (amp-bf16-cpu)"
"""Why ``precision: amp`` is not in effect on a machine without CUDA (tinylm, resnet_cifar)."""


def effective(
    cfg: dict[str, Any], used: dict[str, Any] | None = None, not_in_effect: dict[str, str] | None = None
) -> dict[str, Any]:
    """The uniform record of what ran, to merge into a workload's returned dict.

    Args:
        cfg: the requested settings (defaults overlaid with the spec's settings).
        used: the settings whose effective value differs from ``cfg`` (e.g.
            ``{"memory": "pageable"}`` when pinned memory was asked for on a machine
            without CUDA); the others ran as requested.
        not_in_effect: ``{setting: reason}`` for each requested setting whose level did
            not run as asked, the reason in one sentence (``"no CUDA device: pinned
            memory unavailable, host-to-host copy of pageable memory"``). A report
            compares no two variants along such a setting: their work is not what the
            labels say.

    Returns:
        ``{"settings_effective": {...every setting as it ran...},
        "settings_not_in_effect": {setting: reason}}`` (the latter empty when every
        setting ran as requested).
    """
    eff = {**cfg, **(used or {})}
    return {SETTINGS_EFFECTIVE: eff, SETTINGS_NOT_IN_EFFECT: dict(not_in_effect or {})}


def defaults_for(kind: str) -> dict[str, Any] | None:
    """The settings a workload kind accepts with their defaults, or None for free-form
    settings (:attr:`gcbench.kinds.WorkloadKind.defaults`).

    Raises:
        gcbench.kinds.UnknownKind: no installed package registers ``kind``.
    """
    defaults = kinds.get(kind).defaults
    return dict(defaults) if defaults is not None else None
