"""Every plan in plans/ becomes a DAG; a broken plan fails alone."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent("""
    import json, sys
    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag(sys.argv[1])
    out = {"errors": {k: v for k, v in bag.import_errors.items()}, "dags": {}}
    for dag_id, dag in bag.dags.items():
        out["dags"][dag_id] = {
            "tags": sorted(dag.tags), "params": sorted(dag.params.keys()),
            "tasks": sorted(t.task_id for t in dag.tasks),
            "pools": sorted({t.pool for t in dag.tasks}), "schedule": str(getattr(dag.timetable, "description", "")),
            "description": dag.description, "doc": dag.doc_md,
        }
    print(json.dumps(out))
""")


def dagbag(dags_dir: Path, plans_dir: Path, tmp_path: Path) -> dict:
    import json
    import os

    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "GCBENCH_PLANS_DIR": str(plans_dir),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "GCBENCH_HOME": str(tmp_path / "home"),
    }
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(dags_dir)], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_plan_imports_with_params_and_pools(tmp_path):
    bag = dagbag(REPO / "dags", REPO / "plans", tmp_path)
    assert bag["errors"] == {}
    plan_names = sorted(p.stem for p in (REPO / "plans").glob("*.yaml"))
    from gcbench.plan import load_plan

    expected = sorted(f"gcbench__{load_plan(REPO / 'plans' / f'{n}.yaml').name}" for n in plan_names)
    assert sorted(bag["dags"]) == expected
    smoke = bag["dags"]["gcbench__smoke"]
    assert smoke["params"] == ["repetitions", "runner", "variants"]
    assert {
        "expand_trials",
        "build_tokenizers",
        "trials_gpu0",
        "run_trial_gpu0",
        "collect",
        "validate",
        "report",
    } <= set(smoke["tasks"])
    assert "gcbench_gpu0" in smoke["pools"]
    assert "gcbench" in smoke["tags"] and "smoke" in smoke["tags"]


def test_broken_plan_fails_alone(tmp_path):
    plans = tmp_path / "plans"
    plans.mkdir()
    shutil.copy(REPO / "plans" / "smoke.yaml", plans / "smoke.yaml")
    (plans / "broken.yaml").write_text("name: broken\nrepetitions: many\nworkloads: [{name: a, kind: noop}]\n")
    bag = dagbag(REPO / "dags", plans, tmp_path)
    assert bag["errors"] == {}
    assert "gcbench__smoke" in bag["dags"]
    broken = bag["dags"]["gcbench__broken"]
    assert broken["tags"] == ["gcbench", "plan-error"] and broken["tasks"] == ["plan_error"]


def test_parsing_reads_only_the_yaml_files(tmp_path):
    # Building the DAGs must not touch the database, Docker or the trial folders.
    import os

    code = textwrap.dedent("""
        import sys, builtins, socket
        opened = []
        real_open = builtins.open
        def spy(file, *a, **k):
            opened.append(str(file)); return real_open(file, *a, **k)
        def no_net(*a, **k):
            raise AssertionError("network use while parsing")
        socket.socket.connect = no_net
        import gcbench.factory.plans as plans
        from gcbench.config import plans_dir
        import time
        plans.build_all(plans_dir())  # first build imports Airflow (its config files); measure a re-parse
        builtins.open = spy
        t = time.perf_counter()
        dags = plans.build_all(plans_dir())
        dt = time.perf_counter() - t
        builtins.open = real_open
        print(len(dags), dt, sorted({f for f in opened if not f.endswith('.py')}))
    """)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "GCBENCH_PLANS_DIR": str(REPO / "plans"),
        "GCBENCH_HOME": str(tmp_path / "home"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    n, dt, files = out.stdout.strip().splitlines()[-1].split(" ", 2)
    import ast

    files = ast.literal_eval(files)
    assert int(n) == len(list((REPO / "plans").glob("*.yaml")))
    assert all(f.endswith((".yaml", ".yml")) for f in files), files
    assert not (tmp_path / "home" / "pgdata").exists()


BOOM_DAG_FILE = textwrap.dedent("""
    # The airflow DAG file of dags/ (the words airflow and dag keep safe-mode parsing on), with the
    # factory made to fail inside one plan's `with DAG(...)` block.
    import os
    from pathlib import Path

    import gcbench.notify

    class BrokenNotifier:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("notifier unavailable")

    gcbench.notify.RegressionNotifier = BrokenNotifier  # only plans with a schedule build one

    from gcbench.factory.plans import build_all

    globals().update(build_all(Path(os.environ["GCBENCH_PLANS_DIR"])))
""")

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "plans"


def test_any_failure_of_one_plan_leaves_the_other_plans_dags(tmp_path):
    plans = tmp_path / "plans"
    plans.mkdir()
    shutil.copy(REPO / "plans" / "smoke.yaml", plans / "smoke.yaml")
    shutil.copy(CASES / "host_name_with_spaces.yaml", plans / "c02.yaml")  # C02: a host name Airflow refuses
    shutil.copy(CASES / "schedule_never_fires.yaml", plans / "c01.yaml")
    # valid, but its DAG build raises a RuntimeError half-way through `with DAG(...)`
    (plans / "boom.yaml").write_text("name: boom\nschedule: '@daily'\nworkloads: [{name: w, kind: noop}]\n")
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "gcbench_dags.py").write_text(BOOM_DAG_FILE)
    bag = dagbag(dags, plans, tmp_path)
    assert bag["errors"] == {}
    assert sorted(bag["dags"]) == ["gcbench__boom", "gcbench__c01", "gcbench__c02", "gcbench__smoke"]
    assert "run_trial_gpu0" in bag["dags"]["gcbench__smoke"]["tasks"]
    for dag_id in ("gcbench__boom", "gcbench__c01", "gcbench__c02"):
        dag = bag["dags"][dag_id]
        assert dag["tags"] == ["gcbench", "plan-error"] and dag["tasks"] == ["plan_error"], dag
    boom = bag["dags"]["gcbench__boom"]  # the plan loaded: its stand-in has the plan's dag_id and the traceback
    assert boom["description"].startswith(
        f"plan error: {plans / 'boom.yaml'}: its DAG could not be built: RuntimeError: notifier unavailable"
    )
    assert "Traceback" in boom["doc"] and 'raise RuntimeError("notifier unavailable")' in boom["doc"]
    c02 = bag["dags"]["gcbench__c02"]
    assert c02["description"].startswith(
        f"plan error: {plans / 'c02.yaml'}:5: hosts.gpu node 1: host name 'gpu node 1'"
    )
    assert (
        bag["dags"]["gcbench__c01"]["description"]
        == (
            f"plan error: {plans / 'c01.yaml'}:14: schedule: '0 2 30 2 *' never fires: "
            "Airflow's timetable finds no time that matches it"
        )[:200]
    )


def test_stand_in_dag_of_a_plan_error_fails_with_file_line_and_field(tmp_path):
    from gcbench.errors import PlanError
    from gcbench.factory.plans import build_all

    plans = tmp_path / "plans"
    plans.mkdir()
    shutil.copy(CASES / "host_name_with_spaces.yaml", plans / ("x" * 240 + ".yaml"))
    (dag,) = build_all(plans).values()
    assert dag.dag_id == "gcbench__" + "x" * 200  # a long file name still gives a valid dag id
    task = dag.get_task("plan_error")
    with pytest.raises(PlanError) as info:
        task.python_callable()
    assert (info.value.line, info.value.field) == (5, "hosts.gpu node 1")
