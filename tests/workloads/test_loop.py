"""The shared step loop (gcbench.workloads._loop): progress inside a window, warm-up
until the step time settles."""

from __future__ import annotations

import pytest

from gcbench.spec import Amount, StableWarmup
from gcbench.stability import Progress
from gcbench.workloads._loop import recording, run_steps, warm_until_stable, warmup_log


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_steps_inside_a_window_are_reported_one_by_one():
    p = Progress(origin_monotonic=0.0, start_s=0.0)
    with recording(p):
        assert run_steps(Amount(steps=7), lambda i: None, default_steps=1) == 7
    assert [pt[1] for pt in p.points] == [1, 2, 3, 4, 5, 6, 7]
    # outside a window nothing is recorded
    assert run_steps(Amount(steps=3), lambda i: None, default_steps=1) == 3 and p.steps == 7


def test_with_a_device_sync_progress_is_reported_at_each_sync_only():
    syncs = []
    p = Progress(origin_monotonic=0.0, start_s=0.0)
    with recording(p):
        run_steps(Amount(steps=10), lambda i: None, default_steps=1, sync=lambda: syncs.append(1), check_every=4)
    assert [pt[1] for pt in p.points] == [4, 8, 10] and len(syncs) == 3
    p2 = Progress(origin_monotonic=0.0, start_s=0.0)
    with recording(p2):
        run_steps(Amount(seconds=0.05), lambda i: None, default_steps=1, sync=lambda: None, check_every=1000)
    assert p2.points[-1][1] == p2.steps and p2.steps % 1000 == 0


def test_warm_up_until_stable_stops_once_the_step_time_settles_and_is_logged():
    clock = Clock()
    times = [0.5, 0.3, 0.2, 0.12, 0.1, 0.1, 0.101, 0.099, 0.1, 0.1, 0.1]

    def step(i):
        clock.t += times[i]

    with warmup_log() as log:
        out = warm_until_stable(StableWarmup(cv_max=0.05, steps=4, max_seconds=60), step, clock=clock)
    assert out["settled"] and not out["capped"] and out["steps"] == 8 and out["cv"] <= 0.05
    assert log == [out]


def test_warm_up_that_never_settles_stops_at_its_cap():
    clock = Clock()

    def step(i):
        clock.t += 0.1 if i % 2 else 0.3

    out = warm_until_stable(StableWarmup(cv_max=0.05, steps=4, max_seconds=5), step, clock=clock)
    assert out["capped"] and not out["settled"] and out["seconds"] == pytest.approx(5.0, abs=0.3)
    assert out["cv"] == pytest.approx(0.5)


def test_run_steps_runs_an_until_stable_warm_up():
    n = run_steps(
        Amount(until_stable=StableWarmup(cv_max=0.5, steps=3, max_seconds=2)), lambda i: None, default_steps=0
    )
    assert n >= 3
