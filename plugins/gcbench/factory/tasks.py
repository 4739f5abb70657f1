"""The task bodies of a plan's DAG (:func:`gcbench.factory.dag.build_dag` keeps the wiring).

Each function is what one task does, given the plan and the task's Airflow context:
``expand_trials`` (plan -> trial specs of this run, already-stored ones left out),
``select_trials`` (one set of GPUs), ``run_trial`` (lease, runner, outcome),
``build_tokenizers``, ``collect_run``, ``validate``, ``report``, ``check_trials`` (the
run's verdict, :func:`run_verdict`) and ``regression_check``. They are plain functions,
so tests call them without a DAG. Everything heavy is imported inside them: the DAG
processor imports this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gcbench import kinds
from gcbench.config import default_runner
from gcbench.plan.identifiers import device_key, host_device_sets, trial_label
from gcbench.plan.schema import Plan

ERROR_XCOM = "gcbench_error"
"""XCom key under which a task failed by :func:`fail_fast` leaves its one-line reason."""

DETERMINISTIC_ERRORS: tuple[type[BaseException], ...] = (TypeError, ValueError, KeyError)
"""Errors that a retry would meet again (with :class:`gcbench.errors.PlanError`)."""


@contextmanager
def fail_fast(what: str) -> Iterator[None]:
    """Turn errors a retry cannot fix into ``AirflowFailException`` (failed at once, no
    retry, the reason in one line): PlanError, TypeError, ValueError, KeyError. Other
    errors (StoreError, OSError, the Docker engine) pass through and are retried.
    A context manager, or a decorator of a task's function (under ``@task``)."""
    from gcbench.errors import PlanError

    futile: tuple[type[BaseException], ...] = (PlanError, *DETERMINISTIC_ERRORS)
    try:
        yield
    except futile as exc:
        from airflow.sdk.exceptions import AirflowFailException

        message = f"{what}: {type(exc).__name__}: {exc}"
        print(message)
        try:  # check_trials repeats it as the run's reason
            from airflow.sdk import get_current_context

            get_current_context()["ti"].xcom_push(key=ERROR_XCOM, value=message[:2000])
        except Exception:  # noqa: BLE001 - outside a task, or XCom unavailable: the log has it
            pass
        raise AirflowFailException(message) from exc


def place_trials(plan: Plan, specs: list) -> list[tuple[str | None, list[int]]]:
    """(host, devices) of each spec, in the specs' order.

    Without ``hosts:`` a trial runs on its spec's devices on the one machine (host
    None). With hosts, k-GPU trials go round-robin, in schedule order, over every
    host GPU set of size k (:func:`host_device_sets`), so each host and GPU gets an
    equal share and the randomized order spreads variants over them.
    """
    if not plan.hosts:
        return [(None, list(s.devices)) for s in specs]
    slots: dict[int, list[tuple[str, list[int]]]] = {}
    for host, sets in host_device_sets(plan).items():
        for d in sets:
            slots.setdefault(len(d), []).append((host, d))
    used: dict[int, int] = {}
    out: list[tuple[str | None, list[int]]] = []
    for s in specs:
        k = len(s.devices)
        if k == 0:
            out.append((next(iter(plan.hosts)), []))
            continue
        i = used.get(k, 0)
        used[k] = i + 1
        host, devices = slots[k][i % len(slots[k])]
        out.append((host, list(devices)))
    return out


def expand_trials(plan: Plan, ctx: Any) -> list[dict[str, Any]]:
    """Plan -> trial specs for this run (already-stored trials left out); for a precision
    target, its first round (:func:`expand_round2` plans the second)."""
    from gcbench.plan.params import run_params_from_conf
    from gcbench.plan.trials import expand
    from gcbench.store import db, runs

    params = ctx["params"]
    run_id = ctx["run_id"]
    logical_date = ctx.get("logical_date")
    run = run_params_from_conf(plan, params)  # the trigger's checks again: one line, whatever got here
    specs = expand(plan, repetitions=run.repetitions, only_variants=run.variants)
    with db.connection() as conn:
        pk = runs.register_run(
            conn, plan, plan.dag_id, run_id, logical_date.isoformat() if logical_date else None, dict(params)
        )
        runs.reset_run_outcome(conn, pk)
        stored = runs.stored_trials(
            conn, plan.name, plan.dag_id, run_id, logical_date.isoformat() if logical_date else None
        )
    todo = [spec for spec in specs if stored.get(spec.trial_id) != "ok"]
    skipped = len(specs) - len(todo)
    out = _trial_items(plan, run_id, todo)
    print(f"{len(specs)} trials in this run, {skipped} already stored, {len(out)} to run")
    if specs and not out:  # a re-run or backfill of a date that has everything: green, and says so
        when = f" for logical date {logical_date.isoformat()}" if logical_date else ""
        note = (
            f"Nothing to run: all {len(specs)} trials of this run were already stored{when}; "
            "this run ran and stored no trial."
        )
        with db.connection() as conn:
            runs.add_run_note(conn, pk, note)
        print(note)
    return out


