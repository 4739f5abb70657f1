"""C15: the GPU measured is the GPU used (fixtures/cases/round3/C15-cuda-device-order).

A host with two GPU models, NVML/PCI order gpu0 = Tesla T4 (00:3B), gpu1 = A100 (00:86):
CUDA numbers them fastest first (A100 first) unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
Both runners give the trial that order whatever their own environment says; the trial
sets it itself when started another way; and a trial whose CUDA devices are not the
measured GPUs is invalid.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gcbench.energy import nvml
from gcbench.factory.docker import trial_operator_kwargs
from gcbench.factory.local import trial_env, write_spec
from gcbench.plan import expand, plan_from_text
from gcbench.spec import Amount, EnergySettings, TrialSpec
from gcbench.trial import device_check

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "round3" / "C15-cuda-device-order"


@pytest.fixture
def nv():
    spec = importlib.util.spec_from_file_location("c15_fake_pynvml", CASE / "fake_pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_gpu_trial(device: int) -> TrialSpec:
    return TrialSpec(
        plan="k04",
        workload="w",
        kind="noop",
        variant="w",
        repetition=0,
        seed=1,
        devices=[device],
        warmup=Amount(steps=0),
        window=Amount(steps=1),
        energy=EnergySettings(),
    ).with_id()


def cuda_device(nv, env: dict, cuda_index: int) -> str:
    """The GPU CUDA gives as ``cuda:<cuda_index>`` under ``env`` (CUDA's documented order:
    PCI bus order with PCI_BUS_ID, else fastest first), by PCI bus id."""
    gpus = nv.GPUS
    if env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        order = sorted(range(len(gpus)), key=lambda i: gpus[i]["pci"])
    else:
        order = sorted(range(len(gpus)), key=lambda i: 0 if "A100" in gpus[i]["name"] else 1)
    visible = [order[int(e)] for e in env["CUDA_VISIBLE_DEVICES"].split(",")]
    return gpus[visible[cuda_index]]["pci"]


@pytest.mark.parametrize(
    "runner_env",
    [{}, {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}],  # the case; a worker whose own environment says fastest first
    ids=["unset", "fastest-first"],
)
def test_c15_local_runner_measures_the_gpu_the_trial_computes_on(nv, runner_env):
    spec = one_gpu_trial(1)
    env = trial_env(spec, base=dict(runner_env))
    assert (env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"]) == ("1", "PCI_BUS_ID")
    gpus, notes = nvml.resolve_devices(nv, [1], env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"])
    assert [(g.host_index, g.name, g.pci_bus_id) for g in gpus] == [(1, "NVIDIA A100-SXM4-40GB", "00000000:86:00.0")]
    assert notes == []
    assert cuda_device(nv, env, 0) == gpus[0].pci_bus_id  # before the fix: the T4 computed, the A100 measured


def test_both_runners_give_the_trial_the_same_order(nv):
    spec = one_gpu_trial(1)
    local = trial_env(spec, base={"CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    docker = trial_operator_kwargs(spec, "img", Path("/tmp/x"), home=Path("/tmp/h"), native_dir=Path("/tmp/n"))
    keys = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
    assert (
        {k: local[k] for k in keys}
        == {k: docker["environment"][k] for k in keys}
        == {
            "CUDA_VISIBLE_DEVICES": "1",
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        }
    )


def test_cuda_visible_devices_by_uuid_is_the_same_gpu_for_cuda_and_the_meter(nv):
    # a UUID names one GPU whatever the order: the meter resolves it, and the check agrees
    gpus, _ = nvml.resolve_devices(nv, [1], "GPU-a100-111", None)
    assert [g.name for g in gpus] == ["NVIDIA A100-SXM4-40GB"]
    check = device_check(["a100-111"], [g.uuid for g in gpus])  # torch gives the UUID without "GPU-"
    assert check["same"] is True and check["reason"] is None


def test_a_trial_on_another_gpu_than_the_measured_one_is_invalid():
    from gcbench.validate import ValidationSettings, check_trial

    check = device_check(["t4-0000"], ["GPU-a100-111"])
    assert check["same"] is False
    assert check["reason"] == "the workload computed on GPU(s) t4-0000 but the meter measured a100-111"
    result = {
        "status": "ok",
        "windows": {"main": {"start_s": 1.0, "end_s": 3.0}},
        "energy": {"main": {"gpu_energy_j": 600.0, "gpu": [], "flags": []}},
        "device_check": check,
    }
    import pandas as pd

    verdict = check_trial(result, "ok", pd.DataFrame(columns=["t_s", "device"]), ValidationSettings())
    assert not verdict.valid
    assert verdict.reasons[0] == "measured another GPU than the one used: " + check["reason"]


def test_nothing_on_cuda_is_nothing_to_compare():
    assert device_check(None, ["GPU-a100-111"])["same"] is None
    assert device_check(["a100-111"], [None])["same"] is None  # the simulated device has no UUID


def test_a_trial_started_by_hand_sets_pci_bus_order_itself(tmp_path):
    spec = expand(
        plan_from_text(
            "name: c15\nwindow: {steps: 1}\nenergy: {backend: simulated}\nworkloads: [{name: n, kind: noop}]\n"
        )
    )[0]
    out = tmp_path / "out"
    env = {**os.environ, "CUDA_DEVICE_ORDER": "FASTEST_FIRST"}
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.trial", str(write_spec(spec, out)), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "CUDA_DEVICE_ORDER was FASTEST_FIRST; set to PCI_BUS_ID" in proc.stdout
    result = json.loads((out / "result.json").read_text())
    assert result["environment"]["cuda_device_order"] == "PCI_BUS_ID"
    assert result["device_check"]["same"] is None  # noop: nothing ran on CUDA


def test_a_users_container_gets_the_measured_gpu_by_uuid_not_by_the_workers_index(monkeypatch, tmp_path):
    # a worker in a container given only the host's GPU 1 (docker --gpus device=GPU-...)
    # sees it as its GPU 0; device_ids=['0'] would start the user's program on the host's
    # GPU 0 while the meter measures the worker's GPU 0 (the host's GPU 1)
    from gcbench.workloads.container import container_kwargs, device_ids

    monkeypatch.setattr("gcbench.config.engine_has_gpus", lambda: True)
    spec = one_gpu_trial(0).model_copy(update={"kind": "container", "program": {"image": "user/app:1"}})
    measured = [{"label": "gpu0", "index": 0, "uuid": "GPU-a100-0000-1111"}]
    (req,) = container_kwargs(spec, tmp_path, str(tmp_path / "control" / "control.fifo"), measured)["device_requests"]
    assert req.device_ids == ["GPU-a100-0000-1111"]
    # without a measured UUID (the simulated device, an older meter): the host indices as before
    assert device_ids(spec, None) == ["0"]
    assert device_ids(spec, [{"label": "gpu0", "uuid": "simulated"}]) == ["0"]
    two = one_gpu_trial(0).model_copy(update={"devices": [0, 1]})
    assert device_ids(two, measured) == ["0", "1"]  # not one UUID per device: indices
