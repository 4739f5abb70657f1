"""Per-trial overhead under a live Airflow scheduler (LocalExecutor, PostgreSQL metadata).

    python benchmarks/live_scheduler_overhead.py [--trials 50] [--window-s 1.2] [--keep DIR] [--json FILE]
    python benchmarks/live_scheduler_overhead.py --plan plans/smoke.yaml --conf '{"repetitions": 2}'

Starts the local Airflow of ``gcbench airflow up`` (:func:`gcbench.airflow_local.up`:
the embedded PostgreSQL for Airflow's metadata and GC-Bench's results, api-server,
scheduler, dag-processor, triggerer, with the settings ``up`` writes) in a throw-away
``GCBENCH_HOME``, with one plan of ``--trials`` no-op trials (or ``--plan``), triggers
it through the REST API, waits for the run, stops everything, and prints per trial
task (``run_trial_*``, one mapped instance per trial):

* **beyond window**: the task's wall time (Airflow's start_date to end_date) minus
  the trial's measured window (``result.windows.main`` in the results database);
* **gap**: from the end of the previous trial task to the start of this one (the
  scheduler noticing the end and queueing the next instance, the executor starting it);
* **cost per trial**: beyond window + the gap before it: what a trial costs besides
  its window (target for no-op trials: at most 2 s);

with medians and percentiles, and where the time goes: the gap split at Airflow's
``queued_when``; the task split at the task log's "GPUs ... leased" line and the
trial's own log lines (trial starts, workload starts, window begins and ends, trial
ends); with several variants, the same per variant. Also the machine's load before
and after and the CPU time of Airflow's own processes: the machine may be shared,
so compare runs made back to back.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_COST_S = 2.0
"""Issue 15: the whole cost per no-op trial, gap included, at most 2 s (2-core machine)."""

PLAN = """name: overhead
description: live-scheduler overhead benchmark (benchmarks/live_scheduler_overhead.py)
runner: local
devices: [0]
repetitions: {trials}
order: sequential
window: {{seconds: {window_s}}}
workloads: [{{name: noop, kind: noop}}]
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    """The REST API of the local Airflow, as the ``admin`` user of ``gcbench airflow up``."""

    def __init__(self, url: str, password: str):
        self.url, self.password, self._token = url, password, None

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        if self._token is None:
            req = urllib.request.Request(
                f"{self.url}/auth/token",
                method="POST",
                data=json.dumps({"username": "admin", "password": self.password}).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=60) as r:
                self._token = json.loads(r.read())["access_token"]
        req = urllib.request.Request(
            self.url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def get(self, path: str) -> dict:
        return self._request("GET", path)

    def post(self, path: str, body: dict) -> dict:
        return self._request("POST", path, body)

    def patch(self, path: str, body: dict) -> dict:
        return self._request("PATCH", path, body)


def _wait(what: str, timeout_s: float, probe, every_s: float = 1.0):
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except (OSError, ValueError, KeyError) as exc:  # not there yet, or a busy API server
            last = exc
        time.sleep(every_s)
    raise TimeoutError(f"waited {timeout_s:.0f} s for {what}" + (f" (last error: {last})" if last else ""))


def _ts(value: str | None) -> float | None:
    """An ISO 8601 timestamp (API, logs) as POSIX seconds."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _trial_log_times(path: Path) -> dict[str, float]:
    """Wall times of a trial's own log lines (trial.log: ``<ISO time> <message>``)."""
    out: dict[str, float] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        stamp, _, message = line.partition(" ")
        key = (
            "start"
            if " starts" in message and message.startswith("trial ")
            else "workload"
            if message.startswith("workload ") and " starts " in message
            else "window_begin"
            if message.startswith("window main begins")
            else "window_end"
            if message.startswith("window main ends")
            else "end"
            if message.startswith("trial ") and " ends: " in message
            else None
        )
        if key and key not in out:
            try:
                out[key] = _ts(stamp)
            except ValueError:
                pass
    return out


def _task_log_leased(home: Path, dag_id: str, run_id: str, task_id: str, map_index: int) -> float | None:
    """Time of the "GPUs ... leased" line in a mapped task's log (Airflow 3 JSON lines)."""
    folder = home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}" / f"map_index={map_index}"
    for log in sorted(folder.glob("attempt=*.log")):
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            if "leased" not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if "GPUs" in str(rec.get("event", "")) and rec.get("timestamp"):
                return _ts(rec["timestamp"])
    return None


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of ``values``, linear between order statistics."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _row(name: str, values: list[float]) -> str:
    v = [x for x in values if x is not None]
    if not v:
        return f"| {name} | – | – | – | – |"
    return f"| {name} | {statistics.median(v):.3f} | {pct(v, 0.1):.3f} | {pct(v, 0.9):.3f} | {max(v):.3f} |"