def _trial_items(plan: Plan, run_id: str, todo: list) -> list[dict[str, Any]]:
    """The mapped ``run_trial`` inputs of the specs ``todo``: placed, spec.json written."""
    from gcbench import config
    from gcbench.factory.local import write_spec

    out: list[dict[str, Any]] = []
    for spec, (host, devices) in zip(todo, place_trials(plan, todo), strict=True):
        spec = spec.model_copy(update={"devices": devices})  # placement: the id does not change
        outdir = config.run_dir(plan.name, run_id) / spec.trial_id
        spec_path = write_spec(spec, outdir)
        item: dict[str, Any] = {
            "trial_id": spec.trial_id,
            "label": trial_label(spec.variant, spec.repetition, spec.trial_id),
            "spec_path": str(spec_path),
            "outdir": str(outdir),
            "devices": devices,
            "host": host,
        }
        if host is not None:  # the host's worker has not this machine's files
            item["spec"] = spec.model_dump(mode="json")
        out.append(item)
    return out


def _known_in(frame: Any) -> Any:
    """``known(metric)``: the metric has a value in some row of ``frame``."""
    return lambda m: m in frame.columns and bool(frame[m].notna().any())


def round2_totals(plan: Plan, df: Any, only_variants: tuple[str, ...] = ()) -> dict[str, int]:
    """``{variant: total repetitions}`` of the groups whose workload has a precision target,
    from the first round's valid trials (``df``: :func:`gcbench.store.queries.trials_frame`):
    Stein's two-stage rule on the group's primary metric
    (:func:`gcbench.stats.planned_repetitions`), between the target's ``min`` and ``max``.

    A group with no valid trial of the first round gets ``max`` (nothing says it is precise).
    """
    import numpy as np

    from gcbench import stats
    from gcbench.plan.matrix import combinations, variant_label
    from gcbench.plan.schema import RepetitionTarget

    totals: dict[str, int] = {}
    for w in plan.workloads:
        target = plan.repetitions_of(w)
        if not isinstance(target, RepetitionTarget):
            continue
        wdf = df[df["workload"] == w.name] if len(df) else df
        metric = kinds.primary_metric(w.kind, _known_in(wdf))
        for combo in combinations(w):
            label = variant_label(w.name, combo)
            if only_variants and label not in only_variants:
                continue
            if len(wdf) and metric in wdf.columns:
                used = wdf[(wdf["variant"] == label) & (wdf["status"] == "ok") & wdf["valid"].map(lambda v: v is True)]
                values = used[metric].to_numpy(dtype=float)
            else:
                values = np.array([])
            n = stats.planned_repetitions(values, until_ci_rel=target.until_ci_rel, max_n=target.max)
            totals[label] = int(min(target.max, max(target.min, n)))
    return totals


def _latest_trials(frames: list) -> Any:
    """One row per trial id from the trials frames of several runs (oldest first): its
    ``ok`` row when it has one, else its latest."""
    import pandas as pd

    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=["trial_id", "workload", "variant", "status", "valid"])
    df = pd.concat(frames, ignore_index=True)
    df["_ok"] = df["status"] == "ok"
    df = df.sort_values("_ok", kind="stable").drop_duplicates("trial_id", keep="last")
    return df.drop(columns=["_ok"])


