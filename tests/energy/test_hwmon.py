"""CPU energy from hwmon sensors where RAPL is absent (gcbench.energy.hwmon), on fake
sysfs trees shaped like NVIDIA Grace's ACPI power meters and AMD's amd_energy."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gcbench.energy import hwmon
from gcbench.energy.meter import Meter
from gcbench.spec import EnergySettings


def grace_tree(root: Path, sockets=(7, 2), cpu_uw=(85_500_000, 90_000_000)) -> Path:
    """Two Grace sockets numbered 7 and 2 (ARM numbers are arbitrary), each with the four
    ACPI power meters (Module, Grace, CPU, SysIO) in uW over a 50 ms interval."""
    for k, (sock, cpu) in enumerate(zip(sockets, cpu_uw, strict=True)):
        d = root / f"hwmon{k}"
        d.mkdir(parents=True)
        (d / "name").write_text("power_meter\n")
        for n, (what, uw) in enumerate(
            (("Module", 450_000_000), ("Grace", cpu + 20_000_000), ("CPU", cpu), ("SysIO", 15_000_000)), start=1
        ):
            (d / f"power{n}_average").write_text(f"{uw}\n")
            (d / f"power{n}_average_interval").write_text("50\n")
            (d / f"power{n}_oem_info").write_text(f"{what} Power Socket {sock}\n")
    gpu = root / "hwmon9"  # a GPU's hwmon (amdgpu): not a CPU sensor
    gpu.mkdir()
    (gpu / "name").write_text("amdgpu\n")
    (gpu / "power1_average").write_text("300000000\n")
    return root


def test_grace_power_meters_count_the_cpu_rail_once_per_socket_ranked_not_indexed(tmp_path):
    d = hwmon.discover(grace_tree(tmp_path))
    assert d.reason is None
    assert [(x.label, x.kind, x.source, x.interval_s) for x in d.domains] == [
        ("cpu:package-0", "power", "power_meter CPU Power Socket 2", 0.05),
        ("cpu:package-1", "power", "power_meter CPU Power Socket 7", 0.05),
    ]
    why = " | ".join(w for _p, w in d.skipped)
    assert "'Module Power Socket 7'" in why and "not the CPU" in why and "SysIO" in why
    assert "amdgpu: a power meter without oem_info" in why
    assert "Grace Power Socket 2: socket 2 is counted once" in why


def test_amd_energy_counts_sockets_and_skips_cores(tmp_path):
    d = tmp_path / "hwmon3"
    d.mkdir()
    (d / "name").write_text("amd_energy\n")
    for n, (label, uj) in enumerate((("Esocket0", 10**9), ("Ecore000", 10**6), ("Esocket1", 2 * 10**9)), start=1):
        (d / f"energy{n}_input").write_text(f"{uj}\n")
        (d / f"energy{n}_label").write_text(f"{label}\n")
    found = hwmon.discover(tmp_path)
    assert [(x.label, x.kind) for x in found.domains] == [("cpu:package-0", "energy"), ("cpu:package-1", "energy")]
    assert any("Ecore000: a core, inside its socket" in w for _p, w in found.skipped)


def test_unreadable_sensor_is_unknown_with_the_reason_never_zero(tmp_path, monkeypatch):
    root = grace_tree(tmp_path)
    real = Path.read_text

    def read_text(self, *a, **kw):
        if self.name == "power3_average" and self.parent.name == "hwmon0":
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", read_text)
    d = hwmon.discover(root)
    assert d.reason == f"{root / 'hwmon0' / 'power3_average'}: permission denied"


def test_no_tree_and_no_cpu_sensor_are_reasons(tmp_path):
    assert hwmon.discover(tmp_path / "none").reason.startswith("no hwmon tree at")
    (tmp_path / "hwmon0").mkdir()
    (tmp_path / "hwmon0" / "name").write_text("coretemp\n")
    assert hwmon.discover(tmp_path).reason == f"no CPU energy or power sensor under {tmp_path}"


def test_counter_and_power_meter_integrate_like_rapl():
    c = hwmon.HwmonCounter("energy")
    c.update(5_000_000, 0.0)
    assert c.update(7_500_000, 0.5) == (2.5, 5.0)
    assert c.update(1_000, 1.0)[0] == 2.5 and c.resets == 1  # a reset drops the step, never negative
    p = hwmon.HwmonCounter("power")
    p.update(80_000_000, 0.0)
    assert p.update(100_000_000, 1.0) == (90.0, 100.0)  # trapezoid of 80 W -> 100 W over 1 s


def test_meter_on_an_arm_host_without_rapl_reads_cpu_energy_from_hwmon(tmp_path):
    root = grace_tree(tmp_path / "hwmon")
    m = Meter(
        EnergySettings(backend="simulated", rapl_root=str(tmp_path / "no-rapl")),
        [0],
        tmp_path / "s.csv",
        seed=1,
        hwmon_root=str(root),
    )
    m.start()
    m.begin_window()
    time.sleep(1.2)
    m.end_window()
    r = m.stop()["main"]
    assert r.cpu_reason is None
    assert [(c.device, c.method, c.source) for c in r.cpu] == [
        ("cpu:package-0", "hwmon", "hwmon"),
        ("cpu:package-1", "hwmon", "hwmon"),
    ]
    assert r.cpu_energy_j == pytest.approx((85.5 + 90.0) * r.duration_s, rel=0.01)
    env = m.environment()
    assert env["cpu_backend"] == "hwmon" and env["hwmon"]["rapl_reason"].startswith("no RAPL powercap tree")


def test_meter_without_rapl_or_hwmon_says_both_reasons(tmp_path):
    m = Meter(
        EnergySettings(backend="simulated", rapl_root=str(tmp_path / "no-rapl")),
        [0],
        tmp_path / "s.csv",
        seed=1,
        hwmon_root=str(tmp_path / "no-hwmon"),
    )
    with m:
        m.begin_window()
        time.sleep(0.3)
        m.end_window()
    r = m.results["main"]
    assert r.cpu_energy_j is None
    assert "no RAPL powercap tree" in r.cpu_reason and "no hwmon tree at" in r.cpu_reason
