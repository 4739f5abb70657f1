"""The examples of docs/your-own-workload.md, run as a new user runs them: ``gcbench run PLAN``.

* ``examples/command``: a C program (kind: command) that marks its window and counts
  items on the control channel;
* ``examples/hf-causal-lm``: a third-party package that registers the ``hf_causal_lm``
  kind through its entry point (``make examples`` installs it): J/token of prefill and of
  decode as two named windows.

Each runs its plan's DAG in-process against a real PostgreSQL and writes its report
(SIMULATED on a machine without a GPU), with intervals where the repetitions allow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _run(plan: Path, tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "AIRFLOW_HOME": str(tmp / "airflow")}
    return subprocess.run(
        [sys.executable, "-m", "gcbench.cli", "run", str(plan)], capture_output=True, text=True, env=env, timeout=900
    )


def _trials(url: str):
    import psycopg2

    conn = psycopg2.connect(url)
    with conn.cursor() as cur:
        cur.execute("SELECT t.trial_id, t.variant, t.status, t.valid, t.reasons, t.simulated FROM gcbench.trials t")
        trials = cur.fetchall()
        cur.execute(
            "SELECT t.variant, m.name, m.value, m.text_value FROM gcbench.metrics m JOIN gcbench.trials t "
            "ON t.id = m.trial_pk"
        )
        metrics = cur.fetchall()
    conn.close()
    return trials, metrics


def test_the_c_program_example_is_measured_and_reported(gcbench_env, pg_url):
    binary = REPO / "examples" / "command" / "marked"
    if not binary.exists():
        subprocess.run(["make", "-s", "-C", str(binary.parent)], check=True)
    proc = _run(REPO / "examples" / "command" / "plan.yaml", gcbench_env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    trials, metrics = _trials(pg_url)
    assert len(trials) == 6
    assert all(status == "ok" and simulated for _, _, status, _, _, simulated in trials)
    valid = [t for t in trials if t[3]]
    assert len(valid) >= 5, [t[4] for t in trials if not t[3]]
    units = {(v, n): t for v, n, _, t in metrics if n == "unit"}
    assert set(units.values()) == {"items"}
    j_per_item = [val for _, n, val, _ in metrics if n == "gpu_j_per_unit"]
    assert len(j_per_item) == 6 and all(0 < j < 1e-3 for j in j_per_item)
    report = next((gcbench_env / "reports").rglob("report.md")).read_text()
    assert "SIMULATED" in report and "marked-c[per_step=20000]" in report
    assert "GPU J/item" in report and "J/unit" not in report  # the program's own unit (items)


def test_the_hugging_face_example_measures_prefill_and_decode_as_two_windows(gcbench_env, pg_url):
    pytest.importorskip("transformers", reason="make examples installs the example package and transformers")
    from gcbench import kinds

    assert "hf_causal_lm" in kinds.names(), "pip install -e examples/hf-causal-lm (make examples)"
    proc = _run(REPO / "examples" / "hf-causal-lm" / "plan.yaml", gcbench_env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    trials, metrics = _trials(pg_url)
    assert len(trials) == 6 and all(t[2] == "ok" for t in trials), [t[4] for t in trials]
    by = {}
    for variant, name, value, _ in metrics:
        by.setdefault(name, {}).setdefault(variant, []).append(value)
    for name in ("prefill_j_per_token", "decode_j_per_token", "prefill_tokens_per_s", "decode_tokens_per_s"):
        assert set(by[name]) == {"gpt2-tiny[batch_size=4]", "gpt2-tiny[batch_size=8]"}, name
        assert all(v > 0 for vs in by[name].values() for v in vs)
    # decoding one token per step costs more energy per token than a prompt pass
    for variant, values in by["decode_j_per_token"].items():
        assert min(values) > max(by["prefill_j_per_token"][variant])
    out = next((gcbench_env / "reports").rglob("report.md"))
    text = out.read_text()
    assert "decode GPU J/token" in text and "prefill GPU J/token" in text
    summary = json.loads((out.parent / "report.json").read_text())
    assert summary["simulated"] is True
