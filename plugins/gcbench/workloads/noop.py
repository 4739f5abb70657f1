"""The no-op workload: a window with (almost) nothing in it.

Used to measure the runner's own overhead per trial (``benchmarks/``) and for load
tests of the pipeline. It never imports torch.

Settings:
    tick_s (float, default 0.01): length of one sleep step when the window is given
        in seconds; the window then holds ceil(window_s / tick_s) sleeps.

Window:
    in steps: N trivial steps (an integer addition each), no sleep;
    in seconds: sleeps of ``tick_s`` until the time is reached (idle device).

Returns:
    steps: steps run in the main window (count).
    window_mode: ``steps`` or ``seconds``.
    device_kind: always ``cpu`` (nothing runs on a GPU).
"""

from __future__ import annotations

import time

from gcbench.spec import TrialSpec
from gcbench.workloads import TrialContext, settings
from gcbench.workloads._loop import run_steps

DEFAULTS = {"tick_s": 0.01}


def run(spec: TrialSpec, ctx: TrialContext) -> dict:
    """Warm-up, then the empty window; see the module docstring."""
    cfg = settings(spec, DEFAULTS)
    tick_s = float(cfg["tick_s"])
    if tick_s <= 0:
        raise ValueError(f"noop setting tick_s must be > 0, got {tick_s}")
    acc = [0]

    def step(i: int) -> None:
        if seconds_mode:
            time.sleep(tick_s)
        else:
            acc[0] += i

    seconds_mode = spec.warmup.seconds is not None
    run_steps(spec.warmup, step, default_steps=0)
    seconds_mode = spec.window.seconds is not None
    with ctx.window():
        steps = run_steps(spec.window, step, default_steps=1)
    return {
        "steps": steps,
        "window_mode": "seconds" if seconds_mode else "steps",
        "device_kind": "cpu",
    }
