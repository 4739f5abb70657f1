"""AMD GPUs through amdsmi (gcbench.energy.amdsmi), on replies shaped like amdsmi 7.0.2's
Python API (tests/energy/fake_amdsmi, tests/fixtures/amdsmi)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from gcbench.energy import amdsmi as amd
from gcbench.energy import backend
from gcbench.errors import MeasurementError
from gcbench.spec import EnergySettings

HERE = Path(__file__).resolve().parent
FAKE = HERE / "fake_amdsmi"
FIXTURE = HERE.parent / "fixtures" / "amdsmi" / "two_mi300x_and_mi250x.json"


@pytest.fixture
def fake_amd(monkeypatch):
    """The stand-in module importable here and in the sampler process."""
    monkeypatch.setenv("FAKE_AMDSMI_FIXTURE", str(FIXTURE))
    monkeypatch.setenv("FAKE_AMDSMI_WRAP_AT", str(time.monotonic() + 1e6))
    monkeypatch.setenv("PYTHONPATH", f"{FAKE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.syspath_prepend(str(FAKE))
    sys.modules.pop("amdsmi", None)
    yield monkeypatch
    sys.modules.pop("amdsmi", None)


# ----------------------------------------------------------------------------- the counter


def reply(counts: int, res_uj: float = 15.259, t_ns: int = 0) -> dict:
    return {"energy_accumulator": counts, "counter_resolution": res_uj, "timestamp": t_ns}


def test_energy_is_counts_times_the_counter_resolution():
    acc = amd.EnergyAccumulator()
    acc.update(reply(1_000_000, t_ns=0))
    # 655,360 counts of 15.259 uJ in 0.1 s: 10.0 J, 100 W
    assert acc.update(reply(1_655_360, t_ns=100_000_000)) == pytest.approx(655_360 * 15.259e-6)


def test_a_wrap_of_the_64_bit_accumulator_is_counted_modulo_2_64():
    acc = amd.EnergyAccumulator()
    top = (1 << 64) - 100_000
    acc.update(reply(top, t_ns=0))
    e = acc.update(reply(555_360, t_ns=100_000_000))  # passed 2^64: 655,360 counts in 0.1 s
    assert e == pytest.approx(655_360 * 15.259e-6) and acc.wraps == 1 and acc.resets == 0


def test_a_narrower_accumulator_wraps_at_its_own_width():
    acc = amd.EnergyAccumulator(bits=32)
    acc.update(reply((1 << 32) - 10, res_uj=1000.0, t_ns=0))
    assert acc.update(reply(90, res_uj=1000.0, t_ns=1_000_000_000)) == pytest.approx(0.1)  # 100 counts of 1 mJ


def test_a_decrease_no_plausible_power_explains_is_a_reset_dropped_not_a_wrap():
    acc = amd.EnergyAccumulator()
    acc.update(reply(10_000_000, t_ns=0))
    e = acc.update(reply(5_000, t_ns=100_000_000))  # 2^64 - 1e7 counts in 0.1 s would be ~1e15 W
    assert e == 0.0 and acc.resets == 1 and acc.wraps == 0
    assert acc.update(reply(5_000 + 65_536, t_ns=200_000_000)) == pytest.approx(65_536 * 15.259e-6)


# ----------------------------------------------------------------------------- devices


def test_devices_are_host_indexed_in_pci_order_with_rocr_then_hip_visibility(fake_amd):
    smi = amd.load()
    gpus, _ = amd.resolve_devices(smi, [], {})
    # handles come c1, 11, 29; PCI order 11, 29, c1
    assert [(g.label, g.bdf) for g in gpus] == [
        ("gpu0", "0000:11:00.0"),
        ("gpu1", "0000:29:00.0"),
        ("gpu2", "0000:c1:00.0"),
    ]
    gpus, notes = amd.resolve_devices(smi, [2], {"ROCR_VISIBLE_DEVICES": "0,GPU-a1ff74a1", "HIP_VISIBLE_DEVICES": "1"})
    assert [g.label for g in gpus] == ["gpu2"] and "ROCR_VISIBLE_DEVICES" in notes[0]
    gpus, _ = amd.resolve_devices(smi, [], {"CUDA_VISIBLE_DEVICES": "1"})  # HIP honours CUDA_VISIBLE_DEVICES
    assert [g.label for g in gpus] == ["gpu1"]
    with pytest.raises(MeasurementError, match="trial devices \\[0\\] are not"):
        amd.resolve_devices(smi, [0], {"HIP_VISIBLE_DEVICES": "2"})
    with pytest.raises(MeasurementError, match="matches 0 GPUs by UUID"):
        amd.resolve_devices(smi, [], {"ROCR_VISIBLE_DEVICES": "GPU-ffff"})


def test_a_partitioned_gpu_is_refused_like_a_mig_slice(fake_amd, tmp_path):
    import json

    data = json.loads(FIXTURE.read_text())
    data["devices"][1]["partition"] = "CPX"
    f = tmp_path / "cpx.json"
    f.write_text(json.dumps(data))
    fake_amd.setenv("FAKE_AMDSMI_FIXTURE", str(f))
    with pytest.raises(MeasurementError, match="compute partition mode CPX"):
        amd.resolve_devices(amd.load(), [0], {})


def test_open_declares_what_each_device_reads_and_its_caps_in_watts(fake_amd):
    b = amd.AmdSmiBackend()
    opened = b.open([0, 1], {})
    mi300, mi250 = opened.device_facts["gpu0"].facts, opened.device_facts["gpu1"].facts
    assert not mi300.instant_power and mi300.average_power and mi300.energy_counter  # MI300X: average only
    assert mi250.instant_power
    assert mi300.counter_resolution_j == pytest.approx(15.259e-6)
    assert mi300.counter_wrap_j == pytest.approx(2**64 * 15.259e-6)
    env = {g["label"]: g for g in opened.environment["gpus"]}
    assert env["gpu0"]["max_limit_w"] == 750.0 and env["gpu1"]["limit_w"] == 560.0
    assert env["gpu0"]["name"] == "AMD Instinct MI300X"
    assert b.max_temperature_c(opened) == 45.0


def test_without_the_library_auto_passes_amdsmi_with_the_reason():
    sys.modules.pop("amdsmi", None)
    with pytest.raises(backend.BackendUnavailable, match="amdsmi"):
        amd.AmdSmiBackend().open([], {})


# ----------------------------------------------------------------------------- through the meter


def test_a_plan_with_backend_amdsmi_measures_the_counter_across_a_wrap(fake_amd, tmp_path):
    """End to end: Meter -> sampler process -> the stand-in; the accumulator of the MI300X at
    c1:00.0 (host gpu2) passes 2^64 inside the window."""
    from gcbench.energy.meter import Meter

    m = Meter(EnergySettings(backend="amdsmi", idle_baseline_s=0, jitter_max_s=0), [2], tmp_path / "s.csv", seed=1)
    m.start()
    t0 = time.monotonic()
    fake_amd.setenv("FAKE_AMDSMI_BUSY_FROM", "0")  # read by the stand-in in this process only: the sampler's
    m.begin_window()  # copy of the environment was taken at start, so the device stays idle there
    time.sleep(1.2)
    m.end_window()
    r = m.stop()["main"]
    g = r.gpu[0]
    assert m.backend == "amdsmi" and g.source == "amdsmi" and not r.simulated
    assert g.method == "amdsmi-counter-edge-corrected"
    assert g.energy_j == pytest.approx(140.0 * r.duration_s, rel=0.02)  # gpu2 = the MI300X at c1:00.0, idle
    assert m.environment()["device_facts"]["gpu2"]["instant_power"] is False
    assert time.monotonic() - t0 < 30


def test_the_wrap_inside_a_window_is_unwrapped_end_to_end(fake_amd, tmp_path):
    from gcbench.energy.meter import Meter

    fake_amd.setenv("FAKE_AMDSMI_WRAP_AT", str(time.monotonic() + 1.5))
    m = Meter(EnergySettings(backend="amdsmi", idle_baseline_s=0, jitter_max_s=0), [2], tmp_path / "s.csv", seed=1)
    m.start()
    m.begin_window()
    time.sleep(1.5)
    m.end_window()
    r = m.stop()["main"]
    assert r.gpu[0].energy_j == pytest.approx(140.0 * r.duration_s, rel=0.02)
    assert "counter_decreased" not in r.flags


def test_doctor_on_the_amd_fixture_finds_the_gpus_and_says_why_nvml_was_passed(fake_amd):
    from gcbench.energy import doctor

    d = doctor.diagnose(env={}, docker_check=False)
    amd_row = next(b for b in d["backends"] if b["name"] == "amdsmi")
    assert amd_row["ok"] and amd_row["devices"] == ["gpu0", "gpu1", "gpu2"]
    assert "amdsmi-counter-edge-corrected" in amd_row["methods"]
    assert d["backend"] == "amdsmi" and d["backend_why"].startswith("nvml: ")
    assert "amdsmi " in doctor.format_text(d)
