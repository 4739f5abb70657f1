"""The energy-time trade-off: what a factor that trades energy for time (power cap,
numeric precision, GPU count) saves in energy and costs in time, against the baseline.

The multi-GPU study states its result in this form: "about 250 W per GPU saved 4.6-9.6 %
energy for 0.7-1.9 % more time" (ARCHITECTURE.md). For each workload with such a factor
GC-Bench gives

* every configuration's energy and time (median over valid trials, order-statistic CI) and the
  Pareto front of the medians (no other configuration has both less energy and less
  time; :func:`gcbench.report.render.plots.pareto_front`);
* each front configuration's change of energy and of time against the baseline
  configuration (every factor at its baseline level: the plan's ``report.baseline``,
  else the highest power cap, FP32, the fewest GPUs; see
  :func:`gcbench.report.analysis.baseline_level`), with the BCa CIs of the percentage
  changes of the medians (:func:`gcbench.stats.compare`);
* per factor level, the same changes against that factor's baseline level with every
  other factor held, over every configuration of the other factors: the headline
  "saved X % energy for Y % more time" (a range over configurations, like the study's,
  with the range of the CIs).

What trades: for a workload of fixed work (a training budget) energy and time of the
run (``total_energy_j`` when CPU energy is known in every trial, else
``gpu_energy_j``, against ``duration_s``); for a workload measured over a fixed window,
energy and time per unit of work (J/token against s/token, J/GB against s/GB).

Trade-off changes are estimates with CIs, not tests: they are not part of the report's
Holm family.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gcbench import kinds, stats
from gcbench.report.analysis.baseline import baseline_level, is_precision
from gcbench.report.analysis.core import Analysis
from gcbench.report.analysis.groups import Group, _level_key, not_compared_reason, summarise_metric
from gcbench.report.metrics import info, is_simulated_metric

DEFAULT_ENERGY_TIME: tuple[tuple[str, ...], str] = (("total_energy_j", "gpu_energy_j"), "duration_s")
"""Workloads of fixed work: the run's energy (GPU + CPU where known in every trial) and
time."""


def energy_time(kind: str) -> tuple[tuple[str, ...], str]:
    """(energy metric candidates, time metric) of a kind's trade-off: the kind's own for
    those measured over a fixed window (J/token and s/token), else
    :data:`DEFAULT_ENERGY_TIME` (:attr:`gcbench.kinds.WorkloadKind.energy_time`)."""
    k = kinds.find(kind)
    return k.energy_time if k is not None and k.energy_time is not None else DEFAULT_ENERGY_TIME


def tradeoff_always(kind: str) -> bool:
    """Whether a kind's per-configuration energy and time (with the change against the
    baseline) are computed even without a trade-off factor (the multi-GPU study's table
    needs them: :attr:`gcbench.kinds.WorkloadKind.tradeoff_always`)."""
    k = kinds.find(kind)
    return k is not None and k.tradeoff_always


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats in both coordinates (lower is better),
    ordered by the first coordinate; NaN points are never on the front.

    Args:
        points: (time, energy) pairs, or any two coordinates where lower is better.
    """
    idx = [i for i, (x, y) in enumerate(points) if math.isfinite(x) and math.isfinite(y)]
    idx.sort(key=lambda i: (points[i][0], points[i][1]))
    front, best = [], math.inf
    for i in idx:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def tradeoff_kind(factor: str) -> str | None:
    """``cap``, ``precision`` or ``gpus`` for a factor that trades energy for time, else None."""
    f = factor.lower()
    if "cap" in f or "power_limit" in f:
        return "cap"
    if is_precision(f):
        return "precision"
    if f in ("gpus", "gpu_count", "n_gpus", "num_gpus", "world_size", "nproc_per_node"):
        return "gpus"
    return None


@dataclass
class Config:
    """One configuration (group) of a trade-off.

    Attributes:
        group: the group.
        label: its factor values (``gpus=1, precision=fp32, power_cap_w=250``).
        energy, time: the summaries of the trade-off's energy and time metrics.
        is_baseline: this is the baseline configuration.
        on_front: on the Pareto front of the medians.
        d_energy, d_time: :class:`gcbench.stats.Comparison` of this configuration
            against the baseline configuration (percentage change of the medians with
            its CI); None for the baseline itself, without one, or when not compared.
        not_compared: why it is not compared with the baseline (a requested level of a
            factor they differ in was not in effect on a side), else "".
    """

    group: Group
    label: str
    energy: stats.GroupSummary
    time: stats.GroupSummary
    is_baseline: bool = False
    on_front: bool = False
    d_energy: stats.Comparison | None = None
    d_time: stats.Comparison | None = None
    not_compared: str = ""


