"""The study's headline tables, ready for a paper: ``paper.md`` (Markdown) and
``paper.tex`` (LaTeX ``booktabs`` tables, a fragment to ``\\input``), written by
``gcbench report RUN_ID --paper``.

The tables follow how the two source studies present their results (ARCHITECTURE.md):

* **Execution regime study** (TinyLM workloads, H2D copies):
  GPU J/token per preprocessing path and regime (train/infer) with the percentage
  change against pure PyTorch (``path=torch``) and its CI, the pooled J/token and the
  throughput beside it; H2D bandwidth and GPU J/GB, pinned against pageable, with their
  ratios (pinned / pageable) and CIs, per copy size.
* **Multi-GPU scaling and CO2e study** (ResNet-50 / CIFAR-10 workloads): energy, time and
  CO2e per configuration (GPUs x precision x power cap) with the change of each against
  the baseline configuration (the uncapped FP32 one).

The references (pure PyTorch, pageable, uncapped FP32 on the fewest GPUs, or the plan's
``report.baseline``) are those of the report: :func:`gcbench.report.analysis.baseline_level`.

Every number is ``median [95 % CI]`` over valid trials (the order-statistic CI of the
median, :func:`gcbench.stats.median_interval`, or the BCa bootstrap CI of the percentage
change of the medians; a ratio of medians is
``1 + change / 100`` with the CI mapped the same way); a group with fewer than
``stats.MIN_N_SUMMARY`` valid trials lists its trials' values and has no CI, and a change
involving it is no result: its cell says why (``n too small (2 vs 2)``), as does that of
an inconclusive comparison or of one whose requested level was not in effect (``not
compared: ...``). The note under each table says what its cells hold. Figures derived
from simulated GPU energy are marked SIMULATED in the table's title and in their column
heads, exactly as in the report.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from gcbench import kinds, stats
from gcbench.report.analysis.core import Analysis
from gcbench.report.analysis.groups import Group, not_compared_reason
from gcbench.report.fmt import markdown_text
from gcbench.report.metrics import RATIOS, info
from gcbench.report.render.tables import (
    DASH,
    Cell,
    busy_cells,
    column_unit,
    fmt_pct,
    fmt_pct_ci,
    pooled_cell,
    summary_cell,
)
from gcbench.report.render.utilization import BUSY_HEADS, busy_note, has_busy

PURE_PYTORCH = "torch"
"""The ``path`` level of pure PyTorch (tokenization inside the process): the regime
study's reference unless the plan's ``report.baseline`` names another."""

STUDY_FACTORS = ("gpus", "precision", "power_cap_w")
"""The multi-GPU study's configuration columns, shown whether a plan varies them or sets
them (a cap of – is no cap)."""


@dataclass
class PaperTable:
    """One table of the paper output.

    Attributes:
        key: a short id (``regime-jtoken``, ``regime-h2d``, ``multigpu``), the LaTeX label's tail.
        title: the caption's first sentence (starts with "SIMULATED:" when any figure is).
        columns: column heads (unit in brackets); ``numeric[i]``: column i holds numbers;
            ``sim_columns[i]``: its figures come from simulated GPU energy (the writers
            mark such a head SIMULATED).
        rows: cells as text (Unicode; the LaTeX writer escapes them).
        notes: sentences under the table (how the numbers were obtained, what is missing).
        simulated: any figure comes from the simulated device.
    """

    key: str
    title: str
    columns: list[str]
    numeric: list[bool]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    simulated: bool = False
    sim_columns: list[bool] = field(default_factory=list)

    def is_sim(self, i: int) -> bool:
        """Column ``i`` holds figures derived from simulated GPU energy."""
        return bool(self.sim_columns) and self.sim_columns[i]


def _cell(c) -> str:
    return c.text()


def no_result(
    d: stats.Comparison | None, treat: Group | None = None, base: Group | None = None, factors: tuple[str, ...] = ()
) -> str | None:
    """Why a change is no result, as its cell says it, or None when it is one.

    ``not compared: memory=pinned not in effect`` when a requested level of ``factors``
    was not in effect on a side; ``inconclusive (...)`` when a side is inconclusive;
    ``n too small (5 vs 5)`` when a side has fewer values than the change's interval needs
    (``stats.MIN_N_INTERVAL``; no CI);
    ``no CI (...)`` when the CI is missing for another reason; an en dash when there is no
    change at all.
    """
    if treat is not None and base is not None and not_compared_reason(treat, base, factors):
        keys = [f"{k}={g.factors.get(k, '?')}" for k in factors for g in (treat, base) if k in g.not_in_effect]
        return "not compared: " + ", ".join(dict.fromkeys(keys)) + " not in effect"
    if d is None or d.pct_change is None:
        return DASH
    sides = [g for g in (treat, base) if g is not None and g.inconclusive]
    if sides:
        return "inconclusive (" + "; ".join(g.inconclusive_reason or g.variant for g in sides) + ")"
    if d.pct_ci_low is None:
        if min(d.n_treatment, d.n_baseline) < stats.MIN_N_INTERVAL["pct_change_of_medians"]:
            return f"n too small ({d.n_treatment} vs {d.n_baseline})"
        return f"no CI ({d.ci_reason})" if d.ci_reason else "no CI"
    return None


def _change(
    d: stats.Comparison | None, treat: Group | None = None, base: Group | None = None, factors: tuple[str, ...] = ()
) -> str:
    """A change with its CI (``-6.73 % [-8.10 %, -5.20 %]``), or why it is no result."""
    why = no_result(d, treat, base, factors)
    if why is not None or d is None or d.pct_change is None:
        return why or DASH
    return f"{fmt_pct(d.pct_change)} {fmt_pct_ci(d)}".strip()


def _ratio(
    d: stats.Comparison | None, treat: Group | None = None, base: Group | None = None, factors: tuple[str, ...] = ()
) -> str:
    """``1 + change / 100`` as ``2.82x [2.70x, 2.95x]``, or why it is no result."""
    why = no_result(d, treat, base, factors)
    if why is not None or d is None or d.pct_change is None:
        return why or DASH
    # no_result gave None, so the CI exists: this only narrows the types for mypy
    if d.pct_ci_low is None or d.pct_ci_high is None:
        return DASH
    r = 1 + d.pct_change / 100
    return f"{r:.3g}x [{1 + d.pct_ci_low / 100:.3g}x, {1 + d.pct_ci_high / 100:.3g}x]"


def cells_note(conf: int, cells: list[Cell], what: str = "median") -> str:
    """The sentence saying what a table's value cells hold, from the cells' kind
    (:attr:`Cell.trials`), not their text: ``median [95 % CI]``, each trial's value
    (``trials: a, b``), or both; medians shown without a CI (fewer valid trials than the
    interval needs) are said to be so.

    Args:
        conf: the confidence level, % (95).
        cells: the value cells of the table's summary columns (en-dash cells, no value,
            count for neither kind).
        what: the summary's name (``median``).
    """
    summaries = [c for c in cells if not c.trials and c.main != DASH]
    has_median = bool(summaries)
    has_trials = any(c.trials for c in cells)
    trials = (
        f'"trials: a, b": each valid trial\'s value, where a group has fewer than '
        f"{stats.MIN_N_SUMMARY} valid trials (no {what}, no CI)"
    )
    n_ci = stats.MIN_N_INTERVAL["median"]
    if not any(c.ci for c in summaries):
        median = f"{what} over valid trials (no CI: no group here has the {n_ci} valid trials a CI needs)"
    elif not all(c.ci for c in summaries):
        median = f"{what} [{conf} % CI] over valid trials ({what} alone, no CI, below {n_ci} valid trials)"
    else:
        median = f"{what} [{conf} % CI] over valid trials"
    if has_median and has_trials:
        return f"Cells: {median}, or {trials}."
    if has_trials:
        return f"Cells: {trials}; no group here has the {stats.MIN_N_SUMMARY} valid trials a {what} needs."
    if has_median:
        return f"Cells: {median}."
    return f"Cells: {what} [{conf} % CI] over valid trials."


def _size(v) -> str:
    try:
        n = float(v)
    except (TypeError, ValueError):
        return str(v)
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f and n % f == 0:
            return f"{n / f:g} {unit}"
    return f"{n:g} B"


def setting(g: Group, key: str):
    """A group's value of ``key``: its factor, else the one value its valid trials
    recorded (a plan setting the workload reports, e.g. ``path`` or ``precision``), else
    None (unknown, or not the same in every trial)."""
    if key in g.factors:
        return g.factors[key]
    used = g._used
    if used is None or key not in used.columns:
        return None
    vals = {v for v in used[key] if v is not None and v == v}
    if len(vals) != 1:
        return None
    v = vals.pop()
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _context(factors: dict, skip: tuple[str, ...]) -> str:
    parts = []
    for k in sorted(factors):
        if k in skip:
            continue
        v = factors[k]
        parts.append(_size(v) if k in ("size_bytes", "bytes") else f"{k}={v}")
    return ", ".join(parts)


def _no_ci_note(groups: list[Group], metric: str) -> list[str]:
    small = [
        f"{g.variant} ({g.summaries[metric].n})"
        for g in groups
        if metric in g.summaries and 0 < g.summaries[metric].n < stats.MIN_N_SUMMARY
    ]
    if not small:
        return []
    return [
        f"No median and no CI for groups with fewer than {stats.MIN_N_SUMMARY} valid trials "
        f"(their trials' values are listed, and changes involving them have no CI): "
        f"{', '.join(small)}."
    ]


def feeds(kind: str, study: str) -> bool:
    """Whether trials of ``kind`` feed the paper table of ``study`` (the kind's
    :attr:`gcbench.kinds.WorkloadKind.study`)."""
    k = kinds.find(kind)
    return k is not None and k.study == study


def regime_jtoken(a: Analysis) -> PaperTable | None:
    """GPU J/token per path and regime, change against pure PyTorch with its CI."""
    groups = [
        g
        for g in a.groups
        if feeds(g.kind, "regime-tokens")
        and "j_per_token" in g.summaries
        and g.summaries["j_per_token"].n + g.summaries["j_per_token"].n_excluded > 0
    ]
    if not groups:
        return None
    sim = any(g.simulated for g in groups)
    conf = round(a.settings.confidence * 100)
    uj = column_unit(groups, "j_per_token")
    ut = column_unit(groups, "tokens_per_s")
    e2e = any(g.known("e2e_j_per_token").size for g in groups if "e2e_j_per_token" in g.values)
    ue = column_unit(groups, "e2e_j_per_token") if e2e else None
    cols = [
        "regime",
        "path",
        "n",
        f"GPU J/token ({uj.label})",
        f"pooled GPU J/token ({uj.label})",
        "Δ GPU J/token vs pure PyTorch",
        f"throughput ({ut.label})",
    ]
    sim_cols = [False, False, False, sim, sim, sim, False]
    if ue is not None:
        cols.append(f"end-to-end J/token ({ue.label})")
        sim_cols.append(sim)
    busy = has_busy(groups)  # why a J/token differs: the GPU's busy and idle share beside it
    if busy:
        cols += list(BUSY_HEADS)
        sim_cols += [False, False]

    def regime(g: Group) -> str:
        rest = _context(g.factors, ("path", "mode"))
        mode = setting(g, "mode")
        head = str(mode) if mode is not None else g.workload
        return f"{head} ({rest})" if rest else head

    refs: dict[str, object] = {}
    for g in groups:  # the reference path of each workload: the report's baseline rule,
        # over every group of the workload, those without a valid trial too (a reference
        # whose trials were all invalid is missing, not replaced by another path)
        levels = [setting(h, "path") for h in a.groups if h.workload == g.workload]
        levels = list(dict.fromkeys(lv for lv in levels if lv is not None))
        refs[g.workload] = a.baseline_for(g.workload, "path", levels)
    ref_names = sorted({str(r) for r in refs.values() if r is not None})
    vs = (
        "pure PyTorch"
        if ref_names in ([], [PURE_PYTORCH])
        else f"path={ref_names[0]}"
        if len(ref_names) == 1
        else "the reference path"
    )
    cols[5] = f"Δ GPU J/token vs {vs}"

    def key(g: Group):
        return (regime(g), setting(g, "path") != refs[g.workload], str(setting(g, "path")))

    def same_but_path(h: Group, g: Group) -> bool:
        return (
            h.workload == g.workload
            and setting(h, "path") == refs[g.workload]
            and {k: v for k, v in h.factors.items() if k != "path"}
            == {k: v for k, v in g.factors.items() if k != "path"}
        )

    rows = []
    values: list[Cell] = []  # the summary cells, for the note on what they hold
    missing_ref = []
    changes = []
    for g in sorted(groups, key=key):
        path = setting(g, "path")
        ref = next((h for h in groups if same_but_path(h, g)), None)
        if path is None:
            change = DASH
        elif path == refs[g.workload]:
            change = "reference"
        elif ref is None:
            change = DASH
            missing_ref.append(g)
        else:
            change = _change(a.comparison(g, ref, "j_per_token"), g, ref, ("path",))
            changes.append(change)
        jt = summary_cell(g.summaries["j_per_token"], g.values["j_per_token"], uj)
        tp = summary_cell(g.summaries.get("tokens_per_s"), g.values.get("tokens_per_s"), ut)
        values += [jt, tp]
        row = [
            regime(g),
            DASH if path is None else str(path),
            str(g.summaries["j_per_token"].n),
            _cell(jt),
            _cell(pooled_cell(g.pooled.get("j_per_token"), uj)),
            change,
            _cell(tp),
        ]
        if ue is not None:
            row.append(_cell(summary_cell(g.summaries.get("e2e_j_per_token"), g.values.get("e2e_j_per_token"), ue)))
        if busy:
            row += busy_cells(g)
        rows.append(row)
    ref_text = ", ".join(f"path={r}" for r in ref_names) or f"path={PURE_PYTORCH}"
    notes = [
        f"{cells_note(conf, values)} GPU J/token = GPU "
        f"energy of the measured window / tokens; the median of the per-trial values over the "
        f"valid trials with its distribution-free order-statistic CI (none below "
        f"{stats.MIN_N_INTERVAL['median']} trials); pooled = {RATIOS['j_per_token'].formula} over the same "
        f"trials, with the ratio estimator's t CI (Cochran 1977; none below "
        f"{stats.MIN_N_INTERVAL['pooled_ratio']} trials). "
        + _delta_note(
            changes,
            f"the median J/token against {ref_text} ({vs}) in the same regime",
            "negative: less energy per token than the reference",
        )
    ]
    notes += _no_ci_note(groups, "j_per_token")
    busy_text = busy_note(groups)
    if busy_text:
        notes.append(busy_text)
    # a reference group whose trials were all invalid or failed is in a.groups, not in groups
    no_valid_ref = [g.variant for g in missing_ref if any(same_but_path(h, g) for h in a.groups)]
    absent_ref = [g.variant for g in missing_ref if g.variant not in no_valid_ref]
    if no_valid_ref:
        notes.append(
            f"No change for {', '.join(no_valid_ref)}: its {ref_text} group has no valid trial "
            f"(the report's trials table gives each trial's reason)."
        )
    if absent_ref:
        notes.append(f"No {ref_text} group to compare with: {', '.join(absent_ref)}.")
    if sim:
        notes.append(SIM_NOTE)
    title = "GPU energy per token by preprocessing path and regime"
    return PaperTable(
        "regime-jtoken",
        ("SIMULATED: " if sim else "") + title,
        cols,
        [False, False, True, True, True, True, True] + ([True] if e2e else []) + ([True, True] if busy else []),
        rows,
        notes,
        sim,
        sim_cols,
    )


SIM_NOTE = (
    "SIMULATED: GPU energy and every figure derived from it come from GC-Bench's "
    "simulated device, a deterministic power model, not from a sensor; times, tokens, "
    "bytes and rates are measured."
)


def _delta_note(changes: list[str], against: str, sign: str, ratio: bool = False) -> str:
    """The note on a table's change (or ratio) column, from what its cells hold."""
    results = [c for c in changes if re.match(r"[-+]?\d", c)]
    what = (
        "ratio = treatment median / reference median (1 + the percentage change of the "
        "medians), its CI the BCa CI of that change mapped the same way"
        if ratio
        else "Δ: percentage change of " + against + ", with the BCa CI of that change"
    )
    head = f"{what} ({sign})." if results else f"{'Ratios' if ratio else 'Δ'}: no change here is a result."
    whys = sorted({re.sub(r" \(.*", "", c) for c in changes if c not in results and c != DASH})
    if whys:
        head += (
            " Where a cell says why instead (" + "; ".join(whys) + "), the change is no result: "
            f"a side has fewer than {stats.MIN_N_INTERVAL['pct_change_of_medians']} valid trials (no CI), "
            "is inconclusive, or "
            "ran with a requested level not in effect."
        )
    return head


