"""The GC-Bench web app and Airflow plugin, through the API (FastAPI TestClient)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gcbench import config
from gcbench.web import app as web

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


JWT_SECRET = "gcbench-web-test-jwt-secret-" + "0123456789abcdef" * 3  # 76 bytes: HS512 wants >= 64
SIMPLE_AUTH = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


@pytest.fixture(scope="module")
def airflow_auth(tmp_path_factory):
    """Airflow's SimpleAuthManager as the API server sets it up: JWT secret, and a SQLite
    metadata database holding the revoked-token table (checked on every token). Yields
    ``token(username, role) -> JWT`` signed by Airflow's own signer; Airflow's settings and
    auth manager are put back afterwards."""
    from airflow import settings
    from airflow.api_fastapi import app as airflow_app
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.models.revoked_token import RevokedToken

    home = tmp_path_factory.mktemp("airflow-auth")
    old_conn, old_manager = settings.SQL_ALCHEMY_CONN, airflow_app._AuthManagerState.instance
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__CORE__AUTH_MANAGER", SIMPLE_AUTH)
        mp.setenv("AIRFLOW__API_AUTH__JWT_SECRET", JWT_SECRET)
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin")
        settings.SQL_ALCHEMY_CONN = f"sqlite:///{home / 'airflow.db'}"
        settings.configure_orm()
        RevokedToken.__table__.create(settings.engine, checkfirst=True)
        airflow_app._AuthManagerState.instance = None
        manager = airflow_app.create_auth_manager()

        def token(username: str = "admin", role: str | None = "admin") -> str:
            return manager.generate_jwt(SimpleAuthManagerUser(username=username, role=role))

        token.manager = manager
        yield token
        settings.dispose_orm()
        settings.SQL_ALCHEMY_CONN = old_conn
        settings.configure_orm()
        airflow_app._AuthManagerState.instance = old_manager


@pytest.fixture()
def client(reports, airflow_auth):
    """A client of the app logged in as Airflow's admin (Bearer token, as an API client sends it)."""
    root, plans = reports
    return TestClient(web.create_app(root, plans), headers={"Authorization": f"Bearer {airflow_auth()}"})


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


@pytest.mark.parametrize(
    "path",
    [
        "/reports/synthetic-test/..%2F..%2Fsecret.txt/x",
        "/reports/synthetic-test/x/..%2F..%2F..%2Fsecret.txt",
        "/reports/synthetic-test/x/%2E%2E/%2E%2E/%2E%2E/secret.txt",
        "/reports/..%2F/x/secret.txt",
        "/reports/synthetic-test/x/%2Fetc%2Fpasswd",
        "/api/plans/..%2F..%2F/runs",
    ],
)
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


def test_mounted_under_gcbench_prefix_like_airflow(reports, airflow_auth):
    from fastapi import FastAPI

    root, plans = reports
    outer = FastAPI()
    outer.mount("/gcbench", web.create_app(root, plans))
    c = TestClient(outer, cookies={"_token": airflow_auth()})  # the UI's cookie
    assert "synthetic-test" in c.get("/gcbench/").text
    r = c.get(f"/gcbench/dag_runs/gcbench__synthetic-test/{RUN_ID}")  # follows the redirect
    assert r.status_code == 200 and "GC-Bench report: synthetic-test" in r.text


def test_reports_dir_from_environment(monkeypatch, reports, airflow_auth):
    root, _ = reports
    monkeypatch.setenv(web.REPORTS_ENV, str(root))
    assert web.reports_root() == root
    r = TestClient(web.app).get("/api/plans", headers={"Authorization": f"Bearer {airflow_auth()}"})
    assert "synthetic-test" in [p["plan"] for p in r.json()]


def test_index_says_it_is_behind_airflows_login_and_hides_absolute_paths(client, reports):
    root, _ = reports
    text = client.get("/").text
    assert 'id="access-note"' in text and "behind Airflow's login" in text
    assert str(root) not in text and str(root.parent) not in text


def test_dag_run_link_finds_a_folder_named_by_the_raw_run_id(tmp_path):
    raw = tmp_path / "smoke" / RUN_ID
    raw.mkdir(parents=True)
    (raw / "report.html").write_text("<h1>raw</h1>")
    r = TestClient(web.create_app(tmp_path, tmp_path, access=None)).get(f"/dag_runs/gcbench__smoke/{RUN_ID}")
    assert r.status_code == 200 and "raw" in r.text


def test_report_dir_and_safe_segment(tmp_path):
    assert web.report_dir(Path("/r"), "smoke", RUN_ID) == Path("/r/smoke") / RUN_KEY
    assert RUN_KEY == "manual__2025-01-01T00_00_00_00_00~31d00d8ebf30"
    legacy = tmp_path / "legacy" / "smoke" / "manual__2025-01-01T00_00_00_00_00"  # the folder before C19's fix
    legacy.mkdir(parents=True)
    (legacy / "report.html").write_text("x")
    assert web.report_dir(tmp_path / "legacy", "smoke", RUN_ID) == legacy
    (tmp_path / "smoke" / RUN_ID).mkdir(parents=True)
    (tmp_path / "smoke" / RUN_ID / "report.html").write_text("x")
    assert web.report_dir(tmp_path, "smoke", RUN_ID) == tmp_path / "smoke" / RUN_ID
    assert web.safe_segment("a/b") == "a_b"
    for bad in ("", ".", ".."):
        with pytest.raises(ValueError):
            web.safe_segment(bad)


