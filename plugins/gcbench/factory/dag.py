"""``build_dag(plan) -> DAG``: one Airflow DAG per plan.

    expand_trials -> [build_tokenizers] -> trials_<gpus> -> run_trial_<gpus> (mapped, one per trial)
                  -> collect -> validate -> report -> check_trials

* ``expand_trials`` turns the plan (and the trigger form's parameters) into trial
  specs, registers the DAG run in the results database, and leaves out the trials
  already stored for this run or its logical date, so a re-run or a backfill never
  runs or stores a trial twice.
* ``run_trial_<key>`` is one mapped task per set of GPUs, in the Airflow pool
  ``gcbench_<key>`` (1 slot: two trials never share a GPU). Trials using several
  GPUs wait for the single-GPU tasks of those GPUs.
* ``collect`` runs whatever happened to the trials (``all_done``): a trial that died
  is stored as failed with its log tail, and the others are kept.
* Plans with a ``schedule`` get a ``regression_check`` after ``report``
  (:mod:`gcbench.regression`): it fails on an energy regression against the last
  nights and fires :class:`gcbench.notify.RegressionNotifier`.
* Plans with ``hosts:`` (CeleryExecutor, docs/multi-host.md) get, per host, their own
  ``build_tokenizers_<host>``, ``trials_<host>_<gpus>``, ``run_trial_<host>_<gpus>``
  (pool ``gcbench_<host>_<gpus>``) and ``collect_<host>`` tasks on the host's Celery
  ``queue``: trial outputs stay on the host that ran them, and only expand, validate,
  report and the regression check run on the central workers. Trials are placed
  round-robin over the hosts' GPUs (:func:`place_trials`); placement is not part of
  a trial's id.

Building the DAG does no I/O: the plan is already loaded, and everything heavy is
imported inside the tasks.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from gcbench.config import default_runner
from gcbench.plan.expand import variants
from gcbench.plan.schema import Plan

START_DATE = "2026-01-01"
"""First logical date of scheduled plans (backfills may start from here)."""


def device_key(devices: list[int]) -> str:
    """Pool key of a set of GPUs: [0] -> ``gpu0``, [0, 1] -> ``gpu0_1``, [] -> ``cpu``."""
    return "gpu" + "_".join(str(d) for d in devices) if devices else "cpu"


def pool_name(devices: list[int]) -> str:
    """Airflow pool of a set of GPUs (``gcbench_gpu0``)."""
    return f"gcbench_{device_key(devices)}"


def device_sets(plan: Plan) -> list[list[int]]:
    """The GPU sets the plan's trials use, single GPUs first (from an expansion of one repetition)."""
    from gcbench.plan.expand import expand

    seen: dict[str, list[int]] = {}
    for spec in expand(plan, repetitions=1):
        seen.setdefault(device_key(spec.devices), spec.devices)
    return sorted(seen.values(), key=lambda d: (len(d), d))


def host_pool_name(host: str, devices: list[int]) -> str:
    """Airflow pool of a set of GPUs of one host (``gcbench_<host>_gpu0``)."""
    return f"gcbench_{host}_{device_key(devices)}"


def host_device_sets(plan: Plan) -> dict[str, list[list[int]]]:
    """``{host: GPU sets}`` for a plan with ``hosts:``: every GPU of the host for
    single-GPU trials, the host's first k GPUs for k-GPU trials (single GPUs first).

    Raises:
        PlanError: a trial needs more GPUs than any host has.
    """
    from gcbench.errors import PlanError

    sizes = sorted({len(d) for d in device_sets(plan) if d})
    out: dict[str, list[list[int]]] = {}
    for name, host in plan.hosts.items():
        sets: list[list[int]] = []
        for k in sizes:
            if k == 1:
                sets.extend([d] for d in host.devices)
            elif len(host.devices) >= k:
                sets.append(list(host.devices[:k]))
        out[name] = sets
    for k in sizes:
        if not any(len(s) == k for sets in out.values() for s in sets):
            raise PlanError(plan.name, None, "hosts", f"trials need {k} GPUs but no host lists that many devices")
    return out


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


def external_tokenizers(plan: Plan) -> list[str]:
    """Native tokenizers ("go", "rust") the plan's TinyLM paths need."""
    impls = set()
    for w in plan.workloads:
        paths = list(w.matrix.get("path", [])) + [w.settings.get("path")]
        for p in paths:
            if isinstance(p, str) and p.startswith("external-"):
                impls.add(p.removeprefix("external-"))
    return sorted(impls)


