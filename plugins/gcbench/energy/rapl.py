"""CPU energy from Intel RAPL through the Linux powercap tree.

Facts this module respects (ARCHITECTURE.md; Linux powercap documentation,
Documentation/power/powercap/powercap.rst):

* ``<root>/intel-rapl:N/energy_uj`` is a counter in microjoules that wraps at that
  zone's own ``max_energy_range_uj``; a window may hold several wraps, so the sampler
  must read each zone more often than once per wrap at the largest plausible power
  (:func:`max_poll_interval_s`).
* ``energy_uj`` is readable by root only since the 2020 PLATYPUS fix (CVE-2020-8694):
  permission denied is *unknown* (None, with a reason), never 0.
* Domains nest: ``psys`` (platform) contains the packages, a package contains ``core``
  and ``uncore``; ``dram`` is a subzone of its package but *not* inside the package's
  figure. ``intel-rapl-mmio:N`` zones mirror the MSR package counter. We count each
  socket's package and DRAM once, never psys/core/uncore on top of them. AMD exposes
  only package and core.

Layouts (one kernel tree, three ways in; every one gives the same domains, each once):

* ``/sys/class/powercap`` (the default root): flat symlinks ``intel-rapl:0``,
  ``intel-rapl:0:2`` ... to the zone folders, plus the control-type folders
  ``intel-rapl`` and ``intel-rapl-mmio``.
* ``/sys/devices/virtual/powercap/intel-rapl`` (a control-type folder given as root):
  zones nested, ``intel-rapl:0/intel-rapl:0:2``; the subzones (core, uncore, dram)
  exist only inside their package's folder.
* ``/sys/devices/virtual/powercap``: the control-type folders ``intel-rapl`` and
  ``intel-rapl-mmio``, each nested as above.

A zone is known by its folder name (``intel-rapl:0:2``), unique in the kernel's tree,
so a zone reached both through a flat symlink and inside its parent is counted once.
A zone's ``enabled`` file is about power *limiting*, not the counter: a subzone with
``enabled`` 0 still counts energy.

Labels: ``cpu:package-<socket>``, ``cpu:dram-<socket>``, ``cpu:psys``.
"""

from __future__ import annotations

import os
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

MAX_PLAUSIBLE_DOMAIN_POWER_W = 1500.0
"""Upper bound of one RAPL domain's power, W, for choosing the poll interval."""

PERMISSION_HINT = (
    "energy_uj is root-only since the 2020 PLATYPUS fix (CVE-2020-8694); "
    "run the trial as root or grant read access to it"
)

_ZONE_RE = re.compile(r"^intel-rapl(-mmio)?:(\d+)(?::(\d+))?$")
_CONTROL_TYPE_RE = re.compile(r"^intel-rapl(-mmio)?$")
_MAX_DEPTH = 4  # root -> control type -> package -> subzone, and one level to spare


def read_int(path: Path) -> int:
    """Read one integer sysfs file (tests monkeypatch this to simulate faults)."""
    return int(Path(path).read_text().strip())


@dataclass
class RaplDomain:
    """One counted RAPL domain.

    Attributes:
        label: ``cpu:package-0``, ``cpu:dram-0``, ``cpu:psys``.
        path: the zone folder (holding ``energy_uj``).
        kind: ``package``, ``dram`` or ``psys``.
        max_energy_range_uj: wrap point of ``energy_uj``, uJ; None when unreadable.
    """

    label: str
    path: str
    kind: str
    max_energy_range_uj: int | None


@dataclass
class RaplDiscovery:
    """What :func:`discover` found.

    Attributes:
        domains: counted domains (each socket's package and DRAM once).
        skipped: (zone path, why) for zones not counted (nested, mirrored, psys).
        reason: why CPU energy is unknown (no tree, permission denied, unreadable);
            None when every counted domain is readable.
    """

    domains: list[RaplDomain] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    reason: str | None = None


def _read_name(zone: Path) -> str | None:
    try:
        return (zone / "name").read_text().strip()
    except OSError:
        return None


def _zone_folders(root: Path) -> list[Path]:
    """Every RAPL zone folder under ``root``, once per zone name, shallowest path first.

    Walks breadth first into zone folders (``intel-rapl:N``, ``intel-rapl:N:M``,
    ``intel-rapl-mmio:N``) and control-type folders (``intel-rapl``,
    ``intel-rapl-mmio``) only, never into ``device`` or ``subsystem`` links (which lead
    back to the class folder), at most :data:`_MAX_DEPTH` levels deep; a folder reached
    twice (through a symlink) is read once. ``root`` may itself be a zone folder.
    """
    found: dict[str, Path] = {}
    if _ZONE_RE.match(root.name):
        found[root.name] = root
    todo: deque[tuple[Path, int]] = deque([(root, 0)])
    visited: set[str] = set()
    while todo:
        folder, depth = todo.popleft()
        real = os.path.realpath(folder)
        if real in visited:
            continue
        visited.add(real)
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            zone = _ZONE_RE.match(entry.name)
            if not (zone or _CONTROL_TYPE_RE.match(entry.name)) or not entry.is_dir():
                continue
            if zone:
                found.setdefault(entry.name, entry)
            if depth + 1 < _MAX_DEPTH:
                todo.append((entry, depth + 1))
    return list(found.values())


