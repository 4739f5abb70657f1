"""Window energy from counter reads and power samples: tick detection, edge correction,
power integration and the counter/power cross-check.

Pure functions on numpy arrays (no sensor access), so that the same code runs on live
samples, on the simulated device and on the recorded H200 traces in
``tests/fixtures/gpu``.

Why edge correction (ARCHITECTURE.md, measured on an H200): NVML's energy counter only
changes every ~100 ms (90-110 ms between ticks), so the plain difference of two counter
reads at a window's edges is off by up to 100 ms x P at each edge. We locate the
counter's ticks (the times at which its value changes), take the counter difference
between the first well-located tick after the window's start (``T_a``) and the first
after its end (``T_b``), and add the energy between each edge and its tick by
integrating instant power over that short span::

    E = C(T_b) - C(T_a) + integral_{start}^{T_a} P dt - integral_{end}^{T_b} P dt

Only spans of about one tick period (~0.1 s) are integrated, so a few percent of error
in instant power (the H200 traces show -2.7 % on a steady load, -10 % on a bursty one)
costs well under 0.1 % of a window of several seconds.

The cross-check (:func:`cross_check_reference`, docs/measurement.md) compares the
counter's energy with a *reference* from another reading of the same sensor: NVML's
1-second average power, integrated over the window shifted by its lag
(:data:`AVERAGE_POWER_LAG_S`). On the H200 traces the 1-s average read at time t is
the mean power over [t - 1.07 s, t - 0.07 s] (rms 9 W against the counter's own 1-s
means, bursty load included), whereas instant power refreshes every ~100 ms, samples
only part of each period and misses bursts (-10 % on a bursty load). A 1-s average
cannot place a power step more finely than its window, so a step at a window edge
leaves up to :data:`EDGE_ALLOWANCE_S` x the step of error; that much is allowed on
top of the relative thresholds, from the step measured at each edge.

All times are seconds (``t_s``) on one time base; energies joules; power watts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

DEFAULT_UPDATE_PERIOD_S = 0.1
"""Sensor update period assumed when it cannot be observed (NVML: ~100 ms, ARCHITECTURE.md)."""

MAX_TICK_UNCERTAINTY_S = 0.02
"""A tick is *well located* when the reads around it are at most 2 x this apart."""

MIN_WINDOW_PERIODS = 10
"""A window shorter than this many sensor update periods is flagged ``window_too_short``."""


@dataclass
class Ticks:
    """The counter's ticks, found in a series of counter reads.

    Attributes:
        t_s: estimated tick times (midpoint of the last read before and the first
            read after the change), shape (n,), s.
        uncertainty_s: half the gap between those two reads, shape (n,), s.
        energy_j: counter value right after each tick, decreases dropped, shape (n,), J.
        first_read_t_s: time of the first read, s.
        first_energy_j: counter value at the first read, J.
        decreased_t_s: read times at which the raw counter went down (step dropped).
        period_s: median interval between adjacent well-located ticks, s; None when
            fewer than two such intervals exist.
    """

    t_s: np.ndarray
    uncertainty_s: np.ndarray
    energy_j: np.ndarray
    first_read_t_s: float
    first_energy_j: float
    decreased_t_s: list[float] = field(default_factory=list)
    period_s: float | None = None


def monotone_counter(energy_j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative counter with every negative step dropped.

    Args:
        energy_j: raw counter reads, shape (n,), J.

    Returns:
        (cumulative, decreased): the corrected counter (starts at ``energy_j[0]``,
        never decreases) and the indices of reads where the raw counter decreased.
    """
    e = np.asarray(energy_j, dtype=float)
    if e.size == 0:
        return e.copy(), np.array([], dtype=int)
    steps = np.diff(e)
    decreased = np.nonzero(steps < 0)[0] + 1
    steps = np.where(steps < 0, 0.0, steps)
    return np.concatenate(([e[0]], e[0] + np.cumsum(steps))), decreased


