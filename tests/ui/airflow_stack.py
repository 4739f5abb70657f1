"""Airflow 3's api-server, scheduler and dag-processor as subprocesses, and a minimal
Chrome DevTools protocol client, for the UI tests.

The stack serves the project's ``dags/`` folder with ``GCBENCH_PLANS_DIR`` pointing at
a folder of test plans. Metadata: SQLite with the LocalExecutor by default (Airflow
3.3 accepts the pair: tasks reach the database only through the API server), or a
PostgreSQL database (``metadata_url``) where several writers meet (a backfill while
the scheduler runs: SQLite answers "database is locked"). ``AIRFLOW_HOME`` in a
temporary folder. SimpleAuthManager with one ``admin`` user
whose password is written to the passwords file beforehand.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ADMIN_PASSWORD = "gcbench-ui-test"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]


def sqlalchemy_url(dsn: str) -> str:
    """A libpq DSN or URL (as the ``pg_url`` fixture gives) -> a SQLAlchemy psycopg2 URL."""
    from urllib.parse import quote

    from psycopg2.extensions import parse_dsn

    d = parse_dsn(dsn)
    auth = quote(d.get("user", "postgres")) + (":" + quote(d["password"]) if d.get("password") else "")
    host = d.get("host", "")
    where = f"@{host}:{d.get('port', 5432)}" if host and not host.startswith("/") else "@"
    query = f"?host={quote(host)}" + (f"&port={d['port']}" if d.get("port") else "") if host.startswith("/") else ""
    return f"postgresql+psycopg2://{auth}{where}/{d['dbname']}{query}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AirflowStack:
    """``airflow db migrate``, then api-server, scheduler and dag-processor; stop() ends them."""

    def __init__(self, home: Path, plans_dir: Path, extra_env: dict[str, str], metadata_url: str | None = None):
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        (home / "passwords.json").write_text(json.dumps({"admin": ADMIN_PASSWORD}))
        self.env = {
            **os.environ,
            **extra_env,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata_url or f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": "gcbench-ui-test-jwt-secret-0123456789",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "GCBENCH_PLANS_DIR": str(plans_dir),
            "GCBENCH_PROJECT_ROOT": str(REPO),
        }

    def _airflow(self, *args: str, timeout: float = 300) -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "airflow", *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if proc.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")

    def start(self, pools: list[str]) -> None:
        self._airflow("db", "migrate")
        for pool in pools:
            self._airflow("pools", "set", pool, "1", "GC-Bench: one trial per GPU")
        for name in ("api-server", "scheduler", "dag-processor"):
            log = open(self.home / f"{name}.log", "wb")
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "airflow", name],
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        self.wait(lambda: self.get("/api/v2/monitor/health", auth=False) is not None, 120, "the API server")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def logs(self) -> str:
        return "\n".join(
            f"--- {f.name} ---\n" + f.read_text(errors="replace")[-3000:] for f in sorted(self.home.glob("*.log"))
        )

    def wait(self, cond, timeout_s: float, what: str):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"an Airflow process exited ({p.args}):\n{self.logs()}")
            value = cond()
            if value:
                return value
            time.sleep(1)
        raise TimeoutError(f"waited {timeout_s:.0f} s for {what}\n{self.logs()}")

    def token(self) -> str:
        """A JWT for the API, kept for a few minutes (asking for one per request slows a
        loaded API server down)."""
        cached = getattr(self, "_token", None)
        if cached and time.monotonic() - cached[1] < 300:
            return cached[0]
        req = urllib.request.Request(
            f"{self.url}/auth/token",
            method="POST",
            data=json.dumps({"username": "admin", "password": ADMIN_PASSWORD}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            token = json.loads(r.read())["access_token"]
        self._token = (token, time.monotonic())
        return token

    def post(self, path: str, body: dict) -> dict:
        """POST JSON to the API (authenticated); returns the JSON answer.

        Raises:
            urllib.error.HTTPError: the API refused it (its body holds the reason).
        """
        req = urllib.request.Request(
            self.url + path,
            method="POST",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token()}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def get(self, path: str, auth: bool = True) -> dict | None:
        try:  # a busy API server (slow answer, timeout) is "no answer yet" to the callers' waits
            headers = {"Authorization": f"Bearer {self.token()}"} if auth else {}
            with urllib.request.urlopen(urllib.request.Request(self.url + path, headers=headers), timeout=30) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None


class Browser:
    """Headless Chromium driven over the Chrome DevTools protocol (one page)."""

    def __init__(self, profile: Path):
        self.profile = profile
        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                "--window-size=1400,1000",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "HOME": str(profile)},
            start_new_session=True,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        pages = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        self.ws_url = next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")
        self.loop = asyncio.new_event_loop()
        self.ids = itertools.count(1)
        self.ws = self.loop.run_until_complete(self._connect())
        self.send("Page.enable")
        self.send("Runtime.enable")

    async def _connect(self):
        import websockets

        return await websockets.connect(self.ws_url, max_size=64 * 2**20, open_timeout=20)

    async def _call(self, method: str, params: dict) -> dict:
        msg_id = next(self.ids)
        await self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(await self.ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def send(self, method: str, **params) -> dict:
        return self.loop.run_until_complete(asyncio.wait_for(self._call(method, params), 60))

    def js(self, expression: str):
        """Evaluate JavaScript in the page (promises awaited); returns the value."""
        r = self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"JS error: {r['exceptionDetails']}")
        return r["result"].get("value")

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def wait_js(self, expression: str, timeout_s: float, what: str):
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.js(expression)
            except RuntimeError:
                last = None
            if last:
                return last
            time.sleep(0.3)
        raise TimeoutError(
            f"waited {timeout_s:.0f} s for {what}; page: {self.js('location.href')}\n"
            f"{(self.js('document.body && document.body.innerText') or '')[:2000]}"
        )

    def screenshot(self, path: Path) -> None:
        import base64

        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.ws.close())
        except Exception:  # noqa: BLE001 - the browser may already be gone
            pass
        self.loop.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
