"""The local runner: one trial as a subprocess of the same entry point.

``python -m gcbench.trial SPEC.json OUTDIR`` runs with ``CUDA_VISIBLE_DEVICES`` set to
the trial's GPUs (and ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, :func:`trial_env`), in its own process group so that a timeout or a killed Airflow task
takes the whole trial (and its sampler) down with it; on Linux the trial is also
killed if the runner itself dies (``PR_SET_PDEATHSIG``), so a trial never outlives
the GPU lease its runner holds (:mod:`gcbench.store.gpulock`). Arguments are an argv
list: no plan value ever reaches a shell.

A stop request (:func:`request_stop`: ``gcbench run`` got Ctrl-C) stops the running
trial the way a kill does (SIGTERM to its process group, SIGKILL after
:data:`KILL_GRACE_S`), keeps what it wrote, and records it as interrupted; no trial
starts after it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from gcbench.spec import TrialSpec

KILL_GRACE_S = 10.0
"""Seconds between SIGTERM and SIGKILL when a trial must be stopped."""

POLL_S = 0.2
"""How often a waiting runner looks at the stop request."""

_stop_reason: str | None = None
_stop_event = threading.Event()


def request_stop(reason: str = "interrupted") -> None:
    """Ask every runner of this process to stop: the running trial is stopped and
    recorded as interrupted, and no further trial starts. Safe in a signal handler."""
    global _stop_reason
    if _stop_reason is None:
        _stop_reason = reason
    _stop_event.set()


def stop_requested() -> str | None:
    """The reason given to :func:`request_stop`, or None when no stop was requested."""
    return _stop_reason if _stop_event.is_set() else None


def _reset_stop() -> None:
    """Forget a stop request (tests)."""
    global _stop_reason
    _stop_reason = None
    _stop_event.clear()


_interruptible_depth = 0


@contextmanager
def interruptible() -> Iterator[None]:
    """A block that a stop request interrupts at once with KeyboardInterrupt (a Docker
    trial: ``run_docker`` then removes its container); elsewhere a stop request is only
    a flag the runners poll."""
    global _interruptible_depth
    _interruptible_depth += 1
    try:
        if stop_requested():
            raise KeyboardInterrupt
        yield
    finally:
        _interruptible_depth -= 1


def install_stop_handlers(signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> None:
    """Make SIGINT (Ctrl-C) and SIGTERM a stop request in this process (``gcbench run``'s
    child): the running trial is stopped and recorded as interrupted, none starts after
    it, and the run goes on to collect, validate and report what it has. Main thread only."""

    def _handler(signum, frame):
        name = signal.Signals(signum).name + (" (Ctrl-C)" if signum == signal.SIGINT else "")
        first = stop_requested() is None
        request_stop(name)
        if first:
            print(f"gcbench: {name}: stopping the running trial; no further trial starts", file=sys.stderr, flush=True)
        if _interruptible_depth:
            raise KeyboardInterrupt

    global _stop_handler
    _stop_handler = (_handler, signals)
    for sig in signals:
        signal.signal(sig, _handler)


_stop_handler = None


def reinstall_stop_handlers() -> None:
    """Put the handlers of :func:`install_stop_handlers` back, if they were installed
    (Airflow's task runner sets its own SIGTERM handler for every task it runs in
    process). Does nothing outside the main thread."""
    if _stop_handler is None or threading.current_thread() is not threading.main_thread():
        return
    handler, signals = _stop_handler
    for sig in signals:
        if signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)


class TrialInterrupted(Exception):
    """A trial was not started (or its GPU wait was given up) because a stop was requested."""


def die_with_parent(sig: int = signal.SIGKILL):
    """A ``preexec_fn`` that makes the child get ``sig`` when its parent dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``); None where that is not available."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child only calls it
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def _preexec() -> None:
        prctl(pr_set_pdeathsig, int(sig), 0, 0, 0)

    return _preexec


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
        interrupted: why the runner stopped it on request (Ctrl-C of ``gcbench run``),
            or None.
        gpu_wait_s: seconds the trial waited for its GPUs before it started.
        attempt_id: the attempt (:func:`begin_attempt`); its result.json must carry it.
        device_restored: what the runner put back after the trial process was gone
            (a power cap the killed trial left applied,
            :func:`gcbench.energy.powercap.restore_leftover`), or None.
    """

    trial_id: str
    exit_code: int | None
    wall_s: float
    timed_out: bool
    outdir: str
    interrupted: str | None = None
    gpu_wait_s: float = 0.0
    device_restored: str | None = None
    attempt_id: str | None = None

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


def begin_attempt(outdir: Path) -> str:
    """Start a new attempt of a trial in its folder; returns the attempt id.

    An earlier attempt's files (result.json, samples.csv, logs, runner.json, ...: all
    but spec.json) are moved to ``attempts/<n>-<its id>/`` and kept, so what this attempt
    leaves is its own: a killed attempt leaves no result.json, not the previous one's
    (C14). ``attempt.json`` names the new attempt; the trial process gets the id as
    ``GCBENCH_ATTEMPT_ID`` and writes it into result.json, and ``collect`` refuses a
    result.json of another attempt (:func:`gcbench.store.trialdir.load_result`).
    """
    import secrets
    from datetime import UTC, datetime

    from gcbench.store.trialdir import ATTEMPT_FILE, ATTEMPTS_DIR, current_attempt

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    earlier = [p for p in outdir.iterdir() if p.name not in ("spec.json", ATTEMPTS_DIR)]
    if earlier:
        keep = outdir / ATTEMPTS_DIR
        keep.mkdir(exist_ok=True)
        n = 1 + sum(1 for _ in keep.iterdir())
        target = keep / f"{n}-{current_attempt(outdir) or 'unrecorded'}"
        target.mkdir()
        for path in earlier:
            os.replace(path, target / path.name)
    attempt_id = secrets.token_hex(8)
    (outdir / ATTEMPT_FILE).write_text(
        json.dumps({"attempt_id": attempt_id, "started_at": datetime.now(UTC).isoformat()}), encoding="utf-8"
    )
    return attempt_id


def trial_argv(spec_path: str, outdir: str, python: str | None = None) -> list[str]:
    """argv of the trial entry point."""
    return [python or sys.executable, "-m", "gcbench.trial", str(spec_path), str(outdir)]


def trial_env(
    spec: TrialSpec,
    base: dict[str, str] | None = None,
    attempt_id: str | None = None,
    host_devices: list[int] | None = None,
) -> dict[str, str]:
    """Environment of the trial process: the runner's, plus the trial's GPUs.

    ``CUDA_VISIBLE_DEVICES`` holds the trial's host indices and ``CUDA_DEVICE_ORDER`` is
    ``PCI_BUS_ID`` whatever the runner's own environment says, as in the docker runner:
    CUDA then numbers GPUs in PCI bus order, as NVML and nvidia-smi do, so the GPU a
    workload computes on is the one the meter measures (by default CUDA numbers them
    fastest first, and on a host with two GPU models index 1 is another GPU for each).

    ``GCBENCH_HOST_DEVICES`` holds ``host_devices``, the GPU indices the plan may use on
    this host: where ``/sys`` shows no GPU they are the slots the host's CPUs are split
    into, one slice per GPU (:mod:`gcbench.energy.cpuset`), so concurrent trials on
    different GPUs get disjoint CPU sets."""
    from gcbench.energy.cpuset import HOST_DEVICES_ENV

    env = dict(os.environ if base is None else base)
    env.pop(HOST_DEVICES_ENV, None)
    if host_devices:
        env[HOST_DEVICES_ENV] = ",".join(str(d) for d in sorted(set(host_devices)))
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in spec.devices)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("GCBENCH_ATTEMPT_ID", None)  # never an attempt id the runner did not start
    if attempt_id:
        env["GCBENCH_ATTEMPT_ID"] = attempt_id
    return env


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the trial's process group, SIGKILL after the grace; returns when
    the trial and every process of its group (its sampler) have ended."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + KILL_GRACE_S
    try:
        proc.wait(KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc.poll() is None or _group_alive(proc.pid):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        deadline = time.monotonic() + KILL_GRACE_S
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def restore_devices(outdir: Path) -> str | None:
    """Once the trial process is gone: put back a GPU setting it left in force (a power
    cap of a trial killed before it could restore it); what was done, or None. Where the
    runner cannot, the next trial on those GPUs finds and resets it."""
    from gcbench.energy.powercap import restore_leftover

    done = restore_leftover(Path(outdir))
    if done:
        with open(Path(outdir) / "runner.log", "a", encoding="utf-8") as f:
            f.write(f"gcbench runner: {done}\n")
    return done


def run_local(
    spec: TrialSpec,
    outdir: Path,
    timeout_s: float,
    python: str | None = None,
    gpu_wait_s: float = 0.0,
    host_devices: list[int] | None = None,
) -> RunnerOutcome:
    """Run one trial as a subprocess and wait for it.

    stdout and stderr go to ``OUTDIR/runner.log``; ``OUTDIR/runner.json`` records
    the outcome. A trial that fails is not an error of the runner (its exit status
    says so); only a process that cannot be started raises. ``timeout_s`` counts
    from the trial's start (a wait for its GPUs, ``gpu_wait_s``, is before it and
    only recorded). A stop request stops the trial and records why
    (``RunnerOutcome.interrupted``). ``host_devices``: the GPUs the plan may use on this
    host (:func:`trial_env`).

    Raises:
        TrialInterrupted: a stop was requested before the trial started.
        TrialError: OUTDIR is read-only, full or nearly full (checked before the trial
            starts; an infrastructure failure, retried by Airflow).
        OSError: the interpreter cannot be started (likewise retried).
    """
    from gcbench.trial import check_writable

    if stop_requested():
        raise TrialInterrupted(f"trial {spec.trial_id} not started: {stop_requested()}")
    outdir = Path(outdir)
    check_writable(outdir)
    attempt_id = begin_attempt(outdir)
    spec_path = write_spec(spec, outdir)
    started = time.monotonic()
    timed_out = False
    interrupted = None
    with open(outdir / "runner.log", "ab") as log:
        proc = subprocess.Popen(
            trial_argv(str(spec_path), str(outdir), python),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=trial_env(spec, attempt_id=attempt_id, host_devices=host_devices),
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        try:
            while True:
                left = started + timeout_s - time.monotonic()
                try:
                    proc.wait(timeout=max(0.0, min(POLL_S, left)))
                    break
                except subprocess.TimeoutExpired:
                    if stop_requested():
                        interrupted = stop_requested()
                        _stop(proc)
                        break
                    if left <= 0:
                        timed_out = True
                        _stop(proc)
                        break
        except BaseException:
            _stop(proc)  # the Airflow task was killed: take the trial down with it
            RunnerOutcome(
                spec.trial_id,
                proc.returncode,
                time.monotonic() - started,
                False,
                str(outdir),
                interrupted="the runner was stopped",
                gpu_wait_s=gpu_wait_s,
                device_restored=restore_devices(outdir),
                attempt_id=attempt_id,
            ).save()
            raise
    outcome = RunnerOutcome(
        spec.trial_id,
        proc.returncode,
        time.monotonic() - started,
        timed_out,
        str(outdir),
        interrupted=interrupted,
        gpu_wait_s=gpu_wait_s,
        device_restored=restore_devices(outdir),
        attempt_id=attempt_id,
    )
    outcome.save()
    return outcome