def detect_ticks(t_s: np.ndarray, energy_j: np.ndarray, max_uncertainty_s: float = MAX_TICK_UNCERTAINTY_S) -> Ticks:
    """Find where a polled counter changed.

    Args:
        t_s: read times, increasing, shape (n,), s.
        energy_j: counter value at each read, shape (n,), J.
        max_uncertainty_s: ticks located to within this are used for the period.

    Returns:
        :class:`Ticks`. A gap that holds two ticks shows as one change with a large
        uncertainty; such ticks are not used as window edges by
        :func:`counter_window_energy_j` when a well-located one is available.

    Raises:
        ValueError: when ``t_s`` and ``energy_j`` differ in shape or are empty.
    """
    t = np.asarray(t_s, dtype=float)
    e = np.asarray(energy_j, dtype=float)
    if t.shape != e.shape or t.size == 0:
        raise ValueError("t_s and energy_j must be non-empty and of the same shape")
    cum, decreased = monotone_counter(e)
    changed = np.nonzero(np.diff(cum) > 0)[0] + 1
    tick_t = (t[changed - 1] + t[changed]) / 2
    unc = (t[changed] - t[changed - 1]) / 2
    period = None
    if changed.size >= 3:
        good = unc <= max_uncertainty_s
        both = good[1:] & good[:-1]
        gaps = np.diff(tick_t)[both]
        if gaps.size >= 2:
            med = float(np.median(gaps))
            # drop intervals that span a missed tick
            gaps = gaps[gaps < 1.5 * med]
            period = float(np.median(gaps)) if gaps.size else None
    return Ticks(
        t_s=tick_t,
        uncertainty_s=unc,
        energy_j=cum[changed],
        first_read_t_s=float(t[0]),
        first_energy_j=float(cum[0]),
        decreased_t_s=[float(x) for x in t[decreased]],
        period_s=period,
    )


def power_integral_j(t_s: np.ndarray, power_w: np.ndarray, a_s: float, b_s: float) -> float:
    """Trapezoid of power samples from ``a_s`` to ``b_s``, J (negative when b < a).

    Power is interpolated linearly at the bounds and held constant beyond the first
    and last samples. NaN samples (unknown) are skipped.

    Raises:
        ValueError: when no finite sample exists.
    """
    if b_s < a_s:
        return -power_integral_j(t_s, power_w, b_s, a_s)
    t = np.asarray(t_s, dtype=float)
    p = np.asarray(power_w, dtype=float)
    ok = np.isfinite(p) & np.isfinite(t)
    t, p = t[ok], p[ok]
    if t.size == 0:
        raise ValueError("no power samples")
    if b_s == a_s:
        return 0.0
    inner = (t > a_s) & (t < b_s)
    tt = np.concatenate(([a_s], t[inner], [b_s]))
    pp = np.concatenate(([np.interp(a_s, t, p)], p[inner], [np.interp(b_s, t, p)]))
    return float(np.trapezoid(pp, tt))


@dataclass
class CounterWindow:
    """Energy of one window from a counter.

    Attributes:
        energy_j: edge-corrected energy, J.
        counter_j: C(T_b) - C(T_a), J.
        start_correction_j: energy from the window start to T_a, J (added).
        end_correction_j: energy from the window end to T_b, J (subtracted).
        tick_start_s, tick_end_s: T_a and T_b, s.
        edge_uncertainty_s: the larger of the two ticks' location uncertainty, s.
        decreased: True when the raw counter decreased inside the window.
        clamped: an edge part was bounded to [0, counter step] (instant power
            disagreed with the counter near an edge).
    """

    energy_j: float
    counter_j: float
    start_correction_j: float
    end_correction_j: float
    tick_start_s: float
    tick_end_s: float
    edge_uncertainty_s: float
    decreased: bool
    clamped: bool = False


def _tick_after(ticks: Ticks, t: float, max_unc: float) -> int | None:
    idx = np.nonzero(ticks.t_s >= t)[0]
    if idx.size == 0:
        return None
    good = idx[ticks.uncertainty_s[idx] <= max_unc]
    # prefer a well-located tick, but not one more than ~3 periods away
    if good.size and ticks.t_s[good[0]] - t <= 0.35:
        return int(good[0])
    return int(idx[0])


def counter_window_energy_j(
    ticks: Ticks,
    power_t_s: np.ndarray,
    power_w: np.ndarray,
    start_s: float,
    end_s: float,
    max_tick_uncertainty_s: float = MAX_TICK_UNCERTAINTY_S,
) -> CounterWindow | None:
    """Edge-corrected window energy (see module docstring).

    Args:
        ticks: from :func:`detect_ticks`.
        power_t_s, power_w: instant power samples, shape (m,), s and W.
        start_s, end_s: window edges, s.
        max_tick_uncertainty_s: prefer ticks located at least this well.

    Returns:
        The :class:`CounterWindow`, or None when no tick follows the window's end (the
        caller then integrates power instead). When both edges fall before the same
        tick the result is the power integral over the window itself.
    """
    ka = _tick_after(ticks, start_s, max_tick_uncertainty_s)
    kb = _tick_after(ticks, end_s, max_tick_uncertainty_s)
    if ka is None or kb is None:
        return None
    if kb < ka:  # a well-located end tick can come before a poorly located start tick
        ka = kb
    ta, tb = float(ticks.t_s[ka]), float(ticks.t_s[kb])
    counter = float(ticks.energy_j[kb] - ticks.energy_j[ka])
    a, clamped_a = _edge_part_j(ticks, ka, power_t_s, power_w, start_s)
    b, clamped_b = _edge_part_j(ticks, kb, power_t_s, power_w, end_s)
    dec = any(start_s <= x <= tb for x in ticks.decreased_t_s)
    return CounterWindow(
        energy_j=counter + a - b,
        counter_j=counter,
        start_correction_j=a,
        end_correction_j=b,
        tick_start_s=ta,
        tick_end_s=tb,
        edge_uncertainty_s=float(max(ticks.uncertainty_s[ka], ticks.uncertainty_s[kb])),
        decreased=dec,
        clamped=clamped_a or clamped_b,
    )


