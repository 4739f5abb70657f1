"""One device's energy over one window, from its samples and its declared facts.

Which method applies follows from what the device can read (:class:`gcbench.energy.backend.DeviceFacts`),
never from the backend's name:

* **energy counter**: the counter between the first ticks after each edge, edge
  corrected with power (:func:`gcbench.energy.integrate.counter_window_energy_j`), and
  cross-checked against the trailing-average power integrated over the window shifted
  by its lag (:func:`gcbench.energy.integrate.cross_check_reference`) where the device
  reads one. Method ``<label>-counter-edge-corrected``.
* **instant power, no counter**: trapezoid of instant power. ``<label>-power-integration``.
* **average power only** (C16: a GPU without counter or instant field, nvidia-smi on a
  driver without ``power.draw.instant``): the average lags the power it averages by
  ``average_lag_s`` (0.57 s for NVML's 1-s average on an H200, docs/measurement.md), so it
  is integrated over the window shifted by that lag
  (:func:`gcbench.energy.integrate.average_power_reference_j`); a power step at an edge
  still leaves up to (:data:`gcbench.energy.integrate.EDGE_ALLOWANCE_S` +
  :data:`AVERAGE_LAG_UNCERTAINTY_S`) x the step of error, recorded as ``edge_uncertainty_rel`` and flagged ``average_power_edges_uncertain``
  above the cross-check's flag threshold (validation invalidates the trial above its
  invalid threshold). ``<label>-average-power-lag-corrected``.
* **CPU counters** (RAPL, hwmon energy): the cumulative counter interpolated at the edges.

All times are seconds on the samples' time base, energies J, power W.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gcbench.energy import backend, integrate
from gcbench.energy.base import CROSS_CHECK_FLAG_REL, CROSS_CHECK_INVALID_REL, DeviceEnergy

AVERAGE_LAG_UNCERTAINTY_S = 0.1
"""How far the true lag of a trailing average may lie from the declared one, s: 0.5 s for
a boxcar read at once, 0.565-0.595 s fitted on the H200 traces (docs/measurement.md):
added to the edge allowance when average power is all there is."""


@dataclass
class DeviceSeries:
    """One device's samples as arrays (NaN = unknown), shape (n,) each; ``source`` is
    the backend that wrote them."""

    t_s: np.ndarray
    power_w: np.ndarray
    power_instant_w: np.ndarray
    energy_j: np.ndarray
    source: str


def read_samples(path: Path) -> dict[str, DeviceSeries]:
    """samples.csv -> {device: DeviceSeries}, rows sorted by time (a line cut by a kill
    is skipped)."""
    cols: dict[str, list[list[float]]] = {}
    sources: dict[str, str] = {}

    def num(x: str) -> float:
        return float(x) if x else np.nan

    with open(path, encoding="utf-8") as f:
        header = f.readline().strip().split(",")
        ix = {c: i for i, c in enumerate(header)}
        for line in f:
            parts = line.rstrip("\n").split(",")
            if len(parts) != len(header):
                continue  # a line cut by a kill
            dev = parts[ix["device"]]
            sources.setdefault(dev, parts[ix["source"]])
            cols.setdefault(dev, []).append(
                [
                    num(parts[ix["t_s"]]),
                    num(parts[ix["power_w"]]),
                    num(parts[ix["power_instant_w"]]),
                    num(parts[ix["energy_j"]]),
                ]
            )
    out = {}
    for dev, rows in cols.items():
        a = np.array(rows, dtype=float)
        a = a[np.argsort(a[:, 0], kind="stable")]
        out[dev] = DeviceSeries(a[:, 0], a[:, 1], a[:, 2], a[:, 3], sources[dev])
    return out


def device_facts_for(series: DeviceSeries, has_counter: bool = True, counter_reason: str | None = None):
    """The declared facts of the backend that wrote ``series`` (for callers that give
    none), with the counter switched off when ``has_counter`` is False."""
    f = backend.facts_of(series.source)
    if not has_counter:
        f = backend.without(f, energy_counter=False)
    return backend.DeviceFacts(f, counter_reason=counter_reason)


def gpu_window_energy(
    series: DeviceSeries,
    label: str,
    start_s: float,
    end_s: float,
    *,
    facts: backend.DeviceFacts | None = None,
    has_counter: bool = True,
    counter_reason: str | None = None,
    power_field: str | None = None,
    cross_check_threshold: float = CROSS_CHECK_FLAG_REL,
    cross_check_invalid: float = CROSS_CHECK_INVALID_REL,
) -> tuple[DeviceEnergy, list[str]]:
    """One GPU's energy over [start_s, end_s] from its samples (method: module docstring).

    Args:
        series: the device's samples.
        label: ``gpu0`` ...
        facts: what the device reads; default: the declared facts of ``series.source``
            with ``has_counter`` / ``counter_reason`` applied.
        power_field: the power reading integrated, when not the default (recorded).
        cross_check_threshold, cross_check_invalid: flag and invalid thresholds of the
            cross-check and of the average-power edge uncertainty; validation re-applies
            the plan's thresholds to the recorded figures.

    Returns:
        (DeviceEnergy, flags). ``energy_j`` is None only when no sample covers the window.
    """
    df = facts or device_facts_for(series, has_counter, counter_reason)
    f = df.facts
    power_field = power_field or df.power_field
    counter_reason = counter_reason or df.counter_reason
    flags: list[str] = []
    src = series.source
    # only what the device declares it reads is used
    inst_ok = np.isfinite(series.power_instant_w) & f.instant_power
    avg_ok = np.isfinite(series.power_w) & f.average_power
    averaged = not inst_ok.any()
    if not averaged:
        pt, pw = series.t_s[inst_ok], series.power_instant_w[inst_ok]
        power_note = None
    else:
        pt, pw = series.t_s[avg_ok], series.power_w[avg_ok]
        period = f.average_period_s or integrate.AVERAGE_POWER_WINDOW_S
        power_note = f"instant power unavailable: {period:g}-s average power integrated"
    e_ok = np.isfinite(series.energy_j)
    ticks = integrate.detect_ticks(series.t_s[e_ok], series.energy_j[e_ok]) if e_ok.sum() >= 2 else None
    period_s = (ticks.period_s if ticks and ticks.period_s else None) or f.update_period_s
    dev = DeviceEnergy(
        device=label,
        energy_j=None,
        method="unavailable",
        source=src,
        update_period_s=period_s,
        power_field=power_field,
        scope=f.counter_scope,
    )
    if integrate.too_short(end_s - start_s, period_s):
        flags.append("window_too_short")
    covered = pt.size > 0 and pt[0] <= start_s + 2 * period_s and pt[-1] >= end_s - 2 * period_s
    if not covered:
        dev.reason = "no power samples cover the window (sampler stopped or never ran)"
        flags.append("samples_incomplete")
        return dev, flags
    cw = integrate.counter_window_energy_j(ticks, pt, pw, start_s, end_s) if ticks and f.energy_counter else None
    if cw is not None:
        dev.energy_j = cw.energy_j
        dev.method = f.method("counter-edge-corrected")
        if cw.decreased:
            flags.append("counter_decreased")
        if not averaged:  # the instant trapezoid, for information
            dev.instant_integral_j = integrate.power_integral_j(pt, pw, start_s, end_s)
            dev.instant_integral_rel = integrate.cross_check(cw.energy_j, dev.instant_integral_j)[0]
        if f.average_power and avg_ok.any():
            cc = integrate.cross_check_reference(
                cw.energy_j,
                series.t_s[avg_ok],
                series.power_w[avg_ok],
                start_s,
                end_s,
                flag_rel=cross_check_threshold,
                invalid_rel=cross_check_invalid,
                lag_s=f.average_lag_s or integrate.AVERAGE_POWER_LAG_S,
            )
            dev.cross_check_method = "average-power-lag"
            dev.cross_check_j, dev.cross_check_rel = cc.reference_j, cc.rel
            dev.cross_check_allowance_rel, dev.cross_check_excess_rel = cc.allowance_rel, cc.excess_rel
            dev.cross_check_verdict, dev.cross_check_lag_s, dev.cross_check_reason = cc.verdict, cc.lag_s, cc.reason
            if cc.verdict in ("flag", "invalid"):
                flags.append("cross_check_disagreement")
        else:
            dev.cross_check_verdict = "unchecked"
            dev.cross_check_reason = "the device reads no average power to check the counter against"
    elif averaged:
        lag_s = f.average_lag_s if f.average_lag_s is not None else integrate.AVERAGE_POWER_LAG_S
        dev.energy_j = integrate.average_power_reference_j(pt, pw, start_s, end_s, lag_s)
        dev.method = f.method("average-power-lag-corrected")
        steps_w = integrate.edge_power_step_w(pt, pw, start_s, lag_s) + integrate.edge_power_step_w(
            pt, pw, end_s, lag_s
        )
        allowance_s = integrate.EDGE_ALLOWANCE_S + AVERAGE_LAG_UNCERTAINTY_S
        dev.edge_uncertainty_rel = allowance_s * steps_w / dev.energy_j if dev.energy_j and dev.energy_j > 0 else None
        dev.average_lag_s = lag_s
        power_note = f"{power_note}, shifted by its lag of {lag_s:g} s"
        if pt[-1] < end_s + lag_s - 2 * period_s:
            power_note += f" (reads end {end_s + lag_s - pt[-1]:.2f} s before the shifted window: last value held)"
            flags.append("average_power_tail_missing")
        if dev.edge_uncertainty_rel is not None and dev.edge_uncertainty_rel > cross_check_threshold:
            flags.append("average_power_edges_uncertain")
        dev.reason = counter_reason or "no energy counter on this device"
    else:
        dev.energy_j = integrate.power_integral_j(pt, pw, start_s, end_s)
        dev.method = f.method("power-integration")
        dev.reason = counter_reason or (
            "no counter on this backend"
            if not f.energy_counter
            else "no counter tick after the window end: power integrated"
        )
    if ticks and any(start_s <= t <= end_s for t in ticks.decreased_t_s) and "counter_decreased" not in flags:
        flags.append("counter_decreased")
    notes = [n for n in (dev.reason, power_note) if n]
    if f.simulated:
        notes.insert(0, "simulated device: deterministic power model, not a measurement")
    dev.reason = "; ".join(notes) or None
    return dev, flags


def cpu_window_energy(
    series: DeviceSeries, label: str, start_s: float, end_s: float, facts: backend.Facts | None = None
) -> DeviceEnergy:
    """One CPU counter's energy over the window (RAPL domain, hwmon energy sensor): the
    cumulative counter interpolated at the edges, J; unknown (None, with the reason)
    when its samples do not cover the window."""
    f = facts or backend.facts_of(series.source)
    ok = np.isfinite(series.energy_j)
    t, e = series.t_s[ok], series.energy_j[ok]
    dev = DeviceEnergy(device=label, energy_j=None, method=f.label or f.name, source=f.name, scope=f.counter_scope)
    if t.size < 2 or t[0] > start_s + 1.0 or t[-1] < end_s - 1.0:
        dev.method, dev.reason = "unavailable", f"{f.label or f.name} samples do not cover the window"
        return dev
    dev.energy_j = float(np.interp(end_s, t, e) - np.interp(start_s, t, e))
    dev.update_period_s = float(np.median(np.diff(t)))
    return dev


def read_utilization(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """utilization.csv -> ``{device: (t_s, gpu_util_pct)}`` (a line cut by a kill, or
    not a number, is skipped); ``{}`` when the file is absent."""
    rows: dict[str, list[tuple[float, float]]] = {}
    try:
        with open(path, encoding="utf-8") as f:
            next(f, None)  # header
            for line in f:
                parts = line.rstrip("\n").split(",")
                if len(parts) != 3:
                    continue
                try:
                    t, pct = float(parts[0]), float(parts[2])
                except ValueError:
                    continue
                if np.isfinite(t) and np.isfinite(pct):
                    rows.setdefault(parts[1], []).append((t, pct))
    except FileNotFoundError:
        return {}
    out = {}
    for device, pairs in rows.items():
        pairs.sort()
        arr = np.asarray(pairs, dtype=float)
        out[device] = (arr[:, 0], arr[:, 1])
    return out


def window_busy_share(
    util: dict[str, tuple[np.ndarray, np.ndarray]], devices: list[str], start_s: float, end_s: float
) -> tuple[float | None, int, str | None]:
    """The GPUs' busy share over ``[start_s, end_s]`` from their utilization reads.

    Each device's reads inside the window are averaged (each covers the driver's last
    sample period, so a read just after the start reaches a little before it); the
    devices' means are averaged. Returns ``(share 0..1 or None, reads used, reason when
    None)``: None when a device has no read inside the window.
    """
    means, n = [], 0
    for d in devices:
        t, pct = util.get(d, (np.zeros(0), np.zeros(0)))
        inside = (t >= start_s) & (t <= end_s)
        if not inside.any():
            return None, 0, f"no utilization read of {d} inside the window"
        means.append(float(np.clip(pct[inside], 0.0, 100.0).mean()) / 100.0)
        n += int(inside.sum())
    if not means:
        return None, 0, "no GPU"
    return float(np.mean(means)), n, None