# ----------------------------------------------------------------------------- Airflow's login

ROUTES = [
    "/",
    "/api/plans",
    "/api/plans/synthetic-test/runs",
    f"/reports/synthetic-test/{RUN_KEY}/report.html",
    f"/dag_runs/gcbench__synthetic-test/{RUN_ID}",
]


@pytest.mark.parametrize("path", ROUTES)
def test_every_route_refuses_an_anonymous_request_with_401(reports, airflow_auth, path):
    root, plans = reports
    r = TestClient(web.create_app(root, plans)).get(path, follow_redirects=False)
    assert r.status_code == 401, (path, r.status_code, r.text[:200])
    assert "synthetic-test" not in r.text and "GC-Bench report" not in r.text


@pytest.mark.parametrize("path", ROUTES)
def test_every_route_answers_the_uis_cookie_and_an_api_bearer_token(reports, airflow_auth, path):
    root, plans = reports
    app = web.create_app(root, plans)
    by_cookie = TestClient(app, cookies={"_token": airflow_auth()}).get(path, follow_redirects=False)
    by_bearer = TestClient(app).get(path, headers={"Authorization": f"Bearer {airflow_auth()}"}, follow_redirects=False)
    for r in (by_cookie, by_bearer):
        assert r.status_code in (200, 307), (path, r.status_code, r.text[:200])


def test_forged_expired_and_revoked_tokens_are_refused(reports, airflow_auth):
    from airflow.api_fastapi.auth.tokens import JWTGenerator, get_signing_args

    root, plans = reports
    c = TestClient(web.create_app(root, plans))

    def status(token: str) -> int:
        return c.get("/api/plans", headers={"Authorization": f"Bearer {token}"}).status_code

    forged = JWTGenerator(
        secret_key="not-the-deployments-secret-" + "f" * 48, valid_for=600, audience="apache-airflow"
    ).generate({"sub": "admin", "role": "admin"})
    expired = JWTGenerator(**get_signing_args(), valid_for=-3600, audience="apache-airflow").generate(
        {"sub": "admin", "role": "admin"}
    )
    assert status("not-a-jwt") == 403 and status(forged) == 403
    assert status(expired) == 401  # Airflow: "Token Expired"
    token = airflow_auth()
    assert status(token) == 200
    airflow_auth.manager.revoke_token(token)  # what Airflow's logout does
    assert status(token) == 403


def test_a_user_without_rights_on_a_dag_sees_none_of_its_reports(reports, airflow_auth):
    """Authorization is the auth manager's: a logged-in user whose role may not read the
    DAG runs (SimpleAuthManager: no role) gets an empty index and 403 on the plan's files."""
    root, plans = reports
    c = TestClient(web.create_app(root, plans), headers={"Authorization": f"Bearer {airflow_auth('guest', None)}"})
    assert c.get("/api/plans").json() == []
    page = c.get("/")
    assert page.status_code == 200 and "synthetic-test" not in page.text
    for path in ROUTES[2:]:
        assert c.get(path, follow_redirects=False).status_code == 403, path
    viewer = TestClient(
        web.create_app(root, plans), headers={"Authorization": f"Bearer {airflow_auth('ann', 'viewer')}"}
    )
    assert "synthetic-test" in [p["plan"] for p in viewer.get("/api/plans").json()]


def test_outside_airflow_the_app_refuses_rather_than_serving_anyone(reports, airflow_auth, monkeypatch):
    from airflow.api_fastapi import app as airflow_app

    root, plans = reports
    token = airflow_auth()
    monkeypatch.setattr(airflow_app._AuthManagerState, "instance", None)  # no API server in this process
    r = TestClient(web.create_app(root, plans)).get("/api/plans", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 503 and "API server" in r.json()["detail"]
    # only on request: no check at all (an app behind an authenticating proxy)
    assert TestClient(web.create_app(root, plans, access=None)).get("/api/plans").status_code == 200


def test_plugin_registers_app_and_views():
    from gcbench.web.airflow_plugin import GCBenchPlugin

    assert GCBenchPlugin.name == "gcbench"
    (app,) = GCBenchPlugin.fastapi_apps
    assert app["url_prefix"] == "/gcbench" and app["app"] is web.app
    views = {v["destination"]: v for v in GCBenchPlugin.external_views}
    assert views["nav"]["name"] == "GC-Bench" and not views["nav"]["href"].startswith("/")
    assert views["dag_run"]["href"] == "gcbench/dag_runs/{DAG_ID}/{RUN_ID}"
    GCBenchPlugin.validate()


def test_plugin_validates_against_airflow_ui_models():
    from airflow.api_fastapi.core_api.datamodels.plugins import ExternalViewResponse

    from gcbench.web.airflow_plugin import GCBenchPlugin

    for v in GCBenchPlugin.external_views:
        ExternalViewResponse.model_validate(v)


def test_plugin_module_imports_cheaply():
    code = (
        "import sys, gcbench.web.airflow_plugin; "
        "heavy = [m for m in ('pandas', 'matplotlib', 'scipy', 'numpy') "
        "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)"
    )
    plugins = str(Path(__file__).resolve().parents[2] / "plugins")
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**__import__("os").environ, "PYTHONPATH": plugins},
    )
    assert r.returncode == 0, r.stdout + r.stderr