def expand_round2(plan: Plan, ctx: Any) -> list[dict[str, Any]]:
    """The second round of a plan with precision targets: after the first round is
    collected and validated, each such group's total n (:func:`round2_totals`), and the
    trials of repetitions ``min`` .. n-1 not yet stored for this run (or its logical
    date: a re-run or backfill skips them, as :func:`expand_trials` does). Empty when the
    run's ``repetitions`` parameter overrides the plan (a fixed count: no rounds)."""
    from gcbench.errors import StoreError
    from gcbench.plan.params import run_params_from_conf
    from gcbench.plan.trials import expand
    from gcbench.store import db, queries, runs

    run_id = ctx["run_id"]
    logical_date = ctx.get("logical_date")
    date = logical_date.isoformat() if logical_date else None
    run = run_params_from_conf(plan, ctx["params"])
    if run.repetitions:
        print(f"repetitions {run.repetitions} given for this run: no second round")
        return []
    with db.connection() as conn:
        pk = queries.dag_run_pk(conn, plan.dag_id, run_id)
        if pk is None:  # expand_trials registers every run
            raise StoreError(f"run {run_id} of {plan.dag_id} is not in the results database")
        # the first round as stored for this run or its logical date (a re-run or backfill
        # finds its first round under the earlier run, and plans the same second round)
        frames = [queries.trials_frame(conn, p) for p in runs.runs_of_date(conn, plan.dag_id, run_id, date)]
        df = _latest_trials(frames)
        stored = runs.stored_trials(
            conn, plan.name, plan.dag_id, run_id, logical_date.isoformat() if logical_date else None
        )
    totals = round2_totals(plan, df, run.variants)
    first = {s.trial_id for s in expand(plan, only_variants=run.variants)}
    specs = [s for s in expand(plan, only_variants=run.variants, totals=totals) if s.trial_id not in first]
    todo = [s for s in specs if stored.get(s.trial_id) != "ok"]
    for label, n in sorted(totals.items()):
        print(f"precision target: {label}: {n} repetitions in all")
    out = _trial_items(plan, run_id, todo)
    print(f"second round: {len(specs)} trials, {len(specs) - len(todo)} already stored, {len(out)} to run")
    return out


def select_trials(trials: list[dict[str, Any]], key: str, host: str | None = None) -> list[dict[str, Any]]:
    """The trials of one set of GPUs of one host (one mapped task per set)."""
    return [t for t in trials if device_key(t["devices"]) == key and t.get("host") == host]


def run_trial(plan: Plan, ctx: Any, trial: dict[str, Any]) -> dict[str, Any]:
    """One trial (a mapped ``run_trial_<gpus>`` task): its GPU lease (and the host's, C13), then the
    local or docker runner; returns its trial id, exit status and why it was stopped."""
    from airflow.sdk.exceptions import AirflowSkipException

    from gcbench.factory import local
    from gcbench.factory.local import RunnerOutcome, TrialInterrupted, run_local
    from gcbench.spec import TrialSpec
    from gcbench.store import gpulock

    local.reinstall_stop_handlers()  # gcbench run: Ctrl-C stops the trial (a no-op under a scheduler)
    if local.stop_requested():
        raise AirflowSkipException(f"trial {trial['trial_id']} not started: {local.stop_requested()}")
    with fail_fast(f"trial {trial.get('trial_id')}"):
        if "spec" in trial:  # placed on another host: write the spec file there
            from gcbench.factory.local import write_spec

            spec = TrialSpec.model_validate(trial["spec"])
            write_spec(spec, Path(trial["outdir"]))
        else:
            spec = TrialSpec.from_file(trial["spec_path"])
    runner = ctx["params"].get("runner") or default_runner(plan.runner)
    if kinds.get(spec.kind).runs_beside:
        runner = "local"  # the meter runs on the worker; the trial starts the user's container itself
    holder = f"trial {spec.trial_id} of {plan.dag_id} {ctx['run_id']}"
    host = trial.get("host")
    # the slots of the host's CPU split where /sys shows no GPU (gcbench.energy.cpuset)
    host_devices = list(plan.hosts[host].devices) if host in plan.hosts else list(plan.devices)
    try:
        # the lease is taken before the trial starts: its wait is in neither the
        # measured window nor the trial's time limit (both start afterwards)
        from gcbench.energy.hostshare import measures_host_energy

        host_energy = measures_host_energy(spec.energy)  # RAPL/CodeCarbon: alone on the host (C13)
        with gpulock.hold_gpus(
            trial["devices"], holder, should_stop=local.stop_requested, host_energy=host_energy
        ) as lease:
            if runner == "docker":
                import time

                from gcbench.factory.docker import run_docker

                started = time.monotonic()
                interrupted = None
                code = None
                attempt_id = local.begin_attempt(Path(trial["outdir"]))
                local.write_spec(spec, Path(trial["outdir"]))
                try:
                    with local.interruptible(), trial_time_limit(plan.trial_timeout_s + DOCKER_GRACE_S):
                        code = run_docker(
                            spec,
                            plan.image,
                            Path(trial["outdir"]),
                            ctx,
                            timeout_s=plan.trial_timeout_s,
                            attempt_id=attempt_id,
                            host_devices=host_devices,
                        )
                except KeyboardInterrupt:  # gcbench run got Ctrl-C: the container is removed
                    interrupted = local.stop_requested() or "interrupted"
                finally:
                    # whatever ended it (its time limit, the task's SIGTERM, the engine): a removed
                    # container was SIGKILLed and restored nothing, so the runner puts back its cap (C12)
                    restored = local.restore_devices(Path(trial["outdir"]))
                RunnerOutcome(
                    spec.trial_id,
                    code,
                    time.monotonic() - started,
                    False,
                    trial["outdir"],
                    interrupted=interrupted,
                    gpu_wait_s=lease.wait_s,
                    device_restored=restored,
                    attempt_id=attempt_id,
                ).save()
            else:
                outcome = run_local(
                    spec,
                    Path(trial["outdir"]),
                    plan.trial_timeout_s,
                    gpu_wait_s=lease.wait_s,
                    host_devices=host_devices,
                )
                code, interrupted = outcome.exit_code, outcome.interrupted
    except (gpulock.LeaseAborted, TrialInterrupted) as exc:
        raise AirflowSkipException(f"trial {spec.trial_id} not started: {exc}") from exc
    if interrupted:
        print(f"trial {spec.trial_id} ({trial['label']}) stopped: {interrupted}")
    else:
        print(f"trial {spec.trial_id} ({trial['label']}) exited with status {code}")
    return {"trial_id": spec.trial_id, "exit_code": code, "interrupted": interrupted}


