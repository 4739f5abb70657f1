"""The local runner: one trial as a subprocess of the same entry point.

``python -m gcbench.trial SPEC.json OUTDIR`` runs with ``CUDA_VISIBLE_DEVICES`` set to
the trial's GPUs, in its own process group so that a timeout or a killed Airflow task
takes the whole trial (and its sampler) down with it. Arguments are an argv list:
no plan value ever reaches a shell.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gcbench.spec import TrialSpec

KILL_GRACE_S = 10.0
"""Seconds between SIGTERM and SIGKILL when a trial must be stopped."""


@dataclass
class RunnerOutcome:
    """What the runner saw of one trial process.

    Attributes:
        trial_id: the trial.
        exit_code: the process's exit status; negative: killed by that signal;
            None: it could not be started.
        wall_s: seconds from start to exit as seen by the runner.
        timed_out: the runner killed it at the trial timeout.
        outdir: the trial's output folder.
    """

    trial_id: str
    exit_code: int | None
    wall_s: float
    timed_out: bool
    outdir: str

    def save(self) -> None:
        """Write runner.json into the trial's folder (read by ``collect``)."""
        path = Path(self.outdir) / "runner.json"
        path.write_text(json.dumps(asdict(self)), encoding="utf-8")


def write_spec(spec: TrialSpec, outdir: Path) -> Path:
    """Write SPEC.json into the trial's folder; returns its path."""
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / "spec.json"
    path.write_text(spec.to_json(), encoding="utf-8")
    return path


def trial_argv(spec_path: str, outdir: str, python: str | None = None) -> list[str]:
    """argv of the trial entry point."""
    return [python or sys.executable, "-m", "gcbench.trial", str(spec_path), str(outdir)]


def trial_env(spec: TrialSpec, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of the trial process: the runner's, plus the trial's GPUs."""
    env = dict(os.environ if base is None else base)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in spec.devices)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def run_local(spec: TrialSpec, outdir: Path, timeout_s: float, python: str | None = None) -> RunnerOutcome:
    """Run one trial as a subprocess and wait for it.

    stdout and stderr go to ``OUTDIR/runner.log``; ``OUTDIR/runner.json`` records
    the outcome. A trial that fails is not an error of the runner (its exit status
    says so); only a process that cannot be started raises.

    Raises:
        TrialError: OUTDIR is read-only, full or nearly full (checked before the trial
            starts; an infrastructure failure, retried by Airflow).
        OSError: the interpreter cannot be started (likewise retried).
    """
    from gcbench.trial import check_writable

    outdir = Path(outdir)
    check_writable(outdir)
    spec_path = write_spec(spec, outdir)
    started = time.monotonic()
    timed_out = False
    with open(outdir / "runner.log", "ab") as log:
        proc = subprocess.Popen(trial_argv(str(spec_path), str(outdir), python), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=trial_env(spec), start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop(proc)
        except BaseException:
            _stop(proc)  # the Airflow task was killed: take the trial down with it
            raise
    outcome = RunnerOutcome(spec.trial_id, proc.returncode, time.monotonic() - started, timed_out, str(outdir))
    outcome.save()
    return outcome
