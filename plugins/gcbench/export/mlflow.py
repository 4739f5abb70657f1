"""Log DAG runs and their trials into an MLflow tracking server, over its REST API.

One DAG run is one MLflow *parent run* (name ``<plan> <run id>``), each trial a *child
run* (tag ``mlflow.parentRunId``, name ``<variant> rep <n>``):

* parameters: the trial spec flattened (``workload``, ``kind``, ``variant``,
  ``repetition``, ``seed``, ``settings.<name>``, ``factors.<name>``, ``window.seconds``,
  ``energy.backend``, ...);
* metrics: every stored numeric metric under its own name, which carries its unit
  (``gpu_energy_j``, ``duration_s``, ``j_per_token``, ``co2e_kg``);
* tags: ``gcbench.status``, ``gcbench.valid``, ``gcbench.reasons``, ``gcbench.simulated``,
  ``gcbench.trial_id``, ``gcbench.dag_id``, ``gcbench.run_id``;
* artifacts: the trial's ``result.json`` (as stored in PostgreSQL); on the parent run the
  report's ``report.html`` and ``report.md``.

Only the REST API is used (``/api/2.0/mlflow/...`` and the artifact proxy
``/api/2.0/mlflow-artifacts/artifacts/...`` that ``mlflow server`` serves by default), through
the standard library, so the exporter needs no MLflow package and cannot clash with
Airflow's pinned dependencies. Exporting again is idempotent: runs are found by their
``gcbench.*`` tags and updated, never duplicated.

Configuration: the plan's ``export: {mlflow: {tracking_uri, experiment}}``, or
``GCBENCH_MLFLOW_TRACKING_URI`` (and ``GCBENCH_MLFLOW_EXPERIMENT``; default experiment:
``gcbench-<plan>``). After each DAG run's report, :func:`export_after_report` exports;
a failure (server unreachable, refused) is retried :data:`ATTEMPTS` times, then logged as
a warning and queued in ``$GCBENCH_HOME/exports/mlflow-pending.jsonl``: the measurement
is stored either way, and ``gcbench export mlflow --pending`` sends the queue later.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gcbench.errors import GCBenchError

ATTEMPTS = 3
"""Tries of one export before it is queued (waits 1 s, 2 s between them)."""

PARAM_VALUE_MAX = 500
"""Longest parameter value sent (MLflow's limit was 500 characters before 2.x; longer ones are cut)."""

TIMEOUT_S = 15.0


class ExportError(GCBenchError):
    """The tracking server refused a request or could not be reached."""


@dataclass(frozen=True)
class MlflowTarget:
    """Where to log: the tracking server's base URL and the experiment's name."""

    tracking_uri: str
    experiment: str


def target_for(plan) -> MlflowTarget | None:
    """The plan's MLflow target (plan ``export.mlflow``, else the environment), or None."""
    cfg = getattr(getattr(plan, "export", None), "mlflow", None)
    uri = (cfg.tracking_uri if cfg else None) or os.environ.get("GCBENCH_MLFLOW_TRACKING_URI")
    if not uri:
        return None
    experiment = (cfg.experiment if cfg else None) or os.environ.get("GCBENCH_MLFLOW_EXPERIMENT")
    return MlflowTarget(uri.rstrip("/"), experiment or f"gcbench-{plan.name}")


class MlflowClient:
    """The few REST calls the exporter needs (MLflow REST API 2.0)."""

    def __init__(self, tracking_uri: str, timeout_s: float = TIMEOUT_S):
        self.base = tracking_uri.rstrip("/")
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: dict | None = None, query: dict | None = None) -> dict:
        url = f"{self.base}/api/2.0/mlflow/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                text = resp.read().decode("utf-8") or "{}"
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            try:
                code = json.loads(detail).get("error_code")
            except ValueError:
                code = None
            raise ExportError(f"MLflow {path}: HTTP {exc.code} {code or ''} {detail}".strip()) from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ExportError(f"MLflow at {self.base} unreachable: {getattr(exc, 'reason', exc)}") from exc
        return json.loads(text)

    def experiment_id(self, name: str) -> str:
        """The id of experiment ``name``, created when missing."""
        try:
            found = self._call("GET", "experiments/get-by-name", query={"experiment_name": name})
            return str(found["experiment"]["experiment_id"])
        except ExportError as exc:
            if "RESOURCE_DOES_NOT_EXIST" not in str(exc):
                raise
        return str(self._call("POST", "experiments/create", {"name": name})["experiment_id"])

    def find_run(self, experiment_id: str, tags: dict[str, str]) -> dict | None:
        """The first run of the experiment with all ``tags`` (exact values), or None."""
        clause = " and ".join(f"tags.`{k}` = '{v.replace(chr(39), '')}'" for k, v in tags.items())
        out = self._call("POST", "runs/search", {"experiment_ids": [experiment_id], "filter": clause, "max_results": 2})
        runs = out.get("runs") or []
        return runs[0] if runs else None

    def create_run(self, experiment_id: str, name: str, start_ms: int, tags: dict[str, str]) -> str:
        body = {
            "experiment_id": experiment_id,
            "run_name": name,
            "start_time": start_ms,
            "tags": [{"key": k, "value": v} for k, v in tags.items()],
        }
        return str(self._call("POST", "runs/create", body)["run"]["info"]["run_id"])

    def log_batch(self, run_id: str, metrics: dict[str, float], params: dict[str, str], tags: dict[str, str]) -> None:
        """Metrics, parameters and tags in batches within MLflow's limits (1000/100/100)."""
        now = int(time.time() * 1000)
        m = [{"key": k, "value": v, "timestamp": now, "step": 0} for k, v in metrics.items()]
        p = [{"key": k, "value": v} for k, v in params.items()]
        t = [{"key": k, "value": v} for k, v in tags.items()]
        while m or p or t:
            self._call(
                "POST", "runs/log-batch", {"run_id": run_id, "metrics": m[:1000], "params": p[:100], "tags": t[:100]}
            )
            m, p, t = m[1000:], p[100:], t[100:]

    def finish(self, run_id: str, status: str, end_ms: int) -> None:
        self._call("POST", "runs/update", {"run_id": run_id, "status": status, "end_time": end_ms})

    def log_artifact(self, experiment_id: str, run_id: str, name: str, content: bytes) -> None:
        """PUT one file through the server's artifact proxy (``mlflow server`` serves it by default)."""
        url = f"{self.base}/api/2.0/mlflow-artifacts/artifacts/{experiment_id}/{run_id}/artifacts/{urllib.parse.quote(name)}"
        req = urllib.request.Request(url, data=content, method="PUT")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s):
                pass
        except urllib.error.HTTPError as exc:
            raise ExportError(f"MLflow artifact {name}: HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ExportError(f"MLflow at {self.base} unreachable: {getattr(exc, 'reason', exc)}") from exc


def flatten_params(spec: dict[str, Any]) -> dict[str, str]:
    """A trial spec as MLflow parameters: nested keys joined by ``.``, values as text
    (lists and nulls as JSON), at most :data:`PARAM_VALUE_MAX` characters; the id, the
    plan name, the schedule position and placement are tags or left out."""
    out: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
            return
        text = value if isinstance(value, str) else json.dumps(value)
        out[prefix] = text[:PARAM_VALUE_MAX]

    walk("", {k: v for k, v in spec.items() if k not in ("trial_id", "plan", "order", "devices")})
    return out


@dataclass
class ExportOutcome:
    """What one export did: the parent run's id, the trials logged, the experiment."""

    experiment_id: str
    parent_run_id: str
    trials: int
    notes: list[str] = field(default_factory=list)


def _ms(t) -> int:
    return int(t.timestamp() * 1000) if t is not None else int(time.time() * 1000)


def export_run(conn, plan, run_id: str, target: MlflowTarget, client: MlflowClient | None = None) -> ExportOutcome:
    """Log one stored DAG run of ``plan`` and its trials (see the module docstring).

    Raises:
        ExportError: the server is unreachable or refuses a request.
        gcbench.errors.StoreError: the run is not stored.
    """
    from gcbench.store import export_queries

    client = client or MlflowClient(target.tracking_uri)
    run, trials = export_queries.run_for_export(conn, plan.dag_id, run_id)
    exp = client.experiment_id(target.experiment)
    key = {"gcbench.dag_id": plan.dag_id, "gcbench.run_id": run_id}
    parent = client.find_run(exp, {**key, "gcbench.level": "dag_run"})
    counts = {"trials": len(trials), "valid": sum(1 for t in trials if t["valid"])}
    parent_id = (
        parent["info"]["run_id"]
        if parent
        else client.create_run(
            exp, f"{plan.name} {run_id}", _ms(run["created_at"]), {**key, "gcbench.level": "dag_run"}
        )
    )
    client.log_batch(
        parent_id,
        {"trials": float(counts["trials"]), "valid_trials": float(counts["valid"])},
        {"plan": plan.name, "logical_date": run["logical_date"].isoformat() if run["logical_date"] else "none"},
        {"gcbench.plan": plan.name},
    )
    for t in trials:
        tags = {**key, "gcbench.level": "trial", "gcbench.trial_id": t["trial_id"]}
        found = client.find_run(exp, tags)
        child = (
            found["info"]["run_id"]
            if found
            else client.create_run(
                exp,
                f"{t['variant']} rep {t['repetition']}",
                _ms(t["started_at"]),
                {**tags, "mlflow.parentRunId": parent_id},
            )
        )
        client.log_batch(
            child,
            {k: v for k, v in t["metrics"].items()},
            flatten_params(t["spec"]),
            {
                "gcbench.status": t["status"],
                "gcbench.valid": "unknown" if t["valid"] is None else str(bool(t["valid"])).lower(),
                "gcbench.reasons": "; ".join(t["reasons"])[:5000] or "none",
                "gcbench.simulated": str(bool(t["simulated"])).lower(),
                "gcbench.variant": t["variant"],
                # named windows whose energy figures the report leaves out (their metrics are logged as stored)
                **(
                    {
                        "gcbench.windows_withheld": "; ".join(f"{k}: {v}" for k, v in t["windows_withheld"].items())[
                            :5000
                        ]
                    }
                    if t.get("windows_withheld")
                    else {}
                ),
            },
        )
        if t["result"] is not None:
            client.log_artifact(exp, child, "result.json", json.dumps(t["result"], indent=2).encode("utf-8"))
        client.finish(child, "FINISHED" if t["status"] == "ok" else "FAILED", _ms(t["finished_at"]))
    for path in (run["html_path"], run["md_path"]):
        if path and Path(path).is_file():
            client.log_artifact(exp, parent_id, Path(path).name, Path(path).read_bytes())
    client.finish(parent_id, "FINISHED", int(time.time() * 1000))
    return ExportOutcome(exp, parent_id, len(trials))


def _pending_file() -> Path:
    from gcbench import config

    return config.home() / "exports" / "mlflow-pending.jsonl"


def queue_pending(plan_name: str, run_id: str, target: MlflowTarget, reason: str) -> Path:
    """Remember an export that failed, for ``gcbench export mlflow --pending``."""
    path = _pending_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"plan": plan_name, "run_id": run_id, "tracking_uri": target.tracking_uri, "experiment": target.experiment}
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps({**record, "reason": reason, "queued_at": time.time()}) + "\n")
    return path


