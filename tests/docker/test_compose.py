"""docker-compose.yml validated by Docker Compose v2 itself (``docker compose config``)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]


def _compose() -> list[str]:
    """The compose command: GCBENCH_COMPOSE (set by make test-docker), or `docker compose`."""
    if os.environ.get("GCBENCH_COMPOSE"):
        return shlex.split(os.environ["GCBENCH_COMPOSE"])
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if os.environ.get("GCBENCH_REQUIRE_DOCKER") == "1":
        pytest.fail("no Docker Compose v2 (make test-docker installs one)")
    pytest.skip("no Docker Compose v2")


def _config(env_file: Path, *extra: str) -> subprocess.CompletedProcess:
    # no .env of the developer may leak in: run from a copy of the compose file's folder view
    return subprocess.run(
        [
            *_compose(),
            "--project-directory",
            str(REPO),
            "--env-file",
            str(env_file),
            "-f",
            str(REPO / "docker-compose.yml"),
            "config",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_compose_file_validates_with_the_example_env():
    proc = _config(REPO / "deploy" / "env.example", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads(proc.stdout)
    assert set(cfg["services"]) == {
        "postgres",
        "airflow-init",
        "airflow-api-server",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
    }
    for name, svc in cfg["services"].items():
        for port in svc.get("ports", []):
            assert port["host_ip"] == "127.0.0.1", (name, port)
        if name.startswith("airflow-") and name != "airflow-init":
            assert "healthcheck" in svc, name
            assert svc["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
    assert "healthcheck" in cfg["services"]["postgres"]
    sched = cfg["services"]["airflow-scheduler"]
    assert sched["group_add"] == ["999"]
    assert any(v["source"] == "/var/run/docker.sock" for v in sched["volumes"])
    others = [s for n, s in cfg["services"].items() if n != "airflow-scheduler"]
    assert not any("docker.sock" in json.dumps(s.get("volumes", [])) for s in others)
    env = sched["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW_CONN_GCBENCH_RESULTS"].startswith("postgresql://gcbench:")
    assert env["GCBENCH_DATABASE_URL"].endswith("@postgres:5432/gcbench")
    jwt = {
        s["environment"]["AIRFLOW__API_AUTH__JWT_SECRET"]
        for n, s in cfg["services"].items()
        if n.startswith("airflow-")
    }
    assert jwt == {"change-me"}  # one shared secret, from the env file


def test_compose_refuses_to_start_without_the_secrets(tmp_path):
    lines = [
        ln
        for ln in (REPO / "deploy" / "env.example").read_text().splitlines()
        if not ln.startswith("AIRFLOW_JWT_SECRET=")
    ]
    env_file = tmp_path / "partial.env"
    env_file.write_text("\n".join(lines) + "\n")
    proc = _config(env_file, "-q")
    assert proc.returncode != 0 and "AIRFLOW_JWT_SECRET" in proc.stderr


def test_debian_overlay_changes_only_images_and_builds(tmp_path):
    """deploy/compose.debian.yml (selected by COMPOSE_FILE in the env file) swaps every image
    for one built from Debian's packages and leaves every other setting as it is."""
    env_file = tmp_path / "debian.env"
    env_file.write_text(
        (REPO / "deploy" / "env.example").read_text() + "COMPOSE_FILE=docker-compose.yml:deploy/compose.debian.yml\n"
    )
    profiles = ["--profile", "celery", "--profile", "gpu-worker"]

    def config(env: Path) -> dict:
        proc = subprocess.run(
            [
                *_compose(),
                "--project-directory",
                str(REPO),
                "--env-file",
                str(env),
                *profiles,
                "config",
                "--format",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["services"]

    official, debian = config(REPO / "deploy" / "env.example"), config(env_file)
    assert set(official) == set(debian)
    for name in official:
        rest = {k: v for k, v in official[name].items() if k not in ("image", "build")}
        assert {k: v for k, v in debian[name].items() if k not in ("image", "build")} == rest, name
    assert debian["postgres"]["image"] == "gcbench/postgres:15-debian"
    assert debian["redis"]["image"] == "gcbench/redis:7-debian"
    built = {n: s["build"] for n, s in debian.items() if "build" in s}
    assert set(built) == {"postgres", "redis", "airflow-init", "airflow-worker-gpu"}  # one build per image and host
    for name, build in built.items():
        assert build["network"] == "host" and build["args"]["BASE_IMAGE"] == "gcbench/debian:bookworm", name
    assert {s["image"] for n, s in debian.items() if n.startswith("airflow-")} == {"gcbench/airflow:3.3.2-debian"}
