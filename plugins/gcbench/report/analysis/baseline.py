"""The baseline rule: which level of a factor is the reference (the one rule of the
report, the paper tables and the trade-off), and which factors are sweeps."""

from __future__ import annotations

from typing import Any

from gcbench.report.analysis.groups import _level_key
from gcbench.report.analysis.settings import ReportSettings


def _is_cap(factor: str) -> bool:
    return "cap" in factor.lower() or "power_limit" in factor.lower()


FULL_PRECISION = ("fp32", "float32", "32", "tf32-off", "full")
"""Levels of a precision factor taken as the full-precision baseline."""

UNCAPPED = ("none", "null", "uncapped", "off", "default", "max")
"""Levels of a power-cap factor that mean "no cap": the uncapped baseline."""

STUDY_BASELINES: dict[str, tuple[str, ...]] = {
    "path": ("torch",),
    "memory": ("pageable",),
}
"""The source studies' reference level of a named factor (ARCHITECTURE.md): pure
PyTorch for the preprocessing path, pageable memory for host-to-device copies."""


def is_precision(factor: str) -> bool:
    """A numeric-precision factor (``precision``, ``dtype``, ``amp``)."""
    f = factor.lower()
    return "precision" in f or f in ("dtype", "amp", "mixed_precision")


def baseline_level(factor: str, levels: list, settings: ReportSettings) -> Any:
    """The baseline level of a factor: the one rule of the report's comparisons, the
    energy-time trade-off and the paper tables.

    In order: the plan's ``report.baseline[factor]`` when it is one of ``levels``; for a
    power-cap factor, no cap (None, ``none``, ``uncapped``...) else the highest cap; for
    a precision factor, FP32; for ``path``, pure PyTorch (``torch``) and for ``memory``,
    ``pageable`` (:data:`STUDY_BASELINES`); else the first level in sorted order (the
    fewest GPUs, the smallest size).

    Args:
        factor: the factor's name.
        levels: its levels in the groups compared (at least one).
        settings: the report's settings (``baseline`` from the plan's ``report`` section).
    """
    if factor in settings.baseline:
        want = settings.baseline[factor]
        for lv in levels:
            if lv == want or str(lv) == str(want):
                return lv
    ordered = sorted(levels, key=_level_key)
    if _is_cap(factor):
        for lv in levels:
            if lv is None or str(lv).lower() in UNCAPPED:
                return lv
        numeric = [lv for lv in ordered if _level_key(lv)[0] == 0 and not isinstance(lv, bool)]
        if numeric:
            return numeric[-1]
    if is_precision(factor):
        for lv in levels:
            if str(lv).lower() in FULL_PRECISION:
                return lv
    for lv in levels:
        if str(lv).lower() in STUDY_BASELINES.get(factor.lower(), ()):
            return lv
    return ordered[0]


def _is_sweep(factor: str, levels: list, settings: ReportSettings) -> bool:
    if factor in settings.compare or factor in settings.baseline or _is_cap(factor):
        return False
    numeric = all(_level_key(lv)[0] == 0 and not isinstance(lv, bool) for lv in levels)
    return numeric and len(levels) >= 3
