"""C12: a power cap never outlives its trial, whatever ends it, and every trial checks
the GPU's limit before it starts (fixtures/cases/round3/C12-leftover-power-cap).

The fake pynvml of the case keeps one GPU's limit in a state file, as the driver keeps
it beyond the process that set it (default 700 W, range 200-700 W). Trials run as real
processes of ``python -m gcbench.trial`` (through the local runner or by hand) and are
stopped the ways a trial is stopped: the runner's time limit, SIGTERM (``docker stop``),
SIGINT, SIGHUP, SIGKILL.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gcbench.energy.powercap import POWER_CAP_FILE, LeftoverCapError, TrialPowerCap
from gcbench.factory.local import run_local, write_spec
from gcbench.plan import expand, plan_from_text
from gcbench.plan.loader import load_plan

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "round3" / "C12-leftover-power-cap"
FAKE = CASE / "fakenvml"
PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


@pytest.fixture
def gpu(tmp_path, monkeypatch):
    """The case's fake GPU: state file at 700 W, fake pynvml first on the trial's path."""
    state = tmp_path / "gpu_state.json"
    state.write_text('{"limit_mw": 700000, "default_mw": 700000}')
    monkeypatch.setenv("FAKE_NVML_STATE", str(state))
    monkeypatch.setenv("PYTHONPATH", f"{FAKE}{os.pathsep}{PLUGINS}")
    return state


def limit_w(state: Path) -> float:
    return json.loads(state.read_text())["limit_mw"] / 1000


def noop_spec(cap_w=None, seconds=30.0, name="c12"):
    settings = "" if cap_w is None else f"\n    settings: {{power_cap_w: {cap_w}}}"
    plan = plan_from_text(
        f"name: {name}\ndevices: [0]\nwindow: {{seconds: {seconds}}}\nenergy: {{backend: simulated}}\n"
        f"workloads:\n  - name: w\n    kind: noop{settings}\n"
    )
    return expand(plan)[0]


def start_trial(spec, outdir: Path) -> subprocess.Popen:
    """The trial process by hand (no runner that could restore anything afterwards)."""
    spec_path = write_spec(spec, outdir)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "gcbench.trial", str(spec_path), str(outdir)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_for_window(outdir: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        log = outdir / "trial.log"
        if log.exists() and "window main begins" in log.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"the trial never opened its window: {(outdir / 'trial.log').read_text()}")


def result_of(outdir: Path) -> dict:
    return json.loads((outdir / "result.json").read_text())


def test_c12_capped_resnet_stopped_at_its_time_limit_restores_the_default(gpu, tmp_path):
    # the case's plan (resnet_cifar capped at 200 W, a window longer than the time limit),
    # with a time limit short enough for a test
    plan = load_plan(CASE / "plan-capped-200w.yaml")
    spec = expand(plan)[0]
    outdir = tmp_path / "t1"
    outcome = run_local(spec, outdir, timeout_s=12)
    assert outcome.timed_out and limit_w(gpu) == 700.0  # observed before the fix: 200 W
    result = result_of(outdir)
    assert result["status"] == "failed" and result["error"] == "TrialTerminated: terminated by SIGTERM"
    assert json.loads((outdir / POWER_CAP_FILE).read_text())["state"] == "restored"
    # the next capped trial (the case's second plan) records the default as its previous limit
    spec2 = expand(load_plan(CASE / "plan-capped-250w.yaml"))[0]
    out2 = tmp_path / "t2"
    assert run_local(spec2, out2, timeout_s=240).exit_code == 0
    m = result_of(out2)["metrics"]
    assert (m["power_cap_w"], m["power_limit_previous_w"], m["power_limit_enforced_w"]) == (250.0, 700.0, 250.0)
    assert limit_w(gpu) == 700.0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_to_the_trial_process_restores_the_cap(gpu, tmp_path, sig):
    # docker stop sends SIGTERM to the container's PID 1 only; a terminal sends SIGINT or SIGHUP
    outdir = tmp_path / "t"
    proc = start_trial(noop_spec(cap_w=200), outdir)
    wait_for_window(outdir)
    assert limit_w(gpu) == 200.0  # the window runs capped
    proc.send_signal(sig)
    assert proc.wait(60) == 1
    assert limit_w(gpu) == 700.0
    result = result_of(outdir)
    assert result["error"] == f"TrialTerminated: terminated by {signal.Signals(sig).name}"
    assert result["windows"]["main"]["end_s"] > result["windows"]["main"]["start_s"]


def test_sigkilled_capped_trial_leaves_the_next_trial_to_reset_the_cap(gpu, tmp_path):
    outdir = tmp_path / "killed"
    proc = start_trial(noop_spec(cap_w=200), outdir)
    wait_for_window(outdir)
    proc.kill()  # SIGKILL: nothing in the trial can restore the limit
    proc.wait(30)
    assert limit_w(gpu) == 200.0
    assert json.loads((outdir / POWER_CAP_FILE).read_text())["state"] == "applied"
    # an uncapped baseline runs next: it finds the leftover, resets it, and says so
    base = tmp_path / "baseline"
    proc = start_trial(noop_spec(cap_w=None, seconds=0.5, name="c12base"), base)
    assert proc.wait(120) == 0
    result = result_of(base)
    assert result["status"] == "ok" and limit_w(gpu) == 700.0
    (found,) = result["device_state_before"]["power_limits"]
    assert (found["index"], found["limit_w"], found["default_w"], found["action"]) == (0, 200.0, 700.0, "reset")
    assert result["device_state_before"]["reset"] == ["gpu0"]


def test_runner_restores_the_cap_of_a_trial_killed_under_it(gpu, tmp_path, monkeypatch):
    # the local runner outlives the SIGKILLed trial: it restores from power_cap.json
    spec = noop_spec(cap_w=200, seconds=1.0, name="c12kill")
    spec = spec.model_copy(update={"settings": {**spec.settings, "kill_self_after_s": 0.3}}).with_id()
    fake = importlib.util.spec_from_file_location("pynvml", FAKE / "pynvml" / "__init__.py")
    module = importlib.util.module_from_spec(fake)
    fake.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "pynvml", module)  # the runner's own NVML is the fake GPU
    outdir = tmp_path / "t"
    outcome = run_local(spec, outdir, timeout_s=60)
    assert outcome.exit_code == -signal.SIGKILL
    assert outcome.device_restored == "power limit restored by the runner: gpu0 700 W"
    assert limit_w(gpu) == 700.0
    assert json.loads((outdir / "runner.json").read_text())["device_restored"].endswith("gpu0 700 W")


def test_uncapped_trial_is_skipped_when_the_leftover_cap_cannot_be_reset(tmp_path, monkeypatch):
    import pynvml

    class Nvml:
        limit_mw = 250_000

    def refuse(h, mw):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    for name, fn in {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetPowerManagementLimit": lambda h: Nvml.limit_mw,
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: 700_000,
        "nvmlDeviceGetPowerManagementLimitConstraints": lambda h: [200_000, 700_000],
        "nvmlDeviceSetPowerManagementLimit": refuse,
    }.items():
        monkeypatch.setattr(pynvml, name, fn)
    cap = TrialPowerCap(None, [0], tmp_path)
    with pytest.raises(LeftoverCapError, match="gpu0: power limit 250 W, not its default 700 W") as err:
        cap.check()
    assert "CAP_SYS_ADMIN" in str(err.value) and err.value.not_in_effect == {}  # an uncapped trial: no setting
    capped = TrialPowerCap(300, [0], tmp_path)
    with pytest.raises(LeftoverCapError) as err:
        capped.check()
    assert err.value.not_in_effect["power_cap_w"].startswith("300 W cap not applied: gpu0: power limit 250 W")


def test_every_kind_can_be_capped_and_says_so(gpu, tmp_path):
    # the cap is the trial's, not the workload's: a noop trial runs capped and reports it
    outdir = tmp_path / "t"
    proc = start_trial(noop_spec(cap_w=300, seconds=0.3), outdir)
    assert proc.wait(120) == 0
    m = result_of(outdir)["metrics"]
    assert (m["power_cap_w"], m["power_cap_state"], m["power_limit_previous_w"]) == (300.0, "applied", 700.0)
    assert limit_w(gpu) == 700.0


@pytest.mark.parametrize("kind", ["noop", "h2d", "tinylm", "resnet_cifar"])
def test_power_cap_w_is_a_setting_of_every_kind(kind):
    plan = plan_from_text(
        f"name: c12k\nworkloads:\n  - name: w\n    kind: {kind}\n    matrix: {{power_cap_w: [250, 300]}}\n"
    )
    assert {s.settings["power_cap_w"] for s in expand(plan)} == {250, 300}


def test_a_power_cap_that_is_not_positive_watts_is_a_plan_error():
    from gcbench.errors import PlanError

    with pytest.raises(PlanError, match=r"workloads\[0\]\.settings\.power_cap_w.*positive number of watts"):
        plan_from_text("name: c12e\nworkloads:\n  - name: w\n    kind: noop\n    settings: {power_cap_w: -5}\n")


def _fake_nvml_module(monkeypatch):
    """The case's fake GPU as this process's pynvml (the runner's own NVML)."""
    fake = importlib.util.spec_from_file_location("pynvml", FAKE / "pynvml" / "__init__.py")
    module = importlib.util.module_from_spec(fake)
    fake.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


def test_a_trial_killed_between_setting_the_cap_and_recording_it_leaves_what_to_restore(gpu, tmp_path, monkeypatch):
    # SIGKILL right after the driver took the cap, before PowerCap returned: the folder must
    # already say what to put back, or the runner restores nothing (observed: no power_cap.json)
    nvml = _fake_nvml_module(monkeypatch)
    seen: list[dict | None] = []
    real_set = nvml.nvmlDeviceSetPowerManagementLimit

    def set_and_look(h, mw):
        real_set(h, mw)
        path = tmp_path / POWER_CAP_FILE
        seen.append(json.loads(path.read_text()) if path.exists() else None)

    monkeypatch.setattr(nvml, "nvmlDeviceSetPowerManagementLimit", set_and_look)
    with TrialPowerCap(200, [0], tmp_path):
        assert limit_w(gpu) == 200.0
    assert seen[0] == {"state": "applying", "cap_w": 200.0, "gpus": [{"index": 0, "previous_w": 700.0}]}
    # what a runner finds after a kill at that instant: it restores the default
    from gcbench.energy.powercap import restore_leftover

    (tmp_path / POWER_CAP_FILE).write_text(json.dumps(seen[0]))
    real_set(0, 200_000)
    monkeypatch.setattr(nvml, "nvmlDeviceSetPowerManagementLimit", real_set)
    assert restore_leftover(tmp_path) == "power limit restored by the runner: gpu0 700 W"
    assert limit_w(gpu) == 700.0


def test_a_cap_refused_at_entry_is_recorded_restored_not_applying(tmp_path, monkeypatch):
    import pynvml

    state = {"limit_mw": 700_000}
    for name, fn in {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetPowerManagementLimit": lambda h: state["limit_mw"],
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: 700_000,
        "nvmlDeviceGetPowerManagementLimitConstraints": lambda h: [200_000, 700_000],
    }.items():
        monkeypatch.setattr(pynvml, name, fn)
    with pytest.raises(Exception, match="outside the allowed range 200-700 W"):
        with TrialPowerCap(100, [0], tmp_path):
            pass
    assert json.loads((tmp_path / POWER_CAP_FILE).read_text())["state"] == "restored"


@pytest.mark.parametrize("how", ["time limit", "task SIGTERM"])
def test_docker_runner_restores_the_cap_of_a_container_removed_mid_trial(gpu, tmp_path, monkeypatch, how):
    # the docker path: at the trial's time limit (AirflowTaskTimeout) or the task's SIGTERM
    # (TrialContainerKilled) the container is force-removed (SIGKILL) with the cap applied;
    # before the fix run_trial raised before the runner's restore: the GPU stayed at 200 W
    from contextlib import contextmanager

    from airflow.sdk.exceptions import AirflowTaskTimeout

    from gcbench.factory import docker, tasks
    from gcbench.store import gpulock

    _fake_nvml_module(monkeypatch)
    plan = plan_from_text(
        "name: c12docker\ndevices: [0]\nrunner: docker\nwindow: {seconds: 1}\nenergy: {backend: simulated}\n"
        "workloads:\n  - name: w\n    kind: noop\n    settings: {power_cap_w: 200}\n"
    )
    spec = expand(plan)[0]
    outdir = tmp_path / "t"
    spec_path = write_spec(spec, outdir)

    def container_killed_capped(spec, image, host_outdir, context, **kw):
        gpu.write_text('{"limit_mw": 200000, "default_mw": 700000}')  # the trial in the container capped it
        (Path(host_outdir) / POWER_CAP_FILE).write_text(
            json.dumps({"state": "applied", "cap_w": 200.0, "gpus": [{"index": 0, "previous_w": 700.0}]})
        )
        if how == "time limit":
            raise AirflowTaskTimeout("the trial ran past its time limit")
        raise docker.TrialContainerKilled(spec.trial_id, "the task was told to stop")

    @contextmanager
    def free_gpus(*args, **kwargs):
        yield gpulock.GpuLease(keys=["h/gpu0"])

    monkeypatch.setattr(docker, "run_docker", container_killed_capped)
    monkeypatch.setattr(gpulock, "hold_gpus", free_gpus)
    trial = {"trial_id": spec.trial_id, "spec_path": str(spec_path), "outdir": str(outdir), "devices": [0]}
    trial |= {"label": spec.variant, "host": None}
    with pytest.raises((AirflowTaskTimeout, docker.TrialContainerKilled)):
        tasks.run_trial(plan, {"params": {"runner": "docker"}, "run_id": "r1"}, trial)
    assert limit_w(gpu) == 700.0
    assert json.loads((outdir / POWER_CAP_FILE).read_text())["state"] == "restored"
    assert "power limit restored by the runner: gpu0 700 W" in (outdir / "runner.log").read_text()


def test_two_gpus_capped_one_restore_failing_is_left_for_the_runner_then_restored(tmp_path, monkeypatch):
    # gpu1's restore fails in the trial (a transient NVML error): gpu0 is back, the record
    # still says applied with both GPUs, and the runner afterwards restores gpu1
    import pynvml

    from gcbench.energy.powercap import PowerCapRestoreError, restore_leftover

    limits = {0: 700_000, 1: 700_000}
    failing = {"on": False}

    def set_limit(h, mw):
        if failing["on"] and h == 1 and mw == 700_000:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        limits[h] = mw

    for name, fn in {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetPowerManagementLimit": lambda h: limits[h],
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: 700_000,
        "nvmlDeviceGetPowerManagementLimitConstraints": lambda h: [200_000, 700_000],
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: limits[h],
        "nvmlDeviceSetPowerManagementLimit": set_limit,
    }.items():
        monkeypatch.setattr(pynvml, name, fn)
    with pytest.raises(PowerCapRestoreError, match="gpu1"):
        with TrialPowerCap(250, [0, 1], tmp_path):
            assert limits == {0: 250_000, 1: 250_000}
            failing["on"] = True
    assert limits == {0: 700_000, 1: 250_000}
    record = json.loads((tmp_path / POWER_CAP_FILE).read_text())
    assert record["state"] == "applied" and [g["index"] for g in record["gpus"]] == [0, 1]
    failing["on"] = False
    assert restore_leftover(tmp_path) == "power limit restored by the runner: gpu0 700 W, gpu1 700 W"
    assert limits == {0: 700_000, 1: 700_000}