AIRFLOW_PROBE = """
import json, sys
from fastapi.testclient import TestClient
from airflow import settings, plugins_manager
from airflow.models.revoked_token import RevokedToken
from airflow.api_fastapi.app import create_app
RevokedToken.__table__.create(settings.engine, checkfirst=True)  # the one table the token check reads
views, _ = plugins_manager._get_ui_plugins()
c = TestClient(create_app())
anonymous = c.get("/gcbench/api/plans").status_code
token = c.post("/auth/token", json={"username": "admin", "password": "probe-password"}).json()["access_token"]
r = c.get("/gcbench/api/plans", headers={"Authorization": "Bearer " + token})
c.cookies.set("_token", token)
page = c.get("/gcbench/")
print(json.dumps(dict(anonymous=anonymous, status=r.status_code, plans=[p["plan"] for p in r.json()],
                      index="GC-Bench reports" in page.text,
                      views=sorted(v["url_route"] for v in views))))
"""


@pytest.mark.slow
def test_airflow_api_server_mounts_the_app_behind_its_login(tmp_path, reports):
    """Airflow's own create_app() loads the plugin and serves it under /gcbench, to the
    token its /auth/token issues (Bearer) and the UI's cookie, never anonymously."""
    root, _ = reports
    plugins_dir = tmp_path / "airflow_plugins"
    plugins_dir.mkdir()
    repo = Path(__file__).resolve().parents[2]
    env = {
        **__import__("os").environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins_dir),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "GCBENCH_REPORTS_DIR": str(root),
        "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE_AUTH,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(tmp_path / "passwords.json"),
        "AIRFLOW__API_AUTH__JWT_SECRET": JWT_SECRET,
        "PYTHONPATH": str(repo / "plugins"),
    }
    (tmp_path / "passwords.json").write_text('{"admin": "probe-password"}')
    # Without the installed entry point, the plugins folder registers it instead.
    from importlib.metadata import entry_points

    ours = "gcbench.web.airflow_plugin:GCBenchPlugin"  # an install older than this checkout may name another
    if not any(e.name == "gcbench" and e.value == ours for e in entry_points(group="airflow.plugins")):
        (plugins_dir / "gcbench_plugin.py").write_text(
            "from gcbench.web.airflow_plugin import GCBenchPlugin  # noqa: F401\n"
        )
    r = subprocess.run(
        [sys.executable, "-c", AIRFLOW_PROBE], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = __import__("json").loads(r.stdout.strip().splitlines()[-1])
    assert out["anonymous"] == 401, "the plugin app answers without Airflow's login"
    assert out["status"] == 200 and "synthetic-test" in out["plans"] and out["index"]
    assert {"gcbench", "gcbench-run-report"} <= set(out["views"])


def test_the_airflow_plugins_entry_point_names_the_plugin_class():
    """pyproject.toml's ``airflow.plugins`` entry point resolves to the plugin in gcbench.web."""
    import importlib
    import tomllib

    from gcbench.web.airflow_plugin import GCBenchPlugin

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    module, _, name = pyproject["project"]["entry-points"]["airflow.plugins"]["gcbench"].partition(":")
    assert getattr(importlib.import_module(module), name) is GCBenchPlugin


def test_an_older_layout_folder_of_another_run_id_is_not_this_runs_report(tmp_path):
    """Another input of kind C19: ``exp_1/`` written before run keys were injective holds the
    report of run ``exp:1``. Run ``exp+1`` (legacy key also ``exp_1``), whose own report is
    not written yet, was shown that report; now its own (absent) folder is named, a 404."""
    import json

    old = tmp_path / "smoke" / "exp_1"
    old.mkdir(parents=True)
    (old / "report.html").write_text("<h1>run exp:1</h1>")
    (old / "report.json").write_text(json.dumps({"run_id": "exp:1"}))
    assert web.report_dir(tmp_path, "smoke", "exp:1") == old
    assert web.report_dir(tmp_path, "smoke", "exp+1") == tmp_path / "smoke" / web.run_key("exp+1")
    r = TestClient(web.create_app(tmp_path, tmp_path, access=None)).get("/dag_runs/gcbench__smoke/exp+1")
    assert r.status_code == 404 and "exp:1" not in r.text
