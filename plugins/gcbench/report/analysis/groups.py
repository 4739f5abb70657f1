"""Groups: one variant of one workload, its valid trials and their statistics
(median, mean, pooled ratios), and why a group is not in effect or not compared."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gcbench import stats
from gcbench.report.analysis.settings import ReportSettings
from gcbench.report.metrics import (
    CORE_METRICS,
    RATIOS,
    paired_metrics,
    table_metrics,
)
from gcbench.stability import TWIN_FLAG
from gcbench.validate import CONTENTION_PREFIX


def _level_key(v: Any) -> tuple:
    if isinstance(v, bool):
        return (0, int(v), "")
    if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
        return (0, float(v), "")
    return (1, 0.0, str(v))


@dataclass
class Group:
    """One variant of one workload and its statistics.

    Attributes:
        workload, kind, variant: as in the trials frame.
        factors: the variant's factor values.
        n_trials, n_ok, n_failed, n_skipped, n_valid, n_invalid, n_unvalidated: counts.
        inconclusive: n_valid < min_valid_repetitions, or validation found its two
            valid repetitions' throughputs too far apart (the twin rule).
        inconclusive_reason: why, in words (None when conclusive).
        simulated: any trial of the group is simulated.
        summaries: metric -> :class:`gcbench.stats.GroupSummary` (valid trials only).
        pooled: ratio metric -> :class:`gcbench.stats.RatioSummary`, the pooled
            estimator over the same trials as ``summaries[metric]``.
        values: metric -> the per-trial values summarised (shape (n,), NaN where the
            trial's value is unknown or left out to keep a paired metric's trials);
            the tables show them instead of a median below ``stats.MIN_N_SUMMARY`` trials,
            and the plots draw each as a dot.
        trial_ids: the valid trials' ids, in the order of ``values``.
        co2e_band: (median CO2e at band low, at band high), kgCO2e, or None.
        not_in_effect: setting -> the sentence that marks the group, e.g.
            ``memory=pinned requested, not in effect: no CUDA device: pinned memory
            unavailable, host-to-host copy of pageable memory`` (from its trials'
            ``settings_not_in_effect``; "(in 2 of 3 trials)" when not all); empty when
            every requested setting ran as asked.
        n_contended: valid trials flagged for CPU contention (other processes took more
            than the plan's ``validation.cpu_contention_flag_share`` of their CPUs; they stay
            in the statistics unless the plan sets ``cpu_contention_invalid_share``).
        work_unit: the unit of work its trials counted when it is a user's own (a plan's
            ``unit: requests``; the text metric ``unit``) and all name the same one, else
            None; J/unit and units/s are written in it (:func:`gcbench.report.metrics.info`).
    """

    workload: str
    kind: str
    variant: str
    factors: dict
    n_trials: int
    n_ok: int
    n_failed: int
    n_skipped: int
    n_valid: int
    n_invalid: int
    n_unvalidated: int
    inconclusive: bool
    simulated: bool
    summaries: dict[str, stats.GroupSummary] = field(default_factory=dict)
    pooled: dict[str, stats.RatioSummary] = field(default_factory=dict)
    values: dict[str, np.ndarray] = field(default_factory=dict)
    trial_ids: list[str] = field(default_factory=list)
    co2e_band: tuple[float, float] | None = None
    inconclusive_reason: str | None = None
    not_in_effect: dict[str, str] = field(default_factory=dict)
    work_unit: str | None = None
    n_contended: int = 0
    _used: pd.DataFrame | None = field(default=None, repr=False)

    def known(self, metric: str) -> np.ndarray:
        """The finite values of ``metric`` that entered its summary."""
        v = self.values.get(metric)
        if v is None:
            return np.array([])
        return v[np.isfinite(v)]

    @property
    def label(self) -> str:
        """``variant`` (already unique within a plan)."""
        return self.variant


def workload_metrics(df: pd.DataFrame, kind: str) -> list[str]:
    """A workload's table metrics (``metrics.table_metrics``): the kind's metrics known
    in at least one trial of ``df`` and every core metric, known or not."""
    return [m for m in table_metrics(kind) if m in CORE_METRICS or (m in df.columns and df[m].notna().any())]


def paired_mask(used: pd.DataFrame, kind: str) -> np.ndarray:
    """Trials of ``used`` where every paired metric of the kind (J/token and tokens/s...)
    and its pooling denominator are known: the trials all of them are summarised over."""
    keep = np.ones(len(used), dtype=bool)
    for m in paired_metrics(kind):
        keep &= used[m].notna().to_numpy()
        if m in RATIOS:
            keep &= (used[RATIOS[m].denominator] > 0).to_numpy()
    return keep


PAIRED_DERIVED = {"s_per_token": "tokens_per_s", "s_per_gb": "gb_per_s"}
"""Metrics derived from a paired rate, summarised over the same trials as that rate."""


def summarise_metric(g: Group, metric: str, settings: ReportSettings) -> None:
    """Fill ``g.values[metric]``, ``g.summaries[metric]`` and, for a ratio,
    ``g.pooled[metric]`` from the group's valid trials (paired metrics over the trials
    where all of the kind's paired metrics are known)."""
    used = g._used
    if used is None:
        raise ValueError(f"group {g.variant}: its used trials are not set (analyze() sets them)")
    v = used[metric].to_numpy(dtype=float)
    paired = paired_metrics(g.kind)
    mask = None
    if metric in paired or PAIRED_DERIVED.get(metric) in paired:
        mask = paired_mask(used, g.kind)
        v = np.where(mask, v, np.nan)
    g.values[metric] = v
    g.summaries[metric] = stats.summarize(
        v,
        group=g.variant,
        metric=metric,
        confidence=settings.confidence,
        n_resamples=settings.n_resamples,
        seed=stats.stable_seed(g.workload, g.variant, metric, base=settings.seed),
    )
    if metric in RATIOS:
        g.pooled[metric] = _pooled(
            used,
            metric,
            mask,
            group=g.variant,
            settings=settings,
            seed=stats.stable_seed(g.workload, g.variant, metric, "pooled", base=settings.seed),
        )


