"""The GC-Bench web app: lists plans, runs and their reports, and serves report files.

Mounted inside Airflow's API server by :mod:`gcbench.web.airflow_plugin` under
``/gcbench``; usable on its own too (``uvicorn gcbench.web.app:app``). Reports lie
under the reports folder (``GCBENCH_REPORTS_DIR``, default ``<repo>/reports``) as
``<plan>/<run key>/report.html``, where the run key is :func:`gcbench.config.run_key`
of the Airflow run id (``manual__2025-01-01T00:00:00+00:00`` ->
``manual__2025-01-01T00_00_00_00_00``), as the report writer names it (see
:func:`report_dir`; a folder named by the raw run id is found too).

Access: Airflow 3 does not put plugin FastAPI apps behind its login, so this app does it
itself on every route (:func:`airflow_access`): the request must carry the JWT Airflow
issued, as the UI holds it (cookie ``_token``) or as an API client sends it
(``Authorization: Bearer``), and Airflow's auth manager checks it (signature, expiry,
revocation) exactly as for Airflow's own REST API. No token: 401; a bad one: 403 (401
when expired). A user then sees the reports of the plans whose DAG runs the auth manager
lets them read (``is_authorized_dag`` GET on the DAG's runs); other plans are hidden from
the index and their files refused (403). ``create_app(access=None)`` serves without any
check, for an app mounted behind an authenticating proxy only.

Routes (relative to the mount point):

    GET /                                   HTML index: plans, runs, links to reports
    GET /api/plans                          JSON: [{plan, runs: [...]}]
    GET /api/plans/{plan}/runs              JSON: the runs of one plan
    GET /reports/{plan}/{run_id}/{file}     a report file (html, md, csv, png, json)
    GET /dag_runs/{dag_id}/{run_id}         redirect to that DAG run's report (the
                                            Airflow DAG-run tab links here)

Any path that resolves outside the reports folder is refused (403); links in the index
are relative, so the app works behind Airflow's base URL or a proxy prefix.

Only the standard library, FastAPI and :mod:`gcbench.config` (standard library only)
are imported at module level: Airflow imports this module in every component that loads
plugins. Airflow's auth modules are imported at the first request.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse

from gcbench.config import legacy_run_key, run_key

REPORTS_ENV = "GCBENCH_REPORTS_DIR"
PLANS_ENV = "GCBENCH_PLANS_DIR"
DAG_ID_PREFIX = "gcbench__"
REPORT_FILE = "report.html"
SUMMARY_FILE = "report.json"
_REPO = Path(__file__).resolve().parents[3]


def _default_dir(name: str) -> Path:
    # Source checkout (plugins/gcbench/web/app.py): <repo>/<name>; installed: ./<name>.
    if (_REPO / "pyproject.toml").is_file():
        return _REPO / name
    return Path.cwd() / name


def reports_root() -> Path:
    """The reports folder: ``$GCBENCH_REPORTS_DIR`` or ``<repo>/reports``."""
    env = os.environ.get(REPORTS_ENV)
    return Path(env) if env else _default_dir("reports")


def plans_root() -> Path:
    """The plans folder: ``$GCBENCH_PLANS_DIR`` or ``<repo>/plans``."""
    env = os.environ.get(PLANS_ENV)
    return Path(env) if env else _default_dir("plans")


def safe_segment(name: str) -> str:
    """A plan name or run id as one folder name: path separators and NUL become ``_``.

    Airflow run ids such as ``manual__2025-01-01T00:00:00+00:00`` are kept as they are.

    Raises:
        ValueError: empty, ``.`` or ``..``.
    """
    seg = str(name).replace("/", "_").replace("\\", "_").replace("\x00", "_")
    if seg in ("", ".", ".."):
        raise ValueError(f"not usable as a folder name: {name!r}")
    return seg


def report_dir(root: Path, plan: str, run_id: str) -> Path:
    """``root/<plan>/<run_key(run id)>/``, the folder of one run's report, as
    :func:`gcbench.report.build.report_run` writes it. Where only a folder named by the
    raw run id holds a report (older layout), that folder, unless its report.json names
    another run: the older key was many-to-one (``exp:1`` and ``exp+1`` were both
    ``exp_1``), and a run whose own report is not written yet must not show another's."""
    plan_dir = Path(root) / safe_segment(plan)
    keyed = plan_dir / safe_segment(run_key(run_id))
    if not (keyed / REPORT_FILE).is_file():
        for older in (legacy_run_key(run_id), run_id):  # layouts before injective run keys
            raw = plan_dir / safe_segment(older)
            if (raw / REPORT_FILE).is_file() and _read_summary(raw).get("run_id", run_id) == run_id:
                return raw
    return keyed


