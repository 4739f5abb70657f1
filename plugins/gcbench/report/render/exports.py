"""The report's CSV files (trials.csv, groups.csv, comparisons.csv, tradeoff.csv) as
pandas DataFrames built from an :class:`Analysis`."""

from __future__ import annotations

import json

import pandas as pd

from gcbench.metrics import CO2E_BAND_COLUMNS, METRIC_COLUMNS
from gcbench.report.analysis.core import Analysis
from gcbench.report.data import TRIAL_COLUMNS
from gcbench.report.metrics import RATIOS, SIMULATED_METRICS, info, is_simulated_metric


def _source_label(simulated: bool) -> str:
    return "SIMULATED" if simulated else "measured"


def _gpu_energy_source(t) -> str:
    if t["simulated"] or t["gpu_method"] == "simulated":
        return "simulated"
    src = t["gpu_source"]
    if src:
        return str(src)
    return "unavailable" if not t["gpu_method"] else str(t["gpu_method"])


SIMULATED_CSV_COLUMNS = tuple(
    c for c in (*METRIC_COLUMNS, *CO2E_BAND_COLUMNS) if c in SIMULATED_METRICS or c.startswith("co2e_kg")
)
"""trials.csv columns whose values come from the simulated device in simulated trials."""


def trials_frame(a: Analysis) -> pd.DataFrame:
    """trials.csv: every trial; lists joined by '; ', factors as JSON; ``ingest_notes`` and
    ``samples_dropped`` say what storing the trial changed or could not keep.

    The first two columns say, per column, what is simulated: ``gpu_energy_source``
    (simulated | nvml | nvidia-smi | unavailable) and ``simulated_columns`` (the columns
    of :data:`SIMULATED_CSV_COLUMNS` that are known and simulated in that row)."""
    df = a.trials
    sim_cols = []
    for _, t in df.iterrows():
        sim_cols.append("; ".join(c for c in SIMULATED_CSV_COLUMNS if t["simulated"] and pd.notna(t[c])))
    out = pd.DataFrame(
        {"gpu_energy_source": [_gpu_energy_source(t) for _, t in df.iterrows()], "simulated_columns": sim_cols}
    )
    for col in TRIAL_COLUMNS:
        v = df[col]
        if col in ("reasons", "flags"):
            v = v.map(lambda x: "; ".join(x))
        elif col == "factors":
            v = v.map(lambda x: json.dumps(x, sort_keys=True, default=str))
        elif col == "settings_not_in_effect":  # as the report judged it (older trials: from <factor>_effective)
            v = df["not_in_effect"].map(lambda x: json.dumps(x, sort_keys=True, default=str))
        elif col == "valid":
            v = v.map(lambda x: "" if x is None else str(bool(x)))
        out[col] = v.to_numpy()
    out["used_in_statistics"] = df["used"].to_numpy()
    # what storing the trial changed or could not keep (trials.ingest_notes, samples_dropped)
    notes = df["ingest_notes"] if "ingest_notes" in df else pd.Series([[]] * len(df), index=df.index)
    out["ingest_notes"] = notes.map(lambda x: "; ".join(x or [])).to_numpy()
    dropped = df["samples_dropped"] if "samples_dropped" in df else pd.Series([0] * len(df), index=df.index)
    out["samples_dropped"] = dropped.fillna(0).astype(int).to_numpy()
    for col in (*METRIC_COLUMNS, *CO2E_BAND_COLUMNS):
        out[col] = df[col].to_numpy()
    return out


GROUP_CSV_COLUMNS = (
    "data_source",
    "workload",
    "kind",
    "variant",
    "factors",
    "metric",
    "unit",
    "n",
    "n_excluded",
    "median",
    "mean",
    "std",
    "cv",
    "ci_low",
    "ci_high",
    "ci_method",
    "ci_reason",
    "ci_coverage",
    "confidence",
    "n_resamples",
    "n_trials",
    "n_valid",
    "n_invalid",
    "n_failed",
    "n_skipped",
    "n_unvalidated",
    "inconclusive",
    "simulated",
    "co2e_band_low",
    "co2e_band_high",
    "pooled",
    "pooled_ci_low",
    "pooled_ci_high",
    "pooled_ci_method",
    "pooled_n",
    "pooled_formula",
    "not_in_effect",
)
"""groups.csv columns (``ci_coverage``: the exact coverage of the median's order-statistic
interval, a fraction). ``median`` ... ``ci_reason``: the median of the per-trial values
and its order-statistic CI; ``pooled`` ...: for a ratio metric, sum of the numerator / sum of the
denominator over the same trials (``n``) with its ratio-estimator t CI (Cochran 1977); empty otherwise.
``not_in_effect``: the group's requested settings that did not run as asked, each as
"memory=pinned requested, not in effect: <reason>" ('; '-separated), empty when none."""


