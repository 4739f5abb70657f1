"""``gcbench airflow up`` / ``down`` for real, as a newcomer follows the README: the UI
answers with the printed password, shows no plugin import error (the API's
import-error endpoints), has one pool per GPU of every plan and the GC-Bench plugin
once; ``down`` leaves no process it started (Airflow services, the embedded PostgreSQL
and its holder). About two minutes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from airflow_stack import free_port

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]


def _ours(home: Path) -> list[str]:
    """Live processes started for this GCBENCH_HOME (environment or a path in the command line)."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = " ".join(p.info["cmdline"] or [])
            if (
                p.pid != os.getpid()
                and p.status() != psutil.STATUS_ZOMBIE
                and (str(home) in cmdline or p.environ().get("GCBENCH_HOME") == str(home))
            ):
                found.append(f"{p.pid}: {cmdline[:120]}")
        except psutil.Error:
            continue
    return found


def _api(url: str, token: str, path: str) -> dict:
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def test_up_serves_the_ui_without_plugin_errors_and_down_leaves_nothing(tmp_path):
    home = tmp_path / "gcbench"
    plans = tmp_path / "plans"
    plans.mkdir()
    shutil.copy(REPO / "plans" / "smoke.yaml", plans / "smoke.yaml")
    shutil.copy(REPO / "tests" / "fixtures" / "cases" / "plans" / "gpu0_1_pair.yaml", plans / "pair.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and k not in ("GCBENCH_DATABASE_URL",)}
    env.update(
        {
            "GCBENCH_HOME": str(home),
            "GCBENCH_PLANS_DIR": str(plans),
            "GCBENCH_PROJECT_ROOT": str(REPO),
            "GCBENCH_REPORTS_DIR": str(tmp_path / "reports"),
        }
    )
    port = free_port()
    gcbench = [sys.executable, "-m", "gcbench.cli", "airflow"]
    try:
        up = subprocess.run([*gcbench, "up", "--port", str(port)], capture_output=True, text=True, env=env, timeout=600)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        url = f"http://127.0.0.1:{port}"
        password_file = home / "airflow" / "passwords.json"
        assert f"Airflow UI: {url}  user admin, password in {password_file}" in up.stdout
        assert "pools (1 slot each): gcbench_gpu0, gcbench_gpu1" in up.stdout
        password = json.loads(password_file.read_text())["admin"]
        req = urllib.request.Request(
            f"{url}/auth/token",
            method="POST",
            data=json.dumps({"username": "admin", "password": password}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            token = json.loads(r.read())["access_token"]

        plugin_errors = _api(url, token, "/api/v2/plugins/importErrors")
        assert plugin_errors["total_entries"] == 0, plugin_errors
        plugins = [p["name"] for p in _api(url, token, "/api/v2/plugins")["plugins"]]
        assert plugins.count("gcbench") == 1
        pools = {p["name"]: p["slots"] for p in _api(url, token, "/api/v2/pools")["pools"]}
        assert pools["gcbench_gpu0"] == 1 and pools["gcbench_gpu1"] == 1 and "gcbench_gpu0_1" not in pools

        import time

        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # the DAG processor's first pass
            dags = {d["dag_id"] for d in _api(url, token, "/api/v2/dags")["dags"]}
            if {"gcbench__smoke", "gcbench__study-b"} <= dags:
                break
            time.sleep(2)
        assert {"gcbench__smoke", "gcbench__study-b"} <= dags
        assert _api(url, token, "/api/v2/importErrors")["total_entries"] == 0

        again = subprocess.run(
            [*gcbench, "up", "--port", str(port)], capture_output=True, text=True, env=env, timeout=300
        )
        assert again.returncode == 0 and f"already running: {url}" in again.stdout
        assert _ours(home)  # the services, the database holder, the embedded PostgreSQL
    finally:
        down = subprocess.run([*gcbench, "down"], capture_output=True, text=True, env=env, timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "stopped" in down.stdout
    assert _ours(home) == []
    assert not (home / "airflow" / "gcbench-up.json").exists()
