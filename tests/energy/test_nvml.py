"""NVML backend (gcbench.energy.nvml, and the Meter's use of it), mocked at the pynvml
boundary only: the real pynvml module with its functions monkeypatched."""

from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace

import numpy as np
import pynvml
import pytest

from gcbench.energy import nvml
from gcbench.energy.meter import DeviceSeries, Meter, gpu_window_energy, read_samples
from gcbench.energy.sampler import Sampler
from gcbench.errors import MeasurementError
from gcbench.spec import EnergySettings

UUIDS = ["GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-1111-1111-1111-111111111111"]
PCI = ["00000000:00:06.0", "00000000:00:07.0"]


class FakeGpus:
    """Two H200-like GPUs: 120 W each, counter = 120 W x time in 100 ms ticks."""

    def __init__(self, mig=(0, 0), counter=(True, True)):
        self.mig, self.counter = mig, counter
        self.t0 = time.monotonic()

    def install(self, mp):
        h = lambda i: ("handle", i)  # noqa: E731
        idx = lambda handle: handle[1]  # noqa: E731

        def err(code):
            return pynvml.NVMLError(code)

        def energy(handle):
            if not self.counter[idx(handle)]:
                raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
            ticks = int((time.monotonic() - self.t0) / 0.1)
            return 5_000_000 + ticks * 12_000  # mJ

        def fields(handle, ids):
            arr = (pynvml.c_nvmlFieldValue_t * len(ids))()
            for k, f in enumerate(ids):
                arr[k].fieldId = f
                arr[k].nvmlReturn = 0
                arr[k].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                arr[k].value.uiVal = 120000 if f == pynvml.NVML_FI_DEV_POWER_INSTANT else 119500
            return arr

        def mig_mode(handle):
            if self.mig[idx(handle)] is None:
                raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return [self.mig[idx(handle)], self.mig[idx(handle)]]

        for name, fn in {
            "nvmlInit": lambda: None,
            "nvmlShutdown": lambda: None,
            "nvmlDeviceGetCount": lambda: 2,
            "nvmlDeviceGetHandleByIndex": h,
            "nvmlDeviceGetHandleByUUID": lambda u: h(UUIDS.index(u if isinstance(u, str) else u.decode())),
            "nvmlDeviceGetUUID": lambda handle: UUIDS[idx(handle)],
            "nvmlDeviceGetPciInfo": lambda handle: SimpleNamespace(busId=PCI[idx(handle)].encode()),
            "nvmlDeviceGetName": lambda handle: "NVIDIA H200",
            "nvmlDeviceGetMigMode": mig_mode,
            "nvmlDeviceGetTotalEnergyConsumption": energy,
            "nvmlDeviceGetFieldValues": fields,
            "nvmlDeviceGetPowerUsage": lambda handle: 119500,
            "nvmlDeviceGetTemperature": lambda handle, s: 38,
            "nvmlDeviceGetClockInfo": lambda handle, c: 1980,
            "nvmlDeviceGetCurrentClocksEventReasons": lambda handle: 4,
            "nvmlDeviceGetUtilizationRates": lambda handle: SimpleNamespace(gpu=(87, 12)[idx(handle)], memory=40),
            "nvmlSystemGetDriverVersion": lambda: "580.159.04",
            "nvmlSystemGetNVMLVersion": lambda: "13.580.159.04",
            "nvmlDeviceGetPowerManagementLimit": lambda handle: 700000,
            "nvmlDeviceGetEnforcedPowerLimit": lambda handle: 700000,
            "nvmlDeviceGetPowerManagementDefaultLimit": lambda handle: 700000,
            "nvmlDeviceGetPowerManagementLimitConstraints": lambda handle: [200000, 700000],
        }.items():
            mp.setattr(pynvml, name, fn)
        return pynvml


def test_cuda_visible_devices_uuid_of_nvml_index_1_measures_index_1(monkeypatch):
    nv = FakeGpus().install(monkeypatch)
    gpus, notes = nvml.resolve_devices(nv, [1], cuda_visible_devices=UUIDS[1])
    assert [(g.host_index, g.label, g.uuid, g.pci_bus_id, g.cuda_index) for g in gpus] == [
        (1, "gpu1", UUIDS[1], PCI[1], 0)
    ]
    # a unique UUID prefix is accepted like CUDA does
    assert nvml.resolve_devices(nv, [], cuda_visible_devices="GPU-bbbb")[0][0].host_index == 1


