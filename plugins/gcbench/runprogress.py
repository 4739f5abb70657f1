"""``gcbench run``: the plan's DAG in a child process, progress shown with rich.

The child (``python -m gcbench.factory.testrun``) runs Airflow's ``dag.test()`` and
writes Airflow's verbose output to ``$GCBENCH_HOME/logs/``; this process follows the
trial folders (a ``result.json`` appears when a trial ends) and prints a summary
and the report's path.

Ctrl-C (SIGINT to the terminal's foreground process group) or SIGTERM reaches this
process only: the child runs in its own session, so the embedded PostgreSQL and the
trials it started are not hit by the terminal's signal. This process forwards one
SIGINT to the child, which stops the running trial and stores it as interrupted,
starts no further trial and reports what completed; this process returns only once
the child (and with it every process it started) has ended, prints
``interrupted after D of N trials; run again to do the M missing ones`` and exits
130. Running the same command again resumes that run (same run id and logical
date): only the missing trials run. If this process dies, the child gets SIGINT
(``PR_SET_PDEATHSIG``) and stops the same way.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from gcbench import config


def _count_results(plan_name: str, since: float, run_key: str | None = None) -> tuple[int, int, int]:
    root = config.home() / "runs" / plan_name
    started = done = failed = 0
    if not root.exists():
        return 0, 0, 0
    for run in root.iterdir():
        if not run.is_dir() or (run.stat().st_mtime < since - 5 and run.name != run_key):
            continue
        for trial in run.iterdir():
            if (trial / "spec.json").exists() and trial.stat().st_mtime >= since - 5:
                started += 1
                result = trial / "result.json"
                if result.exists() and result.stat().st_mtime >= since - 5:
                    done += 1
                    try:
                        failed += json.loads(result.read_text()).get("status") != "ok"
                    except ValueError:
                        failed += 1
    return started, done, failed


def has_precision_target(plan, repetitions: int | None) -> bool:
    """Whether a run of ``plan`` may add rounds after its first (a ``repetitions:
    {min, max, until_ci_rel}`` target at the plan or a workload, not overridden by a
    ``--repetitions`` count)."""
    from gcbench.plan.schema import RepetitionTarget

    if repetitions:
        return False
    reps = [plan.repetitions, *(w.repetitions for w in plan.workloads)]
    return any(isinstance(r, RepetitionTarget) for r in reps)


def bar_state(
    n_first: int, started: int, done: int, failed: int, more_rounds: bool, stopping: bool = False
) -> tuple[int, int, str]:
    """The progress bar's (total, completed, description) from the trial folders seen.

    ``n_first`` trials are known before the run (its first round); a plan with a precision
    target may start more once their statistics are in, so the total grows to the trials
    started, and the bar says which round it is in and what it waits for. Never more
    completed than total.
    """
    total = max(n_first, started)
    desc = f"trials ({failed} failed)" if failed else "trials"
    if more_rounds and started > n_first:
        desc = f"{desc}, more rounds until the precision target ({started - n_first} added)"
    if stopping:
        desc = "stopping"
    elif done >= total and total:
        desc = "collect, validate, decide the next round or report" if more_rounds else "collect, validate, report"
    return total, min(done, total), desc


def run_with_progress(plan_file: Path, runner: str | None, repetitions: int | None, variants: list[str]) -> int:
    """Run the plan; returns 0 when the DAG run succeeded.

    Raises:
        PlanError: the plan does not validate (checked before anything starts).
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from gcbench.factory.local import die_with_parent
    from gcbench.factory.testrun import EXIT_INTERRUPTED, interrupted_run
    from gcbench.plan import expand, load_plan

    console = Console(soft_wrap=True)  # paths stay whole when the output is piped
    plan = load_plan(plan_file)
    n_trials = len(expand(plan, repetitions=repetitions, only_variants=variants or None))
    resume = interrupted_run(
        plan.name, {"runner": runner or plan.runner, "repetitions": repetitions, "variants": variants or []}
    )
    logs = config.home() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_path = logs / f"run-{plan.name}-{stamp}.log"
    status_path = logs / f"run-{plan.name}-{stamp}.json"
    argv = [sys.executable, "-m", "gcbench.factory.testrun", str(Path(plan_file).resolve()), str(status_path)]
    if runner:
        argv += ["--runner", runner]
    if repetitions:
        argv += ["--repetitions", str(repetitions)]
    for v in variants:
        argv += ["--variant", v]
    if resume and resume.get("logical_date") and resume.get("run_after"):
        argv += ["--logical-date", resume["logical_date"], "--run-after", resume["run_after"]]
        if isinstance(resume.get("missing"), int) and 0 < resume["missing"] <= n_trials:
            n_trials = resume["missing"]
        console.print(
            f"resuming the interrupted run [cyan]{resume['run_id']}[/cyan]: the trials it stored are not run again"
        )
    rounds = (
        " in its first round (more until its precision target is met)"
        if has_precision_target(plan, repetitions)
        else ""
    )
    console.print(
        f"[bold]GC-Bench[/bold] plan [cyan]{plan.name}[/cyan]: {n_trials} trials{rounds}, runner "
        f"{runner or plan.runner}; Airflow log: {log_path}"
    )
    resume_key = config.run_key(resume["run_id"]) if resume and resume.get("run_id") else None
    since = time.time()
    stopping: list[str] = []

    def _stop(signum, frame):  # Ctrl-C or SIGTERM: one SIGINT to the child, then wait for it
        if not stopping:
            stopping.append(signal.Signals(signum).name)
            try:
                proc.send_signal(signal.SIGINT)
            except (ProcessLookupError, NameError):
                pass
            console.print(
                "[yellow]stopping: the running trial is stopped and stored, no further trial starts, "
                "then a report of what completed is written[/yellow]"
            )

    with open(log_path, "wb") as log:
        # its own session: the terminal's Ctrl-C reaches only this process, which forwards it
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGINT),
        )
        previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            with Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=False,
            ) as progress:
                bar = progress.add_task("trials", total=n_trials)
                more_rounds = has_precision_target(plan, repetitions)
                while proc.poll() is None:
                    started, done, failed = _count_results(plan.name, since, resume_key)
                    total, completed, desc = bar_state(n_trials, started, done, failed, more_rounds, bool(stopping))
                    progress.update(bar, total=total, completed=completed, description=desc)
                    time.sleep(0.5)
                started, done, failed = _count_results(plan.name, since, resume_key)
                total, completed, _ = bar_state(n_trials, started, done, failed, more_rounds)
                progress.update(bar, total=total, completed=completed)
        finally:
            proc.wait()  # never leave before the child (and every process it started) has ended
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    if not status_path.exists():
        console.print(f"[red]the run did not finish (exit status {proc.returncode}); see {log_path}[/red]")
        return EXIT_INTERRUPTED if stopping else proc.returncode or 1
    status = json.loads(status_path.read_text())
    if status.get("interrupted") or stopping:
        return _print_interrupted(console, status, n_trials, log_path)
    ok = status["state"] == "success"
    console.print(f"DAG run [cyan]{status['run_id']}[/cyan]: [{'green' if ok else 'red'}]{status['state']}[/]")
    bad = {k: v for k, v in status["tasks"].items() if v not in ("success", "skipped")}
    for task_id, state in sorted(bad.items()):
        console.print(f"  task {task_id}: {state}")
    counts = status.get("trials") or {}
    if counts and "error" not in counts:
        console.print(
            f"trials: {counts['ok']} ran ({counts['valid']} valid, {counts['invalid']} invalid), "
            f"{counts['failed']} failed, {counts['skipped']} skipped"
        )
        if counts["failed"]:
            console.print(
                "[yellow]failed trials keep their error and log tail in the report's "
                "'Failed and skipped trials' table[/yellow]"
            )
    if status.get("report"):
        console.print(f"report: {status['report']}")
        console.print(f"         {Path(status['report']).with_name('report.md')}")
    else:
        console.print(f"[red]no report was written; see {log_path}[/red]")
    if counts and not counts.get("valid"):
        console.print("[red]no trial of this run is valid: the report has no statistics[/red]")
        return 1
    return 0 if ok and status.get("report") else 1


def _print_interrupted(console, status: dict, n_trials: int, log_path: Path) -> int:
    """What an interrupted run left: the report of what completed, and one line."""
    from gcbench.factory.testrun import EXIT_INTERRUPTED

    info = status.get("interrupted") or {}
    if status.get("report"):
        console.print(f"report: {status['report']}")
    done, total, missing = info.get("done"), info.get("total"), info.get("missing")
    if isinstance(done, int) and isinstance(total, int) and isinstance(missing, int):
        console.print(
            f"interrupted after {done} of {total} trials; run again to do the {missing} missing "
            f"{'one' if missing == 1 else 'ones'}"
        )
    elif isinstance(done, int) and status.get("run_id"):
        console.print(f"interrupted after {done} trials; run again to do the missing ones")
    else:
        console.print(f"interrupted before any trial ran (see {log_path}); run again to start it")
    return EXIT_INTERRUPTED