def regime_h2d(a: Analysis) -> PaperTable | None:
    """H2D bandwidth and GPU J/GB, pinned against pageable (the reference: the report's
    baseline of ``memory``), with their ratios."""
    groups = [g for g in a.groups if feeds(g.kind, "regime-h2d") and "memory" in g.factors]
    if not groups:
        return None
    pairs = []
    for p in sorted(groups, key=lambda g: (g.workload, str(sorted(g.factors.items())))):
        ref = a.baseline_for(p.workload, "memory")
        if p.factors["memory"] == ref:
            continue
        rest = {k: v for k, v in p.factors.items() if k != "memory"}
        q = next(
            (
                g
                for g in groups
                if g.workload == p.workload
                and g.factors.get("memory") == ref
                and {k: v for k, v in g.factors.items() if k != "memory"} == rest
            ),
            None,
        )
        if q is not None:
            pairs.append((p, q))
    if not pairs:
        return None
    tl = "/".join(dict.fromkeys(str(p.factors["memory"]) for p, _ in pairs))
    bl = "/".join(dict.fromkeys(str(q.factors["memory"]) for _, q in pairs))
    sim = any(g.simulated for g in groups) and "gpu_j_per_gb" in groups[0].summaries
    conf = round(a.settings.confidence * 100)
    ub = column_unit(groups, "gb_per_s")
    uj = column_unit(groups, "gpu_j_per_gb")
    cols = [
        "copy",
        f"n ({tl}, {bl})",
        f"bandwidth {tl} ({ub.label})",
        f"bandwidth {bl} ({ub.label})",
        f"bandwidth ratio {tl}/{bl}",
        f"GPU J/GB {tl} ({uj.label})",
        f"GPU J/GB {bl} ({uj.label})",
        f"J/GB ratio {tl}/{bl}",
    ]
    sim_cols = [False] * 5 + [sim] * 3
    busy = has_busy(groups)
    if busy:
        cols += [f"{h.removesuffix(' (%)')} {side} (%)" for h in BUSY_HEADS[:1] for side in (tl, bl)]
        sim_cols += [False, False]
    rows = []
    values: list[Cell] = []  # the summary cells shown, for the note on what they hold
    not_in_effect = []
    for p, q in pairs:
        size = setting(p, "size_bytes")
        ctx = _context(p.factors, ("memory",)) or (_size(size) if size is not None else p.workload)
        not_in_effect += [f"{g.variant}: {g.not_in_effect['memory']}" for g in (p, q) if "memory" in g.not_in_effect]

        def value(g: Group, metric: str, unit) -> str:
            # a figure of work other than its column says (pinned asked for, pageable copied)
            if "memory" in g.not_in_effect:
                return f"{g.factors['memory']} not in effect"
            cell = summary_cell(g.summaries.get(metric), g.values.get(metric), unit)
            values.append(cell)
            return _cell(cell)

        def busy_share(g: Group) -> str:
            # the busy share of that other work is withheld like its other figures
            if "memory" in g.not_in_effect:
                return f"{g.factors['memory']} not in effect"
            return busy_cells(g)[0]

        rows.append(
            [
                ctx,
                f"{p.summaries['gb_per_s'].n}, {q.summaries['gb_per_s'].n}",
                value(p, "gb_per_s", ub),
                value(q, "gb_per_s", ub),
                _ratio(a.comparison(p, q, "gb_per_s"), p, q, ("memory",)),
                value(p, "gpu_j_per_gb", uj),
                value(q, "gpu_j_per_gb", uj),
                (_ratio(a.comparison(p, q, "gpu_j_per_gb"), p, q, ("memory",)) if "gpu_j_per_gb" in p.values else DASH),
            ]
            + ([busy_share(p), busy_share(q)] if busy else [])
        )
    notes = [
        f"{cells_note(conf, values)} "
        + _delta_note(
            [r[4] for r in rows] + [r[7] for r in rows],
            "",
            (f"bandwidth ratio above 1: {tl} is faster; J/GB ratio below 1: {tl} costs less GPU energy per GB"),
            ratio=True,
        )
    ]
    if not_in_effect:
        notes.append(
            "Not compared, and no figure shown for a side whose work was not what its "
            "label says: " + "; ".join(dict.fromkeys(not_in_effect)) + "."
        )
    host = a.trials[a.trials["kind"].map(lambda k: feeds(k, "regime-h2d")) & a.trials["used"]]
    if "copy_target" in host.columns and (host["copy_target"] == "host").any():
        notes.append(
            "No CUDA device: the copies ran from host memory into host memory, so "
            "their bandwidth is host memcpy bandwidth, not a host-to-device copy."
        )
    notes += _no_ci_note(groups, "gb_per_s")
    busy_text = busy_note(groups)
    if busy_text:
        notes.append(busy_text)
    if sim:
        notes.append(SIM_NOTE)
    title = f"Host-to-device copies: {tl} against {bl} memory"
    return PaperTable(
        "regime-h2d",
        ("SIMULATED: " if sim else "") + title,
        cols,
        [False, True, True, True, True, True, True, True] + ([True, True] if busy else []),
        rows,
        notes,
        sim,
        sim_cols,
    )


