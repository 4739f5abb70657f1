"""GC-Bench's Airflow 3 plugin: a "GC-Bench" entry in the UI's navigation listing plans,
runs and their reports, and a "GC-Bench report" tab on every DAG run.

Registered through the ``airflow.plugins`` entry point in pyproject.toml
(``gcbench = "gcbench.web.airflow_plugin:GCBenchPlugin"``). Airflow 3.1+ mounts
:data:`gcbench.web.app.app` (FastAPI) at ``/gcbench`` in its API server and shows
the two external views as iframes:

* ``destination: nav`` -> ``gcbench/`` (the index of all reports);
* ``destination: dag_run`` -> ``gcbench/dag_runs/{DAG_ID}/{RUN_ID}``; the UI fills
  the placeholders and the app redirects to that run's report.

``href`` values are relative (no leading slash) so that they follow Airflow's base URL.
The app serves files only from the reports folder (``GCBENCH_REPORTS_DIR``).

Access: Airflow 3 does not authenticate plugin FastAPI apps, so the app does it on every
route with Airflow's own auth (:func:`gcbench.web.app.airflow_access`): the JWT the UI
holds (cookie ``_token``) or an API client sends (``Authorization: Bearer``), checked by
the configured auth manager; no token is 401, and a user sees only the plans whose DAG
runs the auth manager lets them read.

This module imports only Airflow's plugin base class and FastAPI (no pandas, SciPy or
matplotlib): Airflow imports plugins in every component.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from gcbench.web.app import app as _app

URL_PREFIX = "/gcbench"


class GCBenchPlugin(AirflowPlugin):
    """The ``gcbench`` plugin: FastAPI app at ``/gcbench`` and two UI views."""

    name = "gcbench"
    fastapi_apps = [
        {"app": _app, "url_prefix": URL_PREFIX, "name": "GC-Bench reports"},
    ]
    external_views = [
        {
            "name": "GC-Bench",
            "href": "gcbench/",
            "url_route": "gcbench",
            "destination": "nav",
            "nav_top_level": True,
        },
        {
            "name": "GC-Bench report",
            "href": "gcbench/dag_runs/{DAG_ID}/{RUN_ID}",
            "url_route": "gcbench-run-report",
            "destination": "dag_run",
        },
    ]
