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
        }
    print(json.dumps(out))
""")


def dagbag(dags_dir: Path, plans_dir: Path, tmp_path: Path) -> dict:
    import json
    import os

    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"), "GCBENCH_PLANS_DIR": str(plans_dir),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "GCBENCH_HOME": str(tmp_path / "home")}
    out = subprocess.run([sys.executable, "-c", PROBE, str(dags_dir)], capture_output=True, text=True, env=env, timeout=120)
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
    assert {"expand_trials", "build_tokenizers", "trials_gpu0", "run_trial_gpu0", "collect", "validate", "report"} <= set(smoke["tasks"])
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
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"), "GCBENCH_PLANS_DIR": str(REPO / "plans"),
           "GCBENCH_HOME": str(tmp_path / "home"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    n, dt, files = out.stdout.strip().splitlines()[-1].split(" ", 2)
    import ast

    files = ast.literal_eval(files)
    assert int(n) == len(list((REPO / "plans").glob("*.yaml")))
    assert all(f.endswith((".yaml", ".yml")) for f in files), files
    assert not (tmp_path / "home" / "pgdata").exists()