def _edge_part_j(ticks: Ticks, k: int, power_t_s, power_w, edge_s: float) -> tuple[float, bool]:
    """Energy from ``edge_s`` to tick ``k``, J, bounded by what the counter says.

    The counter step of tick k is the energy of the whole tick interval holding the
    edge, so the part after the edge lies in [0, step]. Instant power lags the load on
    real GPUs (a 50 ms burst shows after it ended in the H200 traces); without this
    bound a short window could come out negative.
    """
    part = power_integral_j(power_t_s, power_w, edge_s, float(ticks.t_s[k]))
    prev_e = ticks.energy_j[k - 1] if k > 0 else ticks.first_energy_j
    prev_t = ticks.t_s[k - 1] if k > 0 else ticks.first_read_t_s
    step = float(ticks.energy_j[k] - prev_e)
    bound = step if prev_t <= edge_s else None  # only when the step's interval holds the edge
    clamped = part < 0 or (bound is not None and part > bound)
    part = max(part, 0.0)
    if bound is not None:
        part = min(part, bound)
    return part, clamped


def naive_counter_energy_j(read_t_s: np.ndarray, energy_j: np.ndarray, start_s: float, end_s: float) -> float:
    """The plain difference of the last counter reads at or before each edge, J.

    What a meter that reads the counter only at the window's edges reports; kept for
    comparison (gpu_check, tests), never as a result.
    """
    t = np.asarray(read_t_s, dtype=float)
    cum, _ = monotone_counter(np.asarray(energy_j, dtype=float))
    i = max(int(np.searchsorted(t, start_s, side="right")) - 1, 0)
    j = max(int(np.searchsorted(t, end_s, side="right")) - 1, 0)
    return float(cum[j] - cum[i])


def cross_check(energy_j: float, integrated_j: float, threshold: float = 0.03) -> tuple[float | None, bool]:
    """Relative disagreement of a counter energy with integrated power (no edge allowance).

    Kept for the instant-power integral, recorded for information only: on a bursty
    H200 load it differs from the counter by +11.7 % (docs/measurement.md), so the
    rule uses :func:`cross_check_reference` instead.

    Returns:
        (rel, disagree): rel = (energy_j - integrated_j) / integrated_j (None when the
        integral is not positive), and whether |rel| exceeds ``threshold``.
    """
    if integrated_j is None or not integrated_j > 0:
        return None, False
    rel = (energy_j - integrated_j) / integrated_j
    return rel, abs(rel) > threshold


AVERAGE_POWER_WINDOW_S = 1.0
"""Span of NVML's average power reading (NVML_FI_DEV_POWER_AVERAGE, nvmlDeviceGetPowerUsage
on Ampere and newer), s."""

AVERAGE_POWER_LAG_S = 0.57
"""Lag of the 1-s average power behind the power it averages, s: the reading taken at
time t is the mean over [t - 1.07, t - 0.07], whose middle is 0.57 s before t.

Measured on the H200 traces (tests/fixtures/gpu, driver 580.159.04) by
:func:`fit_average_power_lag_s`: 0.07 s best fits every 20 Hz read against the
counter's 1-s differences (0.065 s on the steady trace, 0.095 s on the bursty one,
0.07 s on the short-window one; tests/energy/test_integrate.py). The 0.07 s is the
delay between the sensor's ~100 ms updates and the reads (uniform, mean ~50 ms) plus
the update's own latency. Limits: one GPU model and driver; GPUs before Ampere report
a shorter average through nvmlDeviceGetPowerUsage, and A100/H100 sample only part of
each period (ARCHITECTURE.md), so the lag may differ there; gpu_check measures it."""

