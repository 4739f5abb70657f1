"""The template context of report.html and report.md: every number of an
:class:`Analysis` turned into text and table rows (no statistic computed here)."""

from __future__ import annotations

import base64
import datetime as _dt
from typing import TYPE_CHECKING, Any

from gcbench import stats
from gcbench.report.analysis.core import Analysis
from gcbench.report.analysis.preprocessors import preprocessor_rows
from gcbench.report.fmt import fmt_num, fmt_p
from gcbench.report.metrics import UNIT_METRICS, in_work_unit, info, is_simulated_metric, kind_metrics
from gcbench.report.render import tables
from gcbench.report.render.plots import Plot, _slug
from gcbench.report.scale import choose_unit

if TYPE_CHECKING:  # pandas stays out of module level: the Airflow plugin imports the report
    import pandas as pd

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


def shown_metrics(a: Analysis, workload: str, kind: str, groups) -> tuple[list[str], list[str]]:
    """See :func:`gcbench.report.render.tables.shown_metrics`."""
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
        reached = [p for p in a.precision if p.workload == workload]
        notes = list(t.notes)
        if reached:
            notes.append(
                f"Precision ({info(reached[0].metric).label}, the larger side of the median's {conf} % interval "
                "relative to the median): " + "; ".join(f"{p.variant}: {p.sentence()}" for p in reached) + "."
            )
        workloads.append(
            dict(
                name=workload,
                kind=kind,
                rows=rows,
                notes=notes,
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
    work_units = {g.workload: g.work_unit for g in a.groups}
    for r in a.comparisons:
        c = r.result
        u = tables.comparison_unit(c, work_units.get(r.workload))
        row: dict[str, Any] = dict(
            workload=r.workload,
            context=r.context,
            factor=r.factor,
            treatment=f"{r.factor}={r.treatment_level}",
            baseline=f"{r.factor}={r.baseline_level}",
            metric=info(c.metric, work_units.get(r.workload)).label,
            unit=u.label,
            n=f"{c.n_treatment} vs {c.n_baseline}",
            medians=f"{tables.fmt_in(c.median_treatment, u)} vs {tables.fmt_in(c.median_baseline, u)}",
            simulated=r.simulated,
        )
        if r.not_compared:
            tested = dict.fromkeys(
                ("pct", "ci", "p_mw", "p_mw_holm", "p_method", "p_welch", "p_welch_holm", "cliff", "hl"), "–"
            )
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
                p_method=c.p_method or "–",
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
            f'No CI ("–") where a group has fewer than {stats.MIN_N_INTERVAL["pct_change_of_medians"]} valid trials: '
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
            f"CI (fewer than {stats.MIN_N_INTERVAL['pct_change_of_medians']} valid trials in a group) "
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

    def own_unit(t) -> str | None:
        u = t.get("unit")
        return u if isinstance(u, str) and u else None

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
            metric=f"{info(kind_m, own_unit(t)).label}: {tables.fmt_in(t[kind_m], u)} "
            f"{in_work_unit(u.label, own_unit(t)) if kind_m in UNIT_METRICS else u.label}".rstrip(),
            metric_simulated=bool(t["simulated"]) and is_simulated_metric(kind_m),
            energy=tables.fmt_in(t["gpu_energy_j"], energy_unit),
            duration=tables.fmt_in(t["duration_s"], time_unit),
            method=t["gpu_method"] or "unavailable",
            simulated=bool(t["simulated"]),
            reasons="; ".join(t["reasons"]),
            flags="; ".join(t["flags"]),
            # the all-trials column: what invalidated and what only flagged, told apart
            findings=[
                f"{label}: {'; '.join(t[col])}"
                for label, col in (("invalid", "reasons"), ("flagged", "flags"))
                if t[col]
            ],
            error=t["error"] or "",
            ingest_notes=list(t.get("ingest_notes") or []),
            samples_dropped=int(t.get("samples_dropped") or 0),
        )

    trials = [trial_row(t) for _, t in df.iterrows()]
    invalid = [t for t in trials if t["status"] == "ok" and t["valid"] == "invalid"]
    failed = [t for t in trials if t["status"] != "ok"]
    unvalidated = [t for t in trials if t["status"] == "ok" and t["valid"] == "not validated"]
    # what collect changed or could not keep to store a trial (store/ingest.py, trials.ingest_notes)
    stored_with_notes = [t for t in trials if t["ingest_notes"]]
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
        stored_with_notes=stored_with_notes,
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
        contention=m.contention,
        sim_model=sim_model,
        example_trial=m.example_trial or "",
        configured_hz=fmt_num(m.configured_hz, 3) if m.configured_hz else "unknown",
        conf=conf,
        n_resamples=f"{s.n_resamples:,}",
        alpha=s.alpha,
        mw_methods=(
            f"exact (every split of the pooled values enumerated, ties included) up to "
            f"{stats.EXACT_PERMUTATION_MAX_SPLITS:,} splits (8 vs 8), a permutation p-value from "
            f"{stats.PERMUTATION_RESAMPLES:,} random splits where a group has fewer than "
            f"{stats.PERMUTATION_BELOW_N} trials or the values tie beyond that, else the normal approximation"
        ),
        min_valid=s.min_valid_repetitions,
        intensity=s.intensity_kg_per_kwh,
        band_low=s.band[0],
        band_high=s.band[1],
        carbon_sources=carbon_sources_sentence(a.trials),
        preprocessors=preprocessor_rows(a.trials),
        co2e_total=dict(
            energy=tables.fmt_in(ct["energy_kwh"], e_unit),
            energy_unit=e_unit.label,
            co2e=tables.fmt_in(ct["co2e_kg"], c_unit),
            co2e_unit=c_unit.label,
            low=tables.fmt_in(ct["low"], c_unit),
            high=tables.fmt_in(ct["high"], c_unit),
            n_unknown=ct["n_unknown"],
            pue=f"{ct['pue']:g}" if ct.get("pue") is not None else None,
            facility_energy=tables.fmt_in(ct.get("facility_energy_kwh"), e_unit),
            facility_co2e=tables.fmt_in(ct.get("facility_co2e_kg"), c_unit),
            scopes=m.energy_basis,
        ),
        tradeoffs=tradeoffs,
        tradeoff_headlines=tradeoff_headlines,
        headline_note=headline_note,
        comparison_notes=comparison_notes,
        min_n_summary=stats.MIN_N_SUMMARY,
        min_n_text=stats.min_n_text(),
        min_n_median=stats.MIN_N_INTERVAL["median"],
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
            f"No headline: no comparison has a CI (each needs at least {stats.MIN_N_INTERVAL['pct_change_of_medians']} "
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