def test_cuda_visible_devices_mig_entry_is_a_clear_error(monkeypatch):
    nv = FakeGpus().install(monkeypatch)
    with pytest.raises(MeasurementError, match="MIG instance.*per physical GPU"):
        nvml.resolve_devices(nv, [0], cuda_visible_devices="MIG-0a1b2c3d-0000-1111-2222-333333333333")


def test_gpu_in_mig_mode_is_a_clear_error(monkeypatch):
    nv = FakeGpus(mig=(0, 1)).install(monkeypatch)
    with pytest.raises(MeasurementError, match="gpu1: MIG mode is enabled"):
        nvml.resolve_devices(nv, [1])


def test_index_entries_map_by_pci_order_and_warn_without_pci_bus_id_order(monkeypatch):
    nv = FakeGpus(mig=(None, None)).install(monkeypatch)
    gpus, notes = nvml.resolve_devices(nv, [], cuda_visible_devices="1,0")
    assert [(g.cuda_index, g.host_index) for g in gpus] == [(0, 1), (1, 0)]
    assert notes and "CUDA_DEVICE_ORDER" in notes[0]
    assert nvml.resolve_devices(nv, [], "1", "PCI_BUS_ID")[1] == []


def test_trial_devices_that_disagree_with_cuda_visible_devices_are_an_error(monkeypatch):
    nv = FakeGpus().install(monkeypatch)
    with pytest.raises(MeasurementError, match="not the GPUs CUDA_VISIBLE_DEVICES"):
        nvml.resolve_devices(nv, [0], cuda_visible_devices=UUIDS[1])
    with pytest.raises(MeasurementError, match="matches 0 GPUs"):
        nvml.resolve_devices(nv, [], cuda_visible_devices="GPU-ffff")


def test_counter_not_supported_is_recorded_at_resolution(monkeypatch):
    nv = FakeGpus(counter=(True, False)).install(monkeypatch)
    gpus, _ = nvml.resolve_devices(nv, [])
    assert [g.has_counter for g in gpus] == [True, False]
    assert "Not Supported" in gpus[1].counter_reason


def test_counter_not_supported_gives_power_integration_never_zero():
    t = np.arange(0, 5.01, 0.05)
    series = DeviceSeries(
        t_s=t,
        power_w=np.full(t.size, 150.0),
        power_instant_w=np.full(t.size, 150.0),
        energy_j=np.full(t.size, np.nan),
        source="nvml",
    )
    dev, flags = gpu_window_energy(
        series, "gpu1", 1.0, 4.0, has_counter=False, counter_reason="energy counter unavailable (Not Supported)"
    )
    assert dev.energy_j == pytest.approx(450.0)
    assert dev.method == "nvml-power-integration" and "Not Supported" in dev.reason
    assert flags == []


def test_reader_converts_mw_and_mj_and_reads_clock_reasons(monkeypatch):
    nv = FakeGpus().install(monkeypatch)
    row = nvml.NvmlReader(nv, UUIDS).read(0, counter=True)
    assert row["power_instant_w"] == 120.0 and row["power_w"] == 119.5
    assert row["energy_j"] >= 5000.0 and row["temperature_c"] == 38
    assert row["sm_clock_mhz"] == 1980 and row["clocks_event_reasons"] == 4
    # nvmlDeviceGetUtilizationRates().gpu: the share of the last sample period a kernel ran
    assert row["gpu_util_pct"] == 87 and nvml.NvmlReader(nv, UUIDS).read(1, counter=False)["gpu_util_pct"] == 12
    assert nvml.NvmlReader(nv, UUIDS).read(0, counter=False, extras=False)["gpu_util_pct"] is None


def test_reader_falls_back_to_power_usage_when_field_values_fail(monkeypatch):
    nv = FakeGpus().install(monkeypatch)

    def broken(handle, ids):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", broken)
    row = nvml.NvmlReader(nv, UUIDS).read(1, counter=False, extras=False)
    assert row["power_instant_w"] is None and row["power_w"] == 119.5 and row["energy_j"] is None