EDGE_ALLOWANCE_S = 0.175
"""Energy error, in seconds x the power step at a window edge, that the 1-s average
reference may carry at that edge: 0.125 s from the boxcar (a step exactly on the edge
puts integral_0^0.5 (0.5 - x) dx = 0.125 s x the step on the wrong side) plus 0.05 s,
half the sensor's 100 ms update period (the lag's granularity)."""


def average_power_reference_j(
    t_s: np.ndarray, average_w: np.ndarray, start_s: float, end_s: float, lag_s: float = AVERAGE_POWER_LAG_S
) -> float:
    """Window energy from the 1-s average power: its trapezoid over [start + lag, end + lag], J.

    Args:
        t_s, average_w: read times (s) and 1-s average power (W) of one GPU, shape (n,);
            NaN samples are skipped.
        start_s, end_s: the window, s.
        lag_s: :data:`AVERAGE_POWER_LAG_S`.

    The 1-s average at time u is E(u - lag + 0.5) - E(u - lag - 0.5) (E: cumulative
    energy), so its integral over the shifted window equals the mean of E over one
    second around the end minus the same around the start: the window's energy exactly
    when power is steady within 0.5 s of each edge (:data:`EDGE_ALLOWANCE_S` otherwise).

    Raises:
        ValueError: no finite sample.
    """
    return power_integral_j(t_s, average_w, start_s + lag_s, end_s + lag_s)


def edge_power_step_w(
    t_s: np.ndarray, average_w: np.ndarray, edge_s: float, lag_s: float = AVERAGE_POWER_LAG_S
) -> float:
    """How much power changed across ``edge_s``, W: |mean over the second after it - mean
    over the second before it|, both read from the 1-s average (lag-corrected).

    Samples are held constant beyond the first and last read (a sampler that stopped
    early then under-states the step). Returns 0.0 without finite samples.
    """
    t = np.asarray(t_s, dtype=float)
    p = np.asarray(average_w, dtype=float)
    ok = np.isfinite(t) & np.isfinite(p)
    if not ok.any():
        return 0.0
    shift = lag_s - AVERAGE_POWER_WINDOW_S / 2
    after = np.interp(edge_s + AVERAGE_POWER_WINDOW_S + shift, t[ok], p[ok])
    before = np.interp(edge_s + shift, t[ok], p[ok])
    return float(abs(after - before))


def reference_tail_s(sample_hz: float, lag_s: float = AVERAGE_POWER_LAG_S) -> float:
    """How long power must still be read after the last window's end, s: the shifted
    window and the end edge's step need 1-s averages up to end + lag + 0.5 s, plus two
    sample periods so that one read lies beyond it."""
    return lag_s + AVERAGE_POWER_WINDOW_S / 2 + 2.0 / sample_hz


@dataclass
class CrossCheck:
    """The counter's energy against the 1-s average reference over one window.

    Attributes:
        verdict: ``ok``, ``flag`` (excess above ``flag_rel``), ``invalid`` (above
            ``invalid_rel``) or ``unchecked`` (with ``reason``).
        reference_j: the reference energy (:func:`average_power_reference_j`), J; None
            when unchecked for want of samples.
        rel: (energy_j - reference_j) / reference_j, or None.
        allowance_j: :data:`EDGE_ALLOWANCE_S` x (power step at the start + at the end), J.
        allowance_rel: allowance_j / reference_j.
        excess_rel: max(0, |rel| - allowance_rel): the disagreement the edges cannot explain.
        lag_s: the lag used, s.
        reason: why unchecked, or None.
    """

    verdict: str
    reference_j: float | None = None
    rel: float | None = None
    allowance_j: float | None = None
    allowance_rel: float | None = None
    excess_rel: float | None = None
    lag_s: float = AVERAGE_POWER_LAG_S
    reason: str | None = None


