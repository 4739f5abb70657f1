"""Validation rules: which trials count in the statistics, and why the others do not.

Every rule reads a trial's stored result and samples and either *invalidates* the
trial (a reason is stored, the data are kept) or *flags* it (a note for the report;
the trial still counts). Thresholds come from the plan's ``validation`` section
(:class:`gcbench.plan.schema.ValidationSettings`).

Invalidating rules: failed trial (exit status); window shorter than
``min_window_periods`` sensor update periods; samples that do not cover the window
or leave a gap over ``max_gap_periods``; an energy counter that decreases; the energy
counter differing from the 1-s average power reference by more than
``cross_check_invalid_rel`` beyond the allowance for power steps at the window's edges
(:func:`cross_check_finding`, docs/measurement.md); power outside the GPU's limits; a
foreign process on the GPU during the window; other processes taking more than
``cpu_contention_invalid_share`` of the trial's CPUs in a window
(:func:`contention_findings`; flagged above ``cpu_contention_flag_share``).

Throughput stability (:mod:`gcbench.stability`): a window whose halves ran more
than ``stability_drift_invalid_ratio`` times apart, or that lost more than
``stability_stall_invalid_rel`` of its time to slow segments, is invalid; smaller
drifts and stalls above the ``*_flag_*`` thresholds are flagged, and a window with
too few steps to judge is flagged as not judged.

A named window other than the main one (``eval``, ``prefill``) that is too short for
the sensor, has no GPU energy or fails the cross-check does not invalidate the trial:
its energy figures are withheld from the statistics (``trials.windows_withheld``) and
the trial is flagged (:func:`named_window_findings`).

Flags: the same cross-check above ``cross_check_flag_rel``; throttling (power cap or
thermal clocks-event reasons) during the window; outliers by the median absolute
deviation (MAD) rule within a group of three or more; in a group of two, twins whose
throughputs differ by more than ``twin_max_ratio`` (the group is then inconclusive);
partial samples.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gcbench import kinds
from gcbench.plan.schema import ValidationSettings

DEFAULT_UPDATE_PERIOD_S = 0.1
"""NVML's power and energy readings update about every 100 ms (ARCHITECTURE.md, H200)."""

THROTTLE_BITS = {
    0x4: "power cap (SW)",
    0x8: "hardware slowdown",
    0x20: "thermal (SW)",
    0x40: "thermal (HW)",
    0x80: "power brake (HW)",
}
"""NVML clocks-event reasons that mean the GPU slowed down (nvmlClocksEventReason*, nvml.h)."""


@dataclass
class Verdict:
    """Outcome of the rules for one trial: valid or not, reasons (invalidating), flags,
    and ``withheld``: ``{window key: reason}`` for named windows whose energy figures are
    left out of the statistics while the trial's main window stands
    (:func:`named_window_findings`)."""

    valid: bool
    reasons: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    withheld: dict[str, str] = field(default_factory=dict)


def _update_period(energy_main: dict[str, Any]) -> float:
    periods = [d.get("update_period_s") for d in energy_main.get("gpu", []) if d.get("update_period_s")]
    return max(periods) if periods else DEFAULT_UPDATE_PERIOD_S


def max_power_limit_w(environment: dict[str, Any], device: str) -> float | None:
    """The GPU's maximum power limit (W) from a result's environment, or None.

    The meter records per GPU ``{"label": "gpu0", "max_limit_w": 700.0, ...}`` under
    ``environment["gpus"]`` (NVML's nvmlDeviceGetPowerManagementLimitConstraints).
    """
    for gpu in environment.get("gpus") or []:
        if isinstance(gpu, dict) and gpu.get("label") == device and gpu.get("max_limit_w"):
            return float(gpu["max_limit_w"])
    return None


