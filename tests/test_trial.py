"""The trial entry point: result.json, derived figures, unknown stays unknown."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gcbench.plan import expand, plan_from_text
from gcbench.trial import derive_metrics

PLAN = """\
name: trialtest
window: {seconds: 1.1}
energy: {backend: simulated, codecarbon: true}
workloads: [{name: noop, kind: noop}]
"""


def test_derive_metrics_per_token_and_per_gb():
    energy = {
        "main": {"duration_s": 2.0, "gpu_energy_j": 600.0, "cpu_energy_j": None, "gpu": [{"idle_power_w": 60.0}]},
        "tokenize": {"duration_s": 0.5, "gpu_energy_j": 30.0, "cpu_energy_j": None},
    }
    m = derive_metrics({"tokens": 3000, "bytes": 4e9}, energy, {})
    assert m["tokens_per_s"] == 1500 and m["j_per_token"] == m["gpu_j_per_token"] == 0.2
    assert m["e2e_j_per_token"] is None  # CPU energy unknown: end to end unknown, never computed with 0
    assert m["total_energy_j"] is None and m["energy_scope"] == "gpu"
    assert m["energy_kwh"] == pytest.approx(600 / 3.6e6)
    assert m["gb_per_s"] == 2.0 and m["gpu_j_per_gb"] == 150.0 and m["cpu_j_per_gb"] is None
    assert m["gpu_energy_above_idle_j"] == pytest.approx(600 - 60 * 2.0)
    assert m["tokenize_duration_s"] == 0.5


def test_derive_metrics_end_to_end_with_cpu_energy():
    energy = {
        "main": {"duration_s": 2.0, "gpu_energy_j": 600.0, "cpu_energy_j": 100.0, "gpu": []},
        "tokenize": {"duration_s": 1.0, "gpu_energy_j": 50.0, "cpu_energy_j": 50.0},
    }
    m = derive_metrics({"tokens": 1000}, energy, {})
    assert m["e2e_j_per_token"] == pytest.approx(0.8) and m["total_energy_j"] == 700.0


def test_noop_trial_writes_result_samples_and_codecarbon_reason(tmp_path):
    spec = expand(plan_from_text(PLAN))[0]
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.to_json())
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.trial", str(spec_path), str(out)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "ok" and result["trial_id"] == spec.trial_id
    assert result["metrics"]["duration_s"] >= 1.1
    main = result["energy"]["main"]
    assert main["simulated"] is True and main["gpu"][0]["method"] == "simulated"
    assert main["cpu_energy_j"] is None and main["cpu_reason"]
    # 300 W while the window is open (simulated device), within the counter's resolution
    assert main["gpu_energy_j"] == pytest.approx(300 * result["metrics"]["duration_s"], rel=0.02)
    assert result["metrics"]["codecarbon_energy_j"] is None
    assert "codecarbon" in result["metrics"]["codecarbon_reason"].lower()
    lines = (out / "samples.csv").read_text().splitlines()
    assert lines[0].startswith("t_s,device,source") and len(lines) > 15
    assert all(",simulated," in line for line in lines[1:] if ",gpu0," in line)
    # the log says where the time before the window went; the sampler computed the
    # cross-check's tail of the simulated device instead of waiting for it
    log = [line.split(" ", 1)[1] for line in (out / "trial.log").read_text().splitlines()]
    assert [m.split(" ")[0] for m in log] == ["trial", "CPUs", "workload", "window", "window", "trial"]
    assert log[1].startswith("CPUs ") and "threads: torch intra-op" in log[1]
    assert log[2].startswith("workload noop starts at t=") and "torch" not in log[2]
    assert result["environment"]["sampler_stats"]["simulated_tail_s"] > 0.9
    assert main["gpu"][0]["cross_check_verdict"] == "ok"
    assert (out / "samples.sampler.log").exists()
    # what ran, at the top of result.json: every setting as requested, none out of effect
    assert result["settings_effective"] == {"tick_s": 0.01, "note": "", "kill_self_after_s": None, "jitter_s_sd": 0.0}
    assert result["settings_not_in_effect"] == {}
    assert "settings_effective" not in result["counts"] and "settings_effective" not in result["metrics"]


def test_trial_skipped_for_a_setting_it_cannot_apply_names_that_setting(tmp_path):
    """A power cap on a machine without a GPU (or without CAP_SYS_ADMIN) skips the trial;
    result.json says which requested setting was not in effect, for the report."""
    plan = plan_from_text(
        "name: capskip\nenergy: {backend: simulated}\nworkloads:\n  - name: r\n    kind: resnet_cifar\n"
        "    settings: {dataset: synthetic, synthetic_train_per_batch: 16, synthetic_test: 16, global_batch: 16,\n"
        "               train_samples: 16, power_cap_w: 250}\n"
    )
    spec = expand(plan)[0]
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.to_json())
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.trial", str(spec_path), str(out)], capture_output=True, text=True, timeout=300
    )
    result = json.loads((out / "result.json").read_text())
    assert proc.returncode == 3 and result["status"] == "skipped", proc.stdout + proc.stderr
    assert list(result["settings_not_in_effect"]) == ["power_cap_w"]
    assert result["settings_not_in_effect"]["power_cap_w"].startswith("250 W cap not applied: ")
    assert result["error"] in result["settings_not_in_effect"]["power_cap_w"]


def test_unwritable_output_folder_fails_before_the_window(tmp_path):
    if os.geteuid() == 0:
        target = "/proc/gcbench-cannot-write-here"
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        target = str(ro / "out")
    spec = expand(plan_from_text(PLAN))[0]
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.to_json())
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.trial", str(spec_path), target], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1 and "is not writable" in proc.stderr and "window" not in proc.stdout


def test_spec_with_a_forged_id_is_refused(tmp_path):
    spec = expand(plan_from_text(PLAN))[0]
    data = json.loads(spec.to_json())
    data["trial_id"] = "0" * 16
    (tmp_path / "spec.json").write_text(json.dumps(data))
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.trial", str(tmp_path / "spec.json"), str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "does not match its spec" in proc.stderr


def test_trial_records_progress_and_stability_of_its_window(tmp_path):
    spec = expand(plan_from_text(PLAN.replace(", codecarbon: true", "")))[0]
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.to_json())
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.trial", str(spec_path), str(out)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((out / "result.json").read_text())
    window = result["windows"]["main"]
    points = result["progress"]["main"]["points"]
    # noop in a seconds window: a 10 ms sleep per step, each step's end recorded inside the window
    assert len(points) == result["counts"]["steps"] == result["progress"]["main"]["steps"] > 50
    assert window["start_s"] < points[0][0] and points[-1][0] <= window["end_s"]
    assert [p[1] for p in points] == list(range(1, len(points) + 1))
    stab = result["stability"]["main"]
    assert stab["judged"] and stab["steps"] == len(points) and stab["drift_ratio"] < 1.5
    m = result["metrics"]
    assert m["window_steps"] == len(points) and m["window_steps_per_s"] == pytest.approx(
        len(points) / (window["end_s"] - window["start_s"])
    )
    assert m["stability_halves_ratio"] == stab["halves_ratio"]
    # the sampler went on reading power for the cross-check's reference after the window
    gpu_t = [
        float(line.split(",")[0]) for line in (out / "samples.csv").read_text().splitlines()[1:] if ",gpu0," in line
    ]
    assert max(gpu_t) >= window["end_s"] + 1.07
    assert result["energy"]["main"]["gpu"][0]["cross_check_verdict"] == "ok"


def test_derive_metrics_with_a_node_meter_takes_the_node_figure_alone_for_kwh():
    """The node figure contains GPU, CPU and DRAM: energy_kwh (the CO2e basis) is the node's,
    never node + parts; total_energy_j stays GPU + CPU, as its name says."""
    node = {"device": "node", "energy_j": 1500.0, "method": "ipmi-node-power-integration", "scope": "node"}
    main = {"duration_s": 2.0, "gpu_energy_j": 600.0, "cpu_energy_j": 100.0, "gpu": [], "node": node}
    m = derive_metrics({}, {"main": {**main, "node_energy_j": 1500.0}}, {})
    assert m["energy_scope"] == "node" and m["node_energy_j"] == 1500.0
    assert m["energy_kwh"] == pytest.approx(1500.0 / 3.6e6)
    assert m["total_energy_j"] == 700.0 and m["node_method"] == "ipmi-node-power-integration"
    lost = {**node, "energy_j": None, "reason": "too few BMC readings: ..."}
    m = derive_metrics({}, {"main": {**main, "node": lost, "node_energy_j": None}}, {})
    assert m["energy_kwh"] is None and m["energy_scope"] == "node"  # never the parts in the node's place
    assert m["node_reason"] == "too few BMC readings: ..."


def test_derive_metrics_of_a_module_counter_is_module_energy():
    main = {"duration_s": 2.0, "gpu_energy_j": None, "cpu_energy_j": None, "module_energy_j": 900.0, "gpu": []}
    m = derive_metrics({}, {"main": main}, {})
    assert m["energy_scope"] == "module" and m["energy_kwh"] == pytest.approx(900.0 / 3.6e6)
