"""``build_dag(plan) -> DAG``: one Airflow DAG per plan.

    expand_trials -> [build_tokenizers] -> trials_<gpus> -> run_trial_<gpus> (mapped, one per trial)
                  -> collect -> validate -> report

* ``expand_trials`` turns the plan (and the trigger form's parameters) into trial
  specs, registers the DAG run in the results database, and leaves out the trials
  already stored for this run or its logical date, so a re-run or a backfill never
  runs or stores a trial twice.
* ``run_trial_<key>`` is one mapped task per set of GPUs, in the Airflow pool
  ``gcbench_<key>`` (1 slot: two trials never share a GPU). Trials using several
  GPUs wait for the single-GPU tasks of those GPUs.
* ``collect`` runs whatever happened to the trials (``all_done``): a trial that died
  is stored as failed with its log tail, and the others are kept.

Building the DAG does no I/O: the plan is already loaded, and everything heavy is
imported inside the tasks.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

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
        "runner": Param(plan.runner, type="string", enum=["local", "docker"], title="Runner",
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
            skipped = 0
            for spec in specs:
                if stored.get(spec.trial_id) == "ok":
                    skipped += 1
                    continue
                outdir = config.run_dir(plan.name, run_id) / spec.trial_id
                spec_path = write_spec(spec, outdir)
                item = {"trial_id": spec.trial_id, "label": f"{spec.variant} #{spec.repetition}",
                        "spec_path": str(spec_path), "outdir": str(outdir), "devices": spec.devices}
                out.append(item)
            print(f"{len(specs)} trials in this run, {skipped} already stored, {len(out)} to run")
            return out

        @task
        def select_trials(trials: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
            """The trials of one set of GPUs (one mapped task, one pool, per set)."""
            return [t for t in trials if device_key(t["devices"]) == key]

        def _run_trial(trial: dict[str, Any]) -> dict[str, Any]:
            from gcbench.factory.local import RunnerOutcome, run_local
            from gcbench.spec import TrialSpec

            ctx = get_current_context()
            spec = TrialSpec.from_file(trial["spec_path"])
            runner = ctx["params"].get("runner") or plan.runner
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
        upstream = [specs]
        if tokenizers:

            @task(retries=0)
            def build_tokenizers() -> dict[str, str]:
                """Build the native tokenizers (cached by the hash of their sources)."""
                from gcbench import config
                from gcbench.factory.tokenizers import build_local

                ctx = get_current_context()
                runner = ctx["params"].get("runner") or plan.runner
                built = {}
                for impl in tokenizers:
                    if runner == "docker":
                        from gcbench.factory.tokenizers import build_in_docker

                        built[impl] = str(build_in_docker(impl, config.home() / "tools", ctx))
                    else:
                        built[impl] = str(build_local(impl, config.home() / "tools"))
                    print(f"tokenizer {impl}: {built[impl]}")
                return built

            tok = build_tokenizers()
            specs >> tok
            upstream = [tok]

        run_tasks: list[tuple[list[int], Any]] = []
        for devices in sets:
            key = device_key(devices)
            selected = select_trials.override(task_id=f"trials_{key}")(specs, key)
            mapped = task(
                _run_trial,
                task_id=f"run_trial_{device_key(devices)}",
                pool=pool_name(devices),
                map_index_template="{{ task.op_kwargs['trial']['label'] }}",
                execution_timeout=timedelta(seconds=plan.trial_timeout_s + 120),
                trigger_rule="all_done" if len(devices) > 1 else "all_success",
            ).expand(trial=selected)
            for up in upstream:
                up >> selected
            for other_devices, other in run_tasks:
                if set(devices) & set(other_devices):
                    other >> mapped  # a multi-GPU trial waits for the single-GPU trials of its GPUs
            run_tasks.append((devices, mapped))

        @task(trigger_rule="all_done", retries=retries + 1 if retries else 0)
        def collect(trials: list[dict[str, Any]]) -> dict[str, Any]:
            """Load every trial folder of this run into PostgreSQL (one transaction per trial)."""
            return collect_run(plan, get_current_context(), trials)

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

        collected = collect(specs)
        for _, mapped in run_tasks:
            mapped >> collected
        collected >> validate() >> report()
    return dag


def collect_run(plan: Plan, ctx: Any, trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``collect`` task's body: store each trial of this run, count what happened.

    Raises:
        StoreError: the database failed; the task is retried and, once the server is
            back, every sample is stored exactly once.
    """
    import json

    from gcbench.spec import TrialSpec
    from gcbench.store import db, ingest

    run_id = ctx["run_id"]
    logical_date = ctx.get("logical_date")
    summary: dict[str, Any] = {"stored": 0, "unchanged": 0, "refused": 0, "failed": 0, "samples": 0}
    with db.connection() as conn:
        pk = ingest.register_run(conn, plan, plan.dag_id, run_id, logical_date.isoformat() if logical_date else None)
        for item in trials or []:
            outdir = Path(item["outdir"])
            runner_file = outdir / "runner.json"
            exit_code = json.loads(runner_file.read_text())["exit_code"] if runner_file.exists() else None
            spec = TrialSpec.from_file(item["spec_path"])
            outcome = ingest.collect_trial(conn, pk, spec, outdir, exit_code=exit_code,
                                           carbon=plan.carbon.model_dump(mode="json"))
            summary[outcome.action] += 1
            summary["samples"] += outcome.samples
            if outcome.status == "failed":
                summary["failed"] += 1
            if outcome.action == "refused" or outcome.status != "ok":
                print(f"trial {outcome.trial_id}: {outcome.action} {outcome.status}: {outcome.reason}")
    print(f"collect: {summary}")
    return summary