def check_trial(
    result: dict[str, Any] | None, status: str, samples, settings: ValidationSettings, error: str | None = None
) -> Verdict:
    """Apply the per-trial rules.

    Args:
        result: the trial's result.json (None when the process died without one).
        status: stored status (``ok``, ``failed``, ``skipped``).
        samples: DataFrame of the trial's samples (columns of SAMPLE_COLUMNS).
        settings: thresholds.
        error: stored error text, for the reason of a failed trial.

    Returns:
        A :class:`Verdict`; reasons are sentences with the measured values.
    """
    reasons: list[str] = []
    flags: list[str] = []
    if status != "ok" or result is None:
        code = (result or {}).get("exit_code")
        what = (
            "skipped"
            if status == "skipped"
            else f"trial failed (exit status {code})"
            if code is not None
            else "trial failed"
        )
        reasons.append(f"{what}: {error}" if error else what)
        return Verdict(False, reasons, flags)
    main = (result.get("energy") or {}).get("main") or {}
    window = (result.get("windows") or {}).get("main") or {}
    start_s, end_s = window.get("start_s"), window.get("end_s")
    if start_s is None or end_s is None:
        return Verdict(False, ["no measured window recorded"], flags)
    duration_s = end_s - start_s
    period_s = _update_period(main)
    min_s = settings.min_window_periods * period_s
    if duration_s < min_s:
        reasons.append(
            f"window too short for the sensor: {duration_s:.3f} s < {settings.min_window_periods:g} "
            f"update periods of {period_s:.3f} s ({min_s:.3f} s)"
        )
    if main.get("gpu_energy_j") is None and main.get("module_energy_j") is not None:
        flags.append(
            "energy covers whole modules (GPU, CPU and memory of a superchip): "
            f"{main['module_energy_j']:.1f} J of module energy, no GPU-only figure"
        )
    elif main.get("gpu_energy_j") is None:
        reasons.append(
            "GPU energy unknown: " + "; ".join(d.get("reason") or d.get("method", "?") for d in main.get("gpu", []))
        )
    node = main.get("node")
    if isinstance(node, dict) and main.get("node_energy_j") is None:
        # the plan's node meter did not give the window's figure: GPU and CPU figures stand, energy_kwh is unknown
        flags.append(f"node energy unknown: {node.get('reason') or 'no reason recorded'}")
    check = result.get("device_check") or {}
    if isinstance(check, dict) and check.get("same") is False:
        reasons.append(f"measured another GPU than the one used: {check.get('reason')}")
    for flag in main.get("flags") or []:
        if flag == "counter_decreased":
            reasons.append("energy counter decreased inside the window")
        elif flag == "foreign_process":
            reasons.append("a foreign process used the GPU during the window")
        elif flag == "cpu_energy_shared":
            flags.append(
                "CPU energy apportioned: other trials ran on this host during the window "
                "(RAPL counts the whole socket; see cpu_reason)"
            )
        elif flag == "node_energy_shared":
            flags.append(
                "node energy apportioned: other trials ran on this host during the window "
                "(the BMC measures the whole node; see the node figure's reason)"
            )
        elif flag == "node_below_parts":
            flags.append(
                f"node energy {main.get('node_energy_j') or 0:.1f} J is below the GPU + CPU energy it contains: "
                "the BMC's sensor may cover part of the node only (one power supply of two?)"
            )
        elif flag not in (
            "window_too_short",
            "cross_check_disagreement",
            "average_power_edges_uncertain",
            "module_scope",
        ):
            flags.append(flag)
    for dev in main.get("gpu", []):
        tier, text = cross_check_finding(dev, settings)
        if tier == "invalid":
            reasons.append(text or "energy counter and power reference disagree")
        elif text:
            flags.append(text)
        tier, text = average_power_finding(dev, duration_s, settings)
        if tier == "invalid":
            reasons.append(text)
        elif tier == "flag":
            flags.append(text)
    tier, text = stability_finding(result, start_s, end_s, settings)
    if tier == "invalid":
        reasons.append(text or "throughput unstable in the window")
    elif text:
        flags.append(text)
    withheld = named_window_findings(result, settings, min_s, period_s, reasons, flags)
    contention_findings(result, settings, reasons, flags)
    gpu = samples[samples["device"].astype(str).str.startswith("gpu")] if len(samples) else samples
    if len(gpu) == 0:
        reasons.append("no GPU samples stored")
        return Verdict(not reasons, reasons, flags, withheld)
    sample_hz = main.get("sample_hz") or 10.0
    step_s = max(1.0 / sample_hz, period_s)
    max_gap_s = settings.max_gap_periods * step_s
    env = result.get("environment") or {}
    for device, dev_samples in gpu.groupby("device"):
        t = dev_samples["t_s"].astype(float).sort_values().to_numpy()
        inside = t[(t >= start_s - max_gap_s) & (t <= end_s + max_gap_s)]
        if len(inside) == 0 or inside[0] > start_s + max_gap_s or inside[-1] < end_s - max_gap_s:
            reasons.append(f"{device}: samples do not cover the window [{start_s:.3f}, {end_s:.3f}] s")
        else:
            import numpy as np

            gaps = np.diff(
                np.concatenate(
                    ([max(start_s, inside[0])], inside[(inside > start_s) & (inside < end_s)], [min(end_s, inside[-1])])
                )
            )
            if len(gaps) and gaps.max() > max_gap_s:
                reasons.append(
                    f"{device}: gap of {gaps.max():.3f} s between samples in the window "
                    f"(limit {settings.max_gap_periods:g} periods = {max_gap_s:.3f} s)"
                )
        win = dev_samples[(dev_samples["t_s"] >= start_s) & (dev_samples["t_s"] <= end_s)]
        counter = win["energy_j"].dropna().astype(float).to_numpy()
        if (
            len(counter) > 1
            and (counter[1:] < counter[:-1]).any()
            and "energy counter decreased inside the window" not in reasons
        ):
            reasons.append(f"{device}: energy counter decreased inside the window")
        limit_w = max_power_limit_w(env, str(device))
        power = win["power_instant_w"].dropna().astype(float)
        if len(power) and (power < 0).any():
            reasons.append(f"{device}: negative power reading ({power.min():.1f} W)")
        if limit_w and len(power) and power.max() > (1 + settings.power_limit_margin_rel) * limit_w:
            reasons.append(f"{device}: power {power.max():.0f} W above the GPU's limit {limit_w:.0f} W")
        ev = win["clocks_event_reasons"].dropna()  # unsigned 64-bit: no cast to int64 (bit 63 would overflow)
        if len(ev):
            seen = 0
            for v in ev:
                seen |= int(v)
            names = [name for bit, name in THROTTLE_BITS.items() if seen & bit]
            if names:
                flags.append(f"{device}: throttled during the window ({', '.join(names)})")
    return Verdict(not reasons, reasons, flags, withheld)


