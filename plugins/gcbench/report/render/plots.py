"""The report's figures, as PNG bytes (matplotlib's Agg renderer, no pyplot state).

Each figure is rendered once; the HTML embeds the bytes as base64 and the Markdown
links the same bytes written beside it. A figure containing simulated data carries
"SIMULATED" in its title and a red banner, so it cannot be mistaken for a
measurement even when copied out of the report. Only figures derived from the simulated
device's energy or power are so labelled: durations, throughput, bandwidth and accuracy
are measured even on the simulated device (``metrics.is_simulated_metric``).

How they draw, so that a reader sees the data and not only a summary:

* every valid trial is a dot; over it the group's median and its order-statistic CI (and, for
  a ratio, the pooled estimate with its CI). A group with fewer than
  ``stats.MIN_N_SUMMARY`` valid trials shows only its trials' dots: no median, no CI; a CI is
  drawn only where the group's n allows one (``stats.MIN_N_INTERVAL``). No bars.
* legends sit outside the axes, so they never cover data; shaded windows lie under the
  traces (lower z-order, light fill), so they never hide one.
* captions are written from what was drawn (:class:`Drawn`): an element is described
  only if it is in the figure.
* numbers are in units scaled for reading (:mod:`gcbench.report.scale`), named in the
  axis label.
"""

from __future__ import annotations

import functools
import io
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gcbench import stats
from gcbench.report.analysis import measurement as _analysis
from gcbench.report.analysis.core import Analysis
from gcbench.report.analysis.groups import Group
from gcbench.report.analysis.tradeoff import Tradeoff
from gcbench.report.metrics import (
    ENERGY_METRIC_ORDER,
    EXTRA_METRICS,
    RATIOS,
    in_work_unit,
    info,
    is_simulated_metric,
    kind_metrics,
)
from gcbench.report.render.tables import identical_columns
from gcbench.report.scale import Unit, choose_unit

DPI = 90
SIM_TEXT = "SIMULATED DATA - not a measurement"
TRIAL_COLOR = "#2e86de"
INCONCLUSIVE_COLOR = "#999999"
SUMMARY_COLOR = "#111111"
POOLED_COLOR = "#d35400"
INVALID_COLOR = "#c0392b"
Z_SHADE, Z_TRACE, Z_SUMMARY = 0, 3, 4
"""Drawing order: shaded windows under traces and dots, summaries on top."""


@dataclass
class Plot:
    """One rendered figure.

    Attributes:
        name: file stem (``power_trial``, ``energy_h2d`` ...), unique in a report.
        kind: ``power``, ``energy``, ``metric``, ``pareto``, ``co2e`` or ``trend``.
        title: heading shown above it.
        caption: what it shows and how its numbers were obtained, written from the
            elements actually drawn.
        png: the PNG bytes.
        simulated: it shows simulated data.
        figure: the matplotlib Figure the PNG was rendered from (for inspection).
    """

    name: str
    kind: str
    title: str
    caption: str
    png: bytes
    simulated: bool
    figure: object = field(default=None, repr=False)


class Drawn:
    """What a figure drew, in order, for its caption and legend.

    ``add(key, sentence, handle=None, label=None)`` records an element once: its
    sentence goes into the caption, its handle (an artist) and label into the legend.
    Only what was recorded is described, so a caption cannot speak of an element the
    figure lacks.
    """

    def __init__(self) -> None:
        self.sentences: dict[str, str] = {}
        self.handles: list = []
        self.labels: list[str] = []

    def add(self, key: str, sentence: str, handle=None, label: str | None = None) -> None:
        if key in self.sentences:
            return
        self.sentences[key] = sentence
        if handle is not None and label:
            self.handles.append(handle)
            self.labels.append(label)

    def __contains__(self, key: str) -> bool:
        return key in self.sentences

    def caption(self, *lead: str) -> str:
        return " ".join([*(s for s in lead if s), *(s for s in self.sentences.values() if s)])


