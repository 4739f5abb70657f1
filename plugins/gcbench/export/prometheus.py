"""Prometheus / OpenMetrics metrics of GC-Bench: live power and energy of running trials,
and the latest figures of each plan's groups (``gcbench metrics serve``, a scrape endpoint).

Exposed (``prometheus_client``, the ``export`` extra), read afresh at every scrape:

* ``gcbench_trial_power_w{plan,variant,trial_id,device,source,host}``: the newest power
  sample of each running trial (one whose folder under ``$GCBENCH_HOME/runs`` has samples
  written in the last :data:`LIVE_S` seconds and no result.json yet), W;
* ``gcbench_trial_energy_j{...}``: the device's energy since the trial's first sample, J
  (counter difference; integrated power where the backend has no counter);
* ``gcbench_trial_simulated{...}``: 1 when the samples come from the simulated device;
* ``gcbench_group_median{plan,variant,metric,unit,gpu,host}``: the median over the valid
  trials of each group in the plan's latest stored run, per metric (the primary metric,
  GPU and CPU energy, duration, CO2e), in the metric's unit;
* ``gcbench_group_valid_trials{plan,variant}``: valid trials behind those medians.

Labels carry the plan, variant, GPU (model, ``simulated`` for the simulated device) and
host, so a Grafana panel can filter by any of them (``deploy/grafana/gcbench.json``).
A scrape never fails for a missing database: the live metrics are still served and
``gcbench_up{part="database"}`` is 0.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LIVE_S = 30.0
"""A trial folder whose samples.csv changed within this many seconds and that has no
result.json is a running trial."""

GROUP_METRICS = ("j_per_token", "gpu_j_per_gb", "gpu_energy_j", "cpu_energy_j", "duration_s", "co2e_kg")
"""Metrics whose group medians are exported (names carry the unit)."""

UNITS = {
    "j_per_token": "J/token",
    "gpu_j_per_gb": "J/GB",
    "gpu_energy_j": "J",
    "cpu_energy_j": "J",
    "duration_s": "s",
    "co2e_kg": "kgCO2e",
}


def _tail_rows(path: Path, max_bytes: int = 65536) -> tuple[list[str], list[list[str]]]:
    """The header and the last complete rows of a samples.csv (reads at most ``max_bytes`` of its end)."""
    with path.open("rb") as f:
        header = f.readline().decode("utf-8", "replace").strip().split(",")
        size = f.seek(0, os.SEEK_END)
        start = max(len(",".join(header)) + 1, size - max_bytes)
        f.seek(start)
        chunk = f.read().decode("utf-8", "replace")
    lines = chunk.splitlines()
    if start > len(",".join(header)) + 1 and lines:
        lines = lines[1:]  # the first line may be cut
    if chunk and not chunk.endswith("\n") and lines:
        lines = lines[:-1]  # being written
    return header, [r for r in csv.reader(lines) if len(r) == len(header)]


def _first_row(path: Path) -> dict[str, str] | None:
    with path.open(encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        return next(reader, None)


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def live_trials(runs_root: Path, now: float | None = None) -> Iterator[dict[str, Any]]:
    """Per running trial and device: labels and its newest ``power_w`` and ``energy_j``."""
    now = time.time() if now is None else now
    host = socket.gethostname()
    for samples in runs_root.glob("*/*/*/samples.csv"):
        folder = samples.parent
        try:
            if now - samples.stat().st_mtime > LIVE_S or (folder / "result.json").exists():
                continue
            spec = json.loads((folder / "spec.json").read_text(encoding="utf-8"))
            header, rows = _tail_rows(samples)
            first = _first_row(samples)
        except (OSError, ValueError):
            continue
        latest: dict[str, dict[str, str]] = {}
        for row in rows:
            rec = dict(zip(header, row, strict=True))
            latest[rec.get("device", "")] = rec
        for device, rec in sorted(latest.items()):
            if device.startswith("cpu") or not device:
                continue
            base = _num(first.get("energy_j")) if first and first.get("device") == device else None
            energy = _num(rec.get("energy_j"))
            yield {
                "plan": str(spec.get("plan", "")),
                "variant": str(spec.get("variant", "")),
                "trial_id": str(spec.get("trial_id", folder.name)),
                "device": device,
                "source": rec.get("source", ""),
                "host": host,
                "power_w": _num(rec.get("power_w")),
                "energy_j": energy - base if energy is not None and base is not None else None,
                "simulated": rec.get("source") == "simulated",
            }


def group_medians(conn) -> list[dict[str, Any]]:
    """Per plan's latest stored run, per group and metric of :data:`GROUP_METRICS`: the
    median over valid trials, their number, the GPU model(s) and host(s)."""
    with conn.cursor() as cur:
        cur.execute(
            "WITH latest AS (SELECT DISTINCT ON (plan_name) id, plan_name FROM dag_runs "
            "                ORDER BY plan_name, coalesce(logical_date, created_at) DESC, id DESC) "
            "SELECT l.plan_name, t.variant, m.name, percentile_cont(0.5) WITHIN GROUP (ORDER BY m.value), "
            "       count(*), string_agg(DISTINCT coalesce(CASE WHEN t.simulated THEN 'simulated' END, "
            "           t.result #>> '{environment,gpus,0,name}', 'unknown'), ','), "
            "       string_agg(DISTINCT coalesce(t.result #>> '{environment,hostname}', 'unknown'), ',') "
            "FROM latest l JOIN trials t ON t.dag_run_id = l.id JOIN metrics m ON m.trial_pk = t.id "
            "WHERE t.valid IS TRUE AND t.status = 'ok' AND m.value IS NOT NULL AND m.name = ANY(%s) "
            "GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
            (list(GROUP_METRICS),),
        )
        rows = cur.fetchall()
    conn.commit()
    return [
        {
            "plan": p,
            "variant": v,
            "metric": m,
            "unit": UNITS.get(m, ""),
            "median": float(med),
            "n": int(n),
            "gpu": gpu or "unknown",
            "host": host or "unknown",
        }
        for p, v, m, med, n, gpu, host in rows
    ]


class GCBenchCollector:
    """A ``prometheus_client`` collector reading trial folders and the results database at each scrape."""

    def __init__(self, runs_root: Path, database_url: str | None = None):
        self.runs_root = Path(runs_root)
        self.database_url = database_url

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        labels = ["plan", "variant", "trial_id", "device", "source", "host"]
        power = GaugeMetricFamily("gcbench_trial_power_w", "Newest power sample of a running trial (W)", labels=labels)
        energy = GaugeMetricFamily(
            "gcbench_trial_energy_j", "Energy of a running trial's device since its first sample (J)", labels=labels
        )
        sim = GaugeMetricFamily(
            "gcbench_trial_simulated", "1: the samples come from the simulated device", labels=labels
        )
        for t in live_trials(self.runs_root):
            values = [t[k] for k in labels]
            if t["power_w"] is not None:
                power.add_metric(values, t["power_w"])
            if t["energy_j"] is not None:
                energy.add_metric(values, t["energy_j"])
            sim.add_metric(values, 1.0 if t["simulated"] else 0.0)
        yield from (power, energy, sim)
        up = GaugeMetricFamily("gcbench_up", "1: this part of the exporter could be read", labels=["part"])
        up.add_metric(["trials"], 1.0)
        median = GaugeMetricFamily(
            "gcbench_group_median",
            "Median over the valid trials of a group in the plan's latest stored run (unit in the label)",
            labels=["plan", "variant", "metric", "unit", "gpu", "host"],
        )
        n_valid = GaugeMetricFamily(
            "gcbench_group_valid_trials",
            "Valid trials of a group in the plan's latest stored run",
            labels=["plan", "variant"],
        )
        try:
            from gcbench.store import db

            with db.connection(self.database_url) as conn:
                rows = group_medians(conn)
            up.add_metric(["database"], 1.0)
        except Exception:  # noqa: BLE001 - a scrape serves what it can; gcbench_up says what it could not
            rows = []
            up.add_metric(["database"], 0.0)
        seen: dict[tuple[str, str], int] = {}
        for r in rows:
            median.add_metric([r["plan"], r["variant"], r["metric"], r["unit"], r["gpu"], r["host"]], r["median"])
            seen[(r["plan"], r["variant"])] = max(seen.get((r["plan"], r["variant"]), 0), r["n"])
        for (plan, variant), n in sorted(seen.items()):
            n_valid.add_metric([plan, variant], float(n))
        yield from (median, n_valid, up)


def serve(port: int, addr: str = "127.0.0.1", runs_root: Path | None = None, database_url: str | None = None):
    """Start the scrape endpoint in a background thread; returns ``(server, thread)``.

    Raises:
        ImportError: ``prometheus_client`` is not installed (``pip install 'gcbench[export]'``).
    """
    from prometheus_client import CollectorRegistry, start_http_server

    from gcbench import config

    registry = CollectorRegistry()
    registry.register(GCBenchCollector(runs_root or config.home() / "runs", database_url))
    return start_http_server(port, addr=addr, registry=registry)