WITHHELD_SUFFIX = "its energy figures are left out, the main window stands"
"""How a flag on a named window whose figures validation withheld ends."""


def named_window_findings(
    result: dict[str, Any],
    settings: ValidationSettings,
    min_s: float,
    period_s: float,
    reasons: list[str],
    flags: list[str],
) -> dict[str, str]:
    """The rules on a trial's other named windows (``eval`` of a ResNet run; ``prefill``,
    ``decode``: a user's program marks them) and on what its control channel carried;
    appends to ``reasons`` (invalidating) and ``flags``.

    * a named window must last ``min_window_periods`` sensor periods, have a known GPU
      energy and pass the cross-check as the main window must. One that does not has
      its energy figures withheld (:data:`gcbench.metrics.WINDOW_SENSOR_FIGURES`: left
      out of the statistics, kept in the store) and is flagged; the trial's main window
      is its own measurement and stands. A ResNet-50 evaluation of 1,000 images lasts
      well under the 1 s of ten NVML periods on a modern GPU: judging the whole trial on
      it would invalidate every fixed-budget training run there.
    * a window a program never ended (closed at its exit) invalidates the trial: its end
      is not the program's;
    * every other control-channel problem, and a trial without a count of its unit of
      work (no J/unit), is a flag with its sentence.

    Returns:
        ``{window key: reason}`` of the windows whose figures are withheld.
    """
    withheld: dict[str, str] = {}
    energy = result.get("energy") or {}
    for key, win in (result.get("windows") or {}).items():
        if key in ("main", "tokenize"):
            continue
        start_s, end_s = win.get("start_s"), win.get("end_s")
        problems: list[str] = []
        if start_s is None or end_s is None:
            problems.append(f"window {key}: not recorded")
        else:
            duration_s = end_s - start_s
            if duration_s < min_s:
                problems.append(
                    f"window {key} too short for the sensor: {duration_s:.3f} s < {settings.min_window_periods:g} "
                    f"update periods of {period_s:.3f} s ({min_s:.3f} s)"
                )
        e = energy.get(key) or {}
        if start_s is not None and end_s is not None and e.get("gpu_energy_j") is None:
            problems.append(f"window {key}: GPU energy unknown")
        for dev in e.get("gpu", []):
            tier, text = cross_check_finding(dev, settings)
            if tier == "invalid":
                problems.append(f"window {key}: {text or 'energy counter and power reference disagree'}")
            elif text:
                flags.append(f"window {key}: {text}")
        if problems:
            withheld[key] = "; ".join(problems)
            flags.append(f"{withheld[key]}: {WITHHELD_SUFFIX}")
    control = result.get("control") or {}
    for key in control.get("windows_never_ended") or []:
        reasons.append(f"window {key} was never ended by the program: closed at its exit, so its end is not measured")
    for problem in control.get("problems") or []:
        if "was never ended" in problem or "still open when" in problem:
            continue  # a reason above
        flags.append(f"control channel: {problem}")
    if result.get("no_unit_reason"):
        flags.append(str(result["no_unit_reason"]))
    return withheld