def literal_text(fn):
    """Run a plotting function with matplotlib's mathtext off (``text.parse_math``): every
    title, tick label and legend entry, plan text included, is drawn as typed. A ``$`` in a
    factor value (``$x^$``) raised ParseSyntaxException and lost the whole report;
    ``cost $5 or $6`` was drawn as math (matplotlib/matplotlib#4938, case C21)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False}):
            return fn(*args, **kwargs)

    return wrapper


def _figure(w: float, h: float):
    from matplotlib.figure import Figure  # lazy: keeps the plugin import cheap

    return Figure(figsize=(w, h), dpi=DPI, layout="constrained")


def _png(fig, simulated: bool, text: str = SIM_TEXT) -> bytes:
    if simulated:
        fig.suptitle(
            text, color="white", backgroundcolor="#c0392b", fontweight="bold", fontsize=11 if len(text) <= 40 else 9
        )
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _outside_legend(fig, drawn: Drawn, where: str = "lower center", ncol: int | None = None):
    """A figure legend outside every axes (constrained layout makes room for it)."""
    if not drawn.handles:
        return None
    ncol = ncol or min(len(drawn.handles), 3)
    return fig.legend(drawn.handles, drawn.labels, loc=f"outside {where}", ncol=ncol, fontsize=7, frameon=False)


def _slug(text: str) -> str:
    """A workload name as part of a plot's file name, one per name: ``tinylm-infer`` ->
    ``tinylm_infer`` (letters, digits and ``-`` only: ``-`` becomes ``_``, one-to-one); any
    other name keeps its safe characters and gets ``~`` and 8 hex digits of its SHA-256
    (``a_b`` -> ``a_b~...``). Before, ``a-b`` and ``a_b`` (both valid workload names) made
    one ``metric_a_b.png``: the second plot replaced the first (round-3 kind C19)."""
    if re.fullmatch(r"[a-z0-9-]+", text):
        return text.replace("-", "_")
    import hashlib

    safe = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower() or "x"
    return f"{safe}~{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


NOT_IN_EFFECT_MARK = " (not in effect)"


def short_labels(groups: list[Group]) -> list[str]:
    """Per group, the factor values that vary inside the list (else the variant); a value
    whose requested level did not run as asked is marked ``(not in effect)``."""
    keys = sorted({k for g in groups for k in g.factors})
    varying = [k for k in keys if len({str(g.factors.get(k)) for g in groups}) > 1]
    if not varying:
        return [g.variant + (NOT_IN_EFFECT_MARK if g.not_in_effect else "") for g in groups]
    return [
        ", ".join(f"{k}={g.factors.get(k)}" + (NOT_IN_EFFECT_MARK if k in g.not_in_effect else "") for k in varying)
        for g in groups
    ]


def inconclusive_sentence(a: Analysis, groups: list[Group]) -> str:
    """What grey dots mean, from the reasons of the inconclusive groups drawn."""
    need = a.settings.min_valid_repetitions
    few = any(g.n_valid < need for g in groups if g.inconclusive)
    apart = any(g.n_valid >= need for g in groups if g.inconclusive)
    why = [
        w
        for w, on in (
            (f"fewer than {need} valid repetitions", few),
            ("two valid repetitions too far apart in throughput", apart),
        )
        if on
    ]
    return f"Grey dots: inconclusive groups ({' or '.join(why)}; each group's reason is in its table), not tested."


def _mark_not_in_effect(drawn: Drawn, groups: list[Group]) -> None:
    if any(g.not_in_effect for g in groups):
        drawn.add(
            "not-in-effect",
            'A label marked "(not in effect)": that requested level did not run '
            "as asked (the reason is under the groups table); such groups are not compared "
            "along it.",
        )


def _invalid_values(a: Analysis, g: Group, metric: str) -> np.ndarray:
    df = a.trials
    sel = (df["workload"] == g.workload) & (df["variant"] == g.variant)
    sel &= ~df["used"] & (df["status"] == "ok")
    v = df.loc[sel, metric].to_numpy(dtype=float) if metric in df else np.array([])
    return v[np.isfinite(v)]


def _log_if_wide(ax, values: np.ndarray, axis: str) -> bool:
    """Log scale when positive values span more than two decades (e.g. an H2D size sweep)."""
    v = values[np.isfinite(values)]
    if v.size and (v > 0).all() and v.max() / v.min() > 100:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
        return True
    return False


def _title(text: str, simulated: bool) -> str:
    return f"SIMULATED: {text}" if simulated else text


def _axis_label(label: str, unit: Unit) -> str:
    return f"{label} ({unit.label})" if unit.label else label


# --------------------------------------------------------------------------- power trace


def representative_trial(a: Analysis) -> pd.Series | None:
    """The example trial of the power plot (the one the sampling-rate table also reads,
    see :func:`gcbench.report.analysis.representative_trial`)."""
    return _analysis.representative_trial(a.trials, a.groups)


TRACE_COLORS = {"instant": "#1b2631", "average": "#e67e22"}
WINDOW_COLORS = {"main": "#5dade2", "other": "#bdc3c7"}


@literal_text
def plot_power(a: Analysis) -> Plot | None:
    """Power over time of one trial, its windows shaded under the traces."""
    row = representative_trial(a)
    if row is None:
        return None
    tid = str(row["trial_id"])
    samples = a.data.samples(tid)
    windows = a.data.windows(tid) or {}
    if samples is None or len(samples) == 0:
        return None
    sim = bool(row["simulated"]) or ("source" in samples and (samples["source"] == "simulated").any())
    fig = _figure(8.5, 3.6)
    ax = fig.add_subplot()
    drawn = Drawn()
    for device, s in samples.groupby("device", sort=True):
        s = s.sort_values("t_s")
        if "power_instant_w" in s and s["power_instant_w"].notna().any():
            (h,) = ax.plot(s["t_s"], s["power_instant_w"], lw=0.9, color=TRACE_COLORS["instant"], zorder=Z_TRACE + 1)
            drawn.add(f"{device}-instant", f"Dark line: instant power of {device}.", h, f"{device} instant power")
        if "power_w" in s and s["power_w"].notna().any():
            (h,) = ax.plot(s["t_s"], s["power_w"], lw=1.6, color=TRACE_COLORS["average"], zorder=Z_TRACE)
            drawn.add(
                f"{device}-average", f"Orange line: 1-s average power of {device}.", h, f"{device} 1-s average power"
            )
    for name, w in sorted(windows.items(), key=lambda kv: kv[0] != "main"):
        if not isinstance(w, dict) or w.get("start_s") is None or w.get("end_s") is None:
            continue
        main = name == "main"
        h = ax.axvspan(
            w["start_s"],
            w["end_s"],
            color=WINDOW_COLORS["main" if main else "other"],
            alpha=0.16 if main else 0.22,
            lw=0,
            zorder=Z_SHADE,
        )
        if main:
            for edge in (w["start_s"], w["end_s"]):
                ax.axvline(edge, color="#1f618d", lw=1, ls="--", zorder=Z_TRACE - 1)
            drawn.add(
                "window-main", "Light blue shading between dashed lines: the measured window.", h, "measured window"
            )
        else:
            drawn.add(f"window-{name}", f"Grey shading: the {name} phase.", h, f"{name} phase")
    ax.set_xlabel("time since trial start (s)")
    ax.set_ylabel("power (W)")
    ax.set_title(_title(f"Power of trial {tid} ({row['variant']}, repetition {row['repetition']})", sim), fontsize=10)
    ax.grid(alpha=0.3, zorder=Z_SHADE)
    _outside_legend(fig, drawn, "right upper", ncol=1)
    method = row.get("gpu_method") or "unknown method"
    caption = drawn.caption(
        f"Power samples of trial {tid}, chosen as the valid trial closest to its group's median.",
        f"Its energy was obtained by: {method}.",
    )
    png = _png(fig, sim)
    return Plot("power_trial", "power", "Power over time of one trial", caption, png, sim, fig)


# --------------------------------------------------------------------------- per workload


def energy_metric(a: Analysis, groups: list[Group]) -> str | None:
    """The energy column shown per group: the first of ENERGY_METRIC_ORDER known."""
    df = a.trials[a.trials["workload"] == groups[0].workload]
    for m in ENERGY_METRIC_ORDER:
        if df[m].notna().any():
            return m
    return None


def panel_metrics(a: Analysis, kind: str, groups: list[Group]) -> list[str]:
    """The metrics of a workload's main figure: its primary metric and the next of its
    own metrics (not an extra such as accuracy, not one equal to an earlier one in
    every trial), else time; at most two."""
    df = a.trials[a.trials["workload"] == groups[0].workload]
    cands = [m for m in kind_metrics(kind) if m not in EXTRA_METRICS] + ["duration_s"]
    out: list[str] = []
    for m in dict.fromkeys(cands):
        if m not in groups[0].summaries or not df[m].notna().any():
            continue
        if any(identical_columns(df[m], df[k]) for k in out):
            continue
        out.append(m)
    return out[:2]


def _dots_panel(ax, a: Analysis, groups: list[Group], metric: str, drawn: Drawn, labels: list[str]) -> Unit:
    """Every valid trial of each group as a dot; the median and its CI, and for a ratio
    the pooled estimate and its CI, beside the dots; invalid trials as red crosses."""
    from matplotlib.lines import Line2D

    mi = info(metric, groups[0].work_unit)
    rng = np.random.default_rng(stats.stable_seed(groups[0].workload, metric))
    vals = [g.known(metric) for g in groups]
    everything = np.concatenate([v for v in vals if v.size] or [np.array([np.nan])])
    unit = choose_unit(mi.unit, everything.tolist())
    f = unit.factor
    conf = round(a.settings.confidence * 100)
    no_ci: list[str] = []
    for i, (g, v, lab) in enumerate(zip(groups, vals, labels, strict=True)):
        color = INCONCLUSIVE_COLOR if g.inconclusive else TRIAL_COLOR
        if v.size:
            ax.plot(
                i - 0.12 + rng.uniform(-0.08, 0.08, v.size),
                v / f,
                "o",
                ms=4.5,
                alpha=0.8,
                color=color,
                mec="white",
                mew=0.4,
                zorder=Z_TRACE,
            )
            drawn.add(
                "dots", "Dots: each valid trial.", Line2D([], [], marker="o", ls="", color=TRIAL_COLOR), "valid trial"
            )
        if g.inconclusive:
            drawn.add(
                "inconclusive",
                inconclusive_sentence(a, groups),
                Line2D([], [], marker="o", ls="", color=INCONCLUSIVE_COLOR),
                "inconclusive (reason in the table)",
            )
        s = g.summaries.get(metric)
        if s is not None and s.median is not None and s.n >= stats.MIN_N_SUMMARY:
            if s.ci_low is not None and s.ci_high is not None:
                ax.errorbar(
                    [i + 0.12],
                    [s.median / f],
                    yerr=[[max(0.0, (s.median - s.ci_low) / f)], [max(0.0, (s.ci_high - s.median) / f)]],
                    fmt="_",
                    ms=14,
                    mew=2.2,
                    color=SUMMARY_COLOR,
                    ecolor=SUMMARY_COLOR,
                    elinewidth=1.4,
                    capsize=3,
                    zorder=Z_SUMMARY,
                )
                drawn.add(
                    "median-ci",
                    f"Black bar with whiskers: the median and its {conf} % distribution-free CI (order statistics).",
                    Line2D([], [], marker="_", ms=12, mew=2, color=SUMMARY_COLOR),
                    f"median, {conf} % CI",
                )
            else:
                ax.plot([i + 0.12], [s.median / f], "_", ms=14, mew=2.2, color=SUMMARY_COLOR, zorder=Z_SUMMARY)
                drawn.add(
                    "median",
                    "Black bar: the median (no CI: " + (s.ci_reason or "") + ").",
                    Line2D([], [], marker="_", ms=12, mew=2, color=SUMMARY_COLOR),
                    "median",
                )
        elif v.size:
            no_ci.append(f"{lab} ({v.size})")
        p = g.pooled.get(metric)
        if p is not None and p.pooled is not None and p.n >= stats.MIN_N_SUMMARY:
            yerr = None
            if p.ci_low is not None and p.ci_high is not None:
                yerr = [[max(0.0, (p.pooled - p.ci_low) / f)], [max(0.0, (p.ci_high - p.pooled) / f)]]
            ax.errorbar(
                [i + 0.3],
                [p.pooled / f],
                yerr=yerr,
                fmt="D",
                ms=4.5,
                color=POOLED_COLOR,
                ecolor=POOLED_COLOR,
                elinewidth=1.2,
                capsize=2,
                zorder=Z_SUMMARY,
            )
            drawn.add(
                "pooled",
                f"Orange diamond: the pooled estimate "
                f"({in_work_unit(RATIOS[metric].formula, groups[0].work_unit)} over the same trials) with its {conf} % CI "
                f"(trials resampled).",
                Line2D([], [], marker="D", ls="", ms=4, color=POOLED_COLOR),
                "pooled (Σ/Σ), CI",
            )
        bad = _invalid_values(a, g, metric)
        if bad.size:
            ax.plot(np.full(bad.size, i - 0.12), bad / f, "x", ms=6, mew=1.5, color=INVALID_COLOR, zorder=Z_TRACE)
            drawn.add(
                "invalid",
                "Red crosses: invalid trials, excluded from statistics.",
                Line2D([], [], marker="x", ls="", color=INVALID_COLOR),
                "invalid trial",
            )
    if no_ci:
        text = (
            f"No median or CI where a group has fewer than {stats.MIN_N_SUMMARY} valid trials "
            f"(only its trials are drawn): {'; '.join(no_ci)}."
        )
        drawn.add(text, text)  # keyed by its text: panels with the same groups say it once
    if _log_if_wide(ax, everything / f, "y"):
        drawn.add(f"log-{metric}", f"The {mi.label} axis is logarithmic.")
    ax.set_xticks(np.arange(len(groups)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylabel(_axis_label(mi.label, unit), fontsize=9)
    ax.grid(axis="y", alpha=0.3, zorder=Z_SHADE)
    return unit


@literal_text
def plot_groups(
    a: Analysis, workload: str, groups: list[Group], metrics: list[str], name: str, kind: str, title: str
) -> Plot | None:
    """One panel per metric: every trial as a dot, the median and CI (and pooled) beside."""
    if not metrics:
        return None
    any_sim = any(g.simulated for g in groups)
    sim_metrics = [m for m in metrics if any_sim and is_simulated_metric(m)]
    sim = bool(sim_metrics)
    labels = short_labels(groups)
    fig = _figure(max(5.0, 0.8 * len(groups) + 2.8), 1.6 + 2.9 * len(metrics))
    axes = fig.subplots(len(metrics), 1, squeeze=False)[:, 0]
    drawn = Drawn()
    wu = groups[0].work_unit
    for ax, m in zip(axes, metrics, strict=True):
        _dots_panel(ax, a, groups, m, drawn, labels)
        ax.set_title(_title(f"{workload}: {info(m, wu).label}", m in sim_metrics), fontsize=10)
    _mark_not_in_effect(drawn, groups)
    _outside_legend(fig, drawn, "lower center", ncol=3)
    names = " and ".join(info(m, wu).label for m in metrics)
    measured = [info(m, wu).label for m in metrics if m not in sim_metrics]
    banner = SIM_TEXT
    tail = ""
    if sim and measured:
        sim_names = " and ".join(info(m, wu).label for m in sim_metrics)
        banner = f"SIMULATED: {sim_names}; measured: {' and '.join(measured)}"
        tail = f"{sim_names} comes from the simulated device's power model; {' and '.join(measured)} is measured."
    n_trials = sum(g.summaries[metrics[0]].n for g in groups)
    lead = (
        f"{names[:1].upper()}{names[1:]} of the {len(groups)} "
        f"group{'s' if len(groups) != 1 else ''} of {workload} "
        f"({n_trials} valid trial{'s' if n_trials != 1 else ''})."
    )
    caption = drawn.caption(lead)
    if tail:
        caption += " " + tail
    png = _png(fig, sim, banner)
    return Plot(name, kind, title.format(names=names), caption, png, sim, fig)


# --------------------------------------------------------------------------- trade-off


@literal_text
def plot_tradeoff(a: Analysis, t: Tradeoff) -> Plot | None:
    """Energy against time of every configuration: every trial as a dot, each group's
    medians with their CIs as a cross, the baseline as a star, the Pareto front as a
    thick line; legend outside."""
    from matplotlib.lines import Line2D

    if not t.active:
        return None
    em, tm = info(t.energy_metric), info(t.time_metric)
    xs_all = np.concatenate([c.group.known(t.time_metric) for c in t.configs] or [np.array([])])
    ys_all = np.concatenate([c.group.known(t.energy_metric) for c in t.configs] or [np.array([])])
    if not xs_all.size or not ys_all.size:
        return None
    ux = choose_unit(tm.unit, xs_all.tolist())
    uy = choose_unit(em.unit, ys_all.tolist())
    fig = _figure(8.6, 5.0 + 0.2 * len(t.configs))
    ax = fig.add_subplot()
    drawn = Drawn()
    labels = short_labels([c.group for c in t.configs])
    import matplotlib

    cmap = matplotlib.colormaps["tab20" if len(t.configs) > 10 else "tab10"]
    conf = round(a.settings.confidence * 100)
    no_ci = []
    for i, (c, short) in enumerate(zip(t.configs, labels, strict=True)):
        color = cmap(i % cmap.N)
        x = c.group.values.get(t.time_metric, np.array([]))
        y = c.group.values.get(t.energy_metric, np.array([]))
        both = np.isfinite(x) & np.isfinite(y)
        ax.plot(x[both] / ux.factor, y[both] / uy.factor, "o", ms=3.5, alpha=0.55, color=color, zorder=Z_TRACE)
        label = short + (" (baseline)" if c.is_baseline else "")
        handle = Line2D([], [], marker="*" if c.is_baseline else "o", ls="", color=color, ms=9 if c.is_baseline else 6)
        drawn.add(f"config-{i}", "", handle, label)
        if both.any():
            drawn.add("dots", "Small dots: each valid trial.")
        if c.energy.median is None or c.time.median is None:
            continue
        mx, my = c.time.median / ux.factor, c.energy.median / uy.factor
        if c.energy.n >= stats.MIN_N_SUMMARY and c.time.n >= stats.MIN_N_SUMMARY:
            xerr = yerr = None
            if c.time.ci_low is not None and c.time.ci_high is not None:
                xerr = [[max(0.0, mx - c.time.ci_low / ux.factor)], [max(0.0, c.time.ci_high / ux.factor - mx)]]
            if c.energy.ci_low is not None and c.energy.ci_high is not None:
                yerr = [[max(0.0, my - c.energy.ci_low / uy.factor)], [max(0.0, c.energy.ci_high / uy.factor - my)]]
            ax.errorbar(
                [mx],
                [my],
                xerr=xerr,
                yerr=yerr,
                fmt="*" if c.is_baseline else "s",
                ms=11 if c.is_baseline else 6,
                color=color,
                mec=SUMMARY_COLOR,
                ecolor=color,
                elinewidth=1.3,
                capsize=2,
                zorder=Z_SUMMARY,
            )
            drawn.add(
                "medians",
                f"Large markers with whiskers: each configuration's medians "
                f"of {tm.label} and {em.label} with their {conf} % CIs (order statistics).",
            )
        else:
            ax.plot(
                [mx],
                [my],
                "*" if c.is_baseline else "s",
                ms=11 if c.is_baseline else 6,
                mfc="none",
                color=color,
                zorder=Z_SUMMARY,
            )
            no_ci.append(c.label)
        if c.is_baseline:
            drawn.add("baseline", f"Star: the baseline configuration ({c.label}).")
    if no_ci:
        drawn.add(
            "no-ci",
            f"Hollow markers: the mean of the trials of configurations with "
            f"fewer than {stats.MIN_N_SUMMARY} valid trials, no CI ({'; '.join(no_ci)}).",
        )
    front = t.front
    # front configurations have both medians (pareto_front keeps finite points only)
    front_xy = [
        (c.time.median, c.energy.median) for c in front if c.time.median is not None and c.energy.median is not None
    ]
    if len(front) >= 2:
        (h,) = ax.plot(
            [x / ux.factor for x, _ in front_xy],
            [y / uy.factor for _, y in front_xy],
            "-",
            lw=8,
            color="#7f8c8d",
            alpha=0.4,
            zorder=Z_SHADE + 1,
            solid_capstyle="round",
        )
        drawn.add(
            "front",
            f"Thick grey line: the Pareto front ({len(front)} configurations "
            f"no other beats in both {em.label} and {tm.label}).",
            h,
            "Pareto front",
        )
    elif len(front) == 1:
        drawn.add(
            "front",
            f"Pareto front: one configuration ({front[0].label}) has both the "
            f"least {em.label} and the least {tm.label}.",
        )
    ax.set_xlabel(_axis_label(f"median {tm.label}", ux))
    ax.set_ylabel(_axis_label(f"median {em.label}", uy))
    factors = ", ".join(t.factors)
    ax.set_title(_title(f"{t.workload}: energy against time", t.simulated), fontsize=10)
    ax.grid(alpha=0.3, zorder=Z_SHADE)
    _outside_legend(fig, drawn, "lower center", ncol=2)
    caption = drawn.caption(
        f"{em.label} against {tm.label} of the {len(t.configs)} "
        f"configurations of {t.workload} ({factors}; one colour each, "
        f"legend below)."
    )
    png = _png(fig, t.simulated)
    return Plot(
        f"pareto_{_slug(t.workload)}",
        "pareto",
        f"{t.workload}: energy against time ({factors}; Pareto front)",
        caption,
        png,
        t.simulated,
        fig,
    )


# --------------------------------------------------------------------------- report-wide


@literal_text
def plot_co2e(a: Analysis) -> Plot | None:
    """CO2e per group at the plan's intensity: every trial as a dot, the median and its
    CI, and the median's sensitivity band at the band's intensities."""
    from matplotlib.lines import Line2D

    gs = [g for g in a.groups if "co2e_kg" in g.summaries and g.summaries["co2e_kg"].median is not None]
    if not gs:
        return None
    sim = any(g.simulated for g in gs)
    s = a.settings
    trial_vals = [g.known("co2e_kg") for g in gs]
    unit = choose_unit("kgCO2e", np.concatenate(trial_vals).tolist())
    f = unit.factor
    fig = _figure(8.4, min(12.0, 1.6 + 0.34 * len(gs)))
    ax = fig.add_subplot()
    drawn = Drawn()
    conf = round(s.confidence * 100)
    pos = np.arange(len(gs))[::-1]
    no_ci = []
    everything = []
    for p_, g, v in zip(pos, gs, trial_vals, strict=True):
        su = g.summaries["co2e_kg"]
        if g.co2e_band and su.n >= stats.MIN_N_SUMMARY:
            h = ax.hlines(
                [p_], g.co2e_band[0] / f, g.co2e_band[1] / f, color="#27ae60", lw=6, alpha=0.3, zorder=Z_SHADE + 1
            )
            everything += [g.co2e_band[0] / f, g.co2e_band[1] / f]
            drawn.add(
                "band",
                f"Pale green bar: the median's CO2e at {s.band[0]:g} to {s.band[1]:g} kgCO2e/kWh (sensitivity band).",
                h,
                f"band {s.band[0]:g}-{s.band[1]:g} kgCO2e/kWh",
            )
        color = INCONCLUSIVE_COLOR if g.inconclusive else TRIAL_COLOR
        ax.plot(
            v / f,
            np.full(v.size, p_) + np.linspace(-0.12, 0.12, v.size),
            "o",
            ms=3.5,
            color=color,
            alpha=0.8,
            zorder=Z_TRACE,
        )
        everything += list(v / f)
        drawn.add(
            "dots",
            f"Dots: each valid trial at {s.intensity_kg_per_kwh:g} kgCO2e/kWh.",
            Line2D([], [], marker="o", ls="", color=TRIAL_COLOR),
            "valid trial",
        )
        if su.n >= stats.MIN_N_SUMMARY and su.median is not None:
            xerr = None
            if su.ci_low is not None and su.ci_high is not None:
                xerr = [[max(0.0, (su.median - su.ci_low) / f)], [max(0.0, (su.ci_high - su.median) / f)]]
            ax.errorbar(
                [su.median / f],
                [p_ + 0.25],
                xerr=xerr,
                fmt="|",
                ms=10,
                mew=2,
                color=SUMMARY_COLOR,
                elinewidth=1.3,
                capsize=2,
                zorder=Z_SUMMARY,
            )
            drawn.add(
                "median",
                f"Black tick above the dots: the median with its {conf} % CI (order statistics).",
                Line2D([], [], marker="|", ms=10, mew=2, ls="", color=SUMMARY_COLOR),
                f"median, {conf} % CI",
            )
        else:
            no_ci.append(g.variant)  # a variant label begins with its workload
        if g.inconclusive:
            drawn.add(
                "inconclusive",
                inconclusive_sentence(a, gs),
                Line2D([], [], marker="o", ls="", color=INCONCLUSIVE_COLOR),
                "inconclusive (reason in the table)",
            )
    if no_ci:
        drawn.add(
            "no-ci",
            f"Only the trials (no median, CI or band) for groups with fewer "
            f"than {stats.MIN_N_SUMMARY} valid trials: {'; '.join(no_ci)}.",
        )
    _mark_not_in_effect(drawn, gs)
    if _log_if_wide(ax, np.asarray(everything, dtype=float), "x"):
        drawn.add("log", "The CO2e axis is logarithmic.")
    _outside_legend(fig, drawn, "lower center", ncol=3)
    ax.set_yticks(pos, [f"{g.workload}: {lab}" for g, lab in zip(gs, _labels_by_workload(gs), strict=True)], fontsize=7)
    ax.set_xlabel(f"CO2e per trial ({unit.label}) at {s.intensity_kg_per_kwh:g} kgCO2e/kWh")
    # the title says a band only where one is drawn (groups of fewer than MIN_N_SUMMARY trials have none)
    banded = "band" in drawn
    ax.set_title(_title("CO2e per group" + (" with sensitivity band" if banded else ""), sim), fontsize=10)
    ax.grid(axis="x", alpha=0.3, zorder=Z_SHADE)
    caption = drawn.caption(
        f"CO2e = energy (kWh; {a.measurement.energy_basis}) x carbon intensity "
        f"{s.intensity_kg_per_kwh:g} kgCO2e/kWh, in {unit.label}."
    )
    png = _png(fig, sim)
    return Plot("co2e", "co2e", "CO2e per group" + (" with sensitivity band" if banded else ""), caption, png, sim, fig)


def _labels_by_workload(gs: list[Group]) -> list[str]:
    out: dict[int, str] = {}
    by: dict[str, list[int]] = {}
    for i, g in enumerate(gs):
        by.setdefault(g.workload, []).append(i)
    for idx in by.values():
        for i, lab in zip(idx, short_labels([gs[i] for i in idx]), strict=True):
            out[i] = lab
    return [out[i] for i in range(len(gs))]


@literal_text
def plot_trend(a: Analysis, max_runs: int = 30) -> Plot | None:
    """Nightly trend: each metric's value per run over the last ``max_runs`` runs."""
    h = a.data.history
    if h is None or len(h) == 0:
        return None
    h = h.copy()
    h["logical_date"] = pd.to_datetime(h["logical_date"], utc=True, errors="coerce")
    runs = h.dropna(subset=["logical_date"]).groupby("run_id")["logical_date"].min().sort_values().index[-max_runs:]
    h = h[h["run_id"].isin(runs)]
    metrics = list(dict.fromkeys(h["metric"]))[:3]
    sim = a.simulated and any(is_simulated_metric(str(m)) for m in metrics)
    fig = _figure(8.0, 2.6 * len(metrics) + 0.8)
    axes = fig.subplots(len(metrics), 1, squeeze=False)[:, 0]
    drawn = Drawn()
    for ax, m in zip(axes, metrics, strict=True):
        hm = h[h["metric"] == m]
        mi = info(str(m))
        unit = choose_unit(mi.unit, hm["value"].astype(float).tolist())
        for variant, hv in list(hm.groupby("variant", sort=True))[:8]:
            hv = hv.groupby("logical_date")["value"].median().sort_index()
            (line,) = ax.plot(hv.index, hv.to_numpy(dtype=float) / unit.factor, "o-", ms=3, lw=1)
            drawn.add(f"v-{variant}", "", line, variant)
        ax.set_ylabel(_axis_label(mi.label, unit), fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(axis="x", labelsize=7)
    _outside_legend(fig, drawn, "lower center", ncol=2)
    axes[0].set_title(_title(f"Nightly trend, last {len(runs)} runs", sim), fontsize=10)
    caption = (
        f"Median per run of each variant (one line and colour each, legend below) over "
        f"the last {len(runs)} nightly runs."
    )
    return Plot("trend", "trend", "Nightly trend", caption, _png(fig, sim), sim, fig)


@literal_text
def make_plots(a: Analysis) -> list[Plot]:
    """Every figure of the report, in report order (absent figures are skipped)."""
    plots = [plot_power(a)]
    tradeoffs = {t.workload: t for t in a.tradeoffs}
    for workload, kind, groups in a.workloads():
        panels = panel_metrics(a, kind, groups)
        plots.append(
            plot_groups(a, workload, groups, panels, f"metric_{_slug(workload)}", "metric", f"{workload}: {{names}}")
        )
        em = energy_metric(a, groups)
        if em is not None and em not in panels:
            plots.append(
                plot_groups(
                    a, workload, groups, [em], f"energy_{_slug(workload)}", "energy", f"{workload}: {{names}} per group"
                )
            )
        if workload in tradeoffs:
            plots.append(plot_tradeoff(a, tradeoffs[workload]))
    plots.append(plot_co2e(a))
    plots.append(plot_trend(a))
    return [p for p in plots if p is not None]
