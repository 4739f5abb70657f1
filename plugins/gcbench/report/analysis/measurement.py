"""The "How this was measured" section: sensor timing observed in the samples, edge
correction, cross-check and stability statements, counts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gcbench.report.analysis.groups import Group
from gcbench.report.data import ReportData
from gcbench.report.metrics import (
    describe_method,
)
from gcbench.stability import TWIN_FLAG

MAX_MEASUREMENT_PROBES = 4
"""Trials whose samples are read to measure sampling rate and sensor update periods
(one per energy method found, up to this many): each read may be a database query."""


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
    # every backend's edge-corrected counter (nvml, amdsmi, module scope) counts as edge-corrected
    methods = [EDGE_CORRECTED if str(m).endswith("counter-edge-corrected") else m for m in methods]
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
    from gcbench.energy.backend import describe_method as backend_sentence

    for m in list(other):
        sentence = backend_sentence(m)
        if sentence:
            parts.append(f"{n[m]} trials: {sentence}.")
            other.remove(m)
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
    from gcbench.stability import SEGMENT_MIN_S, TYPICAL_PERCENTILE

    v = _plan_validation(plan)

    def count(col: str, prefix: str) -> int:
        return int(sum(any(str(x).startswith(prefix) for x in items) for items in df[col]))

    return (
        f"Each trial records its progress inside the measured window (steps finished and when). The window "
        f"is cut into equal segments of at least {SEGMENT_MIN_S:g} s: it is flagged when one half ran more "
        f"than {v.stability_drift_flag_ratio:g}x faster than the other or a segment ran more than "
        f"{v.stability_stall_flag_ratio:g}x slower than the window's typical throughput (the "
        f"{TYPICAL_PERCENTILE:g}th percentile of its segments'), and invalid when the halves are "
        f"more than {v.stability_drift_invalid_ratio:g}x apart or segments slower than typical lost more than "
        f"{v.stability_stall_invalid_rel * 100:g} % of the window; with fewer than {v.stability_min_steps} "
        f"steps it is flagged as not judged. In a group of two valid repetitions, throughputs more than "
        f"{v.twin_max_ratio:g}x apart flag both and make the group inconclusive (from three repetitions on, "
        f"the MAD rule flags outliers). This run: {count('flags', 'unstable window')} trials flagged and "
        f"{count('reasons', 'unstable window')} invalid as unstable, {count('flags', 'throughput stability not')} "
        f"not judged, {count('flags', TWIN_FLAG)} in groups whose twins disagree."
    )


def contention_statement(df: pd.DataFrame, plan: dict | None) -> str:
    """The CPU-set and contention rule with the thresholds this run used, and its outcome."""
    from gcbench.validate import CONTENTION_PREFIX

    v = _plan_validation(plan)

    def count(col: str) -> int:
        return int(sum(any(str(x).startswith(CONTENTION_PREFIX) for x in items) for items in df[col]))

    shares = pd.to_numeric(df.get("cpu_contention_share", pd.Series(dtype=float)), errors="coerce").dropna()
    other_cols = [c for c in df.columns if str(c).endswith("_cpu_contention_share") and c != "cpu_contention_share"]
    others = (
        pd.to_numeric(pd.concat([df[c] for c in other_cols]), errors="coerce").dropna() if other_cols else pd.Series()
    )
    seen = (
        f"in the main window others' share was {100 * float(shares.median()):.1f} % in the median trial and "
        f"{100 * float(shares.max()):.1f} % at most, over {len(shares)} trials measured"
        + (
            f" (in the other windows, {', '.join(sorted(str(c).removesuffix('_cpu_contention_share') for c in other_cols))}: "
            f"{100 * float(others.max()):.1f} % at most)"
            if len(others)
            else ""
        )
        if len(shares)
        else "no trial recorded its contention"
    )
    return (
        f"Each trial runs pinned to its own CPU set: its GPUs' share of the host, next to the GPU's NUMA node "
        f"when /sys tells, with as many PyTorch/OpenMP/MKL threads as CPUs (result.json's cpus), so trials on "
        f"a host's GPUs never share a core. At each window edge /proc gives the busy time of those CPUs and "
        f"the CPU time of the trial's own processes; the difference is what other processes took. Above "
        f"{v.cpu_contention_flag_share * 100:g} % of the trial's core-seconds the trial is flagged"
        + (
            f", above {v.cpu_contention_invalid_share * 100:g} % invalid (the plan's validation."
            "cpu_contention_flag_share and cpu_contention_invalid_share)"
            if v.cpu_contention_invalid_share is not None
            else " (validation.cpu_contention_flag_share); this plan sets no cpu_contention_invalid_share, "
            "so contention never invalidates a trial here"
        )
        + ". /proc counts whole 10-ms ticks, so others' time no larger than two ticks per CPU and per "
        "process of the trial (what rounding alone can make) is not judged: a 0.1-s window reads tens of "
        "percent from rounding" + f". This run: {seen}; {count('flags')} trials flagged and "
        f"{count('reasons')} invalid by this rule. See docs/measurement.md."
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
        reasons: the invalid trials' reasons counted by rule, most trials first.
        flags: the findings that did not invalidate, counted by rule, most trials first.
        energy_basis: what CO2e is computed from.
        example_trial: trial id of the power plot and the first probe, or None.
        configured_hz: the plan's power sampling rate, Hz, or None.
        edge_correction: whether edge correction applied, in words.
        simulated_model: the simulated device's model (idle_w, busy_w, tick_s,
            recorded), or None when no trial is simulated.
        cross_check: the counter cross-check's rule, thresholds and outcome, in words.
        stability: the throughput-stability rules, thresholds and outcome, in words.
        contention: the CPU-set and contention rule, thresholds and outcome, in words.
    """

    methods: list[dict]
    probes: list[Probe]
    simulated_trials: int
    counts: dict[str, int]
    reasons: list[FindingCount]
    flags: list[FindingCount]
    energy_basis: str
    example_trial: str | None = None
    configured_hz: float | None = None
    edge_correction: str = ""
    simulated_model: dict | None = None
    cross_check: str = ""
    stability: str = ""
    contention: str = ""


