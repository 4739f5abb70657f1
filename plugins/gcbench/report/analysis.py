"""From :class:`ReportData` to the report's numbers: groups, comparisons, headlines,
the measurement section and the trial lists. No plotting, no files.

Rules applied here (and stated in the report):

* Statistics use trials with ``status == "ok"`` and ``valid is True`` only. Invalid
  trials are listed with their reasons, failed and skipped trials with their error,
  unvalidated trials (``valid`` None) as such; none of them enters a statistic.
* A group (variant) with fewer valid repetitions than the plan's
  ``validation.min_valid_repetitions`` (default 2), or whose two valid repetitions
  validation found too far apart in throughput (``validation.twin_max_ratio``, flag
  ``twins disagree``), is *inconclusive*: its figures are shown, marked, and it takes
  part in no test.
* A group's energy ratio and rate of the same work (J/token and tokens/s, J/GB and GB/s:
  ``metrics.paired_metrics``) are summarised over the same trials, those where both are
  known; every ratio also gets the pooled estimator sum / sum
  (:func:`gcbench.stats.summarize_ratio`) beside the median of per-trial ratios.
* Headlines are comparisons that have a confidence interval (at least
  ``stats.MIN_N_CI`` valid trials per side); the others stay in the comparisons table.
* Comparisons are made inside one workload between variants that differ in exactly one
  factor, each non-baseline level against the baseline level. The baseline is the
  study's reference (:func:`baseline_level`, the one rule of the report, the paper
  tables and the trade-off): the plan's ``report.baseline[factor]`` when given, else no
  cap (or the highest cap) for a power-cap factor, FP32 for a precision factor, pure
  PyTorch (``torch``) for ``path``, ``pageable`` for ``memory``, else the first level in
  sorted order (the fewest GPUs, the smallest size). Numeric factors with three or more
  levels (sizes, batch sizes, GPU counts) are sweeps: summarized and plotted, not
  tested, unless named in ``report.compare`` or ``report.baseline``; power caps are
  always compared.
* A requested setting that did not run as asked (a trial's ``settings_not_in_effect``:
  pinned memory or float16 AMP without CUDA, a GPU count on a CPU, a power cap that
  could not be set) marks its group ("memory=pinned requested, not in effect: ..."), and
  no two groups are compared along that setting: such a comparison is listed as "not
  compared" with the reason, never tested, never a headline.
* CO2e = energy (kWh) x the plan's carbon intensity, with the band's low and high
  intensities as sensitivity (``carbon.intensity_kg_per_kwh``, ``carbon.band``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gcbench import stats
from gcbench.metrics import METRIC_COLUMNS
from gcbench.report.data import TRIAL_COLUMNS, ReportData
from gcbench.report.metrics import (
    CORE_METRICS,
    RATIOS,
    describe_method,
    info,
    is_simulated_metric,
    kind_compared,
    paired_metrics,
    table_metrics,
)
from gcbench.stability import TWIN_FLAG
from gcbench.units import J_PER_KWH

DEFAULT_INTENSITY = 0.20
DEFAULT_BAND = (0.10, 0.30)
DEFAULT_MIN_VALID = 2
MAX_MEASUREMENT_PROBES = 4
"""Trials whose samples are read to measure sampling rate and sensor update periods
(one per energy method found, up to this many): each read may be a database query."""


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class ReportSettings:
    """Plan-derived settings of one report.

    Attributes:
        intensity_kg_per_kwh: carbon intensity for CO2e, kgCO2e/kWh.
        band: (low, high) sensitivity intensities, kgCO2e/kWh.
        per_trial_carbon: the plan's intensity is an hourly series: each trial's CO2e is
            at its own window's stored intensity (``gcbench.carbon.trial_co2e``), and
            ``intensity_kg_per_kwh`` and ``band`` become the energy-weighted means of the
            trials' intensities for the report's text (analyze).
        min_valid_repetitions: fewer valid repetitions make a group inconclusive.
        baseline: factor -> baseline level, from the plan's ``report.baseline``.
        compare: factors to test even if they look like sweeps (``report.compare``).
        n_resamples: bootstrap resamples (10,000).
        confidence: CI level (0.95).
        alpha: significance level after Holm correction (0.05).
        seed: base of the bootstrap seeds.
    """

    intensity_kg_per_kwh: float = DEFAULT_INTENSITY
    band: tuple[float, float] = DEFAULT_BAND
    per_trial_carbon: bool = False
    min_valid_repetitions: int = DEFAULT_MIN_VALID
    baseline: dict[str, Any] = field(default_factory=dict)
    compare: tuple[str, ...] = ()
    n_resamples: int = stats.DEFAULT_RESAMPLES
    confidence: float = stats.DEFAULT_CONFIDENCE
    alpha: float = stats.DEFAULT_ALPHA
    seed: int = 0

    @classmethod
    def from_plan(cls, plan: dict, **overrides) -> ReportSettings:
        """Read ``carbon``, ``validation`` and ``report`` sections of a plan dict."""
        carbon = plan.get("carbon") or {}
        validation = plan.get("validation") or {}
        report = plan.get("report") or {}
        band = carbon.get("band") or DEFAULT_BAND
        intensity = float(carbon.get("intensity_kg_per_kwh", DEFAULT_INTENSITY))
        if carbon.get("place"):  # one intensity for the plan: the place's (gcbench.carbon)
            from gcbench.carbon import window_intensity

            w = window_intensity(carbon)
            intensity, band = float(w.kg_per_kwh or 0.0), (w.low_kg_per_kwh, w.high_kg_per_kwh)
        kw: dict[str, Any] = dict(
            intensity_kg_per_kwh=intensity,
            band=(float(band[0]), float(band[1])),
            per_trial_carbon=bool(carbon.get("series")),
            min_valid_repetitions=int(validation.get("min_valid_repetitions", DEFAULT_MIN_VALID)),
            baseline=dict(report.get("baseline") or {}),
            compare=tuple(report.get("compare") or ()),
            seed=int(plan.get("seed", 0) or 0),
        )
        kw.update(overrides)
        return cls(**kw)


# --------------------------------------------------------------------------- normalizing


def _as_list(v: Any) -> list[str]:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return []
    if isinstance(v, str):
        s = v.strip()
        if s.startswith("["):
            try:
                return [str(x) for x in json.loads(s)]
            except ValueError:
                pass
        return [p.strip() for p in s.split(";") if p.strip()]
    return [str(x) for x in v]


def _as_dict(v: Any) -> dict:
    if isinstance(v, dict):
        return v
    if isinstance(v, str) and v.strip().startswith("{"):
        try:
            return json.loads(v)
        except ValueError:
            return {}
    return {}


def _valid(v: Any) -> bool | None:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    return bool(v)


def _text(v: Any) -> str | None:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v == "":
        return None
    return str(v)


def normalize_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """A copy with every contract column present and typed.

    Missing metric columns become NaN, missing descriptive ones None; ``reasons`` and
    ``flags`` become lists, ``factors`` dicts, ``valid`` True/False/None, metrics float.
    """
    df = trials.copy()
    n = len(df)
    for col in TRIAL_COLUMNS:
        if col not in df.columns:
            df[col] = [None] * n
    for col in METRIC_COLUMNS:
        df[col] = pd.to_numeric(df[col], errors="coerce") if col in df.columns else np.nan
    df["reasons"] = [_as_list(v) for v in df["reasons"]]
    df["flags"] = [_as_list(v) for v in df["flags"]]
    df["factors"] = [_as_dict(v) for v in df["factors"]]
    df["settings_not_in_effect"] = pd.Series(
        [_recorded_dict(v) for v in df["settings_not_in_effect"]], index=df.index, dtype=object
    )
    df["valid"] = pd.Series([_valid(v) for v in df["valid"]], index=df.index, dtype=object)
    df["simulated"] = [bool(v) if _valid(v) is not None else False for v in df["simulated"]]
    df["status"] = [(_text(v) or "ok") for v in df["status"]]
    for col in ("error", "gpu_method", "gpu_source", "cpu_method"):
        df[col] = pd.Series([_text(v) for v in df[col]], index=df.index, dtype=object)
    df["variant"] = [str(v) for v in df["variant"]]
    df["workload"] = [_text(v) or "workload" for v in df["workload"]]
    df["kind"] = [_text(v) or "unknown" for v in df["kind"]]
    df["used"] = (df["status"] == "ok") & (df["valid"].map(lambda v: v is True))
    df["not_in_effect"] = pd.Series(trial_not_in_effect(df), index=df.index, dtype=object)
    return df


def _recorded_dict(v: Any) -> dict | None:
    """A recorded ``{setting: reason}`` (dict or JSON text), or None when not recorded."""
    if isinstance(v, dict):
        return {str(k): str(x) for k, x in v.items()}
    if isinstance(v, str) and v.strip().startswith("{"):
        try:
            d = json.loads(v)
        except ValueError:
            return None
        return {str(k): str(x) for k, x in d.items()} if isinstance(d, dict) else None
    return None


def trial_not_in_effect(df: pd.DataFrame) -> list[dict[str, str]]:
    """Per trial, ``{setting: reason}`` of the requested settings that did not run as asked.

    The trial's recorded ``settings_not_in_effect`` when it has one. A trial stored
    before workloads recorded it is judged from what it reported then: a factor whose
    ``<factor>_effective`` value is another level of the same factor in its workload
    (``memory=pinned`` that ran as ``memory_effective=pageable``) did not run as asked;
    the reason is the trial's ``note`` when it gave one.
    """
    levels: dict[tuple[str, str], set[str]] = {}
    for w, factors in zip(df["workload"], df["factors"], strict=True):
        for k, v in factors.items():
            levels.setdefault((w, k), set()).add(str(v))
    out: list[dict[str, str]] = []
    for i in range(len(df)):
        row = df.iloc[i]
        recorded = row["settings_not_in_effect"]
        if recorded is not None:
            out.append(dict(recorded))
            continue
        legacy: dict[str, str] = {}
        for k, v in row["factors"].items():
            col = f"{k}_effective"
            ran = _text(row[col]) if col in df.columns else None
            if ran is not None and ran != str(v) and ran in levels.get((row["workload"], k), ()):
                note = _text(row["note"]) if "note" in df.columns else None
                legacy[k] = note or f"ran as {k}={ran}"
        out.append(legacy)
    return out


def add_carbon(df: pd.DataFrame, settings: ReportSettings) -> tuple[pd.DataFrame, str]:
    """Add ``co2_energy_kwh``, ``co2e_kg`` (recomputed at the plan's intensity),
    ``co2e_kg_low`` and ``co2e_kg_high``; return the energy basis in words.

    Energy basis, per trial: ``energy_kwh`` when known, else ``total_energy_j``, else
    ``gpu_energy_j`` + ``cpu_energy_j`` (CPU counted only where known), else unknown.
    """
    gpu_cpu = df["gpu_energy_j"] + df["cpu_energy_j"].fillna(0.0)
    joules = df["total_energy_j"].where(df["total_energy_j"].notna(), gpu_cpu)
    kwh = df["energy_kwh"].where(df["energy_kwh"].notna(), joules / J_PER_KWH)
    df["co2_energy_kwh"] = kwh
    if settings.per_trial_carbon and "carbon_intensity_kg_per_kwh" in df.columns:
        # an hourly series: each trial at its own window's intensity and band, as collect stored them
        intensity = df["carbon_intensity_kg_per_kwh"]
        df["co2e_kg"] = kwh * intensity
        for col, key in (
            ("co2e_kg_low", "carbon_intensity_low_kg_per_kwh"),
            ("co2e_kg_high", "carbon_intensity_high_kg_per_kwh"),
        ):
            df[col] = kwh * pd.to_numeric(df[key], errors="coerce") if key in df.columns else np.nan
    else:
        df["co2e_kg"] = kwh * settings.intensity_kg_per_kwh
        df["co2e_kg_low"] = kwh * settings.band[0]
        df["co2e_kg_high"] = kwh * settings.band[1]
    has_cpu = df["cpu_energy_j"].notna().any() or df["total_energy_j"].notna().any()
    basis = "GPU + CPU (RAPL) energy" if has_cpu else "GPU energy only (CPU energy unknown)"
    return df, basis


def add_time_per_work(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``s_per_token`` (duration_s / tokens) and ``s_per_gb`` (duration_s / GB): the
    time side of the energy-time trade-off for workloads measured over a fixed window,
    where energy per unit of work and time per unit of work are what trade."""
    tokens = df["tokens"].where(df["tokens"] > 0)
    gb = (df["bytes"] * 1e-9).where(df["bytes"] > 0)
    df["s_per_token"] = df["duration_s"] / tokens
    df["s_per_gb"] = df["duration_s"] / gb
    return df


# --------------------------------------------------------------------------- groups


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
            the tables show them instead of a median below ``stats.MIN_N_CI`` trials,
            and the plots draw each as a dot.
        trial_ids: the valid trials' ids, in the order of ``values``.
        co2e_band: (median CO2e at band low, at band high), kgCO2e, or None.
        not_in_effect: setting -> the sentence that marks the group, e.g.
            ``memory=pinned requested, not in effect: no CUDA device: pinned memory
            unavailable, host-to-host copy of pageable memory`` (from its trials'
            ``settings_not_in_effect``; "(in 2 of 3 trials)" when not all); empty when
            every requested setting ran as asked.
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
            g._used = used
            for m in metrics:
                summarise_metric(g, m, settings)
            co2 = used["co2e_kg"].to_numpy(dtype=float)
            if np.isfinite(co2).any():
                g.co2e_band = (float(np.nanmedian(used["co2e_kg_low"])), float(np.nanmedian(used["co2e_kg_high"])))
            groups.append(g)
    return groups


# --------------------------------------------------------------------------- comparisons


@dataclass
class ComparisonRow:
    """A :class:`gcbench.stats.Comparison` with its report context.

    Attributes:
        workload, kind: where the two variants come from.
        factor, treatment_level, baseline_level: the one factor they differ in.
        context: the other factor values, e.g. ``batch_size=8``.
        inconclusive: a side has too few valid repetitions: not tested.
        simulated: a side contains simulated trials and the metric is derived from GPU
            energy (durations, rates and accuracy are measured even on the simulated
            device).
        result: the statistics.
        headline: the sentence in the studies' form.
        not_compared: why the two groups are not compared ("memory=pinned requested, not
            in effect: ..."), or "" when they are; a row not compared carries only its
            counts and medians, is never tested and never a headline.
    """

    workload: str
    kind: str
    factor: str
    treatment_level: Any
    baseline_level: Any
    context: str
    inconclusive: bool
    simulated: bool
    result: stats.Comparison
    headline: str = ""
    not_compared: str = ""


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


def plan_comparisons(groups: list[Group], settings: ReportSettings) -> list[tuple[Group, Group, str]]:
    """(treatment, baseline, factor) pairs: same workload, one factor apart."""
    pairs = []
    by_workload: dict[str, list[Group]] = {}
    for g in groups:
        by_workload.setdefault(g.workload, []).append(g)
    for gs in by_workload.values():
        factors = sorted({k for g in gs for k in g.factors})
        for f in factors:
            levels = []
            for g in gs:
                if f in g.factors and g.factors[f] not in levels:
                    levels.append(g.factors[f])
            if len(levels) < 2 or _is_sweep(f, levels, settings):
                continue
            base = baseline_level(f, levels, settings)
            rest: dict[str, list[Group]] = {}
            for g in gs:
                key = json.dumps({k: v for k, v in g.factors.items() if k != f}, sort_keys=True, default=str)
                rest.setdefault(key, []).append(g)
            for members in rest.values():
                bases = [g for g in members if g.factors.get(f) == base]
                if not bases:
                    continue
                for g in members:
                    if g is not bases[0] and g.factors.get(f) != base:
                        pairs.append((g, bases[0], f))
    return pairs


def context_of(g: Group, skip: Iterable[str] = ()) -> str:
    """A group's other factor values for a comparison's context, each marked "(not in
    effect)" where its level did not run as asked."""
    skip = set(skip)
    return ", ".join(
        f"{k}={g.factors[k]}" + (" (not in effect)" if k in g.not_in_effect else "")
        for k in sorted(g.factors)
        if k not in skip
    )


def not_compared_result(treat: Group, base: Group, metric: str, factor: str, reason: str) -> stats.Comparison:
    """A :class:`gcbench.stats.Comparison` that was not made: the counts and medians of
    both sides (what ran), no change, no CI, no test; ``note`` says why."""

    def side(g: Group) -> np.ndarray:
        v = g.values.get(metric, np.array([]))
        return v[np.isfinite(v)]

    t, b = side(treat), side(base)
    return stats.Comparison(
        metric=metric,
        treatment=treat.variant,
        baseline=base.variant,
        factor=factor,
        n_treatment=int(t.size),
        n_baseline=int(b.size),
        n_excluded=0,
        median_treatment=float(np.median(t)) if t.size else None,
        median_baseline=float(np.median(b)) if b.size else None,
        pct_change=None,
        pct_ci_low=None,
        pct_ci_high=None,
        ci_method=None,
        ci_reason="not compared",
        p_mannwhitney=None,
        p_welch=None,
        cliffs_delta=None,
        hodges_lehmann=None,
        note=f"not compared: {reason}",
    )


def build_comparisons(df: pd.DataFrame, groups: list[Group], settings: ReportSettings) -> list[ComparisonRow]:
    """Compare each planned pair on the kind's compared metrics; Holm across all
    conclusive comparisons of the report; write the headline sentences."""
    constant: dict[str, set[str]] = {}  # factors with one level in a workload: no context
    for g in groups:
        others = [h for h in groups if h.workload == g.workload]
        constant[g.workload] = {
            k for k in g.factors if len({json.dumps(h.factors.get(k), default=str) for h in others}) == 1
        }
    rows: list[ComparisonRow] = []
    for treat, base, factor in plan_comparisons(groups, settings):
        why_not = not_compared_reason(treat, base, [factor])
        for m in kind_compared(treat.kind):
            if m not in treat.summaries or not df.loc[df["workload"] == treat.workload, m].notna().any():
                continue
            if why_not:
                res = not_compared_result(treat, base, m, factor, why_not)
            else:
                res = stats.compare(
                    treat.values[m],
                    base.values[m],
                    metric=m,
                    treatment=treat.variant,
                    baseline=base.variant,
                    factor=factor,
                    confidence=settings.confidence,
                    n_resamples=settings.n_resamples,
                    seed=stats.stable_seed(treat.workload, treat.variant, base.variant, m, base=settings.seed),
                    alpha=settings.alpha,
                )
            rows.append(
                ComparisonRow(
                    workload=treat.workload,
                    kind=treat.kind,
                    factor=factor,
                    treatment_level=treat.factors.get(factor),
                    baseline_level=base.factors.get(factor),
                    context=context_of(treat, skip=[factor, *constant[treat.workload]]),
                    inconclusive=treat.inconclusive or base.inconclusive,
                    simulated=(treat.simulated or base.simulated) and is_simulated_metric(m),
                    result=res,
                    not_compared=why_not,
                )
            )
    family = [i for i, r in enumerate(rows) if not r.inconclusive and not r.not_compared]
    adjusted = stats.adjust_holm([rows[i].result for i in family], alpha=settings.alpha)
    for i, res in zip(family, adjusted, strict=True):
        rows[i].result = res
    by_variant = {(g.workload, g.variant): g for g in groups}
    for r in rows:
        if r.inconclusive and not r.not_compared:
            sides = [by_variant.get((r.workload, v)) for v in (r.result.treatment, r.result.baseline)]
            twins = [
                g for g in sides if g is not None and g.inconclusive and g.n_valid >= settings.min_valid_repetitions
            ]
            note = (
                (
                    "inconclusive: the two repetitions of "
                    + " and of ".join(g.variant for g in twins)
                    + " disagree; not tested"
                )
                if twins
                else "inconclusive: too few valid repetitions; not tested"
            )
            r.result.note = note if not r.result.note else f"{note}; {r.result.note}"
        r.headline = headline(r, groups_by_variant={(g.workload, g.variant): g for g in groups}, settings=settings)
    return rows


# --------------------------------------------------------------------------- sentences


def fmt_num(v: float | None, digits: int = 4) -> str:
    """A number with ``digits`` significant digits, or an en dash for unknown."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if v == 0:
        return "0"
    mag = abs(v)
    if 1e-3 <= mag < 1e6:
        decimals = max(0, digits - 1 - int(math.floor(math.log10(mag))))
        return f"{v:,.{decimals}f}"
    return f"{v:.{digits - 1}e}"


def fmt_p(p: float | None) -> str:
    """p-value as in papers: ``p = 0.031``, ``p < 0.001``."""
    if p is None:
        return "p = –"
    if p < 0.001:
        return "p < 0.001"
    return f"p = {p:.3f}" if p < 0.1 else f"p = {p:.2f}"


def headline(r: ComparisonRow, *, groups_by_variant: dict, settings: ReportSettings) -> str:
    """The studies' sentence: ``X cut GPU J/token by 6.73 % (95 % CI -8.1 % to -5.2 %;
    p = 0.002, significant) against Y`` for a significant difference, ``no significant
    difference in GPU J/token between X and Y (change +0.41 %, 95 % CI -1.2 % to
    +2.0 %; p = 0.53)`` otherwise; prefixed ``SIMULATED:`` when the metric comes from
    the simulated device's energy.

    ``p`` is the Holm-adjusted Mann-Whitney U p-value; the CI is that of the
    percentage change of the medians."""
    c = r.result
    mi = info(c.metric)
    where = r.workload + (f" ({r.context})" if r.context else "")
    x = f"{r.factor}={r.treatment_level}"
    y = f"{r.factor}={r.baseline_level}"
    prefix = "SIMULATED: " if r.simulated else ""
    tg = groups_by_variant.get((r.workload, c.treatment))
    bg = groups_by_variant.get((r.workload, c.baseline))
    if r.not_compared:
        return f"{prefix}{where}: {x} against {y} on {mi.label}: not compared ({r.not_compared})."
    if r.inconclusive:
        need = settings.min_valid_repetitions
        nt = tg.n_valid if tg else c.n_treatment
        nb = bg.n_valid if bg else c.n_baseline
        if nt >= need and nb >= need:
            apart = [g.variant for g in (tg, bg) if g is not None and g.inconclusive]
            return (
                f"{prefix}{where}: {x} against {y} on {mi.label} is inconclusive (the two "
                f"repetitions of {' and of '.join(apart)} ran too far apart in throughput)."
            )
        return (
            f"{prefix}{where}: {x} against {y} on {mi.label} is inconclusive "
            f"({nt} and {nb} valid repetitions; at least {need} needed)."
        )
    if c.pct_change is None:
        return f"{prefix}{where}: {x} against {y} on {mi.label}: no percentage change ({c.note})."
    pct = c.pct_change
    conf = round(settings.confidence * 100)
    ci = (
        f"{conf} % CI {c.pct_ci_low:+.2f} % to {c.pct_ci_high:+.2f} %"
        if c.pct_ci_low is not None
        else f"no CI: {c.ci_reason}"
    )
    if not c.significant:
        test = (
            fmt_p(c.p_mannwhitney_holm)
            if c.significant is not None
            else (f"not tested: {c.note}" if c.note else "not tested")
        )
        return (
            f"{prefix}{where}: no significant difference in {mi.label} between {x} and "
            f"{y} (change {pct:+.2f} %, {ci}; {test})."
        )
    verb = "cut" if pct < 0 else "raised" if pct > 0 else "did not change"
    by = f" by {abs(pct):.2f} %" if pct != 0 else ""
    if pct > 100:
        by += f" ({1 + pct / 100:.2f}x)"
    test = f"{fmt_p(c.p_mannwhitney_holm)}, significant"
    return f"{prefix}{where}: {x} {verb} {mi.label}{by} ({ci}; {test}) against {y}."


# --------------------------------------------------------------------------- measurement


@dataclass
class Probe:
    """Sensor timing observed in one trial's samples.

    Attributes:
        trial_id, device, source: where it was observed.
        method: the trial's GPU energy method.
        configured_hz: the sampler's configured power sampling rate (the plan's
            ``energy.sample_hz``), Hz, or None when unknown.
        sample_hz: observed power sampling rate, Hz: 1 / median spacing of the rows
            that carry power, leaving out the counter bursts around window edges
            (spacings under half the configured period, or under 10 ms).
        power_update_s: median time between changes of instant power, s (None for the
            simulated device, whose power is a model that changes only at window edges).
        counter_update_s: median time between changes of the energy counter, s (for
            the simulated device: the model's tick).
        n_samples: rows of that device.
        n_burst: rows left out as edge-burst rows.
    """

    trial_id: str
    device: str
    source: str
    method: str | None
    configured_hz: float | None
    sample_hz: float | None
    power_update_s: float | None
    counter_update_s: float | None
    n_samples: int
    n_burst: int = 0

    @property
    def simulated(self) -> bool:
        return self.source == "simulated" or self.method == "simulated"


def _median_change_interval(t: np.ndarray, v: np.ndarray) -> float | None:
    keep = np.isfinite(v)
    t, v = t[keep], v[keep]
    if v.size < 3:
        return None
    changes = t[1:][np.diff(v) != 0]
    if changes.size < 2:
        return None
    return float(np.median(np.diff(changes)))


BURST_MAX_SPACING_S = 0.010
"""Row spacings below this (or below half the configured period) are edge bursts."""


def observed_rate_hz(t: np.ndarray, configured_hz: float | None) -> tuple[float | None, int]:
    """(rate, rows left out): 1 / median spacing of rows outside the edge bursts.

    The sampler reads every ~2 ms around each window edge to locate counter ticks;
    those rows would make a plain median report hundreds of Hz."""
    t = np.unique(t[np.isfinite(t)])
    if t.size < 3:
        return None, 0
    dt = np.diff(t)
    floor = BURST_MAX_SPACING_S
    if configured_hz:
        floor = max(floor, 0.5 / configured_hz)
    regular = dt[dt >= floor]
    n_burst = int((dt < floor).sum())
    if regular.size == 0:
        return None, n_burst
    med = float(np.median(regular))
    return (1.0 / med if med > 0 else None), n_burst


def probe_samples(
    trial_id: str, method: str | None, samples: pd.DataFrame, configured_hz: float | None = None
) -> list[Probe]:
    """Sampling rate and update periods per GPU device of one trial's samples."""
    out: list[Probe] = []
    if samples is None or len(samples) == 0 or "t_s" not in samples:
        return out
    for device, s in samples.groupby("device", sort=True):
        if not str(device).startswith("gpu"):
            continue
        s = s.sort_values("t_s")
        t = pd.to_numeric(s["t_s"], errors="coerce").to_numpy(dtype=float)
        pw = (
            pd.to_numeric(s["power_instant_w"], errors="coerce").to_numpy(dtype=float)
            if "power_instant_w" in s
            else np.array([])
        )
        en = pd.to_numeric(s["energy_j"], errors="coerce").to_numpy(dtype=float) if "energy_j" in s else np.array([])
        rate_t = t[np.isfinite(pw)] if pw.size and np.isfinite(pw).sum() >= 3 else t
        hz, n_burst = observed_rate_hz(rate_t, configured_hz)
        source = str(s["source"].iloc[0]) if "source" in s else "unknown"
        simulated = source == "simulated" or method == "simulated"
        out.append(
            Probe(
                trial_id=trial_id,
                device=str(device),
                source=source,
                method=method,
                configured_hz=configured_hz,
                sample_hz=hz,
                power_update_s=(None if simulated or not pw.size else _median_change_interval(t, pw)),
                counter_update_s=_median_change_interval(t, en) if en.size else None,
                n_samples=int(len(s)),
                n_burst=n_burst,
            )
        )
    return out


def representative_trial(df: pd.DataFrame, groups: list[Group]) -> pd.Series | None:
    """The valid trial closest to its group's median of the primary metric, in the
    first group of the first workload (else the first ok trial). The power plot and
    the sampling-rate table both use it."""
    if not groups or len(df) == 0:
        return None
    g = groups[0]
    cand = df[(df["workload"] == g.workload) & (df["variant"] == g.variant) & df["used"]]
    if len(cand) == 0:
        cand = df[df["status"] == "ok"]
        if len(cand) == 0:
            return None
        return cand.iloc[0]
    metric = next(iter(g.summaries), None)
    med = g.summaries[metric].median if metric else None
    if med is None:
        return cand.iloc[0]
    dist = (cand[metric] - med).abs().fillna(np.inf)
    return cand.loc[dist.idxmin()]


EDGE_CORRECTED = "nvml-counter-edge-corrected"
NO_EDGE_CORRECTION = {
    "nvml-counter": "NVML counter read at the window edges without edge correction",
    "nvml-power-integration": "trapezoid integral of NVML instant power (no counter, so no edge correction)",
    "nvidia-smi-power-integration": "trapezoid integral of power polled from nvidia-smi (no "
    "counter, so no edge correction)",
}


def edge_correction_statement(methods: list[str]) -> str:
    """Whether edge correction applied to this run's GPU energy, from the methods of
    the trials that ran (``simulated``, ``nvml-counter-edge-corrected`` ...)."""
    n = {m: methods.count(m) for m in dict.fromkeys(methods)}
    total = len(methods)
    if total == 0:
        return "No trial ran, so no GPU energy was computed and edge correction did not apply."
    parts = []
    if n.get(EDGE_CORRECTED):
        parts.append(
            f"Edge correction applied to {n[EDGE_CORRECTED]} of {total} trials "
            f"({EDGE_CORRECTED}): the energy at each window edge is interpolated "
            f"between the NVML counter ticks around it."
        )
    else:
        parts.append(f"Edge correction of a real sensor did not apply to this run: no trial used {EDGE_CORRECTED}.")
    if n.get("simulated"):
        parts.append(
            f"{n['simulated']} trials used the simulated device: the same "
            "tick-detection and edge-correction code runs on the model's counter, "
            "but there is no sensor error to correct (the result is the model's "
            "energy)."
        )
    for m, why in NO_EDGE_CORRECTION.items():
        if n.get(m):
            parts.append(f"{n[m]} trials: {why}.")
    other = [m for m in n if m not in (EDGE_CORRECTED, "simulated", *NO_EDGE_CORRECTION)]
    if other:
        parts.append(
            "GPU energy unknown or from another method in "
            f"{sum(n[m] for m in other)} trials ({', '.join(sorted(other))})."
        )
    return " ".join(parts)


def simulated_model(df: pd.DataFrame) -> dict | None:
    """The simulated device's power model as recorded (``simulated_idle_w`` /
    ``simulated_busy_w`` columns, from the trials' ``environment.simulated_model``)
    or, where the trials frame does not carry them, GC-Bench's model constants."""
    if not df["simulated"].any():
        return None
    from gcbench.energy.simulated import SimulatedGpu

    model = SimulatedGpu()
    out: dict[str, Any] = dict(idle_w=model.idle_w, busy_w=model.busy_w, tick_s=model.tick_s, recorded=False)
    sim = df[df["simulated"]]
    for key in ("idle_w", "busy_w"):
        col = f"simulated_{key}"
        if col in sim.columns:
            v = pd.to_numeric(sim[col], errors="coerce").dropna().unique()
            if len(v):
                out[key] = float(v[0]) if len(v) == 1 else f"{v.min():g}-{v.max():g}"
                out["recorded"] = True
    return out


CROSS_CHECK_PREFIXES = ("energy counter and 1-s average power differ", "counter and integrated power disagree")
"""How the validation's cross-check sentences begin after ``gpuN: `` (gcbench.validate)."""


def _plan_validation(plan: dict | None):
    """The plan's ValidationSettings (defaults where the plan or its section is missing
    or no longer parses)."""
    from gcbench.plan.schema import ValidationSettings

    try:
        return ValidationSettings.model_validate((plan or {}).get("validation") or {})
    except ValueError:
        return ValidationSettings()


def cross_check_statement(df: pd.DataFrame, plan: dict | None) -> str:
    """The cross-check rule with the thresholds this run used, and its outcome."""
    from gcbench.energy.integrate import AVERAGE_POWER_LAG_S, EDGE_ALLOWANCE_S

    v = _plan_validation(plan)

    def hits(col: str) -> int:
        return int(
            sum(any(str(x).split(": ", 1)[-1].startswith(CROSS_CHECK_PREFIXES) for x in items) for items in df[col])
        )

    checked = int(df["gpu_method"].map(lambda m: bool(m) and ("counter" in str(m) or m == "simulated")).sum())
    return (
        f"Each window's GPU energy from the NVML energy counter is checked against a reference from "
        f"another reading of the same sensor: the 1-s average power, integrated over the window shifted "
        f"by its lag of {AVERAGE_POWER_LAG_S:g} s (measured on an H200). A 1-s average cannot place a "
        f"power step more finely than its second, so {EDGE_ALLOWANCE_S:g} s x the power step measured at "
        f"each edge is allowed on top. A difference beyond that allowance above "
        f"{v.cross_check_flag_rel * 100:g} % flags the trial, above {v.cross_check_invalid_rel * 100:g} % "
        f"invalidates it (the plan's validation.cross_check_flag_rel and cross_check_invalid_rel). "
        f"Instant power is not the reference: it refreshes every ~100 ms and misses shorter bursts "
        f"(-10 % on a bursty H200 load); its integral is kept in result.json for information. "
        f"This run: {checked} trials with a counter (or the simulated device's model counter), "
        f"{hits('flags')} flagged and {hits('reasons')} invalid by this rule. See docs/measurement.md."
    )


def stability_statement(df: pd.DataFrame, plan: dict | None) -> str:
    """The throughput-stability rules with the thresholds this run used, and their outcome."""
    from gcbench.stability import SEGMENT_MIN_S

    v = _plan_validation(plan)

    def count(col: str, prefix: str) -> int:
        return int(sum(any(str(x).startswith(prefix) for x in items) for items in df[col]))

    return (
        f"Each trial records its progress inside the measured window (steps finished and when). The window "
        f"is cut into equal segments of at least {SEGMENT_MIN_S:g} s: it is flagged when one half ran more "
        f"than {v.stability_drift_flag_ratio:g}x faster than the other or a segment ran more than "
        f"{v.stability_stall_flag_ratio:g}x slower than the median segment, and invalid when the halves are "
        f"more than {v.stability_drift_invalid_ratio:g}x apart or slow segments lost more than "
        f"{v.stability_stall_invalid_rel * 100:g} % of the window; with fewer than {v.stability_min_steps} "
        f"steps it is flagged as not judged. In a group of two valid repetitions, throughputs more than "
        f"{v.twin_max_ratio:g}x apart flag both and make the group inconclusive (from three repetitions on, "
        f"the MAD rule flags outliers). This run: {count('flags', 'unstable window')} trials flagged and "
        f"{count('reasons', 'unstable window')} invalid as unstable, {count('flags', 'throughput stability not')} "
        f"not judged, {count('flags', TWIN_FLAG)} in groups whose twins disagree."
    )


@dataclass
class Measurement:
    """The "How this was measured" section.

    Attributes:
        methods: rows (role, method, source, trials, description) per energy method.
        probes: sensor timing observed in a few trials' samples (the example trial of
            the power plot first).
        simulated_trials: count of trials with simulated figures.
        counts: status/validity counts (total, ok, failed, skipped, valid, invalid,
            unvalidated).
        reasons: (reason, count) of invalid trials, most frequent first.
        flags: (flag, count) of findings that did not invalidate.
        energy_basis: what CO2e is computed from.
        example_trial: trial id of the power plot and the first probe, or None.
        configured_hz: the plan's power sampling rate, Hz, or None.
        edge_correction: whether edge correction applied, in words.
        simulated_model: the simulated device's model (idle_w, busy_w, tick_s,
            recorded), or None when no trial is simulated.
        cross_check: the counter cross-check's rule, thresholds and outcome, in words.
        stability: the throughput-stability rules, thresholds and outcome, in words.
    """

    methods: list[dict]
    probes: list[Probe]
    simulated_trials: int
    counts: dict[str, int]
    reasons: list[tuple[str, int]]
    flags: list[tuple[str, int]]
    energy_basis: str
    example_trial: str | None = None
    configured_hz: float | None = None
    edge_correction: str = ""
    simulated_model: dict | None = None
    cross_check: str = ""
    stability: str = ""


def _count_items(lists: Iterable[list[str]]) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for lst in lists:
        for item in lst:
            counts[item] = counts.get(item, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def configured_sample_hz(df: pd.DataFrame, plan: dict) -> float | None:
    """The sampler's configured power rate: the trials' ``sample_hz`` column when the
    frame carries it, else the plan's ``energy.sample_hz``, else GC-Bench's default."""
    if "sample_hz" in df.columns:
        v = pd.to_numeric(df["sample_hz"], errors="coerce").dropna()
        if len(v):
            return float(v.median())
    energy = (plan or {}).get("energy") or {}
    if energy.get("sample_hz") is not None:
        try:
            return float(energy["sample_hz"])
        except (TypeError, ValueError):
            return None
    try:
        from gcbench.spec import EnergySettings  # the plan schema's default

        return float(EnergySettings.model_fields["sample_hz"].default)
    except Exception:  # noqa: BLE001 - the schema may move; the rate is then unknown
        return None


def build_measurement(
    df: pd.DataFrame, data: ReportData, energy_basis: str, groups: list[Group] | None = None
) -> Measurement:
    """Methods, sensor timing, validity counts and reasons of one report."""
    ok = df[df["status"] == "ok"]
    methods = []
    for role, col in (("GPU", "gpu_method"), ("CPU", "cpu_method")):
        keys = ok[col].map(lambda v: v or "unavailable")
        src = (
            ok["gpu_source"].map(lambda v: v or "")
            if role == "GPU"
            else keys.map(lambda m: "rapl" if m == "rapl" else "")
        )
        for (method, source), n in pd.Series(1, index=[keys, src]).groupby(level=[0, 1]).sum().items():
            methods.append(
                dict(
                    role=role,
                    method=method,
                    source=source or "–",
                    trials=int(n),
                    simulated=(method == "simulated" or source == "simulated"),
                    description=describe_method(method if method != "unavailable" else None),
                )
            )
    hz = configured_sample_hz(df, data.plan)
    example = representative_trial(df, groups or [])
    probes: list[Probe] = []
    seen = set()
    rows = ([example] if example is not None else []) + [row for _, row in ok.iterrows()]
    for row in rows:
        key = (row["gpu_method"], row["gpu_source"])
        if key in seen:
            continue
        seen.add(key)
        probes.extend(probe_samples(row["trial_id"], row["gpu_method"], data.samples(row["trial_id"]), hz))
        if len(seen) >= MAX_MEASUREMENT_PROBES:
            break
    valid = df["valid"]
    counts = dict(
        total=int(len(df)),
        ok=int((df["status"] == "ok").sum()),
        failed=int((df["status"] == "failed").sum()),
        skipped=int((df["status"] == "skipped").sum()),
        valid=int(df["used"].sum()),
        invalid=int(((df["status"] == "ok") & valid.map(lambda v: v is False)).sum()),
        unvalidated=int(((df["status"] == "ok") & valid.map(lambda v: v is None)).sum()),
    )
    invalid = df[(df["status"] == "ok") & valid.map(lambda v: v is False)]
    return Measurement(
        methods=methods,
        probes=probes,
        simulated_trials=int(df["simulated"].sum()),
        counts=counts,
        reasons=_count_items(invalid["reasons"]),
        flags=_count_items(df["flags"]),
        energy_basis=energy_basis,
        example_trial=None if example is None else str(example["trial_id"]),
        configured_hz=hz,
        edge_correction=edge_correction_statement([m or "unavailable" for m in ok["gpu_method"]]),
        simulated_model=simulated_model(df),
        cross_check=cross_check_statement(df, data.plan),
        stability=stability_statement(df, data.plan),
    )


# --------------------------------------------------------------------------- the whole


@dataclass
class Analysis:
    """All numbers of one report.

    Attributes:
        data: the input.
        settings: plan-derived settings.
        trials: the normalized trials frame (with ``used`` and CO2e columns).
        groups, comparisons, measurement: see their classes.
        simulated: any trial is simulated (the report then says SIMULATED everywhere).
        co2e_total: dict(energy_kwh, co2e_kg, low, high) over all valid trials.
        tradeoffs: the energy-time trade-off of each workload that has energy and time
            (:mod:`gcbench.report.tradeoff`), filled by :func:`analyze`.
    """

    data: ReportData
    settings: ReportSettings
    trials: pd.DataFrame
    groups: list[Group]
    comparisons: list[ComparisonRow]
    measurement: Measurement
    simulated: bool
    co2e_total: dict[str, float | None]
    tradeoffs: list = field(default_factory=list)
    _extra: dict = field(default_factory=dict, repr=False)

    def comparison(self, treat: Group, base: Group, metric: str) -> stats.Comparison:
        """``treat`` against ``base`` on ``metric`` over the groups' summarised values:
        the report's own comparison when it made this one (same numbers everywhere),
        else computed once with the report's seed and settings (not Holm-adjusted: an
        estimate with its CI, not a test)."""
        for r in self.comparisons:
            c = r.result
            if (
                r.workload == treat.workload
                and c.treatment == treat.variant
                and c.baseline == base.variant
                and c.metric == metric
            ):
                return c
        key = (treat.workload, treat.variant, base.variant, metric)
        if key not in self._extra:
            s = self.settings
            self._extra[key] = stats.compare(
                treat.values.get(metric, np.array([])),
                base.values.get(metric, np.array([])),
                metric=metric,
                treatment=treat.variant,
                baseline=base.variant,
                confidence=s.confidence,
                n_resamples=s.n_resamples,
                alpha=s.alpha,
                seed=stats.stable_seed(*key, base=s.seed),
            )
        return self._extra[key]

    def untested_for_ci(self) -> list[ComparisonRow]:
        """Comparisons of headline metrics left out of the headlines: no CI (fewer than
        ``stats.MIN_N_CI`` valid trials on a side, or no percentage change)."""
        return [
            r
            for r in self.comparisons
            if r.result.metric in self.headline_metrics(r) and r.result.pct_ci_low is None and not r.not_compared
        ]

    def not_compared(self) -> list[ComparisonRow]:
        """Comparisons of headline metrics not made: a requested level of the factor was
        not in effect on a side (:attr:`ComparisonRow.not_compared`)."""
        return [r for r in self.comparisons if r.result.metric in self.headline_metrics(r) and r.not_compared]

    def headline_metrics(self, r: ComparisonRow) -> tuple[str, ...]:
        """The two metrics a comparison of ``r``'s workload can headline: the first two
        of its kind's compared metrics that the workload's comparisons have (a user's
        program yields J/token, J/GB or J/unit by its unit)."""
        seen = {c.result.metric for c in self.comparisons if c.workload == r.workload}
        return tuple(m for m in kind_compared(r.kind) if m in seen)[:2]

    def baseline_for(self, workload: str, factor: str, levels: list | None = None) -> Any:
        """The baseline level of ``factor`` in ``workload`` (:func:`baseline_level` over
        ``levels``, by default the factor's levels in that workload's groups), or None
        when the workload has no level of it."""
        if levels is None:
            levels = []
            for g in self.groups:
                if g.workload == workload and factor in g.factors and g.factors[factor] not in levels:
                    levels.append(g.factors[factor])
        return baseline_level(factor, levels, self.settings) if levels else None

    def headline_rows(self) -> list[ComparisonRow]:
        """Comparisons of the primary and secondary compared metrics that have a CI,
        significant ones first, then not significant, then untested and inconclusive
        (stable order). A change without a CI is no headline: it stays in the
        comparisons table (see :meth:`untested_for_ci`)."""
        rows = [
            r
            for r in self.comparisons
            if r.result.metric in self.headline_metrics(r) and r.result.pct_ci_low is not None and not r.not_compared
        ]

        def rank(r: ComparisonRow) -> int:
            if r.inconclusive:
                return 3
            if r.result.significant is None:
                return 2
            return 0 if r.result.significant else 1

        return sorted(rows, key=rank)

    @property
    def headlines(self) -> list[str]:
        """Headline sentences of :meth:`headline_rows`, in that order, then the
        energy-time trade-off's "energy saved for time lost" sentences."""
        return [r.headline for r in self.headline_rows()] + [h for t in self.tradeoffs if t.active for h in t.headlines]

    def workloads(self) -> list[tuple[str, str, list[Group]]]:
        """(workload, kind, groups) in report order."""
        out: dict[str, tuple[str, str, list[Group]]] = {}
        for g in self.groups:
            out.setdefault(g.workload, (g.workload, g.kind, []))[2].append(g)
        return list(out.values())


def analyze(data: ReportData, settings: ReportSettings | None = None) -> Analysis:
    """Compute every number of the report from ``data`` (see module docstring)."""
    settings = settings or ReportSettings.from_plan(data.plan or {})
    df = normalize_trials(data.trials)
    df, basis = add_carbon(df, settings)
    if (
        settings.per_trial_carbon
    ):  # an hourly series: the text quotes the energy-weighted mean of the trials' intensities
        known = df["co2e_kg"].notna() & (df["co2_energy_kwh"] > 0)
        kwh = float(df.loc[known, "co2_energy_kwh"].sum())
        if kwh > 0:
            settings = dataclasses.replace(
                settings,
                intensity_kg_per_kwh=float(df.loc[known, "co2e_kg"].sum()) / kwh,
                band=(
                    float(df.loc[known, "co2e_kg_low"].sum()) / kwh,
                    float(df.loc[known, "co2e_kg_high"].sum()) / kwh,
                ),
            )
    df = add_time_per_work(df)
    groups = build_groups(df, settings)
    comparisons = build_comparisons(df, groups, settings)
    measurement = build_measurement(df, data, basis, groups)
    used = df[df["used"]]
    kwh = used["co2_energy_kwh"]
    known = bool(kwh.notna().any())
    co2e_total = dict(
        energy_kwh=float(kwh.sum()) if known else None,
        co2e_kg=float(used["co2e_kg"].sum()) if known else None,
        low=float(used["co2e_kg_low"].sum()) if known else None,
        high=float(used["co2e_kg_high"].sum()) if known else None,
        n_unknown=int(kwh.isna().sum()),
    )
    a = Analysis(
        data=data,
        settings=settings,
        trials=df,
        groups=groups,
        comparisons=comparisons,
        measurement=measurement,
        simulated=bool(df["simulated"].any()),
        co2e_total=co2e_total,
    )
    from gcbench.report.tradeoff import build_tradeoffs

    a.tradeoffs = build_tradeoffs(a)
    return a
