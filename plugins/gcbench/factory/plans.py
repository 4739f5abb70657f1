"""Loading every plan of a folder for the DAG file, one failure at a time.

A broken plan must not take the other plans' DAGs down with it. Each plan file is
loaded on its own; a :class:`~gcbench.errors.PlanError` becomes a stand-in DAG with
the same dag_id (``gcbench__<file stem>``), tagged ``plan-error``, whose only task
fails with the error (file, line, field), so the problem shows in the Airflow UI next
to the plans that loaded. Only PlanError is caught: a bug in GC-Bench itself still
surfaces as an import error of the DAG file.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from gcbench.errors import PlanError

log = logging.getLogger(__name__)


def plan_files(plans_dir: Path) -> list[Path]:
    """The ``*.yaml`` / ``*.yml`` files of a folder, sorted by name."""
    return sorted([*plans_dir.glob("*.yaml"), *plans_dir.glob("*.yml")])


def error_dag(path: Path, error: PlanError):
    """A stand-in DAG for a plan that does not load; its task fails with the error."""
    from airflow.sdk import DAG, task

    stem = re.sub(r"[^a-z0-9_-]", "-", path.stem.lower())
    with DAG(dag_id=f"gcbench__{stem}", schedule=None, tags=["gcbench", "plan-error"],
             doc_md=f"**This plan does not load.**\n\n```\n{error}\n```", description=f"plan error: {error}"[:200]) as dag:

        @task(retries=0)
        def plan_error() -> None:
            raise PlanError(error.path, error.line, error.field, error.message)

        plan_error()
    return dag


def build_all(plans_dir: Path) -> dict[str, object]:
    """``{dag_id: DAG}`` for every plan file; a broken plan gives its stand-in DAG."""
    from gcbench.factory.dag import build_dag
    from gcbench.plan.loader import load_plan

    dags: dict[str, object] = {}
    for path in plan_files(plans_dir):
        try:
            plan = load_plan(path)
            dag = build_dag(plan, path)
        except PlanError as exc:
            log.error("plan %s does not load: %s", path, exc)
            dag = error_dag(path, exc)
        if dag.dag_id in dags:
            dup = PlanError(str(path), None, "name", f"another plan file already defines {dag.dag_id}")
            log.error("%s", dup)
            continue
        dags[dag.dag_id] = dag
    return dags
