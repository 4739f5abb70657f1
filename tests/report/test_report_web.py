"""The GC-Bench web app and Airflow plugin, through the API (FastAPI TestClient)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gcbench import config
from gcbench.report import web

RUN_ID = "manual__2025-01-01T00:00:00+00:00"
RUN_KEY = config.run_key(RUN_ID)  # the folder the report writer uses (build.report_run)


@pytest.fixture(scope="module")
def reports(tmp_path_factory, simulated_report):
    """A reports folder laid out as the report writer lays it out: the simulated report
    as synthetic-test/<config.run_key(run id)>, a second run without report.json, and a
    secret file beside the folder."""
    base = tmp_path_factory.mktemp("web")
    root = base / "reports"
    _, paths = simulated_report
    shutil.copytree(paths.out_dir, root / "synthetic-test" / RUN_KEY)
    (root / "synthetic-test" / "scheduled__2024-12-31").mkdir(parents=True)
    (root / "synthetic-test" / "scheduled__2024-12-31" / "report.html").write_text("<h1>old</h1>")
    (base / "secret.txt").write_text("do not serve")
    plans = base / "plans"
    plans.mkdir()
    (plans / "smoke.yaml").write_text("name: smoke\n")
    return root, plans


@pytest.fixture()
def client(reports):
    root, plans = reports
    return TestClient(web.create_app(root, plans))


def test_index_lists_plans_runs_and_report_links(client):
    r = client.get("/")
    assert r.status_code == 200 and "GC-Bench reports" in r.text
    assert "synthetic-test" in r.text and "gcbench__smoke" in r.text
    assert f'href="reports/synthetic-test/{RUN_KEY}/report.html"' in r.text
    assert "SIMULATED" in r.text


def test_api_lists_runs_newest_first_with_headlines(client):
    plans = client.get("/api/plans").json()
    assert [p["plan"] for p in plans] == ["smoke", "synthetic-test"]
    runs = plans[1]["runs"]
    assert [r["run_id"] for r in runs] == [RUN_ID, "scheduled__2024-12-31"]
    assert runs[0]["folder"] == RUN_KEY
    assert runs[0]["simulated"] is True and runs[0]["headlines"]
    assert client.get("/api/plans/synthetic-test/runs").json()[0]["run_id"] == RUN_ID
    assert client.get("/api/plans/nope/runs").status_code == 404


def test_report_files_are_served(client):
    base = f"/reports/synthetic-test/{RUN_KEY}"
    r = client.get(f"{base}/report.html")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "GC-Bench report: synthetic-test" in r.text
    assert client.get(f"{base}/trials.csv").text.startswith("gpu_energy_source,")
    raw = "/reports/synthetic-test/manual__2025-01-01T00%3A00%3A00%2B00%3A00/report.html"
    assert client.get(raw).status_code == 200  # the raw run id finds the run_key folder
    assert client.get(f"{base}/co2e.png").content[:4] == b"\x89PNG"
    assert client.get(f"{base}/report.md").headers["content-type"].startswith("text/markdown")
    assert client.get(f"{base}/missing.csv").status_code == 404


@pytest.mark.parametrize("path", [
    "/reports/synthetic-test/..%2F..%2Fsecret.txt/x",
    "/reports/synthetic-test/x/..%2F..%2F..%2Fsecret.txt",
    "/reports/synthetic-test/x/%2E%2E/%2E%2E/%2E%2E/secret.txt",
    "/reports/..%2F/x/secret.txt",
    "/reports/synthetic-test/x/%2Fetc%2Fpasswd",
    "/api/plans/..%2F..%2F/runs",
])
def test_path_traversal_is_refused(client, path):
    r = client.get(path)
    assert r.status_code in (403, 404)
    assert "do not serve" not in r.text and "root:" not in r.text


def test_dag_run_link_redirects_to_its_report(client):
    r = client.get(f"/dag_runs/gcbench__synthetic-test/{RUN_ID}", follow_redirects=False)
    assert r.status_code == 307
    assert r.headers["location"] == f"../../reports/synthetic-test/{RUN_KEY}/report.html"
    r = client.get("/dag_runs/gcbench__synthetic-test/manual__2030-01-01", follow_redirects=False)
    assert r.status_code == 404 and "No report yet" in r.text


def test_mounted_under_gcbench_prefix_like_airflow(reports):
    from fastapi import FastAPI

    root, plans = reports
    outer = FastAPI()
    outer.mount("/gcbench", web.create_app(root, plans))
    c = TestClient(outer)
    assert "synthetic-test" in c.get("/gcbench/").text
    r = c.get(f"/gcbench/dag_runs/gcbench__synthetic-test/{RUN_ID}")  # follows the redirect
    assert r.status_code == 200 and "GC-Bench report: synthetic-test" in r.text


def test_reports_dir_from_environment(monkeypatch, reports):
    root, _ = reports
    monkeypatch.setenv(web.REPORTS_ENV, str(root))
    assert web.reports_root() == root
    r = TestClient(web.app).get("/api/plans")
    assert "synthetic-test" in [p["plan"] for p in r.json()]


def test_index_says_it_is_not_behind_login_and_hides_absolute_paths(client, reports):
    root, _ = reports
    text = client.get("/").text
    assert 'id="access-note"' in text and "not behind Airflow's login" in text
    assert str(root) not in text and str(root.parent) not in text


def test_dag_run_link_finds_a_folder_named_by_the_raw_run_id(tmp_path):
    raw = tmp_path / "smoke" / RUN_ID
    raw.mkdir(parents=True)
    (raw / "report.html").write_text("<h1>raw</h1>")
    r = TestClient(web.create_app(tmp_path, tmp_path)).get(f"/dag_runs/gcbench__smoke/{RUN_ID}")
    assert r.status_code == 200 and "raw" in r.text


def test_report_dir_and_safe_segment(tmp_path):
    assert web.report_dir(Path("/r"), "smoke", RUN_ID) == Path("/r/smoke") / RUN_KEY
    assert RUN_KEY == "manual__2025-01-01T00_00_00_00_00"
    (tmp_path / "smoke" / RUN_ID).mkdir(parents=True)
    (tmp_path / "smoke" / RUN_ID / "report.html").write_text("x")
    assert web.report_dir(tmp_path, "smoke", RUN_ID) == tmp_path / "smoke" / RUN_ID
    assert web.safe_segment("a/b") == "a_b"
    for bad in ("", ".", ".."):
        with pytest.raises(ValueError):
            web.safe_segment(bad)


def test_plugin_registers_app_and_views():
    from gcbench.report.airflow_plugin import GCBenchPlugin

    assert GCBenchPlugin.name == "gcbench"
    (app,) = GCBenchPlugin.fastapi_apps
    assert app["url_prefix"] == "/gcbench" and app["app"] is web.app
    views = {v["destination"]: v for v in GCBenchPlugin.external_views}
    assert views["nav"]["name"] == "GC-Bench" and not views["nav"]["href"].startswith("/")
    assert views["dag_run"]["href"] == "gcbench/dag_runs/{DAG_ID}/{RUN_ID}"
    GCBenchPlugin.validate()


def test_plugin_validates_against_airflow_ui_models():
    from airflow.api_fastapi.core_api.datamodels.plugins import ExternalViewResponse

    from gcbench.report.airflow_plugin import GCBenchPlugin

    for v in GCBenchPlugin.external_views:
        ExternalViewResponse.model_validate(v)


def test_plugin_module_imports_cheaply():
    code = ("import sys, gcbench.report.airflow_plugin; "
            "heavy = [m for m in ('pandas', 'matplotlib', 'scipy', 'numpy') "
            "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)")
    plugins = str(Path(__file__).resolve().parents[2] / "plugins")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**__import__("os").environ, "PYTHONPATH": plugins})
    assert r.returncode == 0, r.stdout + r.stderr


AIRFLOW_PROBE = """
import json, sys
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app
from airflow import plugins_manager
views, _ = plugins_manager._get_ui_plugins()
c = TestClient(create_app())
r = c.get("/gcbench/api/plans")
page = c.get("/gcbench/")
print(json.dumps(dict(status=r.status_code, plans=[p["plan"] for p in r.json()],
                      index="GC-Bench reports" in page.text,
                      views=sorted(v["url_route"] for v in views))))
"""


@pytest.mark.slow
def test_airflow_api_server_mounts_the_app(tmp_path, reports):
    """Airflow's own create_app() loads the plugin and serves it under /gcbench."""
    root, _ = reports
    plugins_dir = tmp_path / "airflow_plugins"
    plugins_dir.mkdir()
    repo = Path(__file__).resolve().parents[2]
    env = {**__import__("os").environ, "AIRFLOW_HOME": str(tmp_path / "airflow"),
           "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins_dir),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "GCBENCH_REPORTS_DIR": str(root),
           "PYTHONPATH": str(repo / "plugins")}
    # Without the installed entry point, the plugins folder registers it instead.
    from importlib.metadata import entry_points

    if not any(e.name == "gcbench" for e in entry_points(group="airflow.plugins")):
        (plugins_dir / "gcbench_plugin.py").write_text(
            "from gcbench.report.airflow_plugin import GCBenchPlugin  # noqa: F401\n")
    r = subprocess.run([sys.executable, "-c", AIRFLOW_PROBE], capture_output=True, text=True,
                       timeout=120, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = __import__("json").loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == 200 and "synthetic-test" in out["plans"] and out["index"]
    assert {"gcbench", "gcbench-run-report"} <= set(out["views"])
