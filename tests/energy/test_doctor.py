"""gcbench doctor: what this machine can measure and why not (gcbench.energy.doctor)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.energy import doctor


def test_machine_without_gpu_rapl_or_docker_says_why_for_each(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    d = doctor.diagnose(rapl_root=str(tmp_path / "none"), docker_check=False)
    assert d["backend"] in ("simulated", "nvml")
    if not d["nvml"]["ok"]:
        assert "nvml" in d["nvml"]["why_not"] and d["gpus"]["why_not"] == "NVML unavailable"
        assert d["backend"] == "simulated"
    assert d["nvidia_smi"] == {"ok": False, "path": None, "why_not": "nvidia-smi not found on PATH"}
    assert d["rapl"]["ok"] is False and d["rapl"]["why_not"].startswith("no RAPL powercap tree")
    text = doctor.format_text(d)
    for name in ("NVML", "nvidia-smi", "RAPL", "Docker", "GPUs", "backend:"):
        assert name in text
    if d["backend"] == "simulated":
        assert "SIMULATED" in text


def test_rapl_permission_denied_is_reported(tmp_path, monkeypatch):
    from gcbench.energy import rapl

    z = tmp_path / "intel-rapl:0"
    z.mkdir()
    (z / "name").write_text("package-0\n")
    (z / "energy_uj").write_text("1\n")

    def denied(path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(rapl, "read_int", denied)
    r = doctor._rapl(str(tmp_path))
    assert r["ok"] is False and r["permission"] == "denied" and "PLATYPUS" in r["why_not"]


def test_docker_engine_unreachable_is_a_finding_not_an_exception(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    r = doctor._docker()
    assert r["ok"] is False and "not reachable" in r["why_not"]


def test_cli_doctor_prints_text_and_json(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    runner = CliRunner()
    res = runner.invoke(app, ["doctor", "--json", "--rapl-root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)  # stderr says which database and home the command uses
    assert set(d) == {
        "nvml",
        "nvidia_smi",
        "rapl",
        "node",
        "docker",
        "gpus",
        "backend",
        "backends",
        "backend_why",
        "workload_kinds",
        "preprocessors",
    }
    assert {"tinylm", "command", "container", "python"} <= set(d["workload_kinds"])
    assert [b["name"] for b in d["backends"] if b["kind"] == "gpu"][-1] == "simulated"  # last in auto order
    assert d["backend"] == "simulated" and "nvidia-smi not found on PATH" in d["backend_why"]
    res = runner.invoke(app, ["doctor", "--rapl-root", str(tmp_path)])
    assert res.exit_code == 0 and "RAPL" in res.output and "backend:" in res.output
    assert "workload kinds: command, container" in res.output
    assert "preprocessors (path: external-<name>):\n  go: " in res.output and sorted(d["preprocessors"]) == [
        "go",
        "rust",
    ]
    assert d["node"]["ok"] is None and d["node"]["why_not"].startswith("no node meter configured")
    assert "--  node (BMC)    no node meter configured: a plan's energy.node names the BMC" in res.output
