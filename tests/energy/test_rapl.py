"""RAPL (gcbench.energy.rapl) on fake powercap trees under tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcbench.energy import rapl


def zone(root: Path, name: str, label: str, energy_uj: int | None = 1000, max_uj: int | None = 262143328850):
    d = root / name
    d.mkdir(parents=True)
    (d / "name").write_text(label + "\n")
    if energy_uj is not None:
        (d / "energy_uj").write_text(f"{energy_uj}\n")
    if max_uj is not None:
        (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return d


def test_wrap_step_is_1328850_uj_never_negative():
    c = rapl.RaplCounter(max_energy_range_uj=262143328850)
    c.update(262143000000)
    assert c.update(1000000) == 1328850
    assert c.total_uj == 1328850 and c.wraps == 1


def test_unknown_range_and_decrease_drops_the_step_and_counts_it():
    c = rapl.RaplCounter(max_energy_range_uj=None)
    steps = [c.update(v) for v in (5_000_000, 9_000_000, 2_000_000, 3_000_000)]
    assert steps == [0, 4_000_000, 0, 1_000_000]
    assert c.unknown_wraps == 1
    assert c.total_uj == 5_000_000


def test_two_wraps_in_a_60_s_window_at_200_w_are_both_counted():
    rng = 2**32
    c = rapl.RaplCounter(max_energy_range_uj=rng)
    poll_s = rapl.max_poll_interval_s([rapl.RaplDomain("cpu:package-0", "", "package", rng)])
    assert poll_s <= 1.0 and 200 * poll_s * 1e6 < rng  # polled faster than one wrap at 200 W
    true_uj = 0
    for _ in range(int(60 / poll_s) + 1):
        c.update(true_uj % rng)
        true_uj += int(200 * poll_s * 1e6)
    counted = c.total_uj
    expected = (int(60 / poll_s)) * int(200 * poll_s * 1e6)
    assert c.wraps == 2
    assert counted == expected


def test_mirrored_package_zones_with_identical_values_are_counted_once(tmp_path):
    zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=123456789)
    zone(tmp_path, "intel-rapl-mmio:0", "package-0", energy_uj=123456789)
    zone(tmp_path, "intel-rapl:1", "package-1", energy_uj=123456789)  # same value: same counter
    found = rapl.discover(tmp_path)
    assert [d.label for d in found.domains] == ["cpu:package-0"]
    assert len(found.skipped) == 2 and found.reason is None


def test_psys_package_core_dram_count_package_and_dram_not_the_sum(tmp_path):
    zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=1)
    zone(tmp_path, "intel-rapl:0:0", "core", energy_uj=2)
    zone(tmp_path, "intel-rapl:0:1", "uncore", energy_uj=3)
    zone(tmp_path, "intel-rapl:0:2", "dram", energy_uj=4)
    zone(tmp_path, "intel-rapl:1", "psys", energy_uj=5)
    zone(tmp_path, "intel-rapl:2", "package-1", energy_uj=6)
    zone(tmp_path, "intel-rapl:2:0", "dram", energy_uj=7)
    found = rapl.discover(tmp_path)
    assert [d.label for d in found.domains] == ["cpu:package-0", "cpu:dram-0", "cpu:package-1", "cpu:dram-1"]
    skipped = dict(found.skipped)
    assert "nested in package-0" in skipped[str(tmp_path / "intel-rapl:0:0")]
    assert "psys" in skipped[str(tmp_path / "intel-rapl:1")]


def test_psys_alone_is_used_when_no_package_exists(tmp_path):
    zone(tmp_path, "intel-rapl:0", "psys")
    assert [d.label for d in rapl.discover(tmp_path).domains] == ["cpu:psys"]


def test_amd_package_and_core_count_package_only(tmp_path):
    zone(tmp_path, "intel-rapl:0", "package-0")
    zone(tmp_path, "intel-rapl:0:0", "core")
    assert [d.label for d in rapl.discover(tmp_path).domains] == ["cpu:package-0"]


def test_permission_denied_is_unknown_with_reason_never_zero(tmp_path, monkeypatch):
    z = zone(tmp_path, "intel-rapl:0", "package-0")
    real = rapl.read_int

    def denied(path):
        if Path(path) == z / "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(rapl, "read_int", denied)
    found = rapl.discover(tmp_path)
    assert "permission denied" in found.reason and "PLATYPUS" in found.reason


def test_unreadable_max_range_leaves_range_unknown(tmp_path):
    zone(tmp_path, "intel-rapl:0", "package-0", max_uj=None)
    found = rapl.discover(tmp_path)
    assert found.domains[0].max_energy_range_uj is None and found.reason is None


def test_missing_tree_gives_reason(tmp_path):
    assert rapl.discover(tmp_path / "absent").reason.startswith("no RAPL powercap tree")
    assert rapl.discover(tmp_path).reason.startswith("no RAPL zones")


def test_poll_interval_sees_every_wrap_at_plausible_power():
    d = rapl.RaplDomain("cpu:package-0", "", "package", 262143328850)
    assert rapl.max_poll_interval_s([d]) == 1.0
    small = rapl.RaplDomain("cpu:dram-0", "", "dram", 65_532_610)  # ~65 J range
    assert rapl.max_poll_interval_s([d, small]) == pytest.approx(65.53261 / 1500 / 2)
