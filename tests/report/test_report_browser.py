"""The report as a browser shows it: headless Chromium against a uvicorn server.

Needs Debian's ``chromium`` package (``apt-get install -y chromium``); skipped with
that reason when no chromium binary is on PATH.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from gcbench import config
from gcbench.web import app as web

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
RUN_ID = "manual__2025-01-01T00:00:00+00:00"

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not installed (Debian: apt-get install -y chromium)",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def server(tmp_path, simulated_report):
    """uvicorn on 127.0.0.1 serving the app mounted at /gcbench, as Airflow mounts it."""
    import uvicorn
    from fastapi import FastAPI

    _, paths = simulated_report
    root = tmp_path / "reports"
    shutil.copytree(paths.out_dir, root / "synthetic-test" / config.run_key(RUN_ID))
    outer = FastAPI()
    outer.mount("/gcbench", web.create_app(root, tmp_path / "plans", access=None))  # rendering, not login
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(outer, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not srv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, env={**os.environ, "HOME": str(tmp_path)})


def test_report_renders_in_headless_chromium(server, tmp_path):
    # The DAG-run tab's link: redirects to the run's report.
    url = f"{server}/gcbench/dag_runs/gcbench__synthetic-test/{quote(RUN_ID, safe='')}"
    dom = _chromium(tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert '<h1 id="report-title">GC-Bench report: synthetic-test</h1>' in dom.stdout
    assert 'id="simulated-banner"' in dom.stdout

    shot = tmp_path / "report.png"
    r = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,900", url)
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    from matplotlib.image import imread

    img = imread(shot)[..., :3]
    assert img.shape[:2] == (900, 1280)
    assert img.std() > 0.05, "screenshot is blank"
    red = (img[..., 0] > 0.6) & (img[..., 1] < 0.35) & (img[..., 2] < 0.35)
    assert red.mean() > 0.005, "the red SIMULATED banner is not visible"
    artifacts = os.environ.get("GCBENCH_TEST_ARTIFACTS")
    if artifacts:  # keep the screenshot for CI artifacts
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(artifacts) / "report_chromium.png")


def test_index_renders_in_headless_chromium(server, tmp_path):
    dom = _chromium(tmp_path, "--dump-dom", f"{server}/gcbench/")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "GC-Bench reports" in dom.stdout and "synthetic-test" in dom.stdout


def test_groups_tables_fit_a_1280_px_window(measured_report, tmp_path):
    """Every column of every groups table is inside a 1280-px-wide window (no sideways
    scrolling hides columns)."""
    _, paths = measured_report
    probe = """<script>
    const w = document.documentElement.clientWidth;
    const bad = [...document.querySelectorAll('table.groups')].filter(
        t => t.getBoundingClientRect().right > w + 1 || t.scrollWidth > t.clientWidth + 1);
    document.body.setAttribute('data-fit', bad.length ? 'overflow' : 'ok');
    document.body.setAttribute('data-tables', document.querySelectorAll('table.groups').length);
    </script></body>"""
    page = tmp_path / "report.html"
    page.write_text(paths.html.read_text(encoding="utf-8").replace("</body>", probe), encoding="utf-8")
    dom = _chromium(tmp_path, "--window-size=1280,900", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-fit="ok"' in dom.stdout and 'data-tables="4"' in dom.stdout
