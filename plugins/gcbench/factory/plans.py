"""Loading every plan of a folder for the DAG file, one failure at a time.

A broken plan must not take the other plans' DAGs down with it. Each plan file is
loaded and built on its own. A plan that does not load (:class:`~gcbench.errors.PlanError`:
file, line, field), or whose DAG fails to build in any other way (any exception: a bug
in GC-Bench, an Airflow that refuses something the plan checks missed), becomes a
stand-in DAG tagged ``plan-error`` whose only task fails with the error, so the problem
shows in the Airflow UI next to the plans that loaded, and in the DAG processor's log
with its traceback. The stand-in has the plan's own dag_id when the plan loaded, else
``gcbench__<file stem>``. Nothing is dropped silently: an error DAG is the visible
failure, and a DAG half-built before its build failed is unregistered so that it
cannot stand in for the plan.
"""

from __future__ import annotations

import logging
import re
import traceback
from pathlib import Path

from gcbench.errors import PlanError

log = logging.getLogger(__name__)

ERROR_DAG_STEM_MAX_CHARS = 200
"""File stems longer than this are cut in a stand-in DAG's id (Airflow ids hold 250 characters)."""


def plan_files(plans_dir: Path) -> list[Path]:
    """The ``*.yaml`` / ``*.yml`` files of a folder, sorted by name."""
    return sorted([*plans_dir.glob("*.yaml"), *plans_dir.glob("*.yml")])


def error_dag(path: Path, error: Exception, dag_id: str | None = None):
    """A stand-in DAG for a plan that does not load or build; its task fails with the error.

    Args:
        path: the plan file.
        error: a PlanError (shown as file:line: field: message) or any exception
            raised while building the plan's DAG (shown with its type and traceback).
        dag_id: the plan's own dag_id when it loaded; default ``gcbench__<file stem>``.
    """
    from airflow.sdk import DAG, task

    if dag_id is None:
        stem = re.sub(r"[^a-z0-9_-]", "-", path.stem.lower())[:ERROR_DAG_STEM_MAX_CHARS]
        dag_id = f"gcbench__{stem}"
    if isinstance(error, PlanError):
        failure = PlanError(error.path, error.line, error.field, error.message)
        details = str(error)
    else:
        failure = PlanError(str(path), None, "", f"its DAG could not be built: {type(error).__name__}: {error}")
        details = "".join(traceback.format_exception(error)).strip()
    with DAG(
        dag_id=dag_id,
        schedule=None,
        tags=["gcbench", "plan-error"],
        auto_register=False,
        doc_md=f"**This plan does not load.**\n\n```\n{details}\n```",
        description=f"plan error: {failure}"[:200],
    ) as dag:

        @task(retries=0)
        def plan_error() -> None:
            raise failure

        plan_error()
    return dag


def _autoregistered() -> set:
    from airflow.sdk.definitions._internal.contextmanager import DagContext

    return set(DagContext.autoregistered_dags)


def _unregister_since(before: set) -> None:
    """Forget the DAGs Airflow auto-registered (``with DAG(...)``) since ``before``: the
    DAG processor would otherwise load a half-built DAG next to its stand-in."""
    from airflow.sdk.definitions._internal.contextmanager import DagContext

    DagContext.autoregistered_dags.intersection_update(before)


def build_all(plans_dir: Path) -> dict[str, object]:
    """``{dag_id: DAG}`` for every plan file; a plan that fails to load or build gives its stand-in DAG."""
    from gcbench.factory.dag import build_dag
    from gcbench.plan.loader import load_plan

    dags: dict[str, object] = {}
    for path in plan_files(plans_dir):
        before = _autoregistered()
        plan = None
        try:
            plan = load_plan(path)
            dag = build_dag(plan, path)
        except PlanError as exc:
            log.error("plan %s does not load: %s", path, exc)
            _unregister_since(before)
            dag = error_dag(path, exc, plan.dag_id if plan is not None else None)
        except Exception as exc:  # noqa: BLE001 - one plan's failure, whatever it is, must not hide the others
            log.exception("the DAG of plan %s could not be built", path)
            _unregister_since(before)
            dag = error_dag(path, exc, plan.dag_id if plan is not None else None)
        if dag.dag_id in dags:
            dup = PlanError(str(path), None, "name", f"another plan file already defines {dag.dag_id}")
            log.error("%s", dup)
            _unregister_since(before)
            continue
        dags[dag.dag_id] = dag
    return dags