@dataclass
class FindingCount:
    """The trials one validation rule invalidated or flagged.

    Attributes:
        rule: the rule's words (:func:`gcbench.validate.finding_rule`), e.g. ``CPU contention``.
        trials: how many trials it hit (a trial hit on two devices counts once).
        example: one of its sentences as stored (the first trial's first).
        texts: how many different sentences it wrote (their values differ).
    """

    rule: str
    trials: int
    example: str
    texts: int


def count_findings(lists: Iterable[list[str]]) -> list[FindingCount]:
    """Reasons or flags of trials (one list per trial) counted by rule, most trials first
    (then by rule); sentences of one rule differ by their measured values, so counting
    texts would give each its own count of 1."""
    from gcbench.validate import finding_rule

    trials: dict[str, int] = {}
    example: dict[str, str] = {}
    texts: dict[str, set[str]] = {}
    for lst in lists:
        for rule in dict.fromkeys(finding_rule(item) for item in lst):
            trials[rule] = trials.get(rule, 0) + 1
        for item in lst:
            rule = finding_rule(item)
            example.setdefault(rule, item)
            texts.setdefault(rule, set()).add(item)
    return [
        FindingCount(rule, n, example[rule], len(texts[rule]))
        for rule, n in sorted(trials.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


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
    if "node_method" in ok.columns and ok["node_method"].map(lambda v: isinstance(v, str) and bool(v)).any():
        # the plan's node meter (the BMC): its own row, its figure contains the GPU and CPU rows
        keys = ok["node_method"].map(lambda v: v if isinstance(v, str) and v else "unavailable")
        for method, n in keys.value_counts(sort=False).items():
            methods.append(
                dict(
                    role="node",
                    method=method,
                    source=str(method).split("-", 1)[0] if method != "unavailable" else "–",
                    trials=int(n),
                    simulated=False,
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
        reasons=count_findings(invalid["reasons"]),
        flags=count_findings(df["flags"]),
        energy_basis=energy_basis,
        example_trial=None if example is None else str(example["trial_id"]),
        configured_hz=hz,
        edge_correction=edge_correction_statement([m or "unavailable" for m in ok["gpu_method"]]),
        simulated_model=simulated_model(df),
        cross_check=cross_check_statement(df, data.plan),
        stability=stability_statement(df, data.plan),
        contention=contention_statement(df, data.plan),
    )
