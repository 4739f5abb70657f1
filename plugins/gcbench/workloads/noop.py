"""The no-op workload: a window with (almost) nothing in it.

Used to measure the runner's own overhead per trial (``benchmarks/``) and for load
tests of the pipeline. It never imports torch.

Settings:
    tick_s (float, default 0.01): length of one sleep step when the window is given
        in seconds; the window then holds ceil(window_s / tick_s) sleeps.
    note (str, default ""): free text returned unchanged as the count ``note`` (and so
        stored as a text metric); labels a variant, and lets tests prove that plan
        values reach the trial verbatim, never through a shell.
    kill_self_after_s (float or null, default null): FAULT INJECTION, for reliability
        tests only. When set, the trial process SIGKILLs itself this many seconds after
        its main window opened (like an OOM kill or a lost node): no result.json, the
        samples streamed so far, the runner sees exit status -9. Null: never.
    jitter_s_sd (float, default 0): PLANTED NOISE, a test aid for precision targets
        (``repetitions: {min, max, until_ci_rel}``). With a window in seconds, each
        trial's window lasts ``seconds + |N(0, jitter_s_sd)|``, drawn from a generator
        seeded with the trial's seed (so a trial's length is reproducible), so that
        ``duration_s`` varies from trial to trial by a known amount. 0: no jitter.

Window:
    in steps: N trivial steps (an integer addition each), no sleep;
    in seconds: sleeps of ``tick_s`` until the time is reached (idle device).

Returns:
    steps: steps run in the main window (count).
    window_mode: ``steps`` or ``seconds``.
    device_kind: always ``cpu`` (nothing runs on a GPU).
    settings_effective, settings_not_in_effect: every setting, none not in effect.
"""

from __future__ import annotations

import os
import random
import signal
import time

from gcbench.kinds import WorkloadKind
from gcbench.spec import TrialSpec
from gcbench.workloads import TrialContext, effective, settings
from gcbench.workloads._loop import run_steps

DEFAULTS = {"tick_s": 0.01, "note": "", "kill_self_after_s": None, "jitter_s_sd": 0.0}


def run(spec: TrialSpec, ctx: TrialContext) -> dict:
    """Warm-up, then the empty window; see the module docstring."""
    cfg = settings(spec, DEFAULTS)
    tick_s = float(cfg["tick_s"])
    if tick_s <= 0:
        raise ValueError(f"noop setting tick_s must be > 0, got {tick_s}")
    note = cfg["note"]
    if not isinstance(note, str):
        raise ValueError(f"noop setting note must be text, got {note!r}")
    kill_after_s = cfg["kill_self_after_s"]
    if kill_after_s is not None and (
        isinstance(kill_after_s, bool) or not isinstance(kill_after_s, (int, float)) or kill_after_s < 0
    ):
        raise ValueError(f"noop setting kill_self_after_s must be a number >= 0 or null, got {kill_after_s!r}")
    jitter_s_sd = cfg["jitter_s_sd"]
    if isinstance(jitter_s_sd, bool) or not isinstance(jitter_s_sd, (int, float)) or not jitter_s_sd >= 0:
        raise ValueError(f"noop setting jitter_s_sd must be a number >= 0, got {jitter_s_sd!r}")
    window = spec.window
    if jitter_s_sd and window.seconds is not None:
        extra_s = abs(random.Random(spec.seed).gauss(0.0, float(jitter_s_sd)))
        window = window.model_copy(update={"seconds": window.seconds + extra_s})
        ctx.log(f"planted noise: jitter_s_sd={jitter_s_sd}: window {window.seconds:.3f} s")
    acc = [0]
    window_opened: list[float | None] = [None]

    def step(i: int) -> None:
        if (
            kill_after_s is not None
            and window_opened[0] is not None
            and time.monotonic() - window_opened[0] >= kill_after_s
        ):
            ctx.log(f"fault injection: kill_self_after_s={kill_after_s}: SIGKILL to pid {os.getpid()}")
            os.kill(os.getpid(), signal.SIGKILL)
        if seconds_mode:
            time.sleep(tick_s)
        else:
            acc[0] += i

    seconds_mode = spec.warmup.seconds is not None
    run_steps(spec.warmup, step, default_steps=0)
    seconds_mode = window.seconds is not None
    with ctx.window():
        window_opened[0] = time.monotonic()
        steps = run_steps(window, step, default_steps=1)
    out = {
        "steps": steps,
        "window_mode": "seconds" if seconds_mode else "steps",
        "device_kind": "cpu",
        **effective(cfg),  # nothing here depends on the machine: every setting is in effect
    }
    if note:
        out["note"] = note
    return out


KIND = WorkloadKind(
    name="noop",
    run="gcbench.workloads.noop:run",
    description="an (almost) empty window: the runner's own overhead per trial",
    defaults=DEFAULTS,
    primary_metrics=("duration_s",),
    metrics=("duration_s",),
    compared=("duration_s",),
    uses_gpu=False,
)
"""The kind's registration (entry point ``noop`` of group ``gcbench.workloads``)."""
