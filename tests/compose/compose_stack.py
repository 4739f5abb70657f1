"""One project of the compose test deployment, driven as an operator does: ``docker
compose`` for the services, Airflow 3's REST API with a JWT from ``/auth/token`` (the
admin of the env file), ``psql`` in the postgres container."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TERMINAL = {"success", "failed"}


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a compose env file (no quoting is used by the test script)."""
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


class Stack:
    """One compose project of the test deployment and its Airflow API."""

    def __init__(self, env_file: Path, project: str):
        self.env_file = env_file
        self.project = project
        self.env = read_env_file(env_file)
        self.url = f"http://127.0.0.1:{self.env['AIRFLOW_PORT']}"
        self.compose_cmd = shlex.split(os.environ.get("GCBENCH_COMPOSE") or "docker compose")
        self.shell_env: dict[str, str] = {}  # overrides of the env file (compose: shell beats env file)
        self._token: str | None = None

    # ------------------------------------------------------------------ compose
    def compose(
        self,
        *args: str,
        project: str | None = None,
        files: list[str] | None = None,
        extra_env: dict[str, str] | None = None,
        timeout: float = 900,
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        """``docker compose --project-directory REPO --env-file ENV -p PROJECT ARGS``."""
        argv = [
            *self.compose_cmd,
            "--project-directory",
            str(REPO),
            "--env-file",
            str(self.env_file),
            "-p",
            project or self.project,
        ]
        for f in files or []:
            argv += ["-f", f]
        env = {**os.environ, **self.shell_env, **(extra_env or {})}
        proc = subprocess.run([*argv, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"docker compose {' '.join(args)} exited {proc.returncode}:\n"
                f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
            )
        return proc

    def up(self, *args: str, timeout: float = 900) -> float:
        """``up -d --wait``: every service started and its health check green. Returns seconds."""
        started = time.monotonic()
        proc = self.compose(
            *args,
            "up",
            "-d",
            "--wait",
            "--wait-timeout",
            str(int(timeout)),
            "--no-build",
            timeout=timeout + 60,
            check=False,
        )
        if proc.returncode != 0:
            ps = self.compose(*args, "ps", "-a", check=False).stdout
            logs = self.compose(*args, "logs", "--tail", "40", check=False).stdout
            raise AssertionError(f"docker compose up --wait failed:\n{proc.stderr[-3000:]}\n{ps}\n{logs[-8000:]}")
        self._token = None
        return time.monotonic() - started

    def ps(self, *args: str) -> list[dict]:
        """``ps --format json``: one dict per container (Service, State, Health, ...)."""
        out = self.compose(*args, "ps", "-a", "--format", "json").stdout.strip()
        if not out:
            return []
        if out.startswith("["):
            return json.loads(out)
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def psql(self, sql: str) -> list[list[str]]:
        """Rows of ``psql`` run in the postgres container as the results role (unaligned, tab-separated)."""
        proc = self.compose(
            "exec",
            "-T",
            "postgres",
            "psql",
            "-X",
            "-v",
            "ON_ERROR_STOP=1",
            "-U",
            self.env.get("GCBENCH_DB_USER", "gcbench"),
            "-d",
            self.env.get("GCBENCH_DB_NAME", "gcbench"),
            "-At",
            "-F",
            "\t",
            "-c",
            sql,
            timeout=120,
        )
        return [line.split("\t") for line in proc.stdout.splitlines() if line]

    # ------------------------------------------------------------------ REST API
    def token(self, refresh: bool = False) -> str:
        """A JWT from ``POST /auth/token`` for the env file's admin."""
        if self._token is None or refresh:
            body = {"username": self.env["GCBENCH_ADMIN_USER"], "password": self.env["GCBENCH_ADMIN_PASSWORD"]}
            status, data = self.request("POST", "/auth/token", body, auth=False)
            assert status in (200, 201), (status, data)
            self._token = data["access_token"]
        return self._token

    def request(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        *,
        auth: bool = True,
        headers: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> tuple[int, object]:
        """(status, JSON or text) of one request; connection errors raise."""
        hdrs = {"Accept": "application/json", **(headers or {})}
        if body is not None:
            hdrs["Content-Type"] = "application/json"
        if auth:
            hdrs["Authorization"] = f"Bearer {self.token()}"
        req = urllib.request.Request(
            self.url + path, method=method, headers=hdrs, data=json.dumps(body).encode() if body is not None else None
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        text = raw.decode(errors="replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        """A REST API call that must succeed (retried while the API server is restarting)."""
        deadline = time.monotonic() + 120
        while True:
            try:
                status, data = self.request(method, "/api/v2" + path, body)
                if status == 401:
                    self.token(refresh=True)
                    status, data = self.request(method, "/api/v2" + path, body)
            except OSError as exc:
                status, data = 0, str(exc)
            if status < 300 and status != 0:
                return data
            if status in (0, 500, 502, 503) and time.monotonic() < deadline:
                time.sleep(2)
                continue
            raise AssertionError(f"{method} /api/v2{path}: {status} {str(data)[:2000]}")

    def wait_for(self, cond, timeout_s: float, what: str, every_s: float = 2.0):
        """Poll ``cond()`` until it returns something true; AssertionError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            try:
                last = cond()
            except (OSError, AssertionError) as exc:  # the API server may be restarting
                last = exc
            else:
                if last:
                    return last
            time.sleep(every_s)
        logs = self.compose("logs", "--tail", "60", check=False).stdout
        raise AssertionError(f"waited {timeout_s:.0f} s for {what}; last: {last!r}\n{logs[-10000:]}")

    def wait_dag(self, dag_id: str, timeout_s: float = 300) -> dict:
        """The DAG once the dag-processor has parsed it."""

        def parsed():
            status, data = self.request("GET", f"/api/v2/dags/{dag_id}")
            return data if status == 200 else None

        return self.wait_for(parsed, timeout_s, f"DAG {dag_id} to be parsed")

    def unpause(self, dag_id: str, paused: bool = False) -> None:
        self.wait_dag(dag_id)
        assert self.api("PATCH", f"/dags/{dag_id}", {"is_paused": paused})["is_paused"] is paused

    def trigger(self, dag_id: str, conf: dict) -> str:
        """Unpause and trigger a DAG with ``conf``; returns the run id."""
        self.unpause(dag_id)
        run = self.api("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
        return run["dag_run_id"]

    def run(self, dag_id: str, run_id: str) -> dict:
        return self.api("GET", f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")

    def wait_run(self, dag_id: str, run_id: str, timeout_s: float = 900) -> dict:
        """The DAG run once it has ended (success or failed)."""
        return self.wait_for(
            lambda: (r := self.run(dag_id, run_id))["state"] in TERMINAL and r,
            timeout_s,
            f"{dag_id} run {run_id} to end",
            every_s=3,
        )

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        data = self.api("GET", f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances?limit=500")
        return data["task_instances"]

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str:
        """The task instance's log as text (the API's structured lines joined)."""
        data = self.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances/"
            f"{task_id}/logs/{try_number}?map_index={map_index}&full_content=true",
        )
        content = data.get("content", data) if isinstance(data, dict) else data
        if isinstance(content, list):
            return "\n".join(
                c.get("event", "") + " " + json.dumps({k: v for k, v in c.items() if k != "event"})
                if isinstance(c, dict)
                else str(c)
                for c in content
            )
        return str(content)


class EngineEvents:
    """The engine's container start events, streamed from now on (``docker events``).

    The engine keeps only its last few hundred events, so they are read as they happen
    rather than asked for afterwards. ``started(plan)`` -> trial ids of the trial
    containers started for that plan (label ``gcbench.plan``).
    """

    def __init__(self):
        import threading

        self.events: list[dict] = []
        self.proc = subprocess.Popen(
            [
                "docker",
                "events",
                "--filter",
                "type=container",
                "--filter",
                "event=start",
                "--filter",
                "label=gcbench.trial_id",
                "--format",
                "{{json .}}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.strip():
                self.events.append(json.loads(line))

    def started(self, plan: str) -> set[str]:
        return {
            e["Actor"]["Attributes"]["gcbench.trial_id"]
            for e in list(self.events)
            if e["Actor"]["Attributes"].get("gcbench.plan") == plan
        }

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
