"""``gcbench run``: the plan's DAG in a child process, progress shown with rich.

The child (``python -m gcbench.factory.testrun``) runs Airflow's ``dag.test()`` and
writes Airflow's verbose output to ``$GCBENCH_HOME/logs/``; this process follows the
trial folders (a ``result.json`` appears when a trial ends) and prints a summary
and the report's path.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from gcbench import config


def _count_results(plan_name: str, since: float) -> tuple[int, int, int]:
    root = config.home() / "runs" / plan_name
    started = done = failed = 0
    if not root.exists():
        return 0, 0, 0
    for run in root.iterdir():
        if not run.is_dir() or run.stat().st_mtime < since - 5:
            continue
        for trial in run.iterdir():
            if (trial / "spec.json").exists() and trial.stat().st_mtime >= since - 5:
                started += 1
                result = trial / "result.json"
                if result.exists():
                    done += 1
                    try:
                        failed += json.loads(result.read_text()).get("status") != "ok"
                    except ValueError:
                        failed += 1
    return started, done, failed


def run_with_progress(plan_file: Path, runner: str | None, repetitions: int | None, variants: list[str]) -> int:
    """Run the plan; returns 0 when the DAG run succeeded.

    Raises:
        PlanError: the plan does not validate (checked before anything starts).
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from gcbench.plan import expand, load_plan

    console = Console(soft_wrap=True)  # paths stay whole when the output is piped
    plan = load_plan(plan_file)
    n_trials = len(expand(plan, repetitions=repetitions, only_variants=variants or None))
    logs = config.home() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    log_path = logs / f"run-{plan.name}-{stamp}.log"
    status_path = logs / f"run-{plan.name}-{stamp}.json"
    argv = [sys.executable, "-m", "gcbench.factory.testrun", str(Path(plan_file).resolve()), str(status_path)]
    if runner:
        argv += ["--runner", runner]
    if repetitions:
        argv += ["--repetitions", str(repetitions)]
    for v in variants:
        argv += ["--variant", v]
    console.print(f"[bold]GC-Bench[/bold] plan [cyan]{plan.name}[/cyan]: {n_trials} trials, runner "
                  f"{runner or plan.runner}; Airflow log: {log_path}")
    since = time.time()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=False) as progress:
            bar = progress.add_task("trials", total=n_trials)
            while proc.poll() is None:
                started, done, failed = _count_results(plan.name, since)
                desc = f"trials ({failed} failed)" if failed else "trials"
                if done >= n_trials and n_trials:
                    desc = "collect, validate, report"
                progress.update(bar, completed=min(done, n_trials), description=desc)
                time.sleep(0.5)
            started, done, failed = _count_results(plan.name, since)
            progress.update(bar, completed=min(done, n_trials))
    if not status_path.exists():
        console.print(f"[red]the run did not finish (exit status {proc.returncode}); see {log_path}[/red]")
        return proc.returncode or 1
    status = json.loads(status_path.read_text())
    ok = status["state"] == "success"
    console.print(f"DAG run [cyan]{status['run_id']}[/cyan]: [{'green' if ok else 'red'}]{status['state']}[/]")
    bad = {k: v for k, v in status["tasks"].items() if v not in ("success", "skipped")}
    for task_id, state in sorted(bad.items()):
        console.print(f"  task {task_id}: {state}")
    counts = status.get("trials") or {}
    if counts and "error" not in counts:
        console.print(f"trials: {counts['ok']} ran ({counts['valid']} valid, {counts['invalid']} invalid), "
                      f"{counts['failed']} failed, {counts['skipped']} skipped")
        if counts["failed"]:
            console.print("[yellow]failed trials keep their error and log tail in the report's "
                          "'Failed and skipped trials' table[/yellow]")
    if status.get("report"):
        console.print(f"report: {status['report']}")
        console.print(f"         {Path(status['report']).with_name('report.md')}")
    else:
        console.print(f"[red]no report was written; see {log_path}[/red]")
    if counts and not counts.get("valid"):
        console.print("[red]no trial of this run is valid: the report has no statistics[/red]")
        return 1
    return 0 if ok and status.get("report") else 1