def multigpu(a: Analysis) -> PaperTable | None:
    """Energy, time and CO2e per configuration with the change against the baseline."""
    ts = [t for t in a.tradeoffs if feeds(t.kind, "multigpu-co2e")]
    if not ts:
        return None
    rows = []
    sim = any(t.simulated for t in ts)
    conf = round(a.settings.confidence * 100)
    factors = list(
        dict.fromkeys([*STUDY_FACTORS, *sorted({k for t in ts for c in t.configs for k in c.group.factors})])
    )
    groups = [c.group for t in ts for c in t.configs]
    em = ts[0].energy_metric
    ue = column_unit(groups, em)
    ut = column_unit(groups, "duration_s")
    uc = column_unit(groups, "co2e_kg")
    lead = (["workload"] if len(ts) > 1 else []) + factors
    cols = lead + [
        "n",
        f"{info(em).label} ({ue.label})",
        "Δ energy",
        f"time ({ut.label})",
        "Δ time",
        f"CO2e ({uc.label})",
        "Δ CO2e",
    ]
    sim_cols = [False] * len(lead) + [False, sim, sim, False, False, sim, sim]
    baselines = []
    skipped: list[str] = []
    values: list[Cell] = []  # the summary cells, for the note on what they hold
    for t in ts:
        if t.energy_metric != em:
            continue
        if t.baseline is not None:
            baselines.append(t.baseline.label)
        for c in t.configs:
            g = c.group
            base = t.baseline
            d_co2 = None if base is None or c.is_baseline or c.not_compared else a.comparison(g, base.group, "co2e_kg")
            if c.not_compared:
                skipped.append(f"{c.label} ({c.not_compared})")

            def delta(d, c=c, g=g, base=base):
                if c.is_baseline:
                    return "baseline"
                if c.not_compared:
                    return "not compared: see note"
                return _change(d, g, base.group if base is not None else None)

            row = ([t.workload] if len(ts) > 1 else []) + [
                DASH
                if setting(g, k) is None
                else str(setting(g, k)) + (" (not in effect)" if k in g.not_in_effect else "")
                for k in factors
            ]
            cells = [
                summary_cell(c.energy, g.values.get(em), ue),
                summary_cell(c.time, g.values.get("duration_s"), ut),
                summary_cell(g.summaries.get("co2e_kg"), g.values.get("co2e_kg"), uc),
            ]
            values += cells
            row += [
                str(c.energy.n),
                _cell(cells[0]),
                delta(c.d_energy),
                _cell(cells[1]),
                delta(c.d_time),
                _cell(cells[2]),
                delta(d_co2),
            ]
            rows.append(row)
    s = a.settings
    n_lead = len(lead) + 1
    deltas = [
        r[i]
        for r in rows
        for i in (n_lead + 1, n_lead + 3, n_lead + 5)
        if r[i] not in ("baseline", "not compared: see note")
    ]
    notes = [
        f"{cells_note(conf, values)} "
        + _delta_note(
            deltas,
            f"the median against the baseline configuration "
            f"({'; '.join(baselines) or 'not run'}: the uncapped FP32 one)",
            "negative: less than the baseline",
        )
        + f" Energy: {info(em).label}. CO2e = energy x {s.intensity_kg_per_kwh:g} kgCO2e/kWh "
        f"(sensitivity {s.band[0]:g}-{s.band[1]:g} kgCO2e/kWh in the report)."
    ]
    if skipped:
        notes.append(
            "Not compared with the baseline, the work was not what the labels say "
            '(factor values marked "not in effect"): ' + "; ".join(skipped) + "."
        )
    notes += _no_ci_note(groups, em)
    if sim:
        notes.append(SIM_NOTE)
    title = "Energy, time and CO2e per configuration against the uncapped FP32 baseline"
    numeric = [False] * ((1 if len(ts) > 1 else 0) + len(factors)) + [True] * 7
    return PaperTable("multigpu", ("SIMULATED: " if sim else "") + title, cols, numeric, rows, notes, sim, sim_cols)