def _inside(root: Path, *parts: str) -> Path:
    """``root/parts...`` resolved; 403 if it leaves ``root`` (``..``, absolute, links)."""
    base = root.resolve()
    target = base.joinpath(*parts).resolve()
    if target != base and not target.is_relative_to(base):
        raise HTTPException(status_code=403, detail="path outside the reports folder refused")
    return target


def _read_summary(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def list_runs(root: Path, plan: str) -> list[dict]:
    """Runs of one plan that have a report, newest first.

    Each: run_id (from report.json, else the folder name), folder, logical_date, generated_at, simulated, title, headlines, url (relative
    to the app root), files (names in the folder).
    """
    plan_dir = _inside(root, plan)
    if not plan_dir.is_dir():
        return []
    runs = []
    for run_dir in plan_dir.iterdir():
        if not (run_dir / REPORT_FILE).is_file():
            continue
        s = _read_summary(run_dir)
        runs.append(
            dict(
                run_id=s.get("run_id") or run_dir.name,
                folder=run_dir.name,
                logical_date=s.get("logical_date"),
                generated_at=s.get("generated_at"),
                simulated=bool(s.get("simulated", False)),
                title=s.get("title") or f"GC-Bench report: {plan}",
                headlines=list(s.get("headlines") or []),
                counts=s.get("counts") or {},
                url=f"reports/{quote(plan, safe='')}/{quote(run_dir.name, safe='')}/{REPORT_FILE}",
                files=sorted(p.name for p in run_dir.iterdir() if p.is_file()),
                mtime=(run_dir / REPORT_FILE).stat().st_mtime,
            )
        )
    runs.sort(key=lambda r: (r["logical_date"] or "", r["mtime"]), reverse=True)
    return runs


def list_plans(root: Path, plans_dir: Path | None = None) -> list[dict]:
    """Plans with reports (and plan files without any yet), each with its runs."""
    names = set()
    if root.is_dir():
        names |= {p.name for p in root.iterdir() if p.is_dir()}
    if plans_dir is not None and plans_dir.is_dir():
        names |= {p.stem for p in plans_dir.glob("*.yaml")}
    return [dict(plan=n, dag_id=DAG_ID_PREFIX + n, runs=list_runs(root, n)) for n in sorted(names)]


@dataclass(frozen=True)
class Access:
    """Who is asking, and which plans' reports they may read.

    Attributes:
        user: the authenticated user (the auth manager's user object), or None when the
            app runs without checks (``create_app(access=None)``).
        can_read: ``can_read(dag_id) -> bool``, whether the user may read that DAG's runs.
    """

    user: Any
    can_read: Callable[[str], bool]


OPEN = Access(user=None, can_read=lambda dag_id: True)
"""No check at all: for an app mounted behind an authenticating proxy only."""


async def airflow_access(request: Request) -> Access:
    """Authenticate a request as Airflow's API server does, and authorize through its auth manager.

    The token is the one Airflow issued (``POST /auth/token`` or the UI's login): the
    ``Authorization: Bearer`` header, else the UI's ``_token`` cookie. Airflow's own
    :func:`airflow.api_fastapi.core_api.security.get_user` checks it with the configured
    auth manager (FAB in docker-compose.yml): signature with the shared JWT secret,
    expiry, audience, revocation at logout.

    Returns:
        An :class:`Access` whose ``can_read(dag_id)`` is the auth manager's
        ``is_authorized_dag(method="GET", access_entity=RUN, details=DagDetails(id=dag_id))``.

    Raises:
        HTTPException: 401 without a token or with an expired one, 403 with an invalid
            one (Airflow's answers), 503 where no Airflow auth manager runs in this
            process (the app served outside Airflow's API server).
    """
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    try:
        from airflow.api_fastapi.app import get_auth_manager

        manager = get_auth_manager()
    except RuntimeError:
        raise HTTPException(
            status_code=503,
            detail="no Airflow auth manager in this process: serve the GC-Bench pages through Airflow's API server",
        ) from None
    credentials = await bearer_scheme(request)
    user = await get_user(request, None, credentials)

    def can_read(dag_id: str) -> bool:
        return bool(
            manager.is_authorized_dag(
                method="GET", access_entity=DagAccessEntity.RUN, details=DagDetails(id=dag_id), user=user
            )
        )

    return Access(user=user, can_read=can_read)


ACCESS_NOTE = "These pages are behind Airflow's login: each user sees the plans whose DAG runs Airflow lets them read."

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1rem 1.5rem; color: #1d2733; }}
table {{ border-collapse: collapse; margin-bottom: 1.4rem; font-size: .9rem; }}
th, td {{ border: 1px solid #d5dde6; padding: .3rem .6rem; text-align: left; vertical-align: top; }}
th {{ background: #f2f5f8; }}
.sim {{ background: #c0392b; color: #fff; font-weight: bold; font-size: .75rem; padding: 0 .35rem; border-radius: 3px; }}
.small {{ color: #5a6978; font-size: .85rem; }}
</style></head><body>
<h1 id="gcbench-title">{title}</h1>
{body}
</body></html>"""


def _index_html(plans: list[dict], root: Path) -> str:
    e = html.escape
    parts = [
        '<p class="small">Report links are relative to the reports folder '
        "(<code>&lt;plan&gt;/&lt;run&gt;/report.html</code>).</p>"
    ]
    if not plans:
        parts.append(
            "<p>No reports yet. Run a plan's DAG (gcbench__&lt;plan&gt;) and its report task writes one here.</p>"
        )
    for p in plans:
        parts.append(
            f'<h2 id="plan-{e(p["plan"])}">{e(p["plan"])} <span class="small">DAG {e(p["dag_id"])}</span></h2>'
        )
        if not p["runs"]:
            parts.append("<p class='small'>No reports for this plan yet.</p>")
            continue
        rows = ["<tr><th>run</th><th>logical date</th><th>trials (valid)</th><th>headlines</th><th>files</th></tr>"]
        for r in p["runs"]:
            base = r["url"].rsplit("/", 1)[0]
            sim = '<span class="sim">SIMULATED</span> ' if r["simulated"] else ""
            counts = r["counts"]
            trials = f"{counts.get('total', '?')} ({counts.get('valid', '?')})" if counts else ""
            heads = "<br>".join(e(h) for h in r["headlines"][:3])
            files = " ".join(f'<a href="{base}/{quote(f)}">{e(f)}</a>' for f in r["files"] if not f.endswith(".png"))
            rows.append(
                f'<tr><td>{sim}<a href="{r["url"]}">{e(r["run_id"])}</a></td>'
                f"<td>{e(r['logical_date'] or '')}</td><td>{e(trials)}</td>"
                f'<td class="small">{heads}</td><td class="small">{files}</td></tr>'
            )
        parts.append("<table>" + "".join(rows) + "</table>")
    parts.append(f'<footer class="small" id="access-note">{ACCESS_NOTE}</footer>')
    return _PAGE.format(title="GC-Bench reports", body="\n".join(parts))


def create_app(
    root: Path | None = None,
    plans_dir: Path | None = None,
    *,
    access: Callable[[Request], Awaitable[Access]] | None = airflow_access,
) -> FastAPI:
    """The app; ``root`` and ``plans_dir`` default to :func:`reports_root` and
    :func:`plans_root`, read at each request (so the environment may change).

    Args:
        access: checks every request and says which plans the user may read; default
            :func:`airflow_access` (Airflow's login). None: no check (:data:`OPEN`), only
            for an app behind an authenticating proxy.
    """
    app = FastAPI(title="GC-Bench reports", docs_url=None, redoc_url=None)

    def _root() -> Path:
        return Path(root) if root is not None else reports_root()

    def _plans() -> Path:
        return Path(plans_dir) if plans_dir is not None else plans_root()

    async def _access(request: Request) -> Access:
        return OPEN if access is None else await access(request)

    def _readable(acc: Access, plan: str) -> None:
        if not acc.can_read(DAG_ID_PREFIX + plan):
            raise HTTPException(status_code=403, detail=f"not allowed to read the runs of {DAG_ID_PREFIX}{plan}")

    def _plans_for(acc: Access) -> list[dict]:
        return [p for p in list_plans(_root(), _plans()) if acc.can_read(p["dag_id"])]

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request, acc: Access = Depends(_access)):
        # Relative links need the trailing slash ("/gcbench" -> "/gcbench/").
        if not request.url.path.endswith("/"):
            return RedirectResponse(url=request.url.path + "/")
        return HTMLResponse(_index_html(_plans_for(acc), _root()))

    @app.get("/api/plans")
    def api_plans(acc: Access = Depends(_access)):
        return _plans_for(acc)

    @app.get("/api/plans/{plan}/runs")
    def api_runs(plan: str, acc: Access = Depends(_access)):
        _readable(acc, plan)
        runs = list_runs(_root(), plan)
        if not runs and not _inside(_root(), plan).is_dir():
            raise HTTPException(status_code=404, detail=f"no reports for plan {plan!r}")
        return runs

    @app.get("/reports/{plan}/{run_id}/{file_path:path}")
    def report_file(plan: str, run_id: str, file_path: str, acc: Access = Depends(_access)):
        _readable(acc, plan)
        if not _inside(_root(), plan, run_id).is_dir():
            run_id = run_key(run_id)  # a raw Airflow run id: the writer's folder name
        target = _inside(_root(), plan, run_id, file_path or REPORT_FILE)
        if target.is_dir():
            target = _inside(target, REPORT_FILE)
        if not target.is_file():
            raise HTTPException(status_code=404, detail="no such report file")
        media = "text/markdown; charset=utf-8" if target.suffix == ".md" else None
        return FileResponse(target, media_type=media)

    @app.get("/dag_runs/{dag_id}/{run_id}")
    def dag_run_report(dag_id: str, run_id: str, acc: Access = Depends(_access)):
        plan = dag_id.removeprefix(DAG_ID_PREFIX)
        _readable(acc, plan)
        try:
            folder = report_dir(_root(), plan, run_id)
        except ValueError:
            raise HTTPException(status_code=403, detail="refused") from None
        _inside(_root(), folder.parent.name, folder.name)
        if (folder / REPORT_FILE).is_file():
            url = f"../../reports/{quote(folder.parent.name, safe='')}/{quote(folder.name, safe='')}/{REPORT_FILE}"
            return RedirectResponse(url=url)
        body = (
            f"<p>No report yet for run <code>{html.escape(run_id)}</code> of "
            f"<code>{html.escape(dag_id)}</code>: its report task has not finished. "
            f'<a href="../../">All reports</a></p>'
        )
        return HTMLResponse(_PAGE.format(title="GC-Bench report", body=body), status_code=404)

    return app


app = create_app()
"""The app Airflow mounts (reports folder read from the environment per request; every
route behind Airflow's login, :func:`airflow_access`)."""
