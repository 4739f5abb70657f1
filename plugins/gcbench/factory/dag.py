"""``build_dag(plan) -> DAG``: one Airflow DAG per plan.

    expand_trials -> [build_tokenizers] -> trials_<gpus> -> run_trial_<gpus> (mapped, one per trial)
                  -> collect -> validate -> report -> check_trials

A plan with a precision target (``repetitions: {min, max, until_ci_rel}``) runs in two
rounds within the one DAG run: ``validate -> expand_round2 -> trials_<gpus>_round2 ->
run_trial_<gpus>_round2 -> collect_round2 -> validate_round2 -> report``.
``expand_round2`` fixes each group's total n from the first round's valid trials
(Stein's two-stage rule, :func:`gcbench.factory.tasks.round2_totals`) and returns the
missing repetitions, already-stored ones left out as in ``expand_trials``.

* ``expand_trials`` turns the plan (and the trigger form's parameters) into trial
  specs, registers the DAG run in the results database, and leaves out the trials
  already stored for this run or its logical date, so a re-run or a backfill never
  runs or stores a trial twice. A run with nothing left to do says so in its log and
  its report, and succeeds.
* ``run_trial_<key>`` is one mapped task per set of GPUs. Airflow pools queue them:
  one pool per single GPU (``gcbench_gpu0``, 1 slot), a multi-GPU trial in the pool of
  its first GPU. What makes two trials never share a GPU, across DAGs, plans and
  hosts, is the GPU lease each trial takes before it starts and holds until it ends:
  a PostgreSQL advisory lock per (host, GPU) in the results database
  (:mod:`gcbench.store.gpulock`). Trials using several GPUs also wait for the
  single-GPU tasks of those GPUs in the same run.
* ``collect`` runs whatever happened to the trials (``all_done``): a trial that died
  is stored as failed with its log tail, and the others are kept.
* ``check_trials`` is the run's verdict and its last task (``all_done``, a leaf:
  Airflow 3 decides a run's state from its leaves): it fails the run when
  ``expand_trials``, ``build_tokenizers``, ``collect``, ``validate`` or ``report`` failed,
  when trials never ran, when trials ran and failed (error, killed, timed out: each
  named with its reason), when a run with trials to run stored none, or when
  ``gcbench run`` was interrupted. Trials that measured invalid or were skipped do
  not fail it (they are stored and reported with their reasons).
* Errors a retry would meet again (a plan or parameter error, a TypeError or
  ValueError) fail their task at once (``AirflowFailException``); only infrastructure
  failures (database, Docker engine, a trial that cannot start, busy GPUs) are retried.
* Plans with a ``schedule`` get a ``regression_check`` after ``report``
  (:mod:`gcbench.regression`): it fails on an energy regression against the last
  nights and fires :class:`gcbench.notify.RegressionNotifier`.
* Plans with ``hosts:`` (CeleryExecutor, docs/multi-host.md) get, per host, their own
  ``build_tokenizers_<host>``, ``trials_<host>_<gpus>``, ``run_trial_<host>_<gpus>``
  (pool ``gcbench_<host>_gpu<i>``) and ``collect_<host>`` tasks on the host's Celery
  ``queue``: trial outputs stay on the host that ran them, and only expand, validate,
  report and the regression check run on the central workers. Trials are placed
  round-robin over the hosts' GPUs (:func:`gcbench.factory.tasks.place_trials`); placement is not part of
  a trial's id.

Building the DAG does no I/O: the plan is already loaded, and everything heavy is
imported inside the tasks. What each task does is in :mod:`gcbench.factory.tasks`;
this module is the wiring (task ids, pools, queues, trigger rules, dependencies).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from gcbench.config import default_runner
from gcbench.factory import tasks
from gcbench.factory.tasks import DOCKER_GRACE_S, collect_run, fail_fast
from gcbench.plan.identifiers import (
    device_key,
    device_sets,
    host_device_sets,
    host_pool_name,
    pool_name,
    trial_pool,
)
from gcbench.plan.matrix import preprocessors_used, variants
from gcbench.plan.schedule import START_DATE
from gcbench.plan.schema import Plan, describe_repetitions


def plan_pools(plan: Plan) -> list[str]:
    """Every pool the plan's trial tasks use: one per single GPU (1 slot each).

    Raises:
        PlanError: as :func:`host_device_sets`.
    """
    names: list[str] = []
    if plan.hosts:
        for host, sets in host_device_sets(plan).items():
            for gpu in sorted({d for s in sets for d in s}):
                names.append(host_pool_name(host, [gpu]))
            if any(not s for s in sets):
                names.append(host_pool_name(host, []))
    else:
        sets = device_sets(plan)
        names = [pool_name([gpu]) for gpu in sorted({d for s in sets for d in s})]
        if any(not s for s in sets):
            names.append(pool_name([]))
    return list(dict.fromkeys(names))


def dag_params(plan: Plan) -> dict[str, Any]:
    """The trigger form (and what a REST API ``conf`` is validated against): repetitions,
    variants, runner. Schemas from :func:`gcbench.plan.params.param_schemas`; whatever
    reaches ``expand_trials`` is checked again by :func:`gcbench.plan.params.run_params`."""
    from airflow.sdk import Param

    from gcbench.plan.params import param_schemas

    schemas = param_schemas(plan)
    return {
        "repetitions": Param(
            None,
            **schemas["repetitions"],
            title="Repetitions",
            description=f"Repetitions per variant; empty: the plan's ({describe_repetitions(plan.repetitions)}).",
        ),
        "variants": Param(
            [], **schemas["variants"], title="Variants", description="Run only these variants; empty: all of them."
        ),
        "runner": Param(
            default_runner(plan.runner),
            **schemas["runner"],
            title="Runner",
            description="local: a subprocess per trial; docker: a container per trial (DockerOperator).",
        ),
    }


def build_dag(plan: Plan, plan_path: str | Path | None = None, *, retries: int = 2):
    """The Airflow DAG of a plan (dag_id ``gcbench__<name>``). See the module docstring.

    Args:
        plan: a validated plan.
        plan_path: its file, for the DAG's documentation.
        retries: retries of infrastructure failures (engine or database unreachable),
            with exponential backoff; ``gcbench run`` uses 0 to fail fast.
    """
    import pendulum
    from airflow.sdk import DAG, get_current_context, task

    tokenizers = preprocessors_used(plan)
    sets = device_sets(plan)
    per_host = host_device_sets(plan) if plan.hosts else {None: sets}
    doc = (
        f"GC-Bench plan **{plan.name}**"
        + (f" from `{plan_path}`" if plan_path else "")
        + f".\n\n{plan.description}\n\n"
        f"Variants: {', '.join(variants(plan))}."
    )
    default_args = {
        "retries": retries,
        "retry_delay": timedelta(seconds=30),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=10),
    }
    start_date = pendulum.parse(START_DATE)
    assert isinstance(start_date, pendulum.DateTime)  # a date string parses to a DateTime
    with DAG(
        dag_id=plan.dag_id,
        description=(plan.description or f"GC-Bench plan {plan.name}")[:200],
        schedule=plan.schedule,
        start_date=start_date,
        catchup=False,
        max_active_runs=1,
        params=dag_params(plan),
        tags=["gcbench", plan.name],
        doc_md=doc,
        default_args=default_args,
        render_template_as_native_obj=False,
    ) as dag:

        @task
        @fail_fast("expand_trials")
        def expand_trials() -> list[dict[str, Any]]:
            """Plan -> trial specs for this run (already-stored trials left out)."""
            return tasks.expand_trials(plan, get_current_context())

        @task
        def select_trials(trials: list[dict[str, Any]], key: str, host: str | None = None) -> list[dict[str, Any]]:
            """The trials of one set of GPUs of one host (one mapped task per set)."""
            return tasks.select_trials(trials, key, host)

        def _run_trial(trial: dict[str, Any]) -> dict[str, Any]:
            return tasks.run_trial(plan, get_current_context(), trial)

        specs = expand_trials()
        upstream: dict[str | None, Any] = {host: specs for host in per_host}
        essential: list[Any] = [specs]  # tasks whose failure fails the run (check_trials)
        if tokenizers:

            @task
            def build_tokenizers() -> dict[str, str]:
                """Build the native tokenizers (cached by the hash of their sources); a compiler
                error fails at once, an unreachable engine is retried."""
                return tasks.build_tokenizers(plan, get_current_context(), tokenizers)

            for host in per_host:
                if host is None:
                    tok = build_tokenizers()
                else:  # each host builds its own (its engine, its tools folder)
                    tok = build_tokenizers.override(task_id=f"build_tokenizers_{host}", queue=plan.hosts[host].queue)()
                specs >> tok
                upstream[host] = tok
                essential.append(tok)

        # the lease wait comes before the trial's own limit (run_local, trial_time_limit):
        # the task's execution_timeout is only a backstop above both
        from gcbench.store.gpulock import lock_timeout_s

        backstop = timedelta(seconds=plan.trial_timeout_s + DOCKER_GRACE_S + lock_timeout_s() + 120)

        def run_round(trials: Any, suffix: str = "") -> dict[str | None, list[tuple[list[int], Any]]]:
            """Per host: the (devices, mapped run_trial task) of one round of trials."""
            out: dict[str | None, list[tuple[list[int], Any]]] = {}
            for host, host_sets in per_host.items():
                prefix = "" if host is None else f"{host}_"
                queue = {} if host is None else {"queue": plan.hosts[host].queue}
                out[host] = []
                for devices in host_sets:
                    key = device_key(devices)
                    # TaskFlow calls take XComArgs where the function takes values: Airflow's typing
                    # does not model it (here and below); task(callable, **kwargs) is task(**kwargs)(callable)
                    selected = select_trials.override(task_id=f"trials_{prefix}{key}{suffix}")(trials, key, host)
                    mapped = task(  # type: ignore[call-overload]
                        _run_trial,
                        task_id=f"run_trial_{prefix}{key}{suffix}",
                        pool=trial_pool(devices, host),
                        map_index_template="{{ task.op_kwargs['trial']['label'] }}",
                        execution_timeout=backstop,
                        do_xcom_push=False,  # nothing reads it (collect reads the trial folders); saves an API call per trial
                        trigger_rule="all_done" if len(devices) > 1 else "all_success",
                        **queue,
                    ).expand(trial=selected)
                    if not suffix:
                        upstream[host] >> selected
                    for other_devices, other in out[host]:
                        if set(devices) & set(other_devices):
                            other >> mapped  # a multi-GPU trial waits for the single-GPU trials of its GPUs
                    out[host].append((devices, mapped))
            return out

        run_tasks = run_round(specs)

        @task(trigger_rule="all_done", retries=retries + 1 if retries else 0)
        def collect(trials: list[dict[str, Any]] | None, host: str | None = None) -> dict[str, Any]:
            """Load every trial folder of this run (of one host) into PostgreSQL (one transaction per trial)."""
            from airflow.sdk.exceptions import AirflowSkipException

            if trials is None:  # expand_trials failed: check_trials fails the run and says why
                raise AirflowSkipException("nothing to collect: expand_trials produced no trial list")
            return collect_run(plan, get_current_context(), [t for t in trials if t.get("host") == host])

        @task
        @fail_fast("validate")
        def validate() -> dict[str, Any]:
            """Apply the validation rules and store validity and reasons."""
            return tasks.validate(plan, get_current_context())

        @task
        @fail_fast("report")
        def report() -> str:
            """Write the HTML, Markdown and CSV report of this run; returns the HTML path."""
            return tasks.report(plan, get_current_context())

        collect_ids: list[str] = []

        @task(trigger_rule="all_done", retries=0)
        def check_trials() -> dict[str, Any]:
            """The run's verdict: fails the run, with the reasons in one line (tasks.run_verdict)."""
            return tasks.check_trials(plan, get_current_context(), essential_ids, collect_ids)

        def collect_round(trials: Any, round_tasks: dict, validated: Any, suffix: str = "") -> None:
            """Per host: collect one round's trials (after its run_trial tasks), then ``validated``."""
            for host, host_tasks in round_tasks.items():
                if host is None:
                    collected = collect.override(task_id=f"collect{suffix}")(trials)
                else:  # the trial folders are on the host: collect there, into the central database
                    collected = collect.override(task_id=f"collect_{host}{suffix}", queue=plan.hosts[host].queue)(
                        trials,
                        host,
                    )
                for _, mapped in host_tasks:
                    mapped >> collected
                collected >> validated
                essential.append(collected)
                collect_ids.append(collected.operator.task_id)  # type: ignore[attr-defined]  # a PlainXComArg

        validated = validate()
        collect_round(specs, run_tasks, validated)
        validated_ids = ["validate"]
        if plan.has_target:  # precision targets: a second round, planned from the first's valid trials

            @task
            @fail_fast("expand_round2")
            def expand_round2() -> list[dict[str, Any]]:
                """The second round's trials (tasks.expand_round2); empty when every group has its n."""
                return tasks.expand_round2(plan, get_current_context())

            extra = expand_round2()
            validated >> extra
            essential.append(extra)
            validated = validate.override(task_id="validate_round2")()
            collect_round(extra, run_round(extra, "_round2"), validated, "_round2")
            validated_ids.append("validate_round2")
        reported = report()
        validated >> reported
        essential_ids = [t.operator.task_id for t in essential] + [*validated_ids, "report"]
        checked = check_trials()
        for t in [*essential, validated, reported]:
            t >> checked
        if plan.schedule:
            from gcbench.notify import RegressionNotifier

            @task(retries=0, on_failure_callback=RegressionNotifier())
            def regression_check() -> dict[str, Any]:
                """Tonight against the last nights (gcbench.regression); fails on a regression."""
                return tasks.regression_check(plan, get_current_context())

            reported >> regression_check()
    return dag