def test_environment_reports_driver_and_power_limits_in_watts(monkeypatch):
    nv = FakeGpus().install(monkeypatch)
    gpus, _ = nvml.resolve_devices(nv, [0])
    env = nvml.environment(nv, gpus)
    assert env["driver"] == "580.159.04" and env["nvml_version"] == "13.580.159.04"
    g = env["gpus"][0]
    assert (g["limit_w"], g["default_limit_w"], g["min_limit_w"], g["max_limit_w"]) == (700, 700, 200, 700)


def test_meter_start_refuses_mig_before_sampling(monkeypatch, tmp_path):
    FakeGpus().install(monkeypatch)
    m = Meter(
        EnergySettings(),
        [0],
        tmp_path / "samples.csv",
        1,
        env={"CUDA_VISIBLE_DEVICES": "MIG-0a1b2c3d-0000-1111-2222-333333333333"},
    )
    with pytest.raises(MeasurementError, match="MIG"):
        m.start()
    assert not (tmp_path / "samples.csv").exists()
    assert m.stop() == {}  # safe after a failed start


def test_meter_resolves_nvml_backend_and_uuid_mapping(monkeypatch, tmp_path):
    FakeGpus().install(monkeypatch)
    m = Meter(EnergySettings(), [1], tmp_path / "samples.csv", 1, env={"CUDA_VISIBLE_DEVICES": UUIDS[1]})
    m._resolve_backend()
    assert m.backend == "nvml" and [g["label"] for g in m.gpus] == ["gpu1"]
    assert m._env_facts["gpus"][0]["uuid"] == UUIDS[1]


def test_nvml_sampler_streams_counter_and_power_rows_with_edge_bursts(monkeypatch, tmp_path):
    FakeGpus().install(monkeypatch)
    rfd, wfd = os.pipe()
    origin = time.monotonic()
    cfg = {
        "backend": "nvml",
        "samples_path": str(tmp_path / "samples.csv"),
        "origin_monotonic": origin,
        "sample_hz": 20,
        "counter_hz": 10,
        "gpus": [{"label": "gpu1", "uuid": UUIDS[1], "index": 1, "has_counter": True}],
    }
    sampler = Sampler(cfg)
    th = threading.Thread(target=sampler.run, args=(rfd,))
    th.start()
    time.sleep(0.3)
    os.write(wfd, f"begin {time.monotonic() - origin:.6f}\n".encode())
    time.sleep(0.5)
    os.write(wfd, f"end {time.monotonic() - origin:.6f}\nstop\n".encode())
    os.close(wfd)
    th.join(5)
    os.close(rfd)
    assert not th.is_alive()
    s = read_samples(tmp_path / "samples.csv")["gpu1"]
    assert s.source == "nvml"
    assert np.nanmax(s.power_instant_w) == 120.0
    counter_reads = np.isfinite(s.energy_j).sum()
    assert counter_reads > 0.8 * 10 * 0.8 + 20  # 10 Hz plus the edge bursts
    dev, _ = gpu_window_energy(s, "gpu1", 0.3, 0.8)
    assert dev.method == "nvml-counter-edge-corrected"
    assert dev.energy_j == pytest.approx(60.0, rel=0.1)  # 120 W x 0.5 s


def test_meter_module_has_no_heavy_imports():
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import gcbench.energy, gcbench.energy.meter, sys;"
            "print(sorted(m for m in ('torch','pandas','pynvml','docker') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == "[]"


def test_doctor_shows_gpus_and_cuda_visible_devices_mapping(monkeypatch, tmp_path):
    from gcbench.energy import doctor

    FakeGpus(counter=(True, False)).install(monkeypatch)
    d = doctor.diagnose(rapl_root=str(tmp_path), env={"CUDA_VISIBLE_DEVICES": UUIDS[1]}, docker_check=False)
    assert d["nvml"]["ok"] and d["nvml"]["driver"] == "580.159.04" and d["backend"] == "nvml"
    assert [g["energy_counter"] for g in d["gpus"]["visible"]] == [True, False]
    assert d["gpus"]["mapping"] == [
        {"cuda_index": 0, "nvml_index": 1, "label": "gpu1", "uuid": UUIDS[1], "pci_bus_id": PCI[1]}
    ]
    text = doctor.format_text(d)
    assert f"cuda:0 -> nvml 1 ({UUIDS[1]})" in text and "no energy counter" in text


