"""The smoke plan's DAG, run with dag.test() against a real PostgreSQL server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_smoke_dag_stores_every_trial_and_writes_the_report(gcbench_env, pg_url):
    tmp = gcbench_env
    status_path = tmp / "status.json"
    env = {**os.environ, "AIRFLOW_HOME": str(tmp / "airflow")}
    # the shipped plan: CPU contention only flags by default (the rule is proven in tests/energy/test_cpuset.py)
    plan_path = REPO / "plans" / "smoke.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.factory.testrun", str(plan_path), str(status_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert status_path.exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
    status = json.loads(status_path.read_text())
    assert status["state"] == "success", status
    assert all(state == "success" for state in status["tasks"].values()), status["tasks"]

    from gcbench.plan import expand, load_plan

    plan = load_plan(REPO / "plans" / "smoke.yaml")
    expected_ids = {s.trial_id for s in expand(plan)}
    import psycopg2

    conn = psycopg2.connect(pg_url)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT trial_id, kind, status, valid, simulated, samples_count, reasons, flags FROM gcbench.trials"
        )
        rows = cur.fetchall()
        assert {r[0] for r in rows} == expected_ids and len(rows) == len(expected_ids) == 31

        # every trial ran and was validated; the only reason a trial may be invalid here is the
        # throughput-stability rule: on a machine shared with other work a CPU-bound window can
        # be starved (h2d copies swung 5-13x between a window's halves on a 2-core machine at
        # load 10), and such a window is invalid by design (docs/measurement.md), as is one whose CPUs
        # other processes took (the contention rule, gcbench.energy.cpuset; only flagged here: see above)
        def starved(r):
            return (
                r[3] is False and r[6] and all(str(x).startswith(("unstable window", "CPU contention")) for x in r[6])
            )

        assert all(r[2] == "ok" and (r[3] is True or starved(r)) and r[4] is True for r in rows), "\n".join(
            f"{r[0]} {r[1]} {r[2]} valid={r[3]}: {r[6]}" for r in rows if not (r[2] == "ok" and r[3] is True)
        )
        n_valid = sum(r[3] is True for r in rows)
        assert all(r[5] >= 10 for r in rows)
        cur.execute("SELECT count(*) FROM gcbench.samples")
        assert cur.fetchone()[0] == sum(r[5] for r in rows)
        # every trial's main window recorded its progress (steps and their times)
        cur.execute("SELECT count(DISTINCT trial_pk) FROM gcbench.progress WHERE window_key = 'main'")
        assert cur.fetchone()[0] == len(rows)
        cur.execute(
            "SELECT t.kind, m.name, min(m.value), max(m.value) FROM gcbench.metrics m "
            "JOIN gcbench.trials t ON t.id = m.trial_pk GROUP BY t.kind, m.name"
        )
        metrics = {(k, n): (lo, hi) for k, n, lo, hi in cur.fetchall()}
        cur.execute("SELECT html_path FROM gcbench.reports")
        (html_path,) = cur.fetchone()
    conn.close()
    # real computation: tokens processed, bytes copied, images trained on, time measured
    assert metrics[("tinylm", "tokens")][0] > 0 and metrics[("tinylm", "j_per_token")][0] > 0
    assert metrics[("h2d", "bytes")][0] >= 4 * 2**20 and metrics[("h2d", "gb_per_s")][0] > 0
    assert metrics[("resnet_cifar", "samples")] == (64.0, 64.0)
    assert 0 <= metrics[("resnet_cifar", "accuracy")][0] <= 1
    assert metrics[("noop", "duration_s")][0] >= 1.2
    assert metrics[("tinylm", "co2e_kg")][0] > 0
    # the GPU's busy share of each window: on the simulated device, the trial's own busy time
    assert 0 < metrics[("tinylm", "gpu_busy_share")][0] <= metrics[("tinylm", "gpu_busy_share")][1] <= 1
    assert metrics[("tinylm", "loader_workers")] == (2.0, 2.0)  # the torch path through DataLoader workers
    # every trial measured what others took of its CPUs (a share of its core-seconds)
    assert all(0 <= v <= 1 for kind in ("tinylm", "h2d", "noop") for v in metrics[(kind, "cpu_contention_share")])

    report = Path(status["report"])
    assert report == Path(html_path) and report.exists()
    assert report.parent == tmp / "reports" / "smoke" / report.parent.name
    html = report.read_text()
    for section in (
        "How this was measured",
        "SIMULATED",
        "Headlines",
        "CO2e",
        "tinylm-infer[path=torch]",
        "GPU busy share (%)",
        "GPU idle share (%)",
    ):
        assert section in html
    md = report.with_name("report.md").read_text()
    assert "| **SIMULATED** resnet |" in md or "resnet" in md
    assert (report.parent / "trials.csv").read_text().count("\n") == 32

    # the CLI writes the same run's report again and prints its path
    cli = subprocess.run(
        [sys.executable, "-m", "gcbench.cli", "report", status["run_id"]],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert cli.stdout.split() == [str(report), str(report.with_name("report.md"))]
    # --paper adds the study's headline tables beside it
    paper = subprocess.run(
        [sys.executable, "-m", "gcbench.cli", "report", status["run_id"], "--paper"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert paper.returncode == 0, paper.stderr[-2000:]
    assert paper.stdout.split() == [
        str(report),
        str(report.with_name("report.md")),
        str(report.with_name("paper.md")),
        str(report.with_name("paper.tex")),
    ]
    tex = report.with_name("paper.tex").read_text()
    assert "\\toprule" in tex and "\\textbf{SIMULATED}" in tex and "GPU energy per token" in tex
    assert "GPU busy" in tex and "GPU busy share (%)" in report.with_name("paper.md").read_text()
    missing = subprocess.run(
        [sys.executable, "-m", "gcbench.cli", "report", "no-such-run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert missing.returncode == 1 and missing.stderr.strip().splitlines()[-1] == "error: no stored run 'no-such-run'"
    runs = subprocess.run(
        [sys.executable, "-m", "gcbench.cli", "runs"], capture_output=True, text=True, env=env, timeout=300
    )
    assert runs.returncode == 0
    row = next(line for line in runs.stdout.splitlines() if status["run_id"] in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:2] == ["smoke", status["run_id"]]
    assert cells[3:] == ["31", str(n_valid), str(31 - n_valid), "0", "0", str(report)]
