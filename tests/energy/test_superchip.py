"""Grace Hopper and other superchips: a module-scope energy counter is module energy,
never GPU energy (gcbench.energy.nvml.probe_power_scope, the meter's sums), and a
superchip that answers only GPU scope falls back to it (a GB10, Zeus PR #242)."""

from __future__ import annotations

import os
import threading
import time

import pynvml
import pytest
from test_nvml import UUIDS, FakeGpus

from gcbench.energy import nvml
from gcbench.energy.meter import Meter
from gcbench.energy.sampler import Sampler
from gcbench.spec import EnergySettings

GH200_MODULE_MW = 450_000  # GPU 120 W + Grace CPU and LPDDR5X
GPU_MW = 120_000


class FakeSuperchip(FakeGpus):
    """Two GH200-like modules (``module=True``: NVML answers scopeId 1) or GB10-like chips
    (``module=False``: a scope tuple is NOT_SUPPORTED). The counter follows the module's power."""

    def __init__(self, module: bool):
        super().__init__()
        self.module = module

    def install(self, mp):
        nv = super().install(mp)

        def fields(handle, ids):
            arr = (pynvml.c_nvmlFieldValue_t * len(ids))()
            for k, f in enumerate(ids):
                fid, scope = f if isinstance(f, tuple) else (f, 0)
                arr[k].fieldId, arr[k].scopeId = fid, scope
                arr[k].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                if scope == nvml.POWER_SCOPE_MODULE and not self.module:
                    arr[k].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                    continue
                arr[k].nvmlReturn = 0
                arr[k].value.uiVal = GH200_MODULE_MW if scope == nvml.POWER_SCOPE_MODULE else GPU_MW
            return arr

        def energy(handle):
            ticks = int((time.monotonic() - self.t0) / 0.1)
            return 5_000_000 + ticks * (45_000 if self.module else 12_000)  # mJ per 100 ms tick

        mp.setattr(pynvml, "nvmlDeviceGetFieldValues", fields)
        mp.setattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption", energy)
        mp.setattr(pynvml, "nvmlDeviceGetName", lambda handle: "NVIDIA GH200 480GB" if self.module else "NVIDIA GB10")
        return nv


def test_the_module_scope_probe_decides_not_the_product_name(monkeypatch):
    nv = FakeSuperchip(module=True).install(monkeypatch)
    scope, why = nvml.probe_power_scope(nv, nv.nvmlDeviceGetHandleByIndex(0))
    assert scope == "module" and "450 W" in why and "CPU and memory" in why
    nv = FakeSuperchip(module=False).install(monkeypatch)
    scope, why = nvml.probe_power_scope(nv, nv.nvmlDeviceGetHandleByIndex(0))
    assert scope == "gpu" and "not supported" in why


def _measure(monkeypatch, tmp_path, module: bool):
    FakeSuperchip(module=module).install(monkeypatch)
    m = Meter(EnergySettings(), [0], tmp_path / "samples.csv", 1, env={"CUDA_VISIBLE_DEVICES": UUIDS[0]})
    m._resolve_backend()
    origin = time.monotonic()
    rfd, wfd = os.pipe()
    cfg = {
        "backend": m.backend,
        "samples_path": str(m.samples_path),
        "origin_monotonic": origin,
        "sample_hz": 20,
        "counter_hz": 10,
        "gpus": m.gpus,
    }
    th = threading.Thread(target=Sampler(cfg).run, args=(rfd,))
    th.start()
    time.sleep(0.3)
    a = time.monotonic() - origin
    os.write(wfd, f"begin {a:.6f}\n".encode())
    time.sleep(1.2)
    b = time.monotonic() - origin
    os.write(wfd, f"end {b:.6f}\nstop\n".encode())
    os.close(wfd)
    th.join(10)
    os.close(rfd)
    m.windows = {"main": [a, b]}
    return m, m._compute([])["main"]


def test_gh200_counter_is_labelled_module_energy_never_gpu_energy(monkeypatch, tmp_path):
    m, r = _measure(monkeypatch, tmp_path, module=True)
    g = r.gpu[0]
    assert g.scope == "module" and g.method == "nvml-module-counter-edge-corrected"
    assert r.gpu_energy_j is None and r.energy_scope == "module"
    assert r.module_energy_j == pytest.approx(450.0 * r.duration_s, rel=0.1)
    assert "module_scope" in r.flags
    assert "included in the module energy of gpu0" in r.cpu_reason  # no RAPL on Grace: CPU is inside
    facts = m.environment()["device_facts"]["gpu0"]
    assert facts["scope"] == "module" and "module-scope power" in facts["scope_reason"]


def test_a_superchip_answering_only_gpu_scope_falls_back_to_gpu_energy(monkeypatch, tmp_path):
    _m, r = _measure(monkeypatch, tmp_path, module=False)
    g = r.gpu[0]
    assert g.scope == "gpu" and g.method == "nvml-counter-edge-corrected"
    assert r.module_energy_j is None and r.gpu_energy_j == pytest.approx(120.0 * r.duration_s, rel=0.1)


def test_validation_keeps_a_module_trial_and_says_what_the_figure_covers():
    import pandas as pd

    from gcbench.plan.schema import ValidationSettings
    from gcbench.validate import check_trial

    result = {
        "status": "ok",
        "windows": {"main": {"start_s": 1.0, "end_s": 6.0}},
        "energy": {
            "main": {
                "gpu_energy_j": None,
                "module_energy_j": 2250.0,
                "flags": ["module_scope"],
                "gpu": [{"device": "gpu0", "scope": "module", "update_period_s": 0.1}],
                "sample_hz": 20,
            }
        },
        "environment": {},
    }
    t = [1.0 + 0.05 * k for k in range(101)]
    samples = pd.DataFrame(
        {
            "device": "gpu0",
            "t_s": t,
            "power_w": 450.0,
            "power_instant_w": 450.0,
            "energy_j": float("nan"),
            "clocks_event_reasons": float("nan"),
        }
    )
    v = check_trial(result, "ok", samples, ValidationSettings())
    assert v.valid, v.reasons
    assert any("module energy, no GPU-only figure" in f for f in v.flags)


def test_a_gpu_echoing_its_own_power_at_module_scope_stays_gpu_scope(monkeypatch):
    """A driver that ignores scopeId (answers module scope with the GPU's figure) is not a module."""
    nv = FakeSuperchip(module=True).install(monkeypatch)
    real = nv.nvmlDeviceGetFieldValues

    def echo(handle, ids):
        return real(handle, [(f[0], 0) if isinstance(f, tuple) else f for f in ids])

    monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", echo)
    scope, why = nvml.probe_power_scope(nv, nv.nvmlDeviceGetHandleByIndex(0))
    assert scope == "gpu" and "GPU's own power" in why