def build_tokenizers(plan: Plan, ctx: Any, tokenizers: list[str]) -> dict[str, str]:
    """Build the declared preprocessors the plan's trials use, and prove each against the
    Python reference before any trial runs (cached by the hash of their sources).

    Returns ``{name: binary path}``. A compiler error or a conformance mismatch fails
    the task at once with its message (the first differing offset and both ids; a
    retry would fail the same way), so no trial of that variant runs; an unreachable
    engine is retried.
    """
    from airflow.sdk.exceptions import AirflowFailException

    from gcbench import config
    from gcbench.tokenizer.errors import TokenizerBuildError
    from gcbench.tokenizer.preprocessors import build_local, read_provenance

    runner = ctx["params"].get("runner") or default_runner(plan.runner)
    declared = plan.declared_preprocessors()
    built = {}
    for name in tokenizers:
        pre = declared[name]
        try:
            if runner == "docker":
                from gcbench.factory.tokenizers import build_in_docker

                binary = build_in_docker(pre, config.home() / "tools", ctx)
            else:
                binary = build_local(pre, config.home() / "tools")
        except TokenizerBuildError as exc:
            raise AirflowFailException(f"building the {name} preprocessor failed:\n{exc}") from exc
        record = read_provenance(binary)
        conformance = record.get("conformance") or {}
        print(
            f"preprocessor {name}: {binary} (source {record.get('source_sha256', '?')[:12]}, "
            f"binary {record.get('binary_sha256', '?')[:12]}, {record.get('toolchain')}); conformance: "
            f"{conformance.get('inputs')} inputs, {conformance.get('ids')} ids identical to the reference"
        )
        built[name] = str(binary)
    return built


def validate(plan: Plan, ctx: Any) -> dict[str, Any]:
    """Apply the validation rules and store validity and reasons."""
    from gcbench.errors import StoreError
    from gcbench.store import db, queries
    from gcbench.validate import validate_run

    with db.connection() as conn:
        pk = queries.dag_run_pk(conn, plan.dag_id, ctx["run_id"])
        if pk is None:  # expand_trials registers every run
            raise StoreError(f"run {ctx['run_id']} of {plan.dag_id} is not in the results database")
        summary = validate_run(conn, pk, plan.validation)
    print(f"validation: {summary}")
    return summary