def pending() -> list[dict]:
    """The queued exports (oldest first); an unreadable line is skipped."""
    try:
        lines = _pending_file().read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def set_pending(records: list[dict]) -> None:
    path = _pending_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    tmp.replace(path)


def export_with_retry(
    conn,
    plan,
    run_id: str,
    target: MlflowTarget,
    log: Callable[[str], None] = print,
    attempts: int = ATTEMPTS,
    wait_s: float = 1.0,
) -> ExportOutcome | None:
    """:func:`export_run` retried ``attempts`` times (waits ``wait_s``, doubling); on the
    last failure a warning line and the run queued (:func:`queue_pending`); never raises
    :class:`ExportError`."""
    last = ""
    for i in range(attempts):
        try:
            out = export_run(conn, plan, run_id, target)
            log(
                f"mlflow: logged {out.trials} trial(s) of {run_id} to {target.tracking_uri} "
                f"(experiment {target.experiment}, run {out.parent_run_id})"
            )
            return out
        except ExportError as exc:
            last = str(exc)
            if i + 1 < attempts:
                time.sleep(wait_s * 2**i)
    path = queue_pending(plan.name, run_id, target, last)
    log(
        f"warning: mlflow export of {run_id} failed after {attempts} attempts ({last}); the results are stored, "
        f"the export is queued in {path} (gcbench export mlflow --pending)"
    )
    return None


def export_after_report(plan, run_id: str, log: Callable[[str], None] = print) -> ExportOutcome | None:
    """The DAG's hook after the report: export when a target is configured; never raises."""
    target = target_for(plan)
    if target is None:
        return None
    from gcbench.store import db

    try:
        with db.connection() as conn:
            return export_with_retry(conn, plan, run_id, target, log)
    except GCBenchError as exc:  # the database itself: the run's own tasks report that
        log(f"warning: mlflow export of {run_id} skipped: {exc}")
        return None
