"""Write the constraints file of the Debian Airflow image (images/airflow-debian.Dockerfile).

Airflow publishes one constraints file per release and Python version
(``https://raw.githubusercontent.com/apache/airflow/constraints-3.3.2/constraints-3.11.txt``).
Where GitHub is not reachable (this project's build machines reach PyPI and Debian only),
this script makes the equivalent from what is reachable:

1. the versions the project's virtual environment resolved (``pip freeze`` of the Python
   running this script: ``make setup``'s ``.venv``), as constraints, so the image runs the
   same Airflow, providers and libraries as the tests;
2. the packages the deployment adds (``EXTRA``: the FAB auth manager, the Celery executor
   and its Redis client), resolved by pip against those pins;
3. pins the added packages cannot live with are released and resolved again
   (``RELEASED``, each with its reason).

The result, one ``name==version`` per line, is every package the image installs
(apache-airflow, the providers, and gcbench's own dependencies from pyproject.toml).
Run from the repository root after changing pyproject.toml or ``EXTRA``:

    .venv/bin/python scripts/airflow_constraints.py > images/debian/airflow-constraints.txt
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AIRFLOW_VERSION = "3.3.2"
EXTRA = [
    "apache-airflow-providers-fab",  # the auth manager of docker-compose.yml (users, roles, /auth/token)
    "apache-airflow-providers-celery",  # CeleryExecutor (the `celery` profile); brings celery[redis]
]
RELEASED = {
    # flask-appbuilder (FAB provider) requires python-dateutil<3; the venv has 4.x
    "python-dateutil": "flask-appbuilder requires python-dateutil<3",
}
SKIP = {"gcbench", "torch"}  # the project itself; torch lives in the trial image only


def requirements() -> list[str]:
    """apache-airflow, the providers and gcbench's dependencies (pyproject.toml) with its
    export extra (prometheus_client: the image serves ``gcbench metrics serve``)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = [
        d
        for d in project["dependencies"] + project["optional-dependencies"]["export"]
        if not d.replace(" ", "").startswith("apache-airflow==")
    ]
    return [f"apache-airflow=={AIRFLOW_VERSION}", *EXTRA, *deps]


def main() -> int:
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    pins = [ln for ln in frozen if "==" in ln and ln.split("==")[0].lower() not in SKIP | set(RELEASED)]
    with tempfile.TemporaryDirectory() as tmp:
        cfile = Path(tmp) / "venv.txt"
        cfile.write_text("\n".join(pins) + "\n")
        report = Path(tmp) / "report.json"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--ignore-installed",
                "--quiet",
                "--report",
                str(report),
                "-c",
                str(cfile),
                *requirements(),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-4000:])
            return 1
        resolved = json.loads(report.read_text())["install"]
    lines = sorted(
        (
            f"{p['metadata']['name']}=={p['metadata']['version']}"
            for p in resolved
            if p["metadata"]["name"].lower() not in SKIP
        ),
        key=str.lower,
    )
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    print(
        f"# Constraints of the Debian Airflow image (images/airflow-debian.Dockerfile): Airflow {AIRFLOW_VERSION},"
        f" Python {py}."
    )
    print("# Made by scripts/airflow_constraints.py from the versions the project's venv resolved, plus")
    print(f"# {', '.join(EXTRA)}; released pins: " + "; ".join(f"{k} ({v})" for k, v in RELEASED.items()) + ".")
    print("# Airflow's own constraints file (GitHub) stands in for this where GitHub is reachable.")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