def report(plan: Plan, ctx: Any) -> str:
    """Write the HTML, Markdown and CSV report of this run; returns the HTML path."""
    from gcbench.factory import local
    from gcbench.report.build import report_run

    stopped = local.stop_requested()
    if stopped:  # gcbench run got Ctrl-C: the report says so
        print(record_interruption(plan, ctx["run_id"], ctx["params"], stopped)[0])
    path = report_run(plan, ctx["run_id"])
    print(f"report: {path}")
    from gcbench.export.mlflow import export_after_report

    export_after_report(plan, ctx["run_id"])  # when configured; never fails the run (queued instead)
    return str(path)


def check_trials(plan: Plan, ctx: Any, essential_ids: list[str], collect_ids: list[str]) -> dict[str, Any]:
    """The run's verdict (see the module docstring): fails the run, with the reasons
    in one line, when a step failed, trials never ran or failed, a run with trials
    to run stored none, or ``gcbench run`` was interrupted (:func:`run_verdict`)."""
    from airflow.sdk.exceptions import AirflowFailException

    from gcbench.factory import local

    ti, run_id = ctx["ti"], ctx["run_id"]
    states = ti.get_task_states(dag_id=plan.dag_id, task_ids=essential_ids, run_ids=[run_id]) or {}
    states = {t: str(st) for t, st in states.get(run_id, {}).items()}
    errors = {t: ti.xcom_pull(task_ids=t, key=ERROR_XCOM) for t in essential_ids if states.get(t) == "failed"}
    summaries = [s for s in (ti.xcom_pull(task_ids=c) for c in collect_ids) if isinstance(s, dict)]
    reasons, total = run_verdict(essential_ids, states, errors, summaries, local.stop_requested())
    if reasons:
        print("run failed: " + "; ".join(reasons))
        raise AirflowFailException("; ".join(reasons))
    if not total["trials"]:
        print("nothing to run: every trial of this run was already stored (see expand_trials)")
    else:
        print(f"trials: {total['trials']} ran, {total['stored'] + total['unchanged']} stored, {total['failed']} failed")
    return total


def regression_check(plan: Plan, ctx: Any) -> dict[str, Any]:
    """Tonight against the last nights (gcbench.regression); fails on a regression."""
    from gcbench.regression import RegressionError, check_run
    from gcbench.store import db

    with db.connection() as conn:
        result = check_run(conn, plan, ctx["run_id"])
    print(result.message())
    if result.regressions:
        raise RegressionError(result)
    return result.to_dict()


def _item_spec(plan: Plan, ctx: Any, item: dict[str, Any]):
    """The spec of one ``expand_trials`` item: its spec.json (or the embedded spec), or,
    when that file is unreadable or holds another trial (a trial may write over its
    folder), the plan's own spec of that trial id. Returns (spec or None, why not)."""
    from gcbench.plan.matrix import combinations, variant_label
    from gcbench.plan.schema import most_repetitions
    from gcbench.plan.trials import expand
    from gcbench.spec import TrialSpec

    try:
        spec = TrialSpec.model_validate(item["spec"]) if "spec" in item else TrialSpec.from_file(item["spec_path"])
        if spec.trial_id == item.get("trial_id", spec.trial_id):
            return spec, None
        why = f"spec.json holds trial {spec.trial_id!r}"
    except Exception as exc:  # noqa: BLE001 - any unreadable spec.json: rebuilt from the plan below
        why = f"spec.json unreadable ({type(exc).__name__}: {str(exc)[:200]})"
    from gcbench.plan.params import run_params_from_conf

    params = (ctx.get("params") if hasattr(ctx, "get") else None) or {}
    try:
        run = run_params_from_conf(plan, params)
        # a precision target's second round: every repetition up to its max
        most = (
            {}
            if run.repetitions
            else {
                variant_label(w.name, combo): most_repetitions(plan.repetitions_of(w))
                for w in plan.workloads
                for combo in combinations(w)
            }
        )
        specs = expand(plan, repetitions=run.repetitions, only_variants=run.variants, totals=most)
    except Exception as exc:  # noqa: BLE001 - reported with the reason, never raised on every retry
        return None, f"{why}; the plan does not expand ({exc})"
    for spec in specs:
        if spec.trial_id == item.get("trial_id"):
            return spec.model_copy(update={"devices": item.get("devices") or spec.devices}), None
    return None, f"{why}; the plan has no trial {item.get('trial_id')!r}"