def test_counter_187_j_against_integrated_327_j_over_5_s_idle_flags_the_window():
    t = np.arange(0, 6.001, 0.05)
    ticks = np.floor((t - 0.013) / 0.1)  # counter ticks every 100 ms
    energy = 1000.0 + np.maximum(ticks, 0) * (187.0 / 50)  # 37.4 W by the counter
    series = DeviceSeries(
        t_s=t, power_w=np.full(t.size, 65.4), power_instant_w=np.full(t.size, 65.4), energy_j=energy, source="nvml"
    )
    dev, flags = gpu_window_energy(series, "gpu0", 0.5, 5.5)
    assert dev.energy_j == pytest.approx(187.0, abs=4.0) and dev.cross_check_j == pytest.approx(327.0)
    assert dev.method == "nvml-counter-edge-corrected" and dev.cross_check_method == "average-power-lag"
    assert dev.cross_check_rel == pytest.approx(-0.43, abs=0.02)
    assert dev.cross_check_allowance_rel == 0.0 and dev.cross_check_verdict == "invalid"
    assert dev.instant_integral_j == pytest.approx(327.0)  # kept for information
    assert flags == ["cross_check_disagreement"]
    dev, flags = gpu_window_energy(series, "gpu0", 0.5, 5.5, cross_check_threshold=0.5, cross_check_invalid=0.6)
    assert flags == [] and dev.cross_check_verdict == "ok"


@pytest.mark.parametrize(
    ("arch", "role"),
    [
        (pynvml.NVML_DEVICE_ARCH_VOLTA, "power_instant_w"),  # V100: nvmlDeviceGetPowerUsage is instant
        (pynvml.NVML_DEVICE_ARCH_TURING, "power_instant_w"),  # T4
        (pynvml.NVML_DEVICE_ARCH_AMPERE, "power_w"),  # the 1-s average
        (pynvml.NVML_DEVICE_ARCH_HOPPER, "power_w"),
        (None, "power_w"),  # architecture unknown: taken as the average
    ],
)
def test_power_usage_fallback_fills_the_role_of_its_architecture_c16(monkeypatch, arch, role):
    # before Ampere nvmlDeviceGetPowerUsage is the instant power: read as the 1-s average it
    # would be integrated 0.57 s late (a Pascal GPU has no counter to fall back on)
    nv = FakeGpus().install(monkeypatch)

    def broken(handle, ids):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def architecture(handle):
        if arch is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return arch

    monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", broken)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetArchitecture", architecture)
    row = nvml.NvmlReader(nv, UUIDS).read(1, counter=False, extras=False)
    other = ({"power_w", "power_instant_w"} - {role}).pop()
    assert row[role] == 119.5 and row[other] is None


def test_a_missing_average_field_beside_an_instant_one_is_filled_from_power_usage_on_ampere(monkeypatch):
    # the instant field answers, the average one does not: on Ampere and newer
    # nvmlDeviceGetPowerUsage is the average (kept for the cross-check); before, it is not
    nv = FakeGpus().install(monkeypatch)
    real = pynvml.nvmlDeviceGetFieldValues

    def no_average(handle, ids):
        inst, avg = real(handle, ids)
        return inst, SimpleNamespace(fieldId=avg.fieldId, nvmlReturn=pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", no_average)
    for arch, average_w in ((pynvml.NVML_DEVICE_ARCH_HOPPER, 119.5), (pynvml.NVML_DEVICE_ARCH_TURING, None)):
        monkeypatch.setattr(pynvml, "nvmlDeviceGetArchitecture", lambda h, a=arch: a)
        row = nvml.NvmlReader(nv, UUIDS).read(1, counter=False, extras=False)
        assert row["power_instant_w"] is not None and row["power_w"] == average_w