def discover(root: str | Path = "/sys/class/powercap") -> RaplDiscovery:
    """Find the RAPL domains to count under a powercap root.

    Args:
        root: ``/sys/class/powercap`` (flat symlinks), a control-type folder such as
            ``/sys/devices/virtual/powercap/intel-rapl`` (nested zones), or
            ``/sys/devices/virtual/powercap``; all give the same domains (see the
            module docstring).

    Never raises for a missing or unreadable tree: the result's ``reason`` says why
    CPU energy is unknown.
    """
    root = Path(root)
    out = RaplDiscovery()
    if not root.is_dir():
        out.reason = f"no RAPL powercap tree at {root}"
        return out
    zones = []
    for entry in _zone_folders(root):
        m = _ZONE_RE.match(entry.name)
        assert m is not None  # _zone_folders lists only names that match
        zones.append((entry, bool(m.group(1)), int(m.group(2)), m.group(3)))
    if not zones:
        out.reason = f"no RAPL zones (intel-rapl:*) under {root}"
        return out
    # MSR zones first so that an mmio mirror of the same package is the one skipped
    zones.sort(key=lambda z: (z[1], z[2], -1 if z[3] is None else int(z[3])))
    names = {z[0].name: _read_name(z[0]) for z in zones}
    candidates: list[RaplDomain] = []
    psys: list[RaplDomain] = []
    for zone, mmio, top, sub in zones:
        name = names[zone.name] or ""
        if sub is None:
            m = re.match(r"^package-(\d+)$", name)
            if m:
                candidates.append(RaplDomain(f"cpu:package-{m.group(1)}", str(zone), "package", None))
            elif name == "psys":
                psys.append(RaplDomain("cpu:psys", str(zone), "psys", None))
            else:
                out.skipped.append((str(zone), f"unknown top-level zone name {name!r}"))
        else:
            parent = ("intel-rapl-mmio:" if mmio else "intel-rapl:") + str(top)
            pname = names.get(parent) or f"package-{top}"
            socket = pname.split("-")[-1] if pname.startswith("package-") else str(top)
            if name == "dram":
                candidates.append(RaplDomain(f"cpu:dram-{socket}", str(zone), "dram", None))
            else:
                out.skipped.append((str(zone), f"{name or 'subzone'} is nested in {pname}"))
    if not candidates and psys:
        candidates = psys[:1]
    else:
        out.skipped.extend((d.path, "psys contains the packages; package + DRAM counted instead") for d in psys)

    counted: list[RaplDomain] = []
    seen_values: dict[tuple[int, int | None], str] = {}
    unreadable: list[str] = []
    for d in candidates:
        if any(c.label == d.label for c in counted):
            out.skipped.append((d.path, f"mirrors {d.label} already counted"))
            continue
        try:
            d.max_energy_range_uj = read_int(Path(d.path) / "max_energy_range_uj")
        except (OSError, ValueError):
            d.max_energy_range_uj = None
        try:
            value = read_int(Path(d.path) / "energy_uj")
        except PermissionError:
            unreadable.append(f"permission denied: {d.path}/energy_uj ({PERMISSION_HINT})")
            counted.append(d)
            continue
        except (OSError, ValueError) as exc:
            unreadable.append(f"unreadable: {d.path}/energy_uj ({exc.__class__.__name__})")
            counted.append(d)
            continue
        key = (value, d.max_energy_range_uj)
        if d.kind == "package" and key in seen_values:
            # two zones returning one counter's value (e.g. a mirrored or virtualised zone)
            out.skipped.append((d.path, f"returns the same counter as {seen_values[key]}; counted once"))
            continue
        if d.kind == "package":
            seen_values[key] = d.label
        counted.append(d)
    out.domains = counted
    if unreadable:
        out.reason = "; ".join(unreadable)
    return out


def max_poll_interval_s(domains: list[RaplDomain], max_power_w: float = MAX_PLAUSIBLE_DOMAIN_POWER_W) -> float:
    """Longest poll interval, s, that still sees every wrap: half a wrap at ``max_power_w``."""
    ranges = [d.max_energy_range_uj for d in domains if d.max_energy_range_uj]
    if not ranges:
        return 1.0
    return min(1.0, min(ranges) / 1e6 / max_power_w / 2)


class RaplCounter:
    """Wrap-corrected accumulation of one domain's ``energy_uj``.

    Args:
        max_energy_range_uj: the domain's wrap point, uJ, or None when unknown.

    A decrease is a wrap when the range is known: the step is
    ``max_energy_range_uj - previous + current`` (e.g. 262143000000 -> 1000000 with
    range 262143328850 is a step of 1328850 uJ). With an unknown range the step is
    dropped and :attr:`unknown_wraps` counts it: the total never decreases.
    """

    def __init__(self, max_energy_range_uj: int | None):
        self.max_energy_range_uj = max_energy_range_uj
        self.previous_uj: int | None = None
        self.total_uj = 0
        self.wraps = 0
        self.unknown_wraps = 0

    def update(self, energy_uj: int) -> int:
        """Add one read; returns the step counted, uJ (>= 0)."""
        prev, self.previous_uj = self.previous_uj, energy_uj
        if prev is None:
            return 0
        if energy_uj >= prev:
            step = energy_uj - prev
        elif self.max_energy_range_uj:
            step = self.max_energy_range_uj - prev + energy_uj
            self.wraps += 1
        else:
            step = 0
            self.unknown_wraps += 1
        self.total_uj += step
        return step

    @property
    def total_j(self) -> float:
        """Energy counted since the first read, J."""
        return self.total_uj / 1e6


def _facts():
    from gcbench.energy.backend import Facts

    return Facts(
        name="rapl",
        kind="cpu",
        label="rapl",
        energy_counter=True,
        update_period_s=0.001,  # the MSR updates about every 1 ms (Intel SDM, vol. 3B 14.9)
        counter_scope="package",
        power_limits=True,
        counter_resolution_j=1e-6,
    )


RAPL_FACTS = _facts()
"""What the RAPL backend reads (:mod:`gcbench.energy.backend`): per-domain energy counters
in uJ, wrapping at ``max_energy_range_uj``; package scope (DRAM subzones ``dram``)."""