def groups_frame(a: Analysis) -> pd.DataFrame:
    """groups.csv: one row per (group, metric)."""
    rows = []
    for g in a.groups:
        for m, su in g.summaries.items():
            d = su.to_dict()
            d.update(
                data_source=_source_label(g.simulated and is_simulated_metric(m)),
                workload=g.workload,
                kind=g.kind,
                variant=g.variant,
                factors=json.dumps(g.factors, sort_keys=True, default=str),
                unit=info(m).unit,
                n_trials=g.n_trials,
                n_valid=g.n_valid,
                n_invalid=g.n_invalid,
                n_failed=g.n_failed,
                n_skipped=g.n_skipped,
                n_unvalidated=g.n_unvalidated,
                inconclusive=g.inconclusive,
                simulated=g.simulated and is_simulated_metric(m),
                co2e_band_low=g.co2e_band[0] if m == "co2e_kg" and g.co2e_band else None,
                co2e_band_high=g.co2e_band[1] if m == "co2e_kg" and g.co2e_band else None,
                not_in_effect="; ".join(g.not_in_effect.values()),
            )
            pr = g.pooled.get(m)
            if pr is not None:
                d.update(
                    pooled=pr.pooled,
                    pooled_ci_low=pr.ci_low,
                    pooled_ci_high=pr.ci_high,
                    pooled_ci_method=pr.ci_method,
                    pooled_n=pr.n,
                    pooled_formula=RATIOS[m].formula,
                )
            rows.append(d)
    return pd.DataFrame(rows, columns=list(GROUP_CSV_COLUMNS))


COMPARISON_CSV_COLUMNS = (
    "data_source",
    "workload",
    "kind",
    "factor",
    "treatment_level",
    "baseline_level",
    "context",
    "metric",
    "treatment",
    "baseline",
    "n_treatment",
    "n_baseline",
    "n_excluded",
    "median_treatment",
    "median_baseline",
    "pct_change",
    "pct_ci_low",
    "pct_ci_high",
    "ci_method",
    "ci_reason",
    "p_mannwhitney",
    "p_mannwhitney_holm",
    "p_method",
    "p_welch",
    "p_welch_holm",
    "cliffs_delta",
    "hodges_lehmann",
    "significant",
    "alpha",
    "inconclusive",
    "simulated",
    "not_compared",
    "note",
    "headline",
)
"""comparisons.csv columns. ``not_compared``: why the two groups were not compared (a
requested level of the factor was not in effect on a side), empty when they were; such a
row has counts and medians but no change, CI or test."""


TRADEOFF_CSV_COLUMNS = (
    "data_source",
    "workload",
    "kind",
    "configuration",
    "variant",
    "factors",
    "baseline",
    "on_front",
    "energy_metric",
    "energy_unit",
    "energy_n",
    "energy_median",
    "energy_ci_low",
    "energy_ci_high",
    "time_metric",
    "time_unit",
    "time_n",
    "time_median",
    "time_ci_low",
    "time_ci_high",
    "energy_pct_change",
    "energy_pct_ci_low",
    "energy_pct_ci_high",
    "time_pct_change",
    "time_pct_ci_low",
    "time_pct_ci_high",
    "not_compared",
)
"""tradeoff.csv columns: one row per configuration of each energy-time trade-off; the
changes are against the baseline configuration (percentage change of the medians, BCa
CI); ``data_source`` SIMULATED when the energy comes from the simulated device;
``not_compared``: why a configuration has no change against the baseline (a requested
level was not in effect), else empty."""


def tradeoff_frame(a: Analysis) -> pd.DataFrame:
    """tradeoff.csv: every configuration of every trade-off (see TRADEOFF_CSV_COLUMNS)."""
    rows = []
    for t in a.tradeoffs:
        for c in t.configs:
            de, dt = c.d_energy, c.d_time
            rows.append(
                dict(
                    data_source=_source_label(t.simulated),
                    workload=t.workload,
                    kind=t.kind,
                    configuration=c.label,
                    variant=c.group.variant,
                    factors=json.dumps(c.group.factors, sort_keys=True, default=str),
                    baseline=c.is_baseline,
                    on_front=c.on_front,
                    energy_metric=t.energy_metric,
                    energy_unit=info(t.energy_metric).unit,
                    energy_n=c.energy.n,
                    energy_median=c.energy.median,
                    energy_ci_low=c.energy.ci_low,
                    energy_ci_high=c.energy.ci_high,
                    time_metric=t.time_metric,
                    time_unit=info(t.time_metric).unit,
                    time_n=c.time.n,
                    time_median=c.time.median,
                    time_ci_low=c.time.ci_low,
                    time_ci_high=c.time.ci_high,
                    energy_pct_change=de.pct_change if de else None,
                    energy_pct_ci_low=de.pct_ci_low if de else None,
                    energy_pct_ci_high=de.pct_ci_high if de else None,
                    time_pct_change=dt.pct_change if dt else None,
                    time_pct_ci_low=dt.pct_ci_low if dt else None,
                    time_pct_ci_high=dt.pct_ci_high if dt else None,
                    not_compared=c.not_compared,
                )
            )
    return pd.DataFrame(rows, columns=list(TRADEOFF_CSV_COLUMNS))


def comparisons_frame(a: Analysis) -> pd.DataFrame:
    """comparisons.csv: one row per comparison and metric (pct_change: of the medians)."""
    rows = []
    for r in a.comparisons:
        d = r.result.to_dict()
        d.update(
            data_source=_source_label(r.simulated),
            workload=r.workload,
            kind=r.kind,
            treatment_level=r.treatment_level,
            baseline_level=r.baseline_level,
            context=r.context,
            inconclusive=r.inconclusive,
            simulated=r.simulated,
            not_compared=r.not_compared,
            headline=r.headline,
        )
        rows.append(d)
    return pd.DataFrame(rows, columns=list(COMPARISON_CSV_COLUMNS))


# --------------------------------------------------------------------------- entry point
