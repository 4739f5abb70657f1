"""Where GC-Bench keeps its files, from the environment.

* ``GCBENCH_HOME``: working folder (trial outputs, embedded PostgreSQL, tool caches);
  default ``<project root>/.gcbench``.
* ``GCBENCH_REPORTS_DIR``: reports; default ``<project root>/reports``.
* ``GCBENCH_DATABASE_URL``: results database; unset: the embedded server.
* ``GCBENCH_PROJECT_ROOT``: the checkout (the DAG file sets it to its parent folder);
  default: the current directory.
* ``GCBENCH_RUNNER``: the runner of DAG runs whose trigger names none (``local`` or
  ``docker``); default: the plan's. docker-compose.yml sets ``docker``: its Airflow image
  has no torch, trials run in the trial image.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


def project_root() -> Path:
    """The project checkout (plans/, dags/, native/ live there)."""
    return Path(os.environ.get("GCBENCH_PROJECT_ROOT") or Path.cwd()).resolve()


def home() -> Path:
    """GC-Bench's working folder (created on demand)."""
    path = Path(os.environ.get("GCBENCH_HOME") or project_root() / ".gcbench")
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def reports_dir() -> Path:
    """Root of the reports: ``reports/<plan>/<run key>/``."""
    return Path(os.environ.get("GCBENCH_REPORTS_DIR") or project_root() / "reports").resolve()


def plans_dir() -> Path:
    """Folder of the plan files the DAG factory reads."""
    return Path(os.environ.get("GCBENCH_PLANS_DIR") or project_root() / "plans").resolve()


RUNNERS = ("local", "docker")


def default_runner(plan_runner: str) -> str:
    """The runner of a DAG run whose trigger names none: ``GCBENCH_RUNNER``, else the plan's.

    Raises:
        ValueError: ``GCBENCH_RUNNER`` is set to something else than ``local`` or ``docker``.
    """
    value = os.environ.get("GCBENCH_RUNNER", "").strip()
    if value and value not in RUNNERS:
        raise ValueError(f"GCBENCH_RUNNER={value!r}: expected one of {', '.join(RUNNERS)}")
    return value or plan_runner


def run_key(run_id: str) -> str:
    """A file-system-safe form of an Airflow run id (``manual__2026-...`` -> ``manual__2026-...``)."""
    key = re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id).strip("._")
    return key or "run"


def run_dir(plan_name: str, run_id: str) -> Path:
    """Output folder of one DAG run: one sub-folder per trial id."""
    return home() / "runs" / plan_name / run_key(run_id)


DEFAULT_DOCKER_URL = "unix://var/run/docker.sock"


def docker_url() -> str:
    """The Docker engine's address: ``DOCKER_HOST``, else the local socket."""
    return os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_URL


def engine_has_gpus() -> bool:
    """Whether containers request the host's GPUs (``GCBENCH_DOCKER_GPUS``, default ``all``;
    ``none`` on an engine without the NVIDIA container toolkit, e.g. CI)."""
    return os.environ.get("GCBENCH_DOCKER_GPUS", "all").strip().lower() not in ("none", "0", "no", "false")
