"""kind: container for real: a user's own image, without GC-Bench, measured beside it.

``examples/container/plan.yaml`` runs ``examples/container/Dockerfile``'s image (the
Debian base and a shell program that marks its window and counts items on the control
channel) through the docker runner: the trial process and its meter run on the worker,
the user's container runs on the engine with the control pipe mounted in; collect,
validation and the report are those of every trial.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "examples" / "container" / "plan.yaml"
USER_IMAGE = os.environ.get("GCBENCH_TEST_USER_IMAGE", "gcbench-example/marked:1")


def test_a_user_image_without_gcbench_is_measured_like_a_built_in_workload(docker_client, make_database, tmp_path):
    import docker
    import psycopg2

    try:
        image = docker_client.images.get(USER_IMAGE)
    except docker.errors.ImageNotFound:
        if os.environ.get("GCBENCH_REQUIRE_DOCKER") == "1":
            pytest.fail(f"the engine has no {USER_IMAGE}; scripts/test_docker.sh builds it")
        pytest.skip(f"no {USER_IMAGE}; run make test-docker")
    # nothing of GC-Bench (nor Python) inside the user's image
    probe = docker_client.containers.run(
        USER_IMAGE,
        entrypoint=["sh", "-c", "command -v python3 || ls /usr/lib/python3* 2>/dev/null || echo none"],
        remove=True,
        network_mode="none",
    )
    assert probe.decode().strip() == "none"
    url = make_database("user_container_")
    env = {
        **os.environ,
        "GCBENCH_HOME": str(tmp_path / "home"),
        "GCBENCH_REPORTS_DIR": str(tmp_path / "reports"),
        "GCBENCH_DATABASE_URL": url,
        "GCBENCH_PROJECT_ROOT": str(REPO),
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "GCBENCH_DOCKER_GPUS": os.environ.get("GCBENCH_DOCKER_GPUS", "none"),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.cli", "run", str(PLAN)], capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    conn = psycopg2.connect(url)
    with conn.cursor() as cur:
        cur.execute("SELECT trial_id, status, valid, reasons, flags, result FROM gcbench.trials")
        rows = cur.fetchall()
        assert len(rows) == 3
        for trial_id, status, valid, reasons, flags, result in rows:
            result = result if isinstance(result, dict) else json.loads(result)
            assert status == "ok" and valid is True, (trial_id, reasons, flags)
            assert result["control"]["whole_program_window"] is False  # the program marked main
            assert result["control"]["problems"] == []
            # the meter ran beside the container, on this host (the container has a hostname of its own)
            assert result["environment"]["hostname"] == socket.gethostname()
        cur.execute(
            "SELECT m.name, m.value, m.text_value FROM gcbench.metrics m "
            "WHERE m.name IN ('units', 'gpu_j_per_unit', 'units_per_s', 'unit', 'duration_s')"
        )
        metrics: dict[str, list] = {}
        for name, value, text in cur.fetchall():
            metrics.setdefault(name, []).append(text if name == "unit" else value)
    conn.close()
    assert metrics["unit"] == ["items"] * 3
    assert all(v > 0 for v in metrics["units"]) and all(v > 0 for v in metrics["gpu_j_per_unit"])
    assert all(1.3 < d < 1.8 for d in metrics["duration_s"])  # the program's 1.5 s of work, not the container's life
    report = next((tmp_path / "reports").rglob("report.md"))
    text = report.read_text()
    assert "GPU J/item" in text and "items/s" in text and "J/unit" not in text  # the program's own unit
    assert image.id  # the image was not rebuilt or changed by the run