def measure(args) -> int:
    from gcbench import airflow_local
    from gcbench.plan.loader import load_plan

    root = Path(args.root)
    (root / "plans").mkdir(parents=True, exist_ok=True)
    plan_path = root / "plans" / (Path(args.plan).name if args.plan else "overhead.yaml")
    plan_path.write_text(
        Path(args.plan).read_text(encoding="utf-8")
        if args.plan
        else PLAN.format(trials=args.trials, window_s=args.window_s),
        encoding="utf-8",
    )
    plan = load_plan(plan_path)
    conf = json.loads(args.conf) if args.conf else {}
    for key in [k for k in os.environ if k.startswith("AIRFLOW__")] + ["GCBENCH_DATABASE_URL", "AIRFLOW_HOME"]:
        os.environ.pop(key, None)  # a throw-away stack: the embedded PostgreSQL, the settings `up` writes
    os.environ.update(
        {
            "GCBENCH_HOME": str(root / "home"),
            "GCBENCH_PLANS_DIR": str(root / "plans"),
            "GCBENCH_REPORTS_DIR": str(root / "reports"),
            "GCBENCH_PROJECT_ROOT": str(REPO),
        }
    )
    load_before = os.getloadavg()
    t_up = time.monotonic()
    info = airflow_local.up(port=_free_port(), log=lambda m: print(f"    {m}", file=sys.stderr))
    try:
        up_s = time.monotonic() - t_up
        api = Api(info.url, json.loads(info.password_file.read_text())["admin"])
        dag_id = plan.dag_id
        _wait("the DAG to be parsed", 300, lambda: api.get(f"/api/v2/dags/{dag_id}"), 2.0)
        api.patch(f"/api/v2/dags/{dag_id}", {"is_paused": False})
        run = api.post(f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
        run_id = run["dag_run_id"]
        print(f"    {dag_id} run {run_id}" + (f" {conf}" if conf else ""), file=sys.stderr)
        t_run = time.monotonic()
        cpu0 = _service_cpu_s(info.home)
        state = _wait(
            "the DAG run to finish",
            args.timeout_s or 120 + args.trials * 30,
            lambda: (lambda s: s if s in ("success", "failed") else None)(
                api.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
            ),
            2.0,
        )
        run_s = time.monotonic() - t_run
        cpu1 = _service_cpu_s(info.home)
        cpu = {k: cpu1[k] - cpu0[k] for k in cpu0 if k in cpu1}
        tis = api.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=1000")["task_instances"]
        load_after = os.getloadavg()
        from gcbench.store import db

        with (
            db.connection(
                json.loads((info.home / airflow_local.STATE_FILE).read_text())["env"]["GCBENCH_DATABASE_URL"]
            ) as conn,
            conn.cursor() as cur,
        ):
            cur.execute(
                "SELECT t.trial_id, t.status, t.valid, t.result->'windows'->'main', t.variant "
                "FROM trials t JOIN dag_runs r ON r.id = t.dag_run_id WHERE r.run_id = %s",
                (run_id,),
            )
            trials = cur.fetchall()
    finally:
        if not args.keep_running:
            airflow_local.down(home=info.home, log=lambda m: print(f"    {m}", file=sys.stderr))
    return report(
        args, root, info.home, plan.name, dag_id, run_id, state, tis, trials, up_s, run_s, load_before, load_after, cpu
    )


def _service_cpu_s(home: Path) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each process ``up`` started (itself only)."""
    import psutil

    from gcbench import airflow_local

    out = {}
    for rec in (airflow_local.read_state(home) or {}).get("processes", []):
        try:
            t = psutil.Process(int(rec["pid"])).cpu_times()
            out[rec["name"]] = t.user + t.system
        except psutil.Error:
            pass
    return out


def report(
    args,
    root: Path,
    home: Path,
    plan_name: str,
    dag_id: str,
    run_id: str,
    state: str,
    tis: list[dict],
    trials: list,
    up_s: float,
    run_s: float,
    load_before,
    load_after,
    cpu: dict[str, float],
) -> int:
    from gcbench import config

    runs = [t for t in tis if t["task_id"].startswith("run_trial_") and t.get("start_date") and t.get("end_date")]
    runs.sort(key=lambda t: _ts(t["start_date"]))
    by_outdir = {}
    run_dir = config.run_dir(plan_name, run_id)
    windows = {tid: (w["end_s"] - w["start_s"]) for tid, _, _, w, _ in trials if w}
    variant_of = {tid: variant for tid, _, _, _, variant in trials}
    for tid in windows:
        by_outdir[tid] = _trial_log_times(run_dir / tid / "trial.log")
    # each trial task <-> its trial: the trial's own start lies inside the task's [start, end]
    rows = []
    for ti in runs:
        a, b = _ts(ti["start_date"]), _ts(ti["end_date"])
        match = [tid for tid, lt in by_outdir.items() if lt.get("start") and a <= lt["start"] <= b]
        tid = match[0] if len(match) == 1 else None
        rows.append(
            {
                "ti": ti,
                "start": a,
                "end": b,
                "trial": tid,
                "window": windows.get(tid),
                "variant": variant_of.get(tid),
                "log": by_outdir.get(tid, {}),
                "leased": _task_log_leased(home, dag_id, run_id, ti["task_id"], ti["map_index"]),
                "scheduled": _ts(ti.get("scheduled_when")),
                "queued": _ts(ti.get("queued_when")),
            }
        )
    ok = [r for r in rows if r["window"] is not None]
    beyond = [r["end"] - r["start"] - r["window"] for r in ok]
    gaps, costs = [], []
    for prev, cur in itertools.pairwise(rows):
        gap = cur["start"] - prev["end"]
        gaps.append(gap)
        if cur["window"] is not None:
            costs.append(cur["end"] - cur["start"] - cur["window"] + gap)
    span = rows[-1]["end"] - rows[0]["start"] if rows else float("nan")
    mean_cost = (span - sum(r["window"] for r in ok)) / len(rows) if rows and len(ok) == len(rows) else float("nan")

    def between(r: dict, a: str, b: str) -> float | None:
        x, y = r["at"].get(a), r["at"].get(b)
        return y - x if x is not None and y is not None else None

    for i, r in enumerate(rows):
        r["at"] = {
            "prev_end": rows[i - 1]["end"] if i else None,
            "queued": r["queued"],
            "start": r["start"],
            "leased": r["leased"],
            **{f"trial_{k}": v for k, v in r["log"].items()},
            "end": r["end"],
        }
    median_cost = statistics.median(costs) if costs else float("nan")
    print(
        f"DAG run {state}: {len(runs)} trial tasks, {len(trials)} trials stored "
        f"({sum(1 for t in trials if t[1] == 'ok')} ok, {sum(1 for t in trials if t[2])} valid); "
        f"`gcbench airflow up` {up_s:.0f} s, run {run_s:.0f} s"
    )
    print(
        f"machine: {os.cpu_count()} CPUs, load average (1, 5, 15 min) {load_before[0]:.2f} {load_before[1]:.2f} "
        f"{load_before[2]:.2f} before, {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} after\n"
    )
    what = f"per no-op trial ({args.window_s:g} s window)" if not args.plan else f"per trial of {plan_name}"
    print(f"| {what}, seconds | median | p10 | p90 | max |")
    print("|---|---:|---:|---:|---:|")
    print(_row("measured window", [r["window"] for r in ok]))
    print(_row("task wall time beyond its window", beyond))
    print(_row("gap: previous trial task's end -> this one's start", gaps))
    print(_row("**cost per trial: beyond window + gap**", costs))
    target = (
        ""
        if args.plan
        else (
            f" (target for no-op trials <= {TARGET_COST_S:g} s: {'met' if median_cost <= TARGET_COST_S else 'NOT met'})"
        )
    )
    print(
        f"\ncost per trial: median {median_cost:.3f} s{target}; mean over the run "
        f"((last end - first start - windows) / trials) {mean_cost:.3f} s\n"
    )
    print("| where it goes, seconds | median | p10 | p90 | max |")
    print("|---|---:|---:|---:|---:|")
    phases = [
        ("gap: previous end -> queued (scheduler loop: idle sleep, pool slot)", "prev_end", "queued"),
        ("gap: queued -> task start (LocalExecutor worker, task supervisor)", "queued", "start"),
        ("task start -> GPUs leased (task process: DAG file parse, GPU lease)", "start", "leased"),
        ("GPUs leased -> trial logs its start (trial Python start-up, imports)", "leased", "trial_start"),
        ("trial start -> window begins (sampler start, meter, warm-up, jitter)", "trial_start", "trial_window_begin"),
        ("window ends -> trial ends (sampling tail, energy, result.json)", "trial_window_end", "trial_end"),
        ("trial ends -> task end (process exit, task result and state)", "trial_end", "end"),
    ]
    for name, a, b in phases:
        print(_row(name, [between(r, a, b) for r in rows]))
    if len({r["variant"] for r in rows}) > 1:
        print(
            "\n| per variant (medians), seconds | trials | window | task beyond window | task start -> trial "
            "start | trial start -> workload (sampler, torch import) | workload -> window (model, data, warm-up) "
            "| window end -> trial end | trial end -> task end |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for variant in sorted({r["variant"] for r in rows if r["variant"]}):
            mine = [r for r in rows if r["variant"] == variant]

            def med(values: list) -> str:
                v = [x for x in values if x is not None]
                return f"{statistics.median(v):.2f}" if v else "–"

            print(
                f"| {variant} | {len(mine)} | {med([r['window'] for r in mine])} | "
                f"{med([r['end'] - r['start'] - r['window'] for r in mine if r['window'] is not None])} | "
                f"{med([between(r, 'start', 'trial_start') for r in mine])} | "
                f"{med([between(r, 'trial_start', 'trial_workload') for r in mine])} | "
                f"{med([between(r, 'trial_workload', 'trial_window_begin') for r in mine])} | "
                f"{med([between(r, 'trial_window_end', 'trial_end') for r in mine])} | "
                f"{med([between(r, 'trial_end', 'end') for r in mine])} |"
            )
    if cpu:
        print(
            "\nCPU of Airflow's own processes during the run (not their children), seconds per trial: "
            + ", ".join(f"{k} {v / max(1, len(rows)):.3f}" for k, v in cpu.items())
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "state": state,
                    "trials": len(rows),
                    "median_cost_s": median_cost,
                    "mean_cost_s": mean_cost,
                    "load_before": load_before,
                    "load_after": load_after,
                    "service_cpu_s": cpu,
                    "rows": [
                        {k: v for k, v in r.items() if k != "ti"} | {"map_index": r["ti"]["map_index"]} for r in rows
                    ],
                },
                indent=1,
                default=str,
            )
        )
    return 0 if state == "success" and ok and len(ok) == len(rows) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--window-s", type=float, default=1.2)
    parser.add_argument("--plan", help="run this plan instead of the no-op plan (e.g. plans/smoke.yaml)")
    parser.add_argument("--conf", help="run parameters as JSON, e.g. '{\"repetitions\": 1}'")
    parser.add_argument("--timeout-s", type=float, help="longest wait for the DAG run (default 120 s + 30 s a trial)")
    parser.add_argument("--keep", help="keep GCBENCH_HOME, logs and trial folders in this folder")
    parser.add_argument("--keep-running", action="store_true", help="leave the Airflow of the benchmark running")
    parser.add_argument("--json", help="also write the per-trial figures to this JSON file")
    args = parser.parse_args()
    if args.keep_running and not args.keep:
        parser.error("--keep-running needs --keep DIR (the Airflow it leaves running lives there)")
    args.root = str(Path(args.keep).resolve()) if args.keep else tempfile.mkdtemp(prefix="gcbench-live-")
    try:
        return measure(args)
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(args.root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