def run_verdict(
    steps: list[str], states: dict[str, str], errors: dict[str, Any], summaries: list[dict[str, Any]], stop: str | None
) -> tuple[list[str], dict[str, int]]:
    """Why a DAG run must fail (``check_trials``), from what its steps did.

    Args:
        steps: the task ids whose failure fails the run (expand_trials,
            build_tokenizers*, collect*, validate, report), in order.
        states: ``{task id: state}`` of this run (``failed``, ``upstream_failed``, ...).
        errors: ``{task id: one-line reason}`` left by failed steps (:func:`fail_fast`).
        summaries: what each ``collect`` returned (:func:`collect_run`).
        stop: the stop request of ``gcbench run`` (Ctrl-C), or None.

    Returns:
        (reasons, the summaries' totals). No reason: the run succeeds; trials that
        measured invalid are no reason (they are stored with theirs). Reasons:
        interrupted; a step failed (its own reason when it left one; the
        upstream-failed ones only when no step failed itself); trials never ran; trials
        that ran and failed (error, killed, timed out: each named with its reason,
        from the summaries' ``failures``); specs unreadable; trials to run but none
        stored.
    """
    total = {
        k: sum(int(s.get(k, 0) or 0) for s in summaries)
        for k in ("trials", "stored", "unchanged", "failed", "not_run", "not_started", "interrupted", "spec_unreadable")
    }
    reasons: list[str] = []
    if stop:
        reasons.append(f"interrupted by {stop}; {total['not_started']} trial(s) not started")
    failed = [t for t in steps if states.get(t) == "failed"] or [t for t in steps if states.get(t) == "upstream_failed"]
    for task_id in failed:
        why = errors.get(task_id)
        reasons.append(why if isinstance(why, str) and why else f"{task_id} {states.get(task_id)} (see the task log)")
    if total["not_run"]:
        reasons.append(f"{total['not_run']} trial(s) never ran (see the run_trial task logs)")
    failures = [f for s in summaries for f in s.get("failures") or [] if isinstance(f, str)]
    if failures:
        reasons.append(f"{len(failures)} trial(s) failed: " + "; ".join(failures))
    if total["spec_unreadable"]:
        reasons.append(
            f"{total['spec_unreadable']} trial(s) could not be stored: their spec.json is unreadable "
            "and the plan has no such trial (see the collect task log)"
        )
    if total["trials"] and not (total["stored"] + total["unchanged"]):
        reasons.append(f"none of the {total['trials']} trial(s) to run was stored")
    return reasons, total


DOCKER_GRACE_S = 120.0
"""Seconds a trial container may run beyond the plan's ``trial_timeout_s`` (start-up,
image load) before the runner stops it."""


@contextmanager
def trial_time_limit(seconds: float) -> Iterator[None]:
    """Raise ``AirflowTaskTimeout`` in the block after ``seconds`` (SIGALRM; main thread
    only, elsewhere no limit). An outer timer (the task's ``execution_timeout``) is
    kept: the shorter one fires, and the outer one is restored, less the time spent."""
    import signal
    import threading
    import time

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    from airflow.sdk.exceptions import AirflowTaskTimeout

    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    if outer_left and outer_left <= seconds:
        yield
        return
    previous = signal.getsignal(signal.SIGALRM)

    def _expired(signum, frame):
        raise AirflowTaskTimeout(f"the trial ran past its time limit of {seconds:.0f} s")

    started = time.monotonic()
    signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_left:
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - started), 0.001))


def record_interruption(
    plan: Plan, run_id: str, params: dict[str, Any], reason: str
) -> tuple[str, int, int | None, bool]:
    """Store that a run was interrupted (``dag_runs.interrupted_at`` and a note for the report).

    Returns:
        (the note, trials done, trials of the run (None if its parameters do not
        expand), whether it was recorded now (False: it already was)). "Done" counts
        the trials stored as ok for this run or its logical date: a re-run of the run
        skips exactly those.
    """
    from gcbench.errors import PlanError
    from gcbench.plan.params import run_params_from_conf
    from gcbench.plan.trials import expand
    from gcbench.store import db, queries, runs

    try:
        run = run_params_from_conf(plan, params)
        total: int | None = len(expand(plan, repetitions=run.repetitions, only_variants=run.variants))
    except (PlanError, TypeError, ValueError):  # parameters expand_trials refused: it said why
        total = None
    with db.connection() as conn:
        pk = queries.dag_run_pk(conn, plan.dag_id, run_id)
        if pk is None:
            return f"interrupted by {reason} before the run was registered", 0, total, False
        with conn.cursor() as cur:
            cur.execute("SELECT logical_date FROM dag_runs WHERE id = %s", (pk,))
            logical = cur.fetchone()[0]
        conn.commit()
        stored = runs.stored_trials(conn, plan.name, plan.dag_id, run_id, logical.isoformat() if logical else None)
        done = sum(1 for status in stored.values() if status == "ok")
        if total is None:
            note = f"Interrupted by {reason} after {done} trials."
        else:
            note = (
                f"Interrupted by {reason} after {done} of {total} trials; running it again does the "
                f"{total - done} missing ones."
            )
        recorded = runs.add_run_note(conn, pk, note, interrupted=True)
    return note, done, total, recorded