def paper_tables(a: Analysis) -> list[PaperTable]:
    """The tables that apply to this run (none of a study whose workloads it lacks)."""
    return [t for t in (regime_jtoken(a), regime_h2d(a), multigpu(a)) if t is not None]


# --------------------------------------------------------------------------- Markdown


def _md_escape(text: str) -> str:
    # the same rule as report.md (gcbench.report.fmt.markdown_text): a plan value with ``|``
    # stays in its cell, one with ``<`` is not raw HTML
    return str(markdown_text(text))


def to_markdown(tables: list[PaperTable], a: Analysis) -> str:
    """All tables as Markdown, each with its title and notes."""
    d = a.data
    out = [
        f"# {d.plan_name}: headline tables{' (SIMULATED)' if any(t.simulated for t in tables) else ''}",
        "",
        f"Run `{d.run_id}`. Written by GC-Bench (`gcbench report RUN_ID --paper`); the LaTeX version is paper.tex.",
        "",
    ]
    if not tables:
        out.append("This run has none of the two studies' workloads (TinyLM, H2D, ResNet-50): no headline table.")
    for i, t in enumerate(tables, 1):
        out += [f"## Table {i}. {t.title}", ""]
        out.append(
            "| "
            + " | ".join(("**SIMULATED** " if t.is_sim(i) else "") + _md_escape(c) for i, c in enumerate(t.columns))
            + " |"
        )
        out.append("|" + "|".join("---:" if n else "---" for n in t.numeric) + "|")
        for r in t.rows:
            out.append("| " + " | ".join(_md_escape(c) for c in r) + " |")
        out.append("")
        for n in t.notes:
            out += [n, ""]
    return "\n".join(out)