def dag_params(plan: Plan) -> dict[str, Any]:
    """The trigger form: repetitions, variants, runner."""
    from airflow.sdk import Param

    return {
        "repetitions": Param(None, type=["null", "integer"], minimum=1, maximum=1000, title="Repetitions",
                             description=f"Repetitions per variant; empty: the plan's ({plan.repetitions})."),
        "variants": Param([], type="array", items={"type": "string"}, examples=variants(plan), title="Variants",
                          description="Run only these variants; empty: all of them."),
        "runner": Param(default_runner(plan.runner), type="string", enum=["local", "docker"], title="Runner",
                        description="local: a subprocess per trial; docker: a container per trial (DockerOperator)."),
    }


def build_dag(plan: Plan, plan_path: str | Path | None = None, *, retries: int = 2):
    """The Airflow DAG of a plan (dag_id ``gcbench__<name>``). See the module docstring.

    Args:
        plan: a validated plan.
        plan_path: its file, for the DAG's documentation.
        retries: retries of infrastructure failures (engine or database unreachable),
            with exponential backoff; ``gcbench run`` uses 0 to fail fast.
    """
    from airflow.sdk import DAG, get_current_context, task

    import pendulum

    tokenizers = external_tokenizers(plan)
    sets = device_sets(plan)
    per_host = host_device_sets(plan) if plan.hosts else {None: sets}
    doc = (f"GC-Bench plan **{plan.name}**" + (f" from `{plan_path}`" if plan_path else "") + f".\n\n{plan.description}\n\n"
           f"Variants: {', '.join(variants(plan))}.")
    default_args = {
        "retries": retries,
        "retry_delay": timedelta(seconds=30),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=10),
    }
    with DAG(
        dag_id=plan.dag_id,
        description=(plan.description or f"GC-Bench plan {plan.name}")[:200],
        schedule=plan.schedule,
        start_date=pendulum.parse(START_DATE),
        catchup=False,
        max_active_runs=1,
        params=dag_params(plan),
        tags=["gcbench", plan.name],
        doc_md=doc,
        default_args=default_args,
        render_template_as_native_obj=False,
    ) as dag:

        @task
        def expand_trials() -> list[dict[str, Any]]:
            """Plan -> trial specs for this run (already-stored trials left out)."""
            from gcbench import config
            from gcbench.factory.local import write_spec
            from gcbench.plan.expand import expand
            from gcbench.store import db, ingest

            ctx = get_current_context()
            params = ctx["params"]
            run_id = ctx["run_id"]
            logical_date = ctx.get("logical_date")
            specs = expand(plan, repetitions=params.get("repetitions"), only_variants=params.get("variants") or None)
            with db.connection() as conn:
                ingest.register_run(conn, plan, plan.dag_id, run_id, logical_date.isoformat() if logical_date else None,
                                    dict(params))
                stored = ingest.stored_trials(conn, plan.name, plan.dag_id, run_id,
                                              logical_date.isoformat() if logical_date else None)
            out: list[dict[str, Any]] = []
            todo = [spec for spec in specs if stored.get(spec.trial_id) != "ok"]
            skipped = len(specs) - len(todo)
            for spec, (host, devices) in zip(todo, place_trials(plan, todo)):
                spec = spec.model_copy(update={"devices": devices})  # placement: the id does not change
                outdir = config.run_dir(plan.name, run_id) / spec.trial_id
                spec_path = write_spec(spec, outdir)
                item = {"trial_id": spec.trial_id, "label": f"{spec.variant} #{spec.repetition}",
                        "spec_path": str(spec_path), "outdir": str(outdir), "devices": devices, "host": host}
                if host is not None:  # the host's worker has not this machine's files
                    item["spec"] = spec.model_dump(mode="json")
                out.append(item)
            print(f"{len(specs)} trials in this run, {skipped} already stored, {len(out)} to run")
            return out

        @task
        def select_trials(trials: list[dict[str, Any]], key: str, host: str | None = None) -> list[dict[str, Any]]:
            """The trials of one set of GPUs of one host (one mapped task, one pool, per set)."""
            return [t for t in trials if device_key(t["devices"]) == key and t.get("host") == host]

        def _run_trial(trial: dict[str, Any]) -> dict[str, Any]:
            from gcbench.factory.local import RunnerOutcome, run_local
            from gcbench.spec import TrialSpec

            ctx = get_current_context()
            if "spec" in trial:  # placed on another host: write the spec file there
                from gcbench.factory.local import write_spec

                spec = TrialSpec.model_validate(trial["spec"])
                write_spec(spec, Path(trial["outdir"]))
            else:
                spec = TrialSpec.from_file(trial["spec_path"])
            runner = ctx["params"].get("runner") or default_runner(plan.runner)
            if runner == "docker":
                import time

                from gcbench.factory.docker import run_docker

                started = time.monotonic()
                code = run_docker(spec, plan.image, Path(trial["outdir"]), ctx, timeout_s=plan.trial_timeout_s)
                RunnerOutcome(spec.trial_id, code, time.monotonic() - started, False, trial["outdir"]).save()
            else:
                code = run_local(spec, Path(trial["outdir"]), plan.trial_timeout_s).exit_code
            print(f"trial {spec.trial_id} ({trial['label']}) exited with status {code}")
            return {"trial_id": spec.trial_id, "exit_code": code}

        specs = expand_trials()
        upstream: dict[str | None, Any] = {host: specs for host in per_host}
        if tokenizers:

            @task
            def build_tokenizers() -> dict[str, str]:
                """Build the native tokenizers (cached by the hash of their sources).

                A compiler error fails the task at once with the compiler's message (a
                retry would fail the same way); an unreachable engine is retried.
                """
                from airflow.exceptions import AirflowFailException

                from gcbench import config
                from gcbench.factory.tokenizers import build_local
                from gcbench.tokenizer.errors import TokenizerBuildError

                ctx = get_current_context()
                runner = ctx["params"].get("runner") or default_runner(plan.runner)
                built = {}
                for impl in tokenizers:
                    try:
                        if runner == "docker":
                            from gcbench.factory.tokenizers import build_in_docker

                            built[impl] = str(build_in_docker(impl, config.home() / "tools", ctx))
                        else:
                            built[impl] = str(build_local(impl, config.home() / "tools"))
                    except TokenizerBuildError as exc:
                        raise AirflowFailException(f"building the {impl} tokenizer failed:\n{exc}") from exc
                    print(f"tokenizer {impl}: {built[impl]}")
                return built

            for host in per_host:
                if host is None:
                    tok = build_tokenizers()
                else:  # each host builds its own (its engine, its tools folder)
                    tok = build_tokenizers.override(task_id=f"build_tokenizers_{host}", queue=plan.hosts[host].queue)()
                specs >> tok
                upstream[host] = tok

        run_tasks: dict[str | None, list[tuple[list[int], Any]]] = {}
        for host, host_sets in per_host.items():
            prefix = "" if host is None else f"{host}_"
            queue = {} if host is None else {"queue": plan.hosts[host].queue}
            run_tasks[host] = []
            for devices in host_sets:
                key = device_key(devices)
                selected = select_trials.override(task_id=f"trials_{prefix}{key}")(specs, key, host)
                mapped = task(
                    _run_trial,
                    task_id=f"run_trial_{prefix}{key}",
                    pool=pool_name(devices) if host is None else host_pool_name(host, devices),
                    map_index_template="{{ task.op_kwargs['trial']['label'] }}",
                    execution_timeout=timedelta(seconds=plan.trial_timeout_s + 120),
                    trigger_rule="all_done" if len(devices) > 1 else "all_success",
                    **queue,
                ).expand(trial=selected)
                upstream[host] >> selected
                for other_devices, other in run_tasks[host]:
                    if set(devices) & set(other_devices):
                        other >> mapped  # a multi-GPU trial waits for the single-GPU trials of its GPUs
                run_tasks[host].append((devices, mapped))

        @task(trigger_rule="all_done", retries=retries + 1 if retries else 0)
        def collect(trials: list[dict[str, Any]], host: str | None = None) -> dict[str, Any]:
            """Load every trial folder of this run (of one host) into PostgreSQL (one transaction per trial)."""
            return collect_run(plan, get_current_context(), [t for t in trials or [] if t.get("host") == host])

        @task
        def validate() -> dict[str, Any]:
            """Apply the validation rules and store validity and reasons."""
            from gcbench.store import db, queries
            from gcbench.validate import validate_run

            ctx = get_current_context()
            with db.connection() as conn:
                pk = queries.dag_run_pk(conn, plan.dag_id, ctx["run_id"])
                summary = validate_run(conn, pk, plan.validation)
            print(f"validation: {summary}")
            return summary

        @task
        def report() -> str:
            """Write the HTML, Markdown and CSV report of this run; returns the HTML path."""
            from gcbench.report.build import report_run

            ctx = get_current_context()
            path = report_run(plan, ctx["run_id"])
            print(f"report: {path}")
            return str(path)

        @task(retries=0)
        def check_trials(summaries: list[dict[str, Any]]) -> dict[str, Any]:
            """Fail the DAG run, after its report, when trials never ran (an infrastructure
            failure that outlived its retries) or ran and failed (error, killed, timed out),
            naming each with its reason; trials that measured invalid do not fail it."""
            from gcbench.errors import TrialError

            not_run = sum(s.get("not_run", 0) for s in summaries)
            failures = [f for s in summaries for f in s.get("failures", [])]
            problems = []
            if not_run:
                problems.append(f"{not_run} trial(s) of this run never ran (see the run_trial task logs)")
            if failures:
                problems.append(f"{len(failures)} trial(s) failed: " + "; ".join(failures))
            if problems:
                raise TrialError(None, "; ".join(problems) + "; the others are stored and reported")
            return {"trials": sum(s.get("trials", 0) for s in summaries)}

        validated = validate()
        summaries = []
        for host, tasks in run_tasks.items():
            if host is None:
                collected = collect(specs)
            else:  # the trial folders are on the host: collect there, into the central database
                collected = collect.override(task_id=f"collect_{host}", queue=plan.hosts[host].queue)(specs, host)
            for _, mapped in tasks:
                mapped >> collected
            collected >> validated
            summaries.append(collected)
        reported = validated >> report()
        reported >> check_trials(summaries)
        if plan.schedule:
            from gcbench.notify import RegressionNotifier

            @task(retries=0, on_failure_callback=RegressionNotifier())
            def regression_check() -> dict[str, Any]:
                """Tonight against the last nights (gcbench.regression); fails on a regression."""
                from gcbench.regression import RegressionError, check_run
                from gcbench.store import db

                ctx = get_current_context()
                with db.connection() as conn:
                    result = check_run(conn, plan, ctx["run_id"])
                print(result.message())
                if result.regressions:
                    raise RegressionError(result)
                return result.to_dict()

            reported >> regression_check()
    return dag


