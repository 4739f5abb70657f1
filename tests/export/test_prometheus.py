"""The Prometheus endpoint (``gcbench metrics serve``) scraped over HTTP and parsed with
prometheus_client's own parser: live power and energy of a trial while it runs (a real
dag.test() run of a no-op plan on the simulated device), the latest group medians from the
results database, and the Grafana dashboard that reads them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "gcbench.json"

if os.environ.get("GCBENCH_REQUIRE_MLFLOW"):  # make test-export (and so CI): the export extra must be there
    import prometheus_client
else:
    prometheus_client = pytest.importorskip(
        "prometheus_client", reason="the export extra: pip install 'gcbench[export]'"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[str, list]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode("utf-8")
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


@pytest.mark.integration
@pytest.mark.slow
def test_a_running_trial_is_scraped_live_and_its_groups_after_the_run(gcbench_env, pg_url):
    from gcbench.export.prometheus import serve

    plan = gcbench_env / "prom.yaml"
    plan.write_text(
        "name: prom\ndevices: [0]\nrepetitions: 1\nwindow: {seconds: 8}\nenergy: {backend: simulated}\n"
        "workloads:\n  - {name: idle, kind: noop}\n"
    )
    port = _free_port()
    server, thread = serve(port, runs_root=gcbench_env / "home" / "runs", database_url=pg_url)
    try:
        env = {**os.environ, "AIRFLOW_HOME": str(gcbench_env / "airflow")}
        status_path = gcbench_env / "status.json"
        proc = subprocess.Popen(
            [sys.executable, "-m", "gcbench.factory.testrun", str(plan), str(status_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )
        live = []
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            samples = _scrape(port)
            live = [s for s in samples.get("gcbench_trial_power_w", []) if s.labels.get("plan") == "prom"]
            if live:
                break
            time.sleep(0.5)
        assert live, "no live power scraped while the trial ran"
        (sample,) = live
        assert sample.labels["variant"] == "idle" and sample.labels["device"] == "gpu0"
        assert sample.labels["source"] == "simulated" and sample.labels["host"] == socket.gethostname()
        assert 0 < sample.value < 1000  # W, the simulated device's model
        samples = _scrape(port)
        (sim,) = [s for s in samples["gcbench_trial_simulated"] if s.labels["plan"] == "prom"]
        assert sim.value == 1.0
        out, _ = proc.communicate(timeout=300)
        assert json.loads(status_path.read_text())["state"] == "success", out.decode()[-3000:]
        samples = _scrape(port)
        assert not [s for s in samples.get("gcbench_trial_power_w", []) if s.labels.get("plan") == "prom"]
        medians = {s.labels["metric"]: s for s in samples["gcbench_group_median"] if s.labels["plan"] == "prom"}
        assert medians["duration_s"].value == pytest.approx(8.0, rel=0.05)
        assert medians["duration_s"].labels["unit"] == "s" and medians["duration_s"].labels["gpu"] == "simulated"
        assert medians["gpu_energy_j"].value > 0 and medians["gpu_energy_j"].labels["unit"] == "J"
        assert {s.labels["part"]: s.value for s in samples["gcbench_up"]} == {"trials": 1.0, "database": 1.0}
    finally:
        server.shutdown()
        server.server_close()


def test_an_unreachable_database_is_reported_not_a_failed_scrape(tmp_path):
    from gcbench.export.prometheus import serve

    port = _free_port()
    server, _ = serve(port, runs_root=tmp_path, database_url="postgresql://nobody@127.0.0.1:1/none?connect_timeout=1")
    try:
        samples = _scrape(port)
        assert {s.labels["part"]: s.value for s in samples["gcbench_up"]} == {"trials": 1.0, "database": 0.0}
    finally:
        server.shutdown()
        server.server_close()


def test_the_grafana_dashboard_loads_and_reads_only_exported_metrics():
    dash = json.loads(DASHBOARD.read_text())
    for key in ("uid", "title", "schemaVersion", "panels", "templating"):
        assert key in dash
    assert isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36
    exported = {
        "gcbench_trial_power_w",
        "gcbench_trial_energy_j",
        "gcbench_trial_simulated",
        "gcbench_group_median",
        "gcbench_group_valid_trials",
        "gcbench_up",
    }
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    import re

    for panel in dash["panels"]:
        assert {"type", "title", "gridPos", "targets"} <= panel.keys()
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        for target in panel["targets"]:
            names = set(re.findall(r"\bgcbench_[a-z_]+", target["expr"]))
            assert names and names <= exported, target["expr"]
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert variables == {"datasource", "plan", "host"}