# --------------------------------------------------------------------------- LaTeX

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
_LATEX_UNICODE = {
    "µ": r"$\mu$",
    "Δ": r"$\Delta$",
    "Σ": r"$\Sigma$",
    "δ": r"$\delta$",
    "×": r"$\times$",
    "–": "--",
    "—": "---",
    "−": "$-$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "±": r"$\pm$",
}


def latex_escape(text: str) -> str:
    """Text for a LaTeX document: special characters escaped, the Unicode signs GC-Bench
    prints (µ Δ Σ δ × – −) as LaTeX, a minus before a digit as a math minus, and a thin
    space before %.

    Any other character outside printable ASCII (from a plan's names) is written as its
    ASCII decomposition (é as e) or, without one, as ``[U+XXXX]``: pdfLaTeX without
    extra packages stops on characters it has no glyph for.
    """
    out = []
    for ch in text:
        if ch in _LATEX_SPECIAL:
            out.append(_LATEX_SPECIAL[ch])
        elif ch in _LATEX_UNICODE:
            out.append(_LATEX_UNICODE[ch])
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            plain = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()
            out.append("".join(_LATEX_SPECIAL.get(c, c) for c in plain if 32 <= ord(c) < 127) or f"[U+{ord(ch):04X}]")
    s = "".join(out)
    # a hyphen after a letter, a digit or another hyphen (the en dash of ``3–5`` is ``--``)
    # is not a minus sign
    s = re.sub(r"(?<![\w$-])-(?=\d)", "$-$", s)
    s = re.sub(r"(?<![\w$])\+(?=\d)", "$+$", s)
    return s.replace(r" \%", r"\,\%")


