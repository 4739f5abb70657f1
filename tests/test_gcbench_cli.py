"""The gcbench command line: exit codes and one-line errors, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def gcbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gcbench.cli", *args], capture_output=True, text=True, timeout=120)


def test_usage_errors_exit_2_without_traceback():
    bad_runner = gcbench("run", str(REPO / "plans" / "smoke.yaml"), "--runner", "dockr")
    assert bad_runner.returncode == 2 and "Invalid value for '--runner'" in bad_runner.stderr
    unknown = gcbench("bogus")
    assert unknown.returncode == 2 and "No such command 'bogus'" in unknown.stderr
    for proc in (bad_runner, unknown):
        assert "Traceback" not in proc.stderr


def test_bad_workload_setting_is_a_plan_error(tmp_path):
    plan = tmp_path / "p.yaml"
    plan.write_text("name: p\nworkloads:\n  - name: c\n    kind: h2d\n    matrix: {memory: [pinned, pinnned]}\n")
    proc = gcbench("plan", "validate", str(plan))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"error: {plan}:5: workloads[0].matrix.memory: "
                                   "h2d setting memory must be pinned or pageable, got 'pinnned'")


def test_expand_json_lists_every_trial():
    import json

    proc = gcbench("plan", "expand", str(REPO / "plans" / "smoke.yaml"), "--json")
    trials = json.loads(proc.stdout)
    assert proc.returncode == 0 and len(trials) == 21 and len({t["trial_id"] for t in trials}) == 21


def test_piped_expand_keeps_ids_and_variants_whole():
    proc = gcbench("plan", "expand", str(REPO / "plans" / "regime.yaml"))
    assert "tinylm[mode=infer,path=external-rust]" in proc.stdout and "…" not in proc.stdout