@dataclass
class LevelEffect:
    """One level of a trade-off factor against the factor's baseline level.

    Attributes:
        factor, level, baseline_level: e.g. ``power_cap_w``, 250, 300.
        contexts: (other factors' values, energy comparison, time comparison), one per
            configuration of the other factors where both levels were run.
        headline: the sentence (empty when no context has CIs for both changes).
        reason: why there is no headline, else "".
        not_compared: contexts left out because a side's level was not in effect, with
            the reason: (other factors' values, reason).
    """

    factor: str
    level: Any
    baseline_level: Any
    contexts: list[tuple[str, stats.Comparison, stats.Comparison]] = field(default_factory=list)
    headline: str = ""
    reason: str = ""
    not_compared: list[tuple[str, str]] = field(default_factory=list)

    def with_ci(self) -> list[tuple[str, stats.Comparison, stats.Comparison]]:
        """The contexts where both changes have a CI."""
        return [c for c in self.contexts if c[1].pct_ci_low is not None and c[2].pct_ci_low is not None]


@dataclass
class Tradeoff:
    """Energy against time for one workload.

    Attributes:
        workload, kind: the workload.
        factors: its trade-off factors with more than one level (cap, precision, GPU count).
        energy_metric, time_metric: what trades (see the module docstring).
        configs: every configuration, in group order.
        baseline: the baseline configuration, or None when it was not run.
        simulated: the energy metric comes from the simulated device.
        effects: per factor level, the changes against the factor's baseline level.
    """

    workload: str
    kind: str
    factors: list[str]
    energy_metric: str
    time_metric: str
    configs: list[Config]
    baseline: Config | None
    simulated: bool
    effects: list[LevelEffect] = field(default_factory=list)

    @property
    def active(self) -> bool:
        """A trade-off to show: a trade-off factor and at least two configurations."""
        return bool(self.factors) and len(self.configs) >= 2

    @property
    def front(self) -> list[Config]:
        """The Pareto front's configurations, fastest first."""
        return sorted((c for c in self.configs if c.on_front), key=lambda c: (c.time.median, c.energy.median))

    @property
    def headlines(self) -> list[str]:
        """The "energy saved for time lost" sentences that have CIs."""
        return [e.headline for e in self.effects if e.headline]


def _label(factors: dict, skip: tuple[str, ...] = ()) -> str:
    return ", ".join(f"{k}={factors[k]}" for k in sorted(factors) if k not in skip)


def _key(factors: dict, skip: str) -> str:
    return json.dumps({k: v for k, v in factors.items() if k != skip}, sort_keys=True, default=str)


def energy_time_metrics(a: Analysis, workload: str, kind: str) -> tuple[str, str] | None:
    """(energy metric, time metric) of a workload, or None when either is unknown."""
    cands, time_m = energy_time(kind)
    df = a.trials[(a.trials["workload"] == workload) & a.trials["used"]]
    if len(df) == 0 or not df[time_m].notna().any():
        return None
    for m in cands:
        if m in df.columns and len(df) and df[m].notna().all():
            return m, time_m
    for m in cands:
        if m in df.columns and df[m].notna().any():
            return m, time_m
    return None


def _pct_range(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f} %" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f} %"


def _signed_range(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:+.2f} %" if abs(hi - lo) < 0.005 else f"{lo:+.2f} % to {hi:+.2f} %"


def effect_phrase(d_energy: list[float], d_time: list[float], energy_label: str, time_label: str) -> str:
    """The change in words: ``saved 4.60-9.60 % energy for 0.70-1.90 % more time`` when
    every energy change is a saving and every time change a loss; otherwise the signed
    ranges (``changed energy by -2.00 % to +1.00 % and time by +3.00 %``)."""
    if max(d_energy) < 0 and min(d_time) > 0:
        return f"saved {_pct_range([-x for x in d_energy])} {energy_label} for {_pct_range(d_time)} more {time_label}"
    if max(d_energy) < 0 and max(d_time) <= 0:
        return (
            f"saved {_pct_range([-x for x in d_energy])} {energy_label} and "
            f"{_pct_range([-x for x in d_time])} {time_label}"
        )
    if min(d_energy) > 0 and max(d_time) < 0:
        return (
            f"spent {_pct_range(d_energy)} more {energy_label} to save {_pct_range([-x for x in d_time])} {time_label}"
        )
    return f"changed {energy_label} by {_signed_range(d_energy)} and {time_label} by {_signed_range(d_time)}"


def _with_ci(v: float | None) -> float:
    """A figure :meth:`LevelEffect.with_ci` guarantees: a change with a CI has the change and both bounds."""
    if v is None:
        raise ValueError("a comparison with a confidence interval lacks its change or a bound")
    return v


