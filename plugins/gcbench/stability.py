"""Throughput stability: progress recorded inside a measured window, the window rule
and the group rule that works with two repetitions.

Why: an energy per token is only as good as the work it divides. A repetition whose
work stalled (another process took the CPU, the GPU throttled, a warm-up that had not
settled) does fewer steps in its window and its J/token moves by as much, yet every
energy rule passes. In ``make demo`` on a busy 2-core machine one ``tinylm-train``
repetition did 3-4 steps, ~70x fewer than its twin, and moved the group's J/token from
0.0057 to 0.269; the MAD outlier rule needs 3 values and smoke groups have 2.

Recording (trial side). :class:`Progress` notes the cumulative step count and the time
(seconds on the meter's time base, like the window edges) each time the workload's
step loop finishes work: after every step, or after each device synchronisation when
the loop synchronises only every few steps (then only the synchronised steps are
known to be done). At most :data:`MAX_POINTS` points are kept: when full, every other
point is dropped and points are then taken at least twice as far apart, so a window
of any length keeps a uniform record. The points go into result.json
(``progress.<window>.points``) and the ``progress`` table.

Rules (validation side, docs/measurement.md):

* :func:`window_stability` computes, from the points of the main window, the drift
  (throughput of the second half of the window against the first) and the stalls
  (throughput over sliding segments of at least 0.5 s: the slowest against the
  typical, their 90th percentile, and the share of the window lost to slow segments).
* :func:`twin_ratio` compares the throughput of the two repetitions of a group; with
  two values nobody can tell which one is right, so a group whose twins differ by more
  than ``twin_max_ratio`` is *inconclusive*.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

MAX_POINTS = 4096
"""Points kept per window (each [t_s, steps]; ~100 kB of result.json at most)."""

TWIN_FLAG = "twins disagree"
"""How the group rule's flag begins (the report marks the group inconclusive on it)."""


class Progress:
    """Cumulative steps against time inside one window.

    Args:
        origin_monotonic: ``time.monotonic()`` of the meter's origin; times are stored
            relative to it, on the samples' and windows' time base.
        start_s: the window's start on that time base (the first interval begins here).
        clock: monotonic clock (tests pass a fake one).

    Attributes:
        points: [[t_s, steps], ...], increasing in both.
        steps: steps finished so far.
        min_dt_s: points closer than this to the previous one are not kept (0 until
            the record first fills up).
    """

    def __init__(self, origin_monotonic: float, start_s: float, clock: Callable[[], float] = time.monotonic):
        self.origin = float(origin_monotonic)
        self.start_s = float(start_s)
        self.clock = clock
        self.points: list[list[float]] = []
        self.steps = 0
        self.min_dt_s = 0.0
        self._pending = False
        self._last: list[float] = []

    def done(self, steps: int = 1) -> None:
        """``steps`` more steps have finished now."""
        self.steps += steps
        t = self.clock() - self.origin
        if self.points and t - self.points[-1][0] < self.min_dt_s:
            self._pending = True
            self._last = [t, self.steps]
            return
        self._append([t, self.steps])

    def _append(self, point: list[float]) -> None:
        self.points.append(point)
        self._pending = False
        if len(self.points) >= MAX_POINTS:
            last = self.points[-1]
            self.points = self.points[:-1:2] + [last]
            span = self.points[-1][0] - self.start_s
            self.min_dt_s = max(2 * self.min_dt_s, 2 * span / MAX_POINTS)

    def close(self) -> None:
        """Keep the last step's point even when it came too soon after the previous one."""
        if self._pending:
            self._append(self._last)

    def to_dict(self) -> dict[str, Any]:
        """``{"points": [[t_s, steps], ...], "steps": n, "min_dt_s": s}`` (t rounded to 1 us)."""
        self.close()
        return {
            "points": [[round(t, 6), int(n)] for t, n in self.points],
            "steps": self.steps,
            "min_dt_s": self.min_dt_s,
        }