def collect_run(plan: Plan, ctx: Any, trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``collect`` task's body: store each trial of this run, count what happened.

    Raises:
        StoreError: the database failed; the task is retried and, once the server is
            back, every sample is stored exactly once.
    """
    from gcbench.spec import TrialSpec
    from gcbench.store import db, ingest

    run_id = ctx["run_id"]
    logical_date = ctx.get("logical_date")
    summary: dict[str, Any] = {"trials": 0, "stored": 0, "unchanged": 0, "refused": 0, "failed": 0, "not_run": 0,
                               "samples": 0}
    with db.connection() as conn:
        pk = ingest.register_run(conn, plan, plan.dag_id, run_id, logical_date.isoformat() if logical_date else None)
        for item in trials or []:
            outdir = Path(item["outdir"])
            exit_code = ingest.runner_exit_code(outdir)
            summary["trials"] += 1
            never_ran = exit_code is None and not (outdir / "result.json").exists()
            if never_ran:
                summary["not_run"] += 1  # no runner outcome, no result: the trial never started
            spec = TrialSpec.model_validate(item["spec"]) if "spec" in item else TrialSpec.from_file(item["spec_path"])
            outcome = ingest.collect_trial(conn, pk, spec, outdir, exit_code=exit_code,
                                           carbon=plan.carbon.model_dump(mode="json"))
            summary[outcome.action] += 1
            summary["samples"] += outcome.samples
            if outcome.status == "failed":
                summary["failed"] += 1
            if outcome.status == "failed" and not never_ran:  # never-run trials are counted in not_run
                summary.setdefault("failures", []).append(f"{outcome.trial_id} ({spec.variant} #{spec.repetition}): "
                                                          f"{outcome.reason}")
            if outcome.action == "refused" or outcome.status != "ok":
                print(f"trial {outcome.trial_id}: {outcome.action} {outcome.status}: {outcome.reason}")
    print(f"collect: {summary}")
    return summary
