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


# ----------------------------------------------------------------------------- layouts of the same tree (C11)

NESTED = Path(__file__).resolve().parents[1] / "fixtures" / "rapl" / "nested_devices_layout"
"""``/sys/devices/virtual/powercap/intel-rapl`` before and after a window: package-0
450 J, its core/uncore/dram subzones nested inside it, psys beside it."""


def energy_j(found: rapl.RaplDiscovery, before: Path, after: Path) -> dict[str, float]:
    """{label: J} between two copies of one tree, read at the paths discover() chose."""
    out = {}
    for d in found.domains:
        rel = Path(d.path).relative_to(before)
        out[d.label] = (rapl.read_int(after / rel / "energy_uj") - rapl.read_int(Path(d.path) / "energy_uj")) / 1e6
    return out


def class_layout(devices: Path, target: Path) -> Path:
    """``/sys/class/powercap`` of a nested control-type tree: flat symlinks to every zone
    folder, plus the control-type folder itself, as the kernel makes them."""
    target.mkdir(parents=True)
    (target / "intel-rapl").symlink_to(devices, target_is_directory=True)
    for zone_dir in sorted(devices.rglob("intel-rapl:*")):
        (target / zone_dir.name).symlink_to(zone_dir, target_is_directory=True)
    return target


def devices_layout(tmp_path: Path, which: str) -> Path:
    """``/sys/devices/virtual/powercap`` holding the fixture's tree as ``intel-rapl``."""
    import shutil

    virtual = tmp_path / which / "devices" / "virtual" / "powercap"
    shutil.copytree(NESTED / which, virtual / "intel-rapl", symlinks=True)
    return virtual


def test_nested_control_type_root_counts_package_and_dram_once_c11():
    found = rapl.discover(NESTED / "before")
    assert [d.label for d in found.domains] == ["cpu:package-0", "cpu:dram-0"]
    assert energy_j(found, NESTED / "before", NESTED / "after") == {"cpu:package-0": 450.0, "cpu:dram-0": 60.0}
    skipped = {Path(p).name: why for p, why in found.skipped}
    assert "core is nested in package-0" in skipped["intel-rapl:0:0"]
    assert "uncore is nested in package-0" in skipped["intel-rapl:0:1"]
    assert "psys contains the packages" in skipped["intel-rapl:1"]
    assert found.reason is None
    # dram's "enabled" is 0 (no power limit set): its counter still counts
    assert (NESTED / "before" / "intel-rapl:0" / "intel-rapl:0:2" / "enabled").read_text().strip() == "0"


@pytest.mark.parametrize("layout", ["class (flat symlinks)", "devices/virtual/powercap", "nested control type"])
def test_every_layout_of_one_tree_gives_the_same_domains_and_joules(tmp_path, layout):
    before, after = devices_layout(tmp_path, "before"), devices_layout(tmp_path, "after")
    if layout == "class (flat symlinks)":
        roots = [class_layout(p / "intel-rapl", p.parents[2] / "class" / "powercap") for p in (before, after)]
    elif layout == "devices/virtual/powercap":
        roots = [before, after]
    else:
        roots = [before / "intel-rapl", after / "intel-rapl"]
    found = rapl.discover(roots[0])
    assert [d.label for d in found.domains] == ["cpu:package-0", "cpu:dram-0"]
    assert energy_j(found, roots[0], roots[1]) == {"cpu:package-0": 450.0, "cpu:dram-0": 60.0}
    # each zone once: the flat intel-rapl:0:2 and intel-rapl:0/intel-rapl:0:2 are one zone
    assert sorted(Path(p).name for p, _ in found.skipped) == ["intel-rapl:0:0", "intel-rapl:0:1", "intel-rapl:1"]


def test_two_socket_nested_tree_with_mmio_mirror_counts_each_socket_once(tmp_path):
    virtual = tmp_path / "powercap"
    msr = virtual / "intel-rapl"
    for socket, base in ((0, 10_000_000), (1, 20_000_000)):
        pkg = zone(msr, f"intel-rapl:{socket}", f"package-{socket}", energy_uj=base)
        zone(pkg, f"intel-rapl:{socket}:0", "core", energy_uj=base // 2)
        zone(pkg, f"intel-rapl:{socket}:1", "dram", energy_uj=base // 10)
    zone(virtual / "intel-rapl-mmio", "intel-rapl-mmio:0", "package-0", energy_uj=10_000_000)  # mirror of socket 0
    for root in (virtual, msr, class_layout(msr, tmp_path / "class")):
        found = rapl.discover(root)
        assert [d.label for d in found.domains] == ["cpu:package-0", "cpu:dram-0", "cpu:package-1", "cpu:dram-1"], root
        assert [Path(d.path).name for d in found.domains] == [
            "intel-rapl:0",
            "intel-rapl:0:1",
            "intel-rapl:1",
            "intel-rapl:1:1",
        ]
    mirror = dict(rapl.discover(virtual).skipped)[str(virtual / "intel-rapl-mmio" / "intel-rapl-mmio:0")]
    assert "package-0" in mirror


def test_walk_never_follows_device_or_subsystem_links_back_into_the_class_folder(tmp_path):
    msr = tmp_path / "devices" / "intel-rapl"
    pkg = zone(msr, "intel-rapl:0", "package-0")
    zone(pkg, "intel-rapl:0:0", "dram")
    cls = class_layout(msr, tmp_path / "class")
    (pkg / "subsystem").symlink_to(cls, target_is_directory=True)  # as in sysfs: a loop back to the class
    (pkg / "device").symlink_to(pkg, target_is_directory=True)
    assert [d.label for d in rapl.discover(cls).domains] == ["cpu:package-0", "cpu:dram-0"]


def test_root_given_as_one_package_zone_counts_that_package_and_its_dram(tmp_path):
    pkg = zone(tmp_path, "intel-rapl:1", "package-1")
    zone(pkg, "intel-rapl:1:0", "dram")
    assert [d.label for d in rapl.discover(pkg).domains] == ["cpu:package-1", "cpu:dram-1"]
