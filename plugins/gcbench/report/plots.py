"""The report's figures, as PNG bytes (matplotlib's Agg renderer, no pyplot state).

Each figure is rendered once; the HTML embeds the bytes as base64 and the Markdown
links the same bytes written beside it. A figure containing simulated data carries
"SIMULATED" in its title and a red banner, so it cannot be mistaken for a
measurement even when copied out of the report. Only figures derived from the simulated
device's energy or power are so labelled: durations, throughput, bandwidth and accuracy
are measured even on the simulated device (``metrics.is_simulated_metric``).
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gcbench.report import analysis as _analysis
from gcbench.report.analysis import Analysis, Group
from gcbench.report.metrics import ENERGY_METRIC_ORDER, info, is_simulated_metric, kind_metrics

DPI = 90
SIM_TEXT = "SIMULATED DATA - not a measurement"


@dataclass
class Plot:
    """One rendered figure.

    Attributes:
        name: file stem (``power_trial``, ``energy_h2d`` ...), unique in a report.
        kind: ``power``, ``energy``, ``metric``, ``pareto``, ``co2e`` or ``trend``.
        title: heading shown above it.
        caption: what it shows and how its numbers were obtained.
        png: the PNG bytes.
        simulated: it shows simulated data.
    """

    name: str
    kind: str
    title: str
    caption: str
    png: bytes
    simulated: bool


def _figure(w: float, h: float):
    from matplotlib.figure import Figure  # lazy: keeps the plugin import cheap

    return Figure(figsize=(w, h), dpi=DPI, layout="constrained")


def _png(fig, simulated: bool, text: str = SIM_TEXT) -> bytes:
    if simulated:
        fig.suptitle(text, color="white", backgroundcolor="#c0392b", fontweight="bold",
                     fontsize=11 if len(text) <= 40 else 9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower() or "x"


def short_labels(groups: list[Group]) -> list[str]:
    """Per group, the factor values that vary inside the list (else the variant)."""
    keys = sorted({k for g in groups for k in g.factors})
    varying = [k for k in keys if len({str(g.factors.get(k)) for g in groups}) > 1]
    if not varying:
        return [g.variant for g in groups]
    return [", ".join(f"{k}={g.factors.get(k)}" for k in varying) for g in groups]


def _used_values(a: Analysis, g: Group, metric: str, used: bool = True) -> np.ndarray:
    df = a.trials
    sel = (df["workload"] == g.workload) & (df["variant"] == g.variant)
    sel &= df["used"] if used else (~df["used"] & (df["status"] == "ok"))
    v = df.loc[sel, metric].to_numpy(dtype=float)
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


# --------------------------------------------------------------------------- power trace


def representative_trial(a: Analysis) -> pd.Series | None:
    """The example trial of the power plot (the one the sampling-rate table also reads,
    see :func:`gcbench.report.analysis.representative_trial`)."""
    return _analysis.representative_trial(a.trials, a.groups)


def plot_power(a: Analysis) -> Plot | None:
    """Power over time of one trial with its windows shaded."""
    row = representative_trial(a)
    if row is None:
        return None
    tid = str(row["trial_id"])
    samples = a.data.samples(tid)
    windows = a.data.windows(tid) or {}
    if samples is None or len(samples) == 0:
        return None
    sim = bool(row["simulated"]) or (
        "source" in samples and (samples["source"] == "simulated").any())
    fig = _figure(8.5, 3.4)
    ax = fig.add_subplot()
    for device, s in samples.groupby("device", sort=True):
        s = s.sort_values("t_s")
        if "power_instant_w" in s and s["power_instant_w"].notna().any():
            ax.plot(s["t_s"], s["power_instant_w"], lw=0.7, alpha=0.7,
                    label=f"{device} instant power")
        if "power_w" in s and s["power_w"].notna().any():
            ax.plot(s["t_s"], s["power_w"], lw=1.6, label=f"{device} 1-s average power")
    for i, (name, w) in enumerate(sorted(windows.items(), key=lambda kv: kv[0] != "main")):
        if not isinstance(w, dict) or w.get("start_s") is None or w.get("end_s") is None:
            continue
        main = name == "main"
        ax.axvspan(w["start_s"], w["end_s"], color="#2e86de" if main else "#aaaaaa",
                   alpha=0.18 if main else 0.12,
                   label=f"{'measured' if main else name} window")
        if main:
            for edge in (w["start_s"], w["end_s"]):
                ax.axvline(edge, color="#2e86de", lw=1, ls="--")
    ax.set_xlabel("time since trial start (s)")
    ax.set_ylabel("power (W)")
    ax.set_title(_title(f"Power of trial {tid} ({row['variant']}, repetition {row['repetition']})",
                        sim), fontsize=10)
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(alpha=0.3)
    method = row.get("gpu_method") or "unknown method"
    caption = (f"Power samples of trial {tid}, chosen as the valid trial closest to its group's "
               f"median. Shaded: the measured window (blue) and other phases. Its energy was "
               f"obtained by: {method}.")
    return Plot("power_trial", "power", "Power over time of one trial", caption,
                _png(fig, sim), sim)


# --------------------------------------------------------------------------- per workload


def energy_metric(a: Analysis, groups: list[Group]) -> str | None:
    """The energy column shown per group: the first of ENERGY_METRIC_ORDER known."""
    df = a.trials[a.trials["workload"] == groups[0].workload]
    for m in ENERGY_METRIC_ORDER:
        if df[m].notna().any():
            return m
    return None


def plot_energy_box(a: Analysis, workload: str, groups: list[Group]) -> Plot | None:
    """Box plot with every valid trial as a point; excluded trials as red crosses."""
    metric = energy_metric(a, groups)
    if metric is None:
        return None
    mi = info(metric)
    sim = any(g.simulated for g in groups) and is_simulated_metric(metric)
    labels = short_labels(groups)
    fig = _figure(max(5.0, 0.75 * len(groups) + 2.5), 3.8)
    ax = fig.add_subplot()
    rng = np.random.default_rng(0)
    data = [_used_values(a, g, metric) for g in groups]
    pos = np.arange(1, len(groups) + 1)
    ax.boxplot([d if d.size else [np.nan] for d in data], positions=pos, widths=0.55,
               showfliers=False, medianprops=dict(color="#c0392b"))
    for p, d, g in zip(pos, data, groups):
        ax.plot(p + rng.uniform(-0.18, 0.18, d.size), d, "o", ms=2.5, alpha=0.5, color="#2e86de")
        bad = _used_values(a, g, metric, used=False)
        if bad.size:
            ax.plot(np.full(bad.size, p + 0.3), bad, "x", ms=5, color="#c0392b")
        if g.inconclusive:
            ax.annotate("inconclusive", (p, 0.98), xycoords=("data", "axes fraction"),
                        ha="center", va="top", fontsize=7, color="#c0392b")
    _log_if_wide(ax, np.concatenate([d for d in data if d.size] or [np.array([1.0])]), "y")
    ax.set_xticks(pos, labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"{mi.label} per trial ({mi.unit})")
    ax.set_title(_title(f"{workload}: {mi.label} per group", sim), fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    caption = (f"{mi.label} of each valid trial (dots) with the box of quartiles and the median "
               f"(red line). Red crosses: invalid trials, excluded from statistics.")
    return Plot(f"energy_{_slug(workload)}", "energy", f"{workload}: energy per group",
                caption, _png(fig, sim), sim)


def plot_metric_bars(a: Analysis, workload: str, kind: str, groups: list[Group]) -> Plot | None:
    """Median of the kind's first two metrics per group, with bootstrap CIs."""
    metrics = [m for m in kind_metrics(kind) if m in groups[0].summaries][:2]
    if not metrics:
        return None
    any_sim = any(g.simulated for g in groups)
    sim_metrics = [m for m in metrics if any_sim and is_simulated_metric(m)]
    sim = bool(sim_metrics)
    labels = short_labels(groups)
    fig = _figure(max(5.0, 0.6 * len(groups) + 2.5), 1.2 + 2.9 * len(metrics))
    axes = fig.subplots(len(metrics), 1, squeeze=False)[:, 0]
    for ax, m in zip(axes, metrics):
        mi = info(m)
        med = np.array([g.summaries[m].median if g.summaries[m].median is not None else np.nan
                        for g in groups])
        lo = np.array([s.ci_low if (s := g.summaries[m]).ci_low is not None else np.nan
                       for g in groups])
        hi = np.array([s.ci_high if (s := g.summaries[m]).ci_high is not None else np.nan
                       for g in groups])
        pos = np.arange(len(groups))
        colors = ["#bbbbbb" if g.inconclusive else "#2e86de" for g in groups]
        bars = ax.bar(pos, np.nan_to_num(med), color=colors)
        for b, g in zip(bars, groups):
            if g.inconclusive:
                b.set_hatch("//")
        yerr = np.vstack([np.clip(med - lo, 0, None), np.clip(hi - med, 0, None)])
        ok = np.isfinite(yerr).all(axis=0)
        if ok.any():
            ax.errorbar(pos[ok], med[ok], yerr=yerr[:, ok], fmt="none", ecolor="black",
                        capsize=3, lw=1)
        ax.set_xticks(pos, labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(f"median {mi.label} ({mi.unit})" if mi.unit else f"median {mi.label}")
        ax.set_title(_title(f"{workload}: {mi.label}", m in sim_metrics), fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    conf = round(a.settings.confidence * 100)
    caption = (f"Median per group over valid trials, with the {conf} % BCa bootstrap CI of the "
               f"median ({a.settings.n_resamples:,} resamples). Grey hatched bars: inconclusive "
               f"groups (fewer than {a.settings.min_valid_repetitions} valid repetitions).")
    names = " and ".join(info(m).label for m in metrics)
    measured = [info(m).label for m in metrics if m not in sim_metrics]
    banner = SIM_TEXT
    if sim and measured:
        sim_names = " and ".join(info(m).label for m in sim_metrics)
        banner = f"SIMULATED: {sim_names}; measured: {' and '.join(measured)}"
        caption += (f" {sim_names} comes from the simulated device's power model; "
                    f"{' and '.join(measured)} is measured.")
    return Plot(f"metric_{_slug(workload)}", "metric", f"{workload}: {names}", caption,
                _png(fig, sim, banner), sim)


def cap_factor(groups: list[Group]) -> str | None:
    """The power-cap factor of a workload (a factor named like ``power_cap_w``), or None."""
    for k in sorted({k for g in groups for k in g.factors}):
        if "cap" in k.lower() or "power_limit" in k.lower():
            if len({str(g.factors.get(k)) for g in groups}) > 1:
                return k
    return None


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats in both coordinates (lower is better),
    ordered by the first coordinate."""
    idx = [i for i, (x, y) in enumerate(points) if math.isfinite(x) and math.isfinite(y)]
    idx.sort(key=lambda i: (points[i][0], points[i][1]))
    front, best = [], math.inf
    for i in idx:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def plot_pareto(a: Analysis, workload: str, groups: list[Group]) -> Plot | None:
    """Energy against time per group, coloured by the other factors, Pareto front drawn."""
    cap = cap_factor(groups)
    if cap is None:
        return None
    df = a.trials[(a.trials["workload"] == workload) & a.trials["used"]]
    emetric = "total_energy_j" if df["total_energy_j"].notna().any() else energy_metric(a, groups)
    if emetric is None or not df["duration_s"].notna().any():
        return None
    sim = any(g.simulated for g in groups)
    med = df.groupby("variant")[[emetric, "duration_s"]].median()
    fig = _figure(7.0, 4.2)
    ax = fig.add_subplot()
    series: dict[str, list[Group]] = {}
    for g in groups:
        key = ", ".join(f"{k}={g.factors[k]}" for k in sorted(g.factors) if k != cap) or "all"
        series.setdefault(key, []).append(g)
    points, owners = [], []
    for key, gs in series.items():
        gs = sorted(gs, key=lambda g: float(g.factors.get(cap, 0) or 0))
        xs = [med[ "duration_s"].get(g.variant, np.nan) for g in gs]
        ys = [med[emetric].get(g.variant, np.nan) for g in gs]
        line, = ax.plot(xs, ys, "o-", ms=5, lw=1, label=key)
        for g, x, y in zip(gs, xs, ys):
            ax.annotate(f"{g.factors.get(cap)}", (x, y), textcoords="offset points",
                        xytext=(4, 4), fontsize=7, color=line.get_color())
            points.append((x, y))
            owners.append(g)
    front = pareto_front(points)
    if len(front) >= 2:
        ax.plot([points[i][0] for i in front], [points[i][1] for i in front], "-", lw=7,
                color="#999999", alpha=0.35, zorder=0, solid_capstyle="round",
                label="Pareto front")
    mi = info(emetric)
    ax.set_xlabel("median time (s)")
    ax.set_ylabel(f"median {mi.label} ({mi.unit})")
    ax.set_title(_title(f"{workload}: energy against time by {cap}", sim), fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    caption = (f"Median {mi.label} against median time per configuration; labels are {cap} "
               f"values. The thick grey line joins the configurations no other configuration beats "
               f"in both energy and time (the Pareto front).")
    return Plot(f"pareto_{_slug(workload)}", "pareto", f"{workload}: energy against time "
                f"(power-cap Pareto front)", caption, _png(fig, sim), sim)


# --------------------------------------------------------------------------- report-wide


def plot_co2e(a: Analysis) -> Plot | None:
    """Median CO2e per group at the plan's intensity, with the sensitivity band."""
    gs = [g for g in a.groups if "co2e_kg" in g.summaries
          and g.summaries["co2e_kg"].median is not None]
    if not gs:
        return None
    sim = any(g.simulated for g in gs)
    vals = np.array([g.summaries["co2e_kg"].median for g in gs])
    lo = np.array([g.co2e_band[0] if g.co2e_band else np.nan for g in gs])
    hi = np.array([g.co2e_band[1] if g.co2e_band else np.nan for g in gs])
    scale, unit = 1.0, "kgCO2e"  # the tables' unit; small values in scientific notation
    fig = _figure(8.0, min(12.0, 1.2 + 0.28 * len(gs)))
    ax = fig.add_subplot()
    pos = np.arange(len(gs))[::-1]
    ok = np.isfinite(lo) & np.isfinite(hi)
    ax.hlines(pos[ok], lo[ok] * scale, hi[ok] * scale, color="#27ae60", lw=5, alpha=0.35,
              label=f"band {a.settings.band[0]:g}-{a.settings.band[1]:g} kgCO2e/kWh")
    ax.plot(vals * scale, pos, "o", ms=5,
            color="#1e8449", label=f"at {a.settings.intensity_kg_per_kwh:g} kgCO2e/kWh")
    for p_, g, v in zip(pos, gs, vals):
        if g.inconclusive:
            ax.plot([v * scale], [p_], "o", ms=7, mfc="none", color="#c0392b")
    if not _log_if_wide(ax, vals * scale, "x"):
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 3), useMathText=True)
    fig.legend(loc="outside lower center", ncol=2, fontsize=7)
    ax.set_yticks(pos, [f"{g.workload}: {lab}" for g, lab in zip(gs, _labels_by_workload(gs))],
                  fontsize=7)
    s = a.settings
    ax.set_xlabel(f"median CO2e per trial ({unit}) at {s.intensity_kg_per_kwh:g} kgCO2e/kWh")
    ax.set_title(_title("CO2e per group with sensitivity band", sim), fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    caption = (f"CO2e = energy (kWh; {a.measurement.energy_basis}) x carbon intensity "
               f"{s.intensity_kg_per_kwh:g} kgCO2e/kWh. Whiskers: the same energy at "
               f"{s.band[0]:g} and {s.band[1]:g} kgCO2e/kWh (sensitivity band). Red rings: "
               f"inconclusive groups.")
    return Plot("co2e", "co2e", "CO2e per group", caption, _png(fig, sim), sim)


def _labels_by_workload(gs: list[Group]) -> list[str]:
    out: dict[int, str] = {}
    by: dict[str, list[int]] = {}
    for i, g in enumerate(gs):
        by.setdefault(g.workload, []).append(i)
    for idx in by.values():
        for i, lab in zip(idx, short_labels([gs[i] for i in idx])):
            out[i] = lab
    return [out[i] for i in range(len(gs))]


def plot_trend(a: Analysis, max_runs: int = 30) -> Plot | None:
    """Nightly trend: each metric's value per run over the last ``max_runs`` runs."""
    h = a.data.history
    if h is None or len(h) == 0:
        return None
    h = h.copy()
    h["logical_date"] = pd.to_datetime(h["logical_date"], utc=True, errors="coerce")
    runs = (h.dropna(subset=["logical_date"]).groupby("run_id")["logical_date"].min()
            .sort_values().index[-max_runs:])
    h = h[h["run_id"].isin(runs)]
    metrics = list(dict.fromkeys(h["metric"]))[:3]
    sim = a.simulated and any(is_simulated_metric(str(m)) for m in metrics)
    fig = _figure(8.0, 2.6 * len(metrics) + 0.4)
    axes = fig.subplots(len(metrics), 1, squeeze=False)[:, 0]
    for ax, m in zip(axes, metrics):
        hm = h[h["metric"] == m]
        for variant, hv in list(hm.groupby("variant", sort=True))[:8]:
            hv = hv.groupby("logical_date")["value"].median().sort_index()
            ax.plot(hv.index, hv.to_numpy(dtype=float), "o-", ms=3, lw=1, label=variant)
        mi = info(str(m))
        ax.set_ylabel(f"{mi.label} ({mi.unit})" if mi.unit else mi.label, fontsize=8)
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
        ax.tick_params(axis="x", labelsize=7)
    axes[0].set_title(_title(f"Nightly trend, last {len(runs)} runs", sim), fontsize=10)
    caption = f"Median per run of each variant over the last {len(runs)} nightly runs."
    return Plot("trend", "trend", "Nightly trend", caption, _png(fig, sim), sim)


def make_plots(a: Analysis) -> list[Plot]:
    """Every figure of the report, in report order (absent figures are skipped)."""
    plots = [plot_power(a)]
    for workload, kind, groups in a.workloads():
        plots.append(plot_energy_box(a, workload, groups))
        plots.append(plot_metric_bars(a, workload, kind, groups))
        plots.append(plot_pareto(a, workload, groups))
    plots.append(plot_co2e(a))
    plots.append(plot_trend(a))
    return [p for p in plots if p is not None]