CONTENTION_PREFIX = "CPU contention"
"""How the contention rule's sentences begin (counted by the report's measurement section)."""

_SCOPE = re.compile(r"^(?:gpu\d*|cpu\d*|window \S+): ")
"""The scope a finding may begin with: the device (``gpu0: ``) or named window it is about."""

_NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d.,]*(?![\w-])")


def finding_rule(text: str) -> str:
    """The rule a reason or flag sentence comes from, to count findings by rule.

    Every sentence here begins with its rule's words and puts the measured values after
    them: ``CPU contention: other processes used 48.1 % ...``, ``unstable window: ...``,
    ``outlier: ...``, ``gpu0: throttled during the window (thermal (HW))``. The rule is
    the text before the first ``:``, ``(`` or ``[``, without the device or window it
    names first and with any number left in it as an ellipsis (``gap of … s between
    samples in the window``).

    Args:
        text: a reason or flag as stored (``trials.reasons``, ``trials.flags``).

    Returns:
        The rule's words (the text itself, stripped, when it holds none of the above).
    """
    rest = text.strip()
    while _SCOPE.match(rest):
        rest = _SCOPE.sub("", rest, count=1)
    head = re.split(r"[:(\[]", rest, maxsplit=1)[0]
    return _NUMBER.sub("…", head).strip(" ,;") or text.strip()


def contention_findings(
    result: dict[str, Any], settings: ValidationSettings, reasons: list[str], flags: list[str]
) -> None:
    """The CPU-contention rule on every window (:mod:`gcbench.energy.cpuset`): other
    processes using more than ``cpu_contention_invalid_share`` of the trial's
    core-seconds invalidate the trial (when the plan sets it), more than
    ``cpu_contention_flag_share`` flag it;
    a window whose contention /proc could not tell, or a trial that could not be pinned,
    is flagged. A window whose others' time is within the readings' rounding
    (``beyond_resolution`` false, :func:`gcbench.energy.cpuset.resolution_ticks`) is not
    judged on its share. A result without a ``cpus`` record (older trials) is not judged.
    """
    cpus = result.get("cpus")
    if not isinstance(cpus, dict):
        return
    if cpus.get("error"):
        flags.append(f"{CONTENTION_PREFIX} not excluded: the trial's CPU set was not applied ({cpus['error']})")
    for key, w in sorted((cpus.get("contention") or {}).items(), key=lambda kv: (kv[0] != "main", kv[0])):
        if not isinstance(w, dict):
            continue
        share = w.get("share")
        where = f"window {key}" if key != "main" else "the window"
        if share is None:
            flags.append(f"{CONTENTION_PREFIX} unknown in {where}: {w.get('error') or 'not measured'}")
            continue
        if w.get("beyond_resolution") is False:
            continue  # others' time within the whole-tick readings' rounding: not told apart from none
        text = (
            f"{CONTENTION_PREFIX}: other processes used {100 * share:.1f} % of the trial's "
            f"{w.get('n_cpus')} CPU(s) ({w.get('cpus')}) during {where} "
            f"({w.get('others_s', 0):.2f} of {w.get('capacity_s', 0):.2f} core-s)"
        )
        if settings.cpu_contention_invalid_share is not None and share > settings.cpu_contention_invalid_share:
            reasons.append(text + f"; limit {100 * settings.cpu_contention_invalid_share:g} %")
        elif share > settings.cpu_contention_flag_share:
            flags.append(text + f"; flagged above {100 * settings.cpu_contention_flag_share:g} %")


def stability_finding(
    result: dict[str, Any], start_s: float, end_s: float, settings: ValidationSettings
) -> tuple[str, str | None]:
    """The throughput-stability rule on the main window (:mod:`gcbench.stability`).

    Recomputed from the progress points in result.json with the plan's
    ``stability_min_steps``, then judged by :func:`gcbench.stability.window_finding`.
    """
    from gcbench.stability import window_finding, window_stability

    prog = ((result.get("progress") or {}).get("main") or {}).get("points")
    stab = window_stability(prog, start_s, end_s, settings.stability_min_steps).to_dict() if prog else None
    return window_finding(stab, settings)