def effect_headline(t: Tradeoff, e: LevelEffect, conf: int) -> str:
    """The headline of one level effect (see the module docstring), or ""."""
    ok = e.with_ci()
    if not ok:
        return ""
    el, tl = info(t.energy_metric).label, info(t.time_metric).label
    de = [_with_ci(c[1].pct_change) for c in ok]
    dt = [_with_ci(c[2].pct_change) for c in ok]
    prefix = "SIMULATED: " if t.simulated else ""
    x, y = f"{e.factor}={e.level}", f"{e.factor}={e.baseline_level}"
    words = effect_phrase(de, dt, el, tl)
    if len(ok) == 1:
        ctx, ce, ct = ok[0]
        where = f" ({ctx})" if ctx else ""
        return (
            f"{prefix}{t.workload}: {x} {words} against {y}{where} "
            f"({conf} % CI of the {el} change {ce.pct_ci_low:+.2f} % to "
            f"{ce.pct_ci_high:+.2f} %, of the {tl} change {ct.pct_ci_low:+.2f} % to "
            f"{ct.pct_ci_high:+.2f} %)."
        )
    others = sorted({k for g in t.configs for k in g.group.factors if k != e.factor})
    lo_e = min(_with_ci(c[1].pct_ci_low) for c in ok)
    hi_e = max(_with_ci(c[1].pct_ci_high) for c in ok)
    lo_t = min(_with_ci(c[2].pct_ci_low) for c in ok)
    hi_t = max(_with_ci(c[2].pct_ci_high) for c in ok)
    return (
        f"{prefix}{t.workload}: {x} against {y} {words} over {len(ok)} configurations "
        f"of {', '.join(others)} ({conf} % CIs of the {el} changes within {lo_e:+.2f} % "
        f"to {hi_e:+.2f} %, of the {tl} changes within {lo_t:+.2f} % to {hi_t:+.2f} %)."
    )


def build_tradeoffs(a: Analysis) -> list[Tradeoff]:
    """A :class:`Tradeoff` for every workload that has a trade-off factor or is of a
    kind with :func:`tradeoff_always`, and whose energy and time are known."""
    out = []
    conf = round(a.settings.confidence * 100)
    for workload, kind, groups in a.workloads():
        levels: dict[str, list] = {}
        for g in groups:
            for k, v in g.factors.items():
                if v not in levels.setdefault(k, []):
                    levels[k].append(v)
        factors = [k for k in sorted(levels) if len(levels[k]) > 1 and tradeoff_kind(k)]
        if not factors and not tradeoff_always(kind):
            continue
        metrics = energy_time_metrics(a, workload, kind)
        if metrics is None:
            continue
        em, tm = metrics
        for g in groups:
            for m in (em, tm):
                if m not in g.summaries:
                    summarise_metric(g, m, a.settings)
        base_levels = {k: baseline_level(k, lv, a.settings) for k, lv in levels.items()}
        configs = [
            Config(group=g, label=_label(g.factors) or g.variant, energy=g.summaries[em], time=g.summaries[tm])
            for g in groups
        ]
        base = next((c for c in configs if all(c.group.factors.get(k) == v for k, v in base_levels.items())), None)
        if base is not None:
            base.is_baseline = True
        pts = [
            (
                c.time.median if c.time.median is not None else np.nan,
                c.energy.median if c.energy.median is not None else np.nan,
            )
            for c in configs
        ]
        for i in pareto_front(pts):
            configs[i].on_front = True
        if base is not None:
            for c in configs:
                if c is not base:
                    differ = [
                        k
                        for k in set(c.group.factors) | set(base.group.factors)
                        if c.group.factors.get(k) != base.group.factors.get(k)
                    ]
                    c.not_compared = not_compared_reason(c.group, base.group, sorted(differ))
                    if c.not_compared:
                        continue
                    c.d_energy = a.comparison(c.group, base.group, em)
                    c.d_time = a.comparison(c.group, base.group, tm)
        t = Tradeoff(
            workload=workload,
            kind=kind,
            factors=factors,
            energy_metric=em,
            time_metric=tm,
            configs=configs,
            baseline=base,
            simulated=any(g.simulated for g in groups) and is_simulated_metric(em),
        )
        for f in factors:
            b = base_levels[f]
            by_rest: dict[str, dict[str, Group]] = {}
            for g in groups:
                by_rest.setdefault(_key(g.factors, f), {})[json.dumps(g.factors.get(f), default=str)] = g
            for lv in sorted(levels[f], key=_level_key):
                if lv == b:
                    continue
                e = LevelEffect(factor=f, level=lv, baseline_level=b)
                for members in by_rest.values():
                    tg = members.get(json.dumps(lv, default=str))
                    bg = members.get(json.dumps(b, default=str))
                    if tg is None or bg is None:
                        continue
                    ctx = _label(tg.factors, skip=(f,))
                    why = not_compared_reason(tg, bg, [f])
                    if why:
                        e.not_compared.append((ctx, why))
                        continue
                    e.contexts.append((ctx, a.comparison(tg, bg, em), a.comparison(tg, bg, tm)))
                e.headline = effect_headline(t, e, conf)
                if not e.headline:
                    if e.contexts:
                        e.reason = (
                            f"no configuration has a CI for both changes (at least "
                            f"{stats.MIN_N_INTERVAL['pct_change_of_medians']} valid trials per group needed)"
                        )
                    elif e.not_compared:
                        e.reason = "not compared: " + "; ".join(dict.fromkeys(w for _, w in e.not_compared))
                    else:
                        e.reason = f"{f}={b} was not run with the same other factors"
                t.effects.append(e)
        out.append(t)
    return out
