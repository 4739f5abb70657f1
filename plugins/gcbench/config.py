"""Where GC-Bench keeps its files, from the environment.

* ``GCBENCH_HOME``: working folder (trial outputs, embedded PostgreSQL, tool caches);
  default ``<project root>/.gcbench``.
* ``GCBENCH_REPORTS_DIR``: reports; default ``<project root>/reports``.
* ``GCBENCH_DATABASE_URL``: results database; unset: the embedded server.
* ``GCBENCH_PROJECT_ROOT``: the checkout (the DAG file sets it to its parent folder);
  default: found as git finds its repository (:func:`locate_project`): the nearest
  checkout or ``.gcbench/`` with results above the working folder, else the checkout
  this package is installed from.
* ``GCBENCH_RUNNER``: the runner of DAG runs whose trigger names none (``local`` or
  ``docker``); default: the plan's. docker-compose.yml sets ``docker``: its Airflow image
  has no torch, trials run in the trial image.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

PROJECT_MARKER = ("pyproject.toml", 'name = "gcbench"')
"""A folder is a GC-Bench checkout when its pyproject.toml names the project ``gcbench``."""


def _is_checkout(folder: Path) -> bool:
    try:
        text = (folder / PROJECT_MARKER[0]).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return PROJECT_MARKER[1] in text and (folder / "plans").is_dir()


def _is_home(folder: Path) -> bool:
    """``folder/.gcbench`` holds results (its embedded database or trial outputs), not
    merely an empty folder an earlier command made."""
    home = folder / ".gcbench"
    return (home / "pgdata" / "PG_VERSION").is_file() or (home / "runs").is_dir()


def locate_project(start: Path | None = None) -> tuple[Path, str]:
    """``(project root, how it was found)``, the way git finds its repository.

    In order: ``GCBENCH_PROJECT_ROOT``; else the nearest folder from ``start`` (default:
    the working folder) upwards that is a GC-Bench checkout (``pyproject.toml`` naming
    ``gcbench`` beside ``plans/``) or holds a ``.gcbench/`` with results; else the
    checkout this package is installed from (an editable install, ``pip install -e .``);
    else the working folder (a plain install with none of the above).

    Before this (7655493) the working folder was the root, so ``gcbench runs`` run in
    another folder made an empty ``.gcbench/`` there and said "no stored runs".
    """
    env = os.environ.get("GCBENCH_PROJECT_ROOT")
    if env:
        return Path(env).resolve(), "GCBENCH_PROJECT_ROOT"
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if _is_checkout(folder):
            return folder, f"checkout found from {here}" if folder != here else "checkout (the working folder)"
        if _is_home(folder):
            return folder, f".gcbench/ found from {here}" if folder != here else ".gcbench/ in the working folder"
    installed = Path(__file__).resolve().parents[2]
    if _is_checkout(installed):
        return installed, "the checkout gcbench is installed from"
    return here, "the working folder (no checkout or .gcbench/ above it)"


def project_root() -> Path:
    """The project checkout (plans/, dags/, native/ live there): :func:`locate_project`."""
    return locate_project()[0]


def home() -> Path:
    """GC-Bench's working folder (created on demand): ``GCBENCH_HOME``, else
    ``<project root>/.gcbench``."""
    path = Path(os.environ.get("GCBENCH_HOME") or project_root() / ".gcbench")
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def describe_home() -> str:
    """One line: where the working folder is and why (for ``gcbench`` commands' stderr)."""
    if os.environ.get("GCBENCH_HOME"):
        return f"home {Path(os.environ['GCBENCH_HOME']).resolve()} (GCBENCH_HOME)"
    root, how = locate_project()
    return f"home {root / '.gcbench'} ({how})"


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


_VERBATIM_KEY = re.compile(r"[a-z0-9][a-z0-9_-]*")
_WINDOWS_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
KEY_MAX_CHARS = 100
"""Longest run id kept as its own folder name (a file name may have 255 bytes)."""


def run_key(run_id: str) -> str:
    """The folder name of an Airflow run id: one folder per run id, never two ids in one.

    A run id of lower-case letters, digits, ``_`` and ``-`` (not starting with ``_`` or
    ``-``, at most :data:`KEY_MAX_CHARS`, not a Windows device name) is its own folder name
    (``nightly-01``). Any other id keeps its safe characters (runs of others become ``_``)
    and gets ``~`` and the first 12 hex digits of the SHA-256 of the exact id:
    ``exp:1`` -> ``exp_1~4c5d...``, ``exp+1`` -> ``exp_1~9f0e...``,
    ``manual__2026-11-29T23:31:50+00:00`` -> ``manual__2026-11-29T23_31_50_00_00~...``.

    The mapping is injective: a verbatim name has no ``~``, a hashed one names its exact
    id, and two ids differing only in case (``Exp1``, ``exp1``) differ in hash, so they
    get different folders on case-insensitive file systems too (macOS, Windows). Dots are
    hashed as well: ``.``, ``..`` and ``interrupted.json`` (a file in the plan's runs
    folder) never become folders of their own name.

    Before this rule (7655493) the key replaced unsafe runs by ``_`` only, so ``exp:1``,
    ``exp+1``, ``exp~1`` and ``exp_1`` shared one folder (case C19); :func:`legacy_run_key`
    keeps that form to find reports written then.
    """
    import hashlib

    if _VERBATIM_KEY.fullmatch(run_id) and len(run_id) <= KEY_MAX_CHARS and run_id not in _WINDOWS_RESERVED:
        return run_id
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id).strip("._")[:KEY_MAX_CHARS] or "run"
    return f"{safe}~{hashlib.sha256(run_id.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


def legacy_run_key(run_id: str) -> str:
    """The folder name 7655493 and earlier gave a run id (many-to-one; only to find old reports)."""
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