SEGMENT_MIN_S = 0.5
"""Shortest segment the window's throughput is judged on, s: five sensor update periods.
Shorter pauses (an OS time slice, one slow step among many) do not move a window's
energy per unit of work and are not judged."""

MAX_SEGMENTS = 10
"""A window is cut into at most this many equal segments (at least 2, the halves)."""

TYPICAL_PERCENTILE = 90
"""The window's typical throughput is this percentile of its segments' throughputs: the
median would be the stall's own rate when a stall fills most of the window."""

MAX_RATIO = 1000.0
"""Ratios are capped here (a segment with no progress at all), so result.json holds a number."""


@dataclass
class WindowStability:
    """Throughput stability of one window.

    The cumulative step count is interpolated linearly between the recorded points (a
    step is taken to progress evenly while it runs), from 0 at the window's start. The
    throughput is taken over segments of 1/``segments`` of the window (at least
    :data:`SEGMENT_MIN_S`), sliding by an eighth of a segment; the window's *typical*
    throughput is their :data:`TYPICAL_PERCENTILE` th percentile.

    Attributes:
        steps: steps finished in the window.
        steps_per_s: steps / window duration.
        segments: the window's length / the segment's (2-10).
        halves_ratio: throughput of the second half / the first (below 1: it slowed down).
        drift_ratio: max(halves_ratio, 1 / halves_ratio): how many times faster one half ran.
        stall_ratio: the typical throughput / the slowest segment's.
        stall_rel: share of the window lost to slow segments: the mean over the sliding
            segments of max(0, 1 - rate / typical rate).
        step_time_cv: coefficient of variation of the recorded step times (for
            information only: OS time slices on a busy CPU and asynchronous device
            queues make single steps vary without moving the window's throughput).
        longest_interval_s: the longest time between two recorded points, s.
        judged: False when there are too few steps or points; ``reason`` says why.
    """

    steps: int
    steps_per_s: float | None
    segments: int = 0
    halves_ratio: float | None = None
    drift_ratio: float | None = None
    stall_ratio: float | None = None
    stall_rel: float | None = None
    step_time_cv: float | None = None
    longest_interval_s: float | None = None
    judged: bool = False
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for result.json."""
        return asdict(self)


def _ratio(a: float, b: float) -> float:
    """a / b capped to [1 / MAX_RATIO, MAX_RATIO] (b = 0 gives MAX_RATIO)."""
    if b <= 0:
        return MAX_RATIO if a > 0 else 1.0
    return float(min(MAX_RATIO, max(1.0 / MAX_RATIO, a / b)))


def window_stability(points: list, start_s: float, end_s: float, min_steps: int = 4) -> WindowStability:
    """Drift and stalls of a window from its progress points.

    Args:
        points: [[t_s, cumulative steps], ...] as recorded by :class:`Progress`.
        start_s, end_s: the window, s (same time base).
        min_steps: fewer finished steps are not judged.

    Returns:
        :class:`WindowStability` (``judged`` False with a reason when too few steps or
        fewer than two points).
    """
    import numpy as np

    pts = np.array([p for p in points if start_s - 1e-9 <= p[0] <= end_s + 1e-6], dtype=float).reshape(-1, 2)
    duration = end_s - start_s
    steps = int(pts[-1, 1]) if len(pts) else 0
    out = WindowStability(steps=steps, steps_per_s=steps / duration if duration > 0 else None)
    if steps < min_steps or duration <= 0:
        out.reason = f"{steps} steps in the window (at least {min_steps} needed to judge its stability)"
        return out
    if len(pts) < 2:
        out.reason = f"{len(pts)} progress point in the window (the loop synchronised only at its end)"
        return out
    t = np.concatenate(([start_s], pts[:, 0], [end_s]))
    n = np.concatenate(([0.0], pts[:, 1], [pts[-1, 1]]))
    k = int(max(2, min(MAX_SEGMENTS, np.floor(duration / SEGMENT_MIN_S))))
    seg = duration / k
    # segments slide by an eighth of their length, so a stall is seen whole wherever it falls
    starts = np.linspace(start_s, end_s - seg, 8 * (k - 1) + 1)
    rates = (np.interp(starts + seg, t, n) - np.interp(starts, t, n)) / seg
    mid = (start_s + end_s) / 2
    n_mid = float(np.interp(mid, t, n))
    out.segments = k
    out.halves_ratio = _ratio((steps - n_mid) / (end_s - mid), n_mid / (mid - start_s))
    out.drift_ratio = max(out.halves_ratio, 1.0 / out.halves_ratio)
    typical = float(np.percentile(rates, TYPICAL_PERCENTILE))
    out.stall_ratio = _ratio(typical, float(rates.min()))
    out.stall_rel = float(np.maximum(0.0, 1.0 - rates / typical).mean()) if typical > 0 else 1.0
    dt, dn = np.diff(t[:-1]), np.diff(n[:-1])
    per_step = dt[dn > 0] / dn[dn > 0]
    mean = float(per_step.mean()) if per_step.size else 0.0
    out.step_time_cv = float(per_step.std() / mean) if mean > 0 else None
    out.longest_interval_s = float(dt.max()) if dt.size else None
    out.judged = True
    return out


def window_finding(stab: dict | None, settings) -> tuple[str, str | None]:
    """The window rule at the plan's thresholds.

    Args:
        stab: a :class:`WindowStability` as a dict (result.json ``stability.main``), or
            None when the trial recorded no progress.
        settings: :class:`gcbench.plan.schema.ValidationSettings` (``stability_*``).

    Returns:
        (tier, sentence): ``ok``, ``flag``, ``invalid`` or ``unchecked``, with the
        measured values in the sentence (None for ``ok``). Invalid: one half of the
        window ran more than ``stability_drift_invalid_ratio`` times faster than the
        other, or segments slower than the typical throughput (:data:`TYPICAL_PERCENTILE`
        th percentile of the segments') lost more than ``stability_stall_invalid_rel`` of
        the window. Flagged: the halves differ by more than ``stability_drift_flag_ratio``
        x, or a segment ran more than ``stability_stall_flag_ratio`` x slower than the
        typical throughput.
    """
    if stab is None:
        return "unchecked", "throughput stability not checked: the workload recorded no progress in its window"
    if not stab.get("judged"):
        return "unchecked", f"throughput stability not judged: {stab.get('reason')}"
    halves, drift = stab.get("halves_ratio"), stab.get("drift_ratio")
    ratio, lost = stab.get("stall_ratio"), stab.get("stall_rel")
    invalid, flags = [], []
    if drift is not None:
        what = (
            f"the window's second half ran at {halves:.2f}x the first half's throughput"
            if halves is not None
            else f"its halves differ {drift:.2f}x in throughput"
        )
        if drift > settings.stability_drift_invalid_ratio:
            invalid.append(f"{what} (invalid beyond {settings.stability_drift_invalid_ratio:g}x)")
        elif drift > settings.stability_drift_flag_ratio:
            flags.append(f"{what} (flag beyond {settings.stability_drift_flag_ratio:g}x)")
    if ratio is not None and lost is not None:
        what = (
            f"its slowest {1 / max(stab.get('segments') or 2, 1):.0%} of the window ran {ratio:.1f}x slower "
            f"than its typical throughput, {lost * 100:.0f} % of the window lost"
        )
        if lost > settings.stability_stall_invalid_rel:
            invalid.append(f"{what} (invalid above {settings.stability_stall_invalid_rel * 100:g} % lost)")
        elif ratio > settings.stability_stall_flag_ratio:
            flags.append(f"{what} (flag beyond {settings.stability_stall_flag_ratio:g}x)")
    if invalid:
        return "invalid", "unstable window: " + "; ".join(invalid + flags)
    if flags:
        return "flag", "unstable window: " + "; ".join(flags)
    return "ok", None


def twin_ratio(a: float | None, b: float | None) -> float | None:
    """max(a, b) / min(a, b) of two positive throughputs, or None when either is unknown
    or not positive."""
    if a is None or b is None or not (a > 0 and b > 0):
        return None
    return max(a, b) / min(a, b)
