"""Write one report: HTML (self-contained), Markdown with PNGs beside it, CSV, JSON.

    from gcbench.report import write_report
    paths = write_report(data, Path("reports") / data.plan_name / data.run_id)

Layout of ``out_dir``::

    report.html        everything, plots embedded as base64 PNG
    report.md          the same text; links the PNGs below
    *.png              one file per figure
    trials.csv         one row per trial; gpu_energy_source (simulated | nvml | nvidia-smi |
                       unavailable) and simulated_columns (the columns of that row whose
                       values come from the simulated device, ';'-separated; empty when
                       none) label the figures per column
    groups.csv         one row per group and metric; data_source: SIMULATED when that
                       metric comes from simulated GPU energy, else measured
    comparisons.csv    one row per comparison and metric; data_source as in groups.csv
    tradeoff.csv       one row per configuration of each energy-time trade-off (energy,
                       time, changes against the baseline); data_source as in groups.csv
    paper.md/.tex      with paper=True: the study's headline tables (gcbench.report.paper)
    report.json        summary for the Airflow view (headlines, counts, simulated)
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from gcbench import stats
from gcbench.metrics import CO2E_BAND_COLUMNS, METRIC_COLUMNS
from gcbench.report import tables
from gcbench.report.analysis import Analysis, ReportSettings, analyze, fmt_num, fmt_p
from gcbench.report.data import TRIAL_COLUMNS, ReportData, ReportPaths
from gcbench.report.metrics import RATIOS, SIMULATED_METRICS, info, is_simulated_metric, kind_metrics
from gcbench.report.plots import Plot, _slug, make_plots
from gcbench.report.scale import choose_unit

TEMPLATES = Path(__file__).with_name("templates")
MD_MAX_TRIAL_ROWS = 300
"""Markdown lists at most this many trials (trials.csv has all of them)."""

SENSOR_FACTS = [
    "NVML's power reading (nvmlDeviceGetPowerUsage, nvidia-smi power.draw) is a 1-second "
    "average on Ampere and newer GPUs; the instant value is NVML_FI_DEV_POWER_INSTANT "
    "(power.draw.instant). Both update about every 100 ms.",
    "The energy counter nvmlDeviceGetTotalEnergyConsumption (mJ, Volta and newer) also "
    "updates about every 100 ms; read only at the window edges it leaves up to "
    "100 ms x power of error per edge, hence the edge correction.",
    "On A100/H100 the power sensor averages only part of each 100 ms period, so GC-Bench "
    "relies on the energy counter, long windows and a cross-check against the 1-s average power.",
    "RAPL counters wrap at max_energy_range_uj and are root-only; unreadable CPU energy is "
    "reported as unknown, never as 0.",
]


def _env():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(["html", "html.j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["md"] = md_escape
    return env


# ASCII punctuation that starts Markdown syntax inline (emphasis, code, links, raw HTML,
# table cells, entities, strikethrough); CommonMark 0.31 section 2.4: any ASCII punctuation
# after a backslash is a literal character.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|&~])")


def md_escape(text: str) -> str:
    """Plan text (a place, a series path, a reason) as literal Markdown: each character of
    ``\\ ` * _ [ ] < > | & ~`` gets a backslash (CommonMark, "Backslash escapes"), so a name
    like ``a|b*c<script>`` shows as written, neither as emphasis, a table cell nor HTML."""
    return _MD_SPECIAL.sub(r"\\\1", str(text))


def shown_metrics(a: Analysis, workload: str, kind: str, groups) -> tuple[list[str], list[str]]:
    """See :func:`gcbench.report.tables.shown_metrics`."""
    return tables.shown_metrics(a, workload, kind, groups)


def carbon_sources_sentence(trials: pd.DataFrame) -> str:
    """Which carbon-intensity source (with its year, average or marginal) each trial's CO2e
    used, and why trials have none: one sentence, "" for trials stored before sources were."""
    if "carbon_intensity_source" not in trials.columns:
        return ""
    parts = []
    kinds = trials["carbon_intensity_kind"] if "carbon_intensity_kind" in trials.columns else None
    for source, rows in trials.groupby(trials["carbon_intensity_source"].astype(str)):
        if source in ("", "nan", "None"):
            continue
        kind = next((str(k) for k in (kinds[rows.index] if kinds is not None else []) if isinstance(k, str)), "average")
        parts.append(f"{source}, {kind} intensity ({len(rows)} trial{'s' if len(rows) != 1 else ''})")
    if not parts:
        return ""
    text = "Carbon intensity: " + "; ".join(parts) + "."
    if "co2e_reason" in trials.columns:
        reasons = trials["co2e_reason"].dropna().astype(str)
        for reason, n in reasons.value_counts().items():
            text += f" No CO2e for {n} trial{'s' if n != 1 else ''}: {reason} (energy kept)."
    return text


def _context(a: Analysis, plots: list[Plot]) -> dict:
    s = a.settings
    conf = round(s.confidence * 100)
    workloads = []
    for workload, kind, groups in a.workloads():
        t = tables.workload_table(a, workload, kind, groups)
        rows = [
            dict(r, cells=[dict(main=c.main, ci=c.ci, band=c.band, trials=c.trials, text=c.text()) for c in r["cells"]])
            for r in t.rows
        ]
        workloads.append(
            dict(
                name=workload,
                kind=kind,
                rows=rows,
                notes=t.notes,
                column_notes=t.notes,
                headers=[
                    dict(
                        label=c.head,
                        sub=c.sub,
                        unit=c.unit.label,
                        name=c.metric,
                        pooled=c.pooled,
                        simulated=c.simulated,
                    )
                    for c in t.columns
                ],
            )
        )
    comparisons = []
    no_ci: list[str] = []
    for r in a.comparisons:
        c = r.result
        u = tables.comparison_unit(c)
        row: dict[str, Any] = dict(
            workload=r.workload,
            context=r.context,
            factor=r.factor,
            treatment=f"{r.factor}={r.treatment_level}",
            baseline=f"{r.factor}={r.baseline_level}",
            metric=info(c.metric).label,
            unit=u.label,
            n=f"{c.n_treatment} vs {c.n_baseline}",
            medians=f"{tables.fmt_in(c.median_treatment, u)} vs {tables.fmt_in(c.median_baseline, u)}",
            simulated=r.simulated,
        )
        if r.not_compared:
            tested = dict.fromkeys(("pct", "ci", "p_mw", "p_mw_holm", "p_welch", "p_welch_holm", "cliff", "hl"), "–")
            comparisons.append({**row, **tested, "verdict": "not compared", "note": r.not_compared})
            continue
        if c.pct_ci_low is None and c.pct_change is not None:
            no_ci.append(
                f"{r.workload} {r.factor}={r.treatment_level} vs "
                f"{r.factor}={r.baseline_level} ({c.n_treatment} vs {c.n_baseline})"
            )
        comparisons.append(
            dict(
                row,
                pct=tables.fmt_pct(c.pct_change),
                ci=(
                    f"{tables.fmt_pct(c.pct_ci_low)} to {tables.fmt_pct(c.pct_ci_high)}"
                    if c.pct_ci_low is not None
                    else "–"
                ),
                p_mw=fmt_p(c.p_mannwhitney).removeprefix("p = "),
                p_mw_holm=fmt_p(c.p_mannwhitney_holm).removeprefix("p = "),
                p_welch=fmt_p(c.p_welch).removeprefix("p = "),
                p_welch_holm=fmt_p(c.p_welch_holm).removeprefix("p = "),
                cliff=fmt_num(c.cliffs_delta, 3),
                hl=("–" if c.hodges_lehmann is None else f"{tables.fmt_in(c.hodges_lehmann, u)} {u.label}".strip()),
                verdict=(
                    "inconclusive"
                    if r.inconclusive
                    else "not tested"
                    if c.significant is None
                    else "significant"
                    if c.significant
                    else "not significant"
                ),
                note="; ".join(
                    x
                    for x in (c.note or "").split("; ")
                    if x and not x.startswith(("n=", "inconclusive:")) and "values per group needed" not in x
                ),
            )
        )
    comparison_notes = []
    skipped = [r for r in a.comparisons if r.not_compared]
    if skipped:
        pairs = dict.fromkeys(
            f"{r.workload} {r.factor}={r.treatment_level} vs {r.factor}={r.baseline_level}" for r in skipped
        )
        comparison_notes.append(
            f"Not compared: {'; '.join(pairs)}. A requested level of the factor was not in effect "
            f"(the reason is in the verdict and under the groups table), so both sides ran other "
            f"work than their labels say; their medians are shown, no change, test or headline."
        )
    if no_ci:
        comparison_notes.append(
            f'No CI ("–") where a group has fewer than {stats.MIN_N_CI} valid trials: '
            f"{'; '.join(dict.fromkeys(no_ci))}. Their change is a point estimate only and is "
            f"not a headline."
        )
    tradeoffs = []
    for t in a.tradeoffs:
        if not t.active:
            continue
        ft = tables.tradeoff_rows(a, t)
        tradeoffs.append(
            dict(
                workload=t.workload,
                factors=", ".join(t.factors),
                simulated=t.simulated,
                energy=info(t.energy_metric).label,
                time=info(t.time_metric).label,
                baseline=t.baseline.label if t.baseline is not None else "",
                headers=[dict(label=c.head, sub=c.sub, simulated=c.simulated) for c in ft.columns],
                rows=[dict(r, cells=[dict(main=c.main, ci=c.ci, text=c.text()) for c in r["cells"]]) for r in ft.rows],
                notes=ft.notes,
                effects=[
                    dict(
                        factor=e.factor,
                        level=e.level,
                        baseline=e.baseline_level,
                        headline=e.headline,
                        reason=e.reason,
                        contexts=[
                            dict(
                                context=ctx or "–",
                                d_energy=tables.fmt_pct(de.pct_change),
                                d_energy_ci=tables.fmt_pct_ci(de),
                                d_time=tables.fmt_pct(dt.pct_change),
                                d_time_ci=tables.fmt_pct_ci(dt),
                            )
                            for ctx, de, dt in e.contexts
                        ],
                    )
                    for e in t.effects
                ],
                figure=next((p.name for p in plots if p.name == f"pareto_{_slug(t.workload)}"), ""),
            )
        )
    headlines = [
        dict(
            text=r.headline, significant=bool(r.result.significant), inconclusive=r.inconclusive, simulated=r.simulated
        )
        for r in a.headline_rows()
    ]
    tradeoff_headlines = [dict(text=h, simulated=t.simulated) for t in a.tradeoffs if t.active for h in t.headlines]
    no_comparison = _no_comparison_reason(a) if not headlines else ""
    left_out = a.untested_for_ci()
    headline_note = ""
    if left_out and headlines:
        headline_note = (
            f"{len(left_out)} comparison{'s' if len(left_out) > 1 else ''} without a "
            f"CI (fewer than {stats.MIN_N_CI} valid trials in a group) "
            f"{'are' if len(left_out) > 1 else 'is'} not a headline; see Comparisons."
        )
    not_made = a.not_compared()
    if not_made and headlines:
        headline_note = (headline_note + " " if headline_note else "") + _not_compared_sentence(not_made)
    df = a.trials
    primary_unit = {
        k: choose_unit(info(kind_metrics(k)[0]).unit, df.loc[df["kind"] == k, kind_metrics(k)[0]].tolist())
        for k in df["kind"].unique()
    }
    energy_unit = choose_unit("J", df["gpu_energy_j"].tolist())
    time_unit = choose_unit("s", df["duration_s"].tolist())

    def trial_row(t) -> dict:
        kind_m = kind_metrics(str(t["kind"]))[0]
        u = primary_unit[t["kind"]]
        return dict(
            trial_id=t["trial_id"],
            variant=t["variant"],
            repetition=t["repetition"],
            status=t["status"],
            valid="not validated" if t["valid"] is None else ("valid" if t["valid"] else "invalid"),
            used=bool(t["used"]),
            metric=f"{info(kind_m).label}: {tables.fmt_in(t[kind_m], u)} {u.label}".rstrip(),
            metric_simulated=bool(t["simulated"]) and is_simulated_metric(kind_m),
            energy=tables.fmt_in(t["gpu_energy_j"], energy_unit),
            duration=tables.fmt_in(t["duration_s"], time_unit),
            method=t["gpu_method"] or "unavailable",
            simulated=bool(t["simulated"]),
            reasons="; ".join(t["reasons"]),
            flags="; ".join(t["flags"]),
            error=t["error"] or "",
        )

    trials = [trial_row(t) for _, t in df.iterrows()]
    invalid = [t for t in trials if t["status"] == "ok" and t["valid"] == "invalid"]
    failed = [t for t in trials if t["status"] != "ok"]
    unvalidated = [t for t in trials if t["status"] == "ok" and t["valid"] == "not validated"]
    m = a.measurement
    probes = [
        dict(
            trial_id=p.trial_id,
            device=p.device,
            source=p.source,
            method=p.method or "",
            configured_hz=fmt_num(p.configured_hz, 3),
            sample_hz=fmt_num(p.sample_hz, 3),
            power_update_ms=(
                "– (model, not a sensor)"
                if p.simulated
                else fmt_num(None if p.power_update_s is None else 1e3 * p.power_update_s, 3)
            ),
            counter_update_ms=(
                fmt_num(None if p.counter_update_s is None else 1e3 * p.counter_update_s, 3)
                + (" (model tick)" if p.simulated and p.counter_update_s else "")
            ),
            n_samples=p.n_samples,
            n_burst=p.n_burst,
            simulated=p.simulated,
            example=p.trial_id == m.example_trial,
        )
        for p in m.probes
    ]
    sm = m.simulated_model
    sim_model = (
        None
        if sm is None
        else dict(
            idle_w=sm["idle_w"] if isinstance(sm["idle_w"], str) else f"{sm['idle_w']:g}",
            busy_w=sm["busy_w"] if isinstance(sm["busy_w"], str) else f"{sm['busy_w']:g}",
            tick_ms=f"{1e3 * sm['tick_s']:g}",
            recorded=sm["recorded"],
        )
    )
    ct = a.co2e_total
    e_unit = choose_unit("kWh", [ct["energy_kwh"]])
    c_unit = choose_unit("kgCO2e", [ct["co2e_kg"]])
    figures = [
        dict(
            name=p.name,
            kind=p.kind,
            title=p.title,
            caption=p.caption,
            b64=base64.b64encode(p.png).decode("ascii"),
            file=f"{p.name}.png",
            simulated=p.simulated,
        )
        for p in plots
    ]
    d = a.data
    return dict(
        title=f"GC-Bench report: {d.plan_name}",
        plan_name=d.plan_name,
        run_id=d.run_id,
        logical_date=d.logical_date or "–",
        description=(d.plan or {}).get("description") or "",
        run_notes=list(getattr(d, "notes", None) or []),
        generated_at=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        simulated=a.simulated,
        simulated_trials=m.simulated_trials,
        headlines=headlines,
        no_comparison=no_comparison,
        workloads=workloads,
        comparisons=comparisons,
        figures=figures,
        trials=trials,
        md_trials=trials[:MD_MAX_TRIAL_ROWS],
        n_trials=len(trials),
        invalid=invalid,
        failed=failed,
        unvalidated=unvalidated,
        methods=m.methods,
        probes=probes,
        counts=m.counts,
        reasons=m.reasons,
        flags=m.flags,
        energy_basis=m.energy_basis,
        sensor_facts=SENSOR_FACTS,
        edge_correction=m.edge_correction,
        cross_check=m.cross_check,
        stability=m.stability,
        sim_model=sim_model,
        example_trial=m.example_trial or "",
        configured_hz=fmt_num(m.configured_hz, 3) if m.configured_hz else "unknown",
        conf=conf,
        n_resamples=f"{s.n_resamples:,}",
        alpha=s.alpha,
        min_valid=s.min_valid_repetitions,
        intensity=s.intensity_kg_per_kwh,
        band_low=s.band[0],
        band_high=s.band[1],
        carbon_sources=carbon_sources_sentence(a.trials),
        co2e_total=dict(
            energy=tables.fmt_in(ct["energy_kwh"], e_unit),
            energy_unit=e_unit.label,
            co2e=tables.fmt_in(ct["co2e_kg"], c_unit),
            co2e_unit=c_unit.label,
            low=tables.fmt_in(ct["low"], c_unit),
            high=tables.fmt_in(ct["high"], c_unit),
            n_unknown=ct["n_unknown"],
        ),
        tradeoffs=tradeoffs,
        tradeoff_headlines=tradeoff_headlines,
        headline_note=headline_note,
        comparison_notes=comparison_notes,
        min_n_ci=stats.MIN_N_CI,
        trial_energy_unit=energy_unit.label,
        trial_time_unit=time_unit.label,
        # the Holm family: what adjust_holm adjusted, comparisons that have a p-value
        n_comparisons=sum(
            1 for r in a.comparisons if not r.inconclusive and not r.not_compared and r.result.p_mannwhitney is not None
        ),
    )


def _not_compared_sentence(rows) -> str:
    """One sentence on the comparisons not made because a requested level was not in effect."""
    why = "; ".join(dict.fromkeys(r.not_compared for r in rows))
    n = len(rows)
    return (
        f"{n} comparison{'s' if n > 1 else ''} not made (a requested factor level was not in "
        f"effect, so both sides did other work than their labels say): {why}."
    )


def _no_comparison_reason(a: Analysis) -> str:
    """Why the headlines are empty: no two variants one factor apart, or they exist but
    their groups are inconclusive or empty (named), or a requested level was not in effect."""
    left_out = a.untested_for_ci()
    not_made = a.not_compared()
    if left_out:
        point = sum(1 for r in left_out if r.result.pct_change is not None)
        none = len(left_out) - point
        parts = [f"{point} comparison{'s are' if point != 1 else ' is'} a point estimate only"] if point else []
        if none:
            parts.append(f"{none} ha{'ve' if none != 1 else 's'} no estimate at all (a side has no valid trial)")
        return (
            f"No headline: no comparison has a CI (each needs at least {stats.MIN_N_CI} "
            f"valid trials per group; {' and '.join(parts)}, see Comparisons)."
            + (" " + _not_compared_sentence(not_made) if not_made else "")
        )
    if not_made:
        return "No headline: " + _not_compared_sentence(not_made)
    if a.comparisons:
        return "No headline comparisons: every planned comparison is of a metric not summarized in headlines."
    from gcbench.report.analysis import plan_comparisons

    pairs = plan_comparisons(a.groups, a.settings)
    weak = [g for g in a.groups if g.inconclusive]
    if not pairs and not weak:
        return "No comparisons: this run has no two variants that differ in one factor."
    names = "; ".join(f"{g.variant} ({g.n_valid} valid of {g.n_trials} trials)" for g in weak)
    return (
        f"No comparisons could be tested: these groups are inconclusive or empty "
        f"(fewer than {a.settings.min_valid_repetitions} valid repetitions): {names}."
    )


# --------------------------------------------------------------------------- CSV


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
    """trials.csv: every trial; lists joined by '; ', factors as JSON.

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
"""groups.csv columns. ``median`` ... ``ci_reason``: the median of the per-trial values
and its BCa CI; ``pooled`` ...: for a ratio metric, sum of the numerator / sum of the
denominator over the same trials (``n``) with its BCa CI over trials; empty otherwise.
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


def _clean_json(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def write_report(
    data: ReportData, out_dir: Path, *, settings: ReportSettings | None = None, paper: bool = False
) -> ReportPaths:
    """Analyze ``data`` and write the report files into ``out_dir`` (created).

    Args:
        data: the run's trials, samples and windows (see :class:`ReportData`).
        out_dir: the report folder, conventionally ``reports/<plan>/<run id>/``
            (:func:`gcbench.report.web.report_dir`).
        settings: overrides of the plan-derived settings (tests use fewer resamples).
        paper: also write the study's headline tables, ``paper.md`` and ``paper.tex``
            (:mod:`gcbench.report.paper`).

    Returns:
        The paths written (:class:`ReportPaths`).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    a = analyze(data, settings)
    plots = make_plots(a)
    ctx = _context(a, plots)
    env = _env()
    html = out_dir / "report.html"
    html.write_text(env.get_template("report.html.j2").render(**ctx), encoding="utf-8")
    md = out_dir / "report.md"
    md.write_text(env.get_template("report.md.j2").render(**ctx), encoding="utf-8")
    pngs = []
    for p in plots:
        path = out_dir / f"{p.name}.png"
        path.write_bytes(p.png)
        pngs.append(path)
    csv = {
        "trials": out_dir / "trials.csv",
        "groups": out_dir / "groups.csv",
        "comparisons": out_dir / "comparisons.csv",
        "tradeoff": out_dir / "tradeoff.csv",
    }
    trials_frame(a).to_csv(csv["trials"], index=False)
    groups_frame(a).to_csv(csv["groups"], index=False)
    comparisons_frame(a).to_csv(csv["comparisons"], index=False)
    tradeoff_frame(a).to_csv(csv["tradeoff"], index=False)
    summary = dict(
        plan_name=data.plan_name,
        run_id=data.run_id,
        logical_date=data.logical_date,
        title=ctx["title"],
        generated_at=ctx["generated_at"],
        simulated=a.simulated,
        counts=a.measurement.counts,
        headlines=a.headlines,
        notes=ctx["run_notes"],
        co2e_total={k: _clean_json(v) for k, v in a.co2e_total.items()},
        files=dict(
            html=html.name, markdown=md.name, csv={k: v.name for k, v in csv.items()}, png=[p.name for p in pngs]
        ),
    )
    paper_md = paper_tex = None
    if paper:
        from gcbench.report.paper import write_paper

        paper_md, paper_tex = write_paper(a, out_dir)
        summary["files"]["paper"] = [paper_md.name, paper_tex.name]
    summary_json = out_dir / "report.json"
    summary_json.write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
    return ReportPaths(
        out_dir=out_dir,
        html=html,
        markdown=md,
        csv_dir=out_dir,
        csv=csv,
        pngs=pngs,
        summary_json=summary_json,
        paper_md=paper_md,
        paper_tex=paper_tex,
    )