def _pooled(
    used: pd.DataFrame, metric: str, mask: np.ndarray | None, *, group: str, settings: ReportSettings, seed: int
) -> stats.RatioSummary:
    r = RATIOS[metric]
    den = used[r.denominator].to_numpy(dtype=float) * r.den_scale
    num = used[metric].to_numpy(dtype=float) * den
    if mask is not None:
        num = np.where(mask, num, np.nan)
    return stats.summarize_ratio(
        num,
        den,
        group=group,
        metric=metric,
        confidence=settings.confidence,
        n_resamples=settings.n_resamples,
        seed=seed,
    )


def group_not_in_effect(gdf: pd.DataFrame) -> dict[str, str]:
    """Setting -> the sentence that marks a group whose trials say a requested setting did
    not run as asked (see :attr:`Group.not_in_effect`). Trials that ran or were skipped
    count; a failed trial says nothing about it."""
    tried = gdf[gdf["status"].isin(("ok", "skipped"))]
    n = len(tried)
    reasons: dict[str, list[str]] = {}
    hits: dict[str, int] = {}
    for d in tried["not_in_effect"]:
        for k, why in d.items():
            hits[k] = hits.get(k, 0) + 1
            if why not in reasons.setdefault(k, []):
                reasons[k].append(why)
    factors = gdf["factors"].iloc[0] if len(gdf) else {}
    settings = gdf["settings"].iloc[0] if "settings" in gdf.columns and len(gdf) else None
    settings = settings if isinstance(settings, dict) else {}
    out = {}
    for k in sorted(reasons):
        part = f" (in {hits[k]} of {n} trials)" if hits[k] < n else ""
        if k in factors or k in settings:
            what = f"{k}={factors[k] if k in factors else settings[k]} requested, not in effect"
        else:  # a default the plan did not set: the reason says what was asked for
            what = f"{k} not in effect"
        out[k] = f"{what}{part}: {'; '.join(reasons[k])}"
    return out


def not_compared_reason(treat: Group, base: Group, factors: Iterable[str]) -> str:
    """Why ``treat`` and ``base`` are not compared along ``factors`` (the factors they
    differ in): the sentences of either group's settings not in effect among them, or ""
    when they may be compared."""
    out: list[str] = []
    for f in factors:
        for g in (treat, base):
            why = g.not_in_effect.get(f)
            if why and why not in out:
                out.append(why)
    return "; ".join(out)


def work_unit(df: pd.DataFrame) -> str | None:
    """The user's unit of work the trials of ``df`` counted (the text metric ``unit``)
    when they all name one, else None."""
    if "unit" not in df.columns:
        return None
    names = {u for u in df["unit"] if isinstance(u, str) and u}
    return names.pop() if len(names) == 1 else None


def build_groups(df: pd.DataFrame, settings: ReportSettings) -> list[Group]:
    """One :class:`Group` per (workload, variant), sorted, with summaries of the kind's
    metrics and of CO2e over the valid trials."""
    groups: list[Group] = []
    for workload, wdf in sorted(df.groupby("workload", sort=False), key=lambda kv: kv[0]):
        kind = str(wdf["kind"].iloc[0])
        metrics = workload_metrics(wdf, kind)

        def order(kv):
            factors = kv[1]["factors"].iloc[0]
            return tuple(_level_key(factors[k]) for k in sorted(factors)), kv[0]

        for variant, gdf in sorted(wdf.groupby("variant", sort=False), key=order):
            used = gdf[gdf["used"]]
            ok = gdf["status"] == "ok"
            n_valid = int(len(used))
            twins = next((f for flags in used["flags"] for f in flags if str(f).startswith(TWIN_FLAG)), None)
            few = n_valid < settings.min_valid_repetitions
            g = Group(
                workload=str(workload),
                kind=kind,
                variant=str(variant),
                factors=dict(gdf["factors"].iloc[0]),
                n_trials=int(len(gdf)),
                n_ok=int(ok.sum()),
                n_failed=int((gdf["status"] == "failed").sum()),
                n_skipped=int((gdf["status"] == "skipped").sum()),
                n_valid=n_valid,
                n_invalid=int((ok & gdf["valid"].map(lambda v: v is False)).sum()),
                n_unvalidated=int((ok & gdf["valid"].map(lambda v: v is None)).sum()),
                inconclusive=few or twins is not None,
                simulated=bool(gdf["simulated"].any()),
                inconclusive_reason=(
                    f"{n_valid} valid repetitions; at least {settings.min_valid_repetitions} needed"
                    if few
                    else twins.split(": ", 1)[-1]
                    if twins
                    else None
                ),
            )
            g.trial_ids = [str(t) for t in used["trial_id"]]
            g.not_in_effect = group_not_in_effect(gdf)
            g.work_unit = work_unit(wdf)
            g.n_contended = int(sum(any(str(f).startswith(CONTENTION_PREFIX) for f in fl) for fl in used["flags"]))
            g._used = used
            for m in metrics:
                summarise_metric(g, m, settings)
            co2 = used["co2e_kg"].to_numpy(dtype=float)
            if np.isfinite(co2).any():
                g.co2e_band = (float(np.nanmedian(used["co2e_kg_low"])), float(np.nanmedian(used["co2e_kg_high"])))
            groups.append(g)
    return groups