def collect_run(plan: Plan, ctx: Any, trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``collect`` task's body: store each trial of this run, count what happened.

    The summary counts trials (stored, unchanged, refused, failed, not run), samples
    stored and dropped, values stored as NULL (``fields_nulled``) and strings stored
    repaired (``text_repaired``); each trial's notes on those are printed and kept in
    ``trials.ingest_notes``.

    A trial stopped on request (``gcbench run`` interrupted) is stored as failed with
    ``interrupted: ...`` and the samples it has; a trial that did not start because
    of the interruption is left out (``not_started``): a re-run does it.

    Raises:
        StoreError: the database failed; the task is retried and, once the server is
            back, every sample is stored exactly once.
    """
    from gcbench.factory import local
    from gcbench.store import db, ingest, runs, trialdir

    run_id = ctx["run_id"]
    logical_date = ctx.get("logical_date")
    summary: dict[str, Any] = {
        "trials": 0,
        "stored": 0,
        "unchanged": 0,
        "refused": 0,
        "failed": 0,
        "not_run": 0,
        "samples": 0,
        "samples_dropped": 0,
        "fields_nulled": 0,
        "text_repaired": 0,
        "spec_unreadable": 0,
        "not_started": 0,
        "interrupted": 0,
    }
    with db.connection() as conn:
        pk = runs.register_run(conn, plan, plan.dag_id, run_id, logical_date.isoformat() if logical_date else None)
        for item in trials or []:
            outdir = Path(item["outdir"])
            exit_code = trialdir.runner_exit_code(outdir)
            interrupted = trialdir.runner_interrupted(outdir)
            started = (
                exit_code is not None
                or interrupted is not None
                or any((outdir / name).exists() for name in ("result.json", "trial.log", "runner.log"))
            )
            if not started and local.stop_requested():
                summary["not_started"] += 1  # never started because the run was stopped: missing, not failed
                continue
            summary["trials"] += 1
            never_ran = exit_code is None and not (outdir / "result.json").exists() and not interrupted
            if never_ran:
                summary["not_run"] += 1  # no runner outcome, no result: the trial never started
            spec, why = _item_spec(plan, ctx, item)
            if (
                spec is None
            ):  # no trial row can be made without its spec: counted (check_trials fails), the others stored
                summary["refused"] += 1
                summary["spec_unreadable"] += 1
                print(f"trial {item.get('trial_id')}: refused: {why}")
                continue
            outcome = ingest.collect_trial(
                conn,
                pk,
                spec,
                outdir,
                exit_code=exit_code,
                carbon=plan.carbon.model_dump(mode="json"),
                interrupted=interrupted,
            )
            summary[outcome.action] += 1
            summary["samples"] += outcome.samples
            for key in ("samples_dropped", "fields_nulled", "text_repaired"):
                summary[key] += getattr(outcome, key)
            summary["interrupted"] += bool(interrupted)
            if outcome.status == "failed":
                summary["failed"] += 1
            if outcome.status == "failed" and not never_ran and not interrupted:  # counted in not_run / interrupted
                summary.setdefault("failures", []).append(
                    f"{outcome.trial_id} ({spec.variant} #{spec.repetition}): {outcome.reason}"
                )
            if outcome.action == "refused" or outcome.status != "ok":
                print(f"trial {outcome.trial_id}: {outcome.action} {outcome.status}: {outcome.reason}")
            for note in outcome.notes:
                print(f"trial {outcome.trial_id}: stored with a change: {note}")
    print(f"collect: {summary}")
    return summary