def cross_check_reference(
    energy_j: float,
    t_s: np.ndarray,
    average_w: np.ndarray,
    start_s: float,
    end_s: float,
    *,
    flag_rel: float,
    invalid_rel: float,
    lag_s: float = AVERAGE_POWER_LAG_S,
    allowance_s: float = EDGE_ALLOWANCE_S,
) -> CrossCheck:
    """Check a window's counter energy against the 1-s average power (the rule of
    docs/measurement.md).

    Args:
        energy_j: the counter's (edge-corrected) energy of the window, J.
        t_s, average_w: 1-s average power reads of the same GPU, s and W, shape (n,).
        start_s, end_s: the window, s.
        flag_rel, invalid_rel: thresholds on the excess over the edge allowance
            (``ValidationSettings.cross_check_flag_rel`` / ``cross_check_invalid_rel``).
        lag_s, allowance_s: :data:`AVERAGE_POWER_LAG_S`, :data:`EDGE_ALLOWANCE_S`.

    Returns:
        :class:`CrossCheck`. ``unchecked`` when the window is shorter than the average
        (1 s: the reference cannot resolve it), when the reads do not cover the
        shifted window (within one update period, 0.1 s, at either end), or when the
        reference is not positive.
    """
    t = np.asarray(t_s, dtype=float)
    p = np.asarray(average_w, dtype=float)
    ok = np.isfinite(t) & np.isfinite(p)
    t, p = t[ok], p[ok]
    duration = end_s - start_s
    if duration < AVERAGE_POWER_WINDOW_S - 1e-6:
        return CrossCheck(
            "unchecked",
            lag_s=lag_s,
            reason=f"window of {duration:.3f} s is shorter than the "
            f"{AVERAGE_POWER_WINDOW_S:g}-s average power it would be checked against",
        )
    slack = DEFAULT_UPDATE_PERIOD_S
    if t.size == 0 or t[0] > start_s + lag_s + slack or t[-1] < end_s + lag_s - slack:
        span = f"[{start_s + lag_s:.3f}, {end_s + lag_s:.3f}] s"
        have = f"[{t[0]:.3f}, {t[-1]:.3f}] s" if t.size else "none"
        return CrossCheck(
            "unchecked",
            lag_s=lag_s,
            reason=f"1-s average power reads ({have}) do not cover the lag-shifted window {span}",
        )
    ref = average_power_reference_j(t, p, start_s, end_s, lag_s)
    if not ref > 0:
        return CrossCheck("unchecked", reference_j=ref, lag_s=lag_s, reason="reference energy is not positive")
    allowance = allowance_s * (edge_power_step_w(t, p, start_s, lag_s) + edge_power_step_w(t, p, end_s, lag_s))
    rel = (energy_j - ref) / ref
    excess = max(0.0, abs(rel) - allowance / ref)
    verdict = "invalid" if excess > invalid_rel else "flag" if excess > flag_rel else "ok"
    return CrossCheck(
        verdict,
        reference_j=ref,
        rel=rel,
        allowance_j=allowance,
        allowance_rel=allowance / ref,
        excess_rel=excess,
        lag_s=lag_s,
    )


def fit_average_power_lag_s(
    t_s: np.ndarray,
    average_w: np.ndarray,
    tick_t_s: np.ndarray,
    tick_energy_j: np.ndarray,
    candidates_s: np.ndarray | None = None,
) -> tuple[float, float]:
    """The delay theta that best maps 1-s average reads onto the counter, and its rms.

    For each read at t, the counter's mean power over [t - theta - 1, t - theta] (the
    cumulative counter interpolated between its well-located ticks) is compared with the
    read; theta minimizing the rms difference is returned with that rms (W). The lag of
    :data:`AVERAGE_POWER_LAG_S` is 0.5 s + theta.

    Args:
        t_s, average_w: reads, s and W, shape (n,); reads less than 1 s + 0.2 s after
            the first tick or after the last tick are left out.
        tick_t_s, tick_energy_j: the counter's ticks (:class:`Ticks` ``t_s``,
            ``energy_j``), shape (m,).
        candidates_s: theta values tried (default -0.05 to 0.25 s by 5 ms).

    Raises:
        ValueError: fewer than 10 usable reads.
    """
    t = np.asarray(t_s, dtype=float)
    p = np.asarray(average_w, dtype=float)
    tt = np.asarray(tick_t_s, dtype=float)
    ee = np.asarray(tick_energy_j, dtype=float)
    cand = np.arange(-0.05, 0.2501, 0.005) if candidates_s is None else np.asarray(candidates_s, dtype=float)
    use = np.isfinite(p) & (t > tt[0] + AVERAGE_POWER_WINDOW_S + 0.25) & (t < tt[-1]) if tt.size else np.zeros(0, bool)
    if use.sum() < 10:
        raise ValueError("too few 1-s average reads between the counter's ticks to fit a lag")
    t, p = t[use], p[use]
    best = (np.inf, 0.0)
    for th in cand:
        mean_w = (
            np.interp(t - th, tt, ee) - np.interp(t - th - AVERAGE_POWER_WINDOW_S, tt, ee)
        ) / AVERAGE_POWER_WINDOW_S
        rms = float(np.sqrt(np.mean((p - mean_w) ** 2)))
        if rms < best[0]:
            best = (rms, float(th))
    return best[1], best[0]


def too_short(duration_s: float, update_period_s: float | None) -> bool:
    """True when the window is under :data:`MIN_WINDOW_PERIODS` sensor update periods."""
    period = update_period_s or DEFAULT_UPDATE_PERIOD_S
    return duration_s < MIN_WINDOW_PERIODS * period
