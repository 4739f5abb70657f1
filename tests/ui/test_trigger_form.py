"""The Airflow UI as a user uses it: log in, open the plan's trigger form, set
repetitions to 1, trigger, and see the run succeed with the local runner.

Airflow 3.3's api-server, scheduler (LocalExecutor) and dag-processor run as
subprocesses (``airflow_stack.py``) and serve the project's ``dags/`` folder; the
plans folder holds only a tiny plan named ``smoke`` (two no-op trials). Headless
Chromium (Debian's ``chromium``) is driven over the DevTools protocol with real mouse
clicks and typed text. The form's screenshot is kept under ``GCBENCH_TEST_ARTIFACTS``
(default: the test's temporary folder). Results go to the real PostgreSQL of
``pg_url``. About a minute.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from airflow_stack import ADMIN_PASSWORD, CHROMIUM, AirflowStack, Browser

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.skipif(
        CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get install -y chromium)"
    ),
]

TINY_SMOKE = """\
name: smoke
description: UI test plan, two no-op trials.
runner: local
devices: [0]
repetitions: 2
window: {steps: 5}
workloads:
  - name: noop
    kind: noop
    repetitions: 2
"""
DAG_ID = "gcbench__smoke"
DIALOG = "Array.from(document.querySelectorAll('[role=dialog]')).find(d => d.innerText.includes('Trigger Dag'))"
REPETITIONS = (
    "document.getElementById(document.getElementById('number-input:element_repetitions:inc')"
    ".getAttribute('aria-controls'))"
)


@pytest.fixture
def stack(tmp_path, pg_url):
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "smoke.yaml").write_text(TINY_SMOKE)
    home = tmp_path / "airflow"
    home.mkdir()
    s = AirflowStack(
        home,
        plans,
        {
            "GCBENCH_HOME": str(tmp_path / "gcbench"),
            "GCBENCH_DATABASE_URL": pg_url,
            "GCBENCH_REPORTS_DIR": str(tmp_path / "reports"),
        },
    )
    try:
        s.start(pools=["gcbench_gpu0"])
        yield s
    finally:
        s.stop()


@pytest.fixture
def browser(tmp_path):
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    b = Browser(profile)
    yield b
    b.close()


def _click(b: Browser, element_js: str) -> None:
    """A real left click in the middle of the element."""
    x, y = b.js(
        f"(() => {{ const e = {element_js}; e.scrollIntoView({{block: 'center'}}); "
        f"const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
    )
    for kind in ("mousePressed", "mouseReleased"):
        b.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)


def _type(b: Browser, element_js: str, text: str) -> None:
    b.js(f"{element_js}.focus()")
    b.send("Input.insertText", text=text)


def test_trigger_form_runs_the_plan_with_one_repetition(stack, browser, tmp_path, pg_url):
    started = time.monotonic()
    artifacts = Path(os.environ.get("GCBENCH_TEST_ARTIFACTS") or tmp_path / "artifacts")
    artifacts.mkdir(parents=True, exist_ok=True)
    dag = stack.wait(lambda: stack.get(f"/api/v2/dags/{DAG_ID}"), 90, "the DAG processor to parse dags/")
    assert dag["has_import_errors"] is False and dag["is_paused"] is False

    b = browser
    b.goto(f"{stack.url}/")
    b.wait_js("!!document.querySelector('input[name=username]')", 30, "the login form")
    _type(b, "document.querySelector('input[name=username]')", "admin")
    _type(b, "document.querySelector('input[name=password]')", ADMIN_PASSWORD)
    _click(b, "document.querySelector('button[type=submit]')")
    b.wait_js("!location.pathname.startsWith('/auth')", 30, "the login to succeed")

    b.goto(f"{stack.url}/dags/{DAG_ID}")
    b.wait_js("!!document.querySelector('button[aria-label=\"Trigger Dag\"]')", 30, "the DAG page")
    _click(b, "document.querySelector('button[aria-label=\"Trigger Dag\"]')")
    b.wait_js(
        f"!!({DIALOG}) && !!document.getElementById('number-input:element_repetitions:inc')", 30, "the trigger form"
    )
    form_text = b.js(f"{DIALOG}.innerText")
    assert f"Trigger Dag - {DAG_ID}" in form_text
    for label in ("Repetitions", "Variants", "Runner", "Repetitions per variant; empty: the plan's (2)."):
        assert label in form_text
    assert b.js("document.querySelector('input[name=element_runner]').value") == "local"

    _type(b, REPETITIONS, "1")
    assert b.js(f"{REPETITIONS}.value") == "1"
    shot = artifacts / "ui_trigger_form.png"
    b.screenshot(shot)
    from matplotlib.image import imread

    img = imread(shot)
    assert img.shape[1] == 1400 and img.shape[0] > 600 and img[..., :3].std() > 0.05, "blank screenshot"

    _click(b, "document.querySelector('[data-testid=trigger-dag-submit]')")
    href = b.wait_js(
        f"location.pathname.includes('/dags/{DAG_ID}/runs/') && location.href", 30, "the run page after triggering"
    )
    run_id = href.split("/runs/")[1].split("?")[0]
    from urllib.parse import unquote

    run_id = unquote(run_id)
    run = stack.wait(
        lambda: (
            (r := stack.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")) and r["state"] in ("success", "failed") and r
        ),
        150,
        "the run to finish",
    )
    tis = stack.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances")["task_instances"]
    states = {(t["task_id"], t["map_index"]): t["state"] for t in tis}
    assert run["state"] == "success", states
    assert run["conf"] == {"repetitions": 1, "variants": [], "runner": "local"}
    assert states == {
        ("expand_trials", -1): "success",
        ("trials_gpu0", -1): "success",
        ("run_trial_gpu0", 0): "success",
        ("collect", -1): "success",
        ("validate", -1): "success",
        ("report", -1): "success",
        ("check_trials", -1): "success",
    }  # one trial: repetitions 1

    # the user sees it: the run page shows the run as successful
    b.goto(href)
    b.wait_js("document.body.innerText.toLowerCase().includes('success')", 30, "the run's state on its page")
    b.screenshot(artifacts / "ui_run_page.png")

    import psycopg2

    conn = psycopg2.connect(pg_url)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT t.variant, t.repetition, t.status FROM gcbench.trials t "
            "JOIN gcbench.dag_runs r ON r.id = t.dag_run_id WHERE r.run_id = %s",
            (run_id,),
        )
        assert cur.fetchall() == [("noop", 0, "ok")]
        cur.execute("SELECT html_path FROM gcbench.reports")
        (html,) = cur.fetchone()
    conn.close()
    assert Path(html).is_file()
    assert time.monotonic() - started < 200