def _stack(lines: list[str], align: str) -> str:
    """Lines stacked in one cell (a nested tabular: plain LaTeX, no package)."""
    if len(lines) == 1:
        return lines[0]
    return (
        rf"\begin{{tabular}}[{'b' if align == 'c' else 't'}]{{@{{}}{align}@{{}}}}"
        + r"\\".join(lines)
        + r"\end{tabular}"
    )


def _wrap(text: str, width: int = 16) -> list[str]:
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _latex_head(text: str) -> str:
    """A column head on short lines, escaped."""
    return _stack([latex_escape(x) for x in _wrap(text)], "c")


def _latex_cell(text: str, numeric: bool) -> str:
    """A cell, escaped; in a numeric cell the bracketed CI goes on a second, smaller line."""
    m = re.fullmatch(r"(.*?) (\[[^\]]*\])", text) if numeric else None
    if m is None:
        return latex_escape(text)
    return _stack([latex_escape(m.group(1)), r"{\scriptsize " + latex_escape(m.group(2)) + "}"], "r")


BOX = r"\gcbenchtablebox"


def to_latex(tables: list[PaperTable], a: Analysis) -> str:
    """All tables as LaTeX ``table`` environments with ``booktabs`` rules (a fragment to
    ``\\input``: the document needs ``\\usepackage{booktabs,graphicx}``). Each CI sits
    under its value; a table wider than the line is scaled down to it (never up).
    Columns of simulated figures get a bold SIMULATED above their head."""
    d = a.data
    out = [
        f"% GC-Bench headline tables: plan {d.plan_name}, run {d.run_id}.",
        "% Generated by `gcbench report RUN_ID --paper`. Needs \\usepackage{booktabs,graphicx}.",
        "% Cells: median [95 % CI] over valid trials (the median's CI: order statistics, distribution-free;"
        " a change's CI: BCa bootstrap).",
        r"\makeatletter\@ifundefined{gcbenchtablebox}{\newsavebox{" + BOX + r"}}{}\makeatother",
        "",
    ]
    if not tables:
        out.append("% This run has none of the two studies' workloads: no table.")
    for t in tables:
        spec = "".join("r" if n else "l" for n in t.numeric)
        title = latex_escape(t.title)
        if t.simulated:
            title = title.replace("SIMULATED", r"\textbf{SIMULATED}", 1)
        out += [
            r"\begin{table}[htbp]",
            r"\centering",
            rf"\caption{{{title}.}}",
            rf"\label{{tab:gcbench-{t.key}}}",
            r"\footnotesize\setlength{\tabcolsep}{4pt}",
            rf"\sbox{{{BOX}}}{{%",
            rf"\begin{{tabular}}{{{spec}}}",
            r"\toprule",
        ]
        if any(t.is_sim(i) for i in range(len(t.columns))):
            out.append(" & ".join(r"\textbf{SIMULATED}" if t.is_sim(i) else "" for i in range(len(t.columns))) + r" \\")
        out += [" & ".join(_latex_head(c) for c in t.columns) + r" \\", r"\midrule"]
        for r in t.rows:
            out.append(" & ".join(_latex_cell(c, n) for c, n in zip(r, t.numeric, strict=True)) + r" \\")
        out += [
            r"\bottomrule",
            r"\end{tabular}}%",
            rf"\ifdim\wd{BOX}>\linewidth\resizebox{{\linewidth}}{{!}}{{\usebox{{{BOX}}}}}"
            rf"\else\usebox{{{BOX}}}\fi",
        ]
        if t.notes:
            out.append(
                r"\par\smallskip\parbox{\linewidth}{\footnotesize "
                + " ".join(latex_escape(n) for n in t.notes).replace("SIMULATED:", r"\textbf{SIMULATED}:")
                + "}"
            )
        out += [r"\end{table}", ""]
    return "\n".join(out)


def write_paper(a: Analysis, out_dir: Path) -> tuple[Path, Path]:
    """Write ``paper.md`` and ``paper.tex`` into ``out_dir``; return their paths."""
    tables = paper_tables(a)
    md = Path(out_dir) / "paper.md"
    tex = Path(out_dir) / "paper.tex"
    md.write_text(to_markdown(tables, a), encoding="utf-8")
    tex.write_text(to_latex(tables, a), encoding="utf-8")
    return md, tex