def twin_finding(values: list[float | None], settings: ValidationSettings) -> str | None:
    """The group rule for exactly two valid repetitions: their throughputs (steps per
    second of the main window) differ by more than ``twin_max_ratio``.

    Returns:
        The flag sentence (it begins with :data:`gcbench.stability.TWIN_FLAG`), or None.
    """
    from gcbench.stability import TWIN_FLAG, twin_ratio

    if len(values) != 2:
        return None
    ratio = twin_ratio(*values)
    if ratio is None or ratio <= settings.twin_max_ratio:
        return None
    a, b = values
    return (
        f"{TWIN_FLAG}: the two valid repetitions ran at {a:.4g} and {b:.4g} steps/s ({ratio:.1f}x apart, "
        f"limit {settings.twin_max_ratio:g}x); the group is inconclusive"
    )


def average_power_finding(dev: dict[str, Any], duration_s: float, settings: ValidationSettings) -> tuple[str, str]:
    """Energy integrated from a trailing-average power reading only (C16): power steps
    at the window's edges leave up to ``edge_uncertainty_rel`` of error even after the
    lag shift (:mod:`gcbench.energy.window`); above ``cross_check_invalid_rel`` the trial
    is invalid, above ``cross_check_flag_rel`` flagged (the same thresholds as the
    counter's cross-check, the same edge allowance).

    Returns:
        (tier, sentence): tier ``ok``, ``flag`` or ``invalid``.
    """
    rel = dev.get("edge_uncertainty_rel")
    if rel is None:
        return "ok", ""
    text = (
        f"{dev.get('device', 'gpu')}: energy from average power only over a {duration_s:.2f} s window: "
        f"power steps at its edges leave up to {100 * rel:.1f} % uncertainty"
    )
    if rel > settings.cross_check_invalid_rel:
        return "invalid", text + f" (limit {100 * settings.cross_check_invalid_rel:g} %; measure a longer window)"
    if rel > settings.cross_check_flag_rel:
        return "flag", text
    return "ok", ""


def cross_check_finding(dev: dict[str, Any], settings: ValidationSettings) -> tuple[str, str | None]:
    """The cross-check's verdict on one GPU of a result at the plan's thresholds.

    Args:
        dev: one ``energy.main.gpu[]`` entry of result.json (a DeviceEnergy dict).
        settings: ``cross_check_flag_rel`` and ``cross_check_invalid_rel``.

    Returns:
        (tier, sentence): tier ``ok``, ``flag``, ``invalid`` or ``unchecked``; the
        sentence names the device, both energies, the difference, the edge allowance
        and the threshold crossed (None for ``ok`` and for a window too short to check,
        which the window rule already reports). The difference that counts is
        max(0, |rel| - allowance) (docs/measurement.md). Results written before the
        1-s average reference (no ``cross_check_method``) hold the instant-power
        difference in ``cross_check_rel``: it is held to ``cross_check_invalid_rel``
        without allowance, as the single threshold was before.
    """
    device = dev.get("device", "gpu?")
    rel = dev.get("cross_check_rel")
    if dev.get("cross_check_method") is None:
        if rel is not None and abs(rel) > settings.cross_check_invalid_rel:
            return "invalid", (
                f"{device}: counter and integrated power disagree by {rel * 100:+.2f} % "
                f"(limit {settings.cross_check_invalid_rel * 100:g} %)"
            )
        return "ok", None
    if rel is None:
        why = dev.get("cross_check_reason") or "no reference"
        if dev.get("method") in (None, "unavailable") or "shorter than" in why:
            return "unchecked", None
        return "unchecked", f"{device}: energy counter not cross-checked: {why}"
    allowance = float(dev.get("cross_check_allowance_rel") or 0.0)
    excess = max(0.0, abs(rel) - allowance)
    if excess <= settings.cross_check_flag_rel:
        return "ok", None
    tier, limit = (
        ("invalid", settings.cross_check_invalid_rel)
        if excess > settings.cross_check_invalid_rel
        else ("flag", settings.cross_check_flag_rel)
    )
    energy, ref = dev.get("energy_j"), dev.get("cross_check_j")
    both = f" ({energy:.1f} J against {ref:.1f} J)" if energy is not None and ref is not None else ""
    return tier, (
        f"{device}: energy counter and 1-s average power differ by {rel * 100:+.2f} %{both}, "
        f"{excess * 100:.2f} % beyond the {allowance * 100:.2f} % allowed for power steps at the "
        f"window edges ({tier} above {limit * 100:g} %)"
    )


def outliers(values, k: float) -> list[bool]:
    """Outlier mask by the MAD rule: |x - median| > k * 1.4826 * MAD.

    1.4826 scales the MAD to the standard deviation of a normal distribution
    (Leys et al. 2013, "Detecting outliers: do not use standard deviation around the
    mean, use absolute deviation around the median"). NaNs are never outliers; a
    group with MAD 0 has no outliers.
    """
    import numpy as np

    x = np.asarray(values, dtype=float)
    ok = ~np.isnan(x)
    if ok.sum() < 3:
        return [False] * len(x)
    med = np.median(x[ok])
    mad = 1.4826 * np.median(np.abs(x[ok] - med))
    if mad == 0:
        return [False] * len(x)
    return [bool(o and abs(v - med) > k * mad) for v, o in zip(x, ok, strict=True)]


def validate_run(conn, dag_run_pk: int, settings: ValidationSettings) -> dict[str, Any]:
    """Validate every trial of a DAG run and store validity, reasons and flags.

    Returns:
        ``{"valid": n, "invalid": n, "reasons": {reason: count}, "inconclusive": [variants]}``;
        a group is inconclusive with fewer than ``min_valid_repetitions`` valid
        repetitions, or when its two valid repetitions' throughputs are more than
        ``twin_max_ratio`` apart (:func:`twin_finding`, flagged on both trials).
    """
    import json

    from gcbench.store import queries

    df = queries.trials_frame(conn, dag_run_pk)
    verdicts: dict[int, Verdict] = {}
    with conn.cursor() as cur:
        cur.execute("SELECT id, result::text FROM trials WHERE dag_run_id = %s", (dag_run_pk,))
        results = {pk: json.loads(r) if r else None for pk, r in cur.fetchall()}
    conn.commit()
    for row in df.itertuples():
        samples = queries.samples_frame(conn, dag_run_pk, row.trial_id)
        verdict = check_trial(results.get(row.trial_pk), row.status, samples, settings, row.error)
        if row.samples_partial and row.status == "ok":
            verdict.flags.append("samples partial")
        verdicts[row.trial_pk] = verdict
    twins_apart: set[str] = set()
    for variant, group in df.groupby("variant"):
        kind = group["kind"].iloc[0]
        valid_rows = group[[verdicts[pk].valid for pk in group["trial_pk"]]]

        def known(m: str, rows=valid_rows) -> bool:
            return bool(m in rows and rows[m].notna().any())

        metric = kinds.primary_metric(kind, known)
        if metric in valid_rows:
            mask = outliers(valid_rows[metric].to_numpy(), settings.outlier_mad_k)
            for pk, is_out in zip(valid_rows["trial_pk"], mask, strict=True):
                if is_out:
                    verdicts[pk].flags.append(
                        f"outlier: {metric} more than {settings.outlier_mad_k:g} scaled MADs from the group median"
                    )
        if "window_steps_per_s" in valid_rows:
            twin = twin_finding([None if v != v else float(v) for v in valid_rows["window_steps_per_s"]], settings)
            if twin:
                twins_apart.add(variant)
                for pk in valid_rows["trial_pk"]:
                    verdicts[pk].flags.append(twin)
    summary: dict[str, Any] = {"valid": 0, "invalid": 0, "reasons": {}, "inconclusive": []}
    for pk, verdict in verdicts.items():
        queries.set_validity(conn, pk, verdict.valid, verdict.reasons, verdict.flags, verdict.withheld)
        summary["valid" if verdict.valid else "invalid"] += 1
        for reason in verdict.reasons:
            key = finding_rule(reason)  # "gpu0: samples do not cover ..." counts under its rule, not "gpu0"
            summary["reasons"][key] = summary["reasons"].get(key, 0) + 1
    conn.commit()
    for variant, group in df.groupby("variant"):
        n_valid = sum(verdicts[pk].valid for pk in group["trial_pk"])
        if n_valid < settings.min_valid_repetitions or variant in twins_apart:
            summary["inconclusive"].append(variant)
    return summary
