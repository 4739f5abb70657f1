"""CPU energy from Linux hwmon sensors, where RAPL is absent (ARM: Grace, Ampere) or
not readable: energy counters (``energy*_input``, uJ) and average power meters
(``power*_average``, uW), integrated with the same rules as RAPL.

Facts (Linux hwmon sysfs ABI, Documentation/hwmon/sysfs-interface.rst; drivers
amd_energy and acpi_power_meter; NVIDIA Grace's ACPI power meters):

* ``energyN_input``: cumulative energy, microjoules. ``amd_energy`` labels them
  ``Esocket<N>`` (a socket) and ``Ecore<NNN>`` (a core, inside its socket: skipped,
  like RAPL's core zone).
* ``powerN_average``: average power, microwatts, over ``powerN_average_interval``
  (milliseconds). The ACPI power meter on Grace names each meter in
  ``powerN_oem_info`` (``Grace Power Socket 0``, ``CPU Power Socket 0``,
  ``Module Power Socket 0``, ``SysIO Power Socket 0``): the CPU ones are counted;
  ``Module`` covers GPU + CPU + memory (the GPU backend's module figure, never added to
  CPU) and ``SysIO`` is not the CPU. A meter without ``oem_info`` covers the platform:
  skipped with the reason.
* Sockets are *ranked*: on ARM ``physical_package_id`` and the socket numbers in sensor
  names are arbitrary (not 0..n-1), so socket k of the label ``cpu:package-<k>`` is the
  k-th smallest number found (:func:`rank_sockets`).
* An unreadable sensor (permission denied, I/O error) is unknown (None, with the
  reason), never 0.

Power meters are integrated in the sampler (trapezoid of the readings, its running sum
written as ``energy_j``), so the window maths is the counter's
(:func:`gcbench.energy.window.cpu_window_energy`); the figure's method says which.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from gcbench.energy.backend import Facts

HWMON_FACTS = Facts(
    name="hwmon",
    kind="cpu",
    label="hwmon",
    energy_counter=True,
    average_power=True,
    update_period_s=0.05,
    counter_scope="package",
    counter_resolution_j=1e-6,
)
"""What the hwmon backend reads (:mod:`gcbench.energy.backend`)."""

_SOCKET_RE = re.compile(r"socket\s*(\d+)", re.IGNORECASE)
_CPU_OEM_RE = re.compile(r"\b(cpu|grace)\b", re.IGNORECASE)


@dataclass
class HwmonSensor:
    """One counted CPU sensor.

    Attributes:
        label: ``cpu:package-<rank>``.
        path: the file read (``.../energy1_input`` or ``.../power1_average``).
        kind: ``energy`` (cumulative uJ) or ``power`` (average uW, integrated).
        interval_s: averaging interval of a power meter, s (None: unknown / counter).
        source: hwmon driver name and the sensor's label or oem_info.
    """

    label: str
    path: str
    kind: str
    interval_s: float | None = None
    source: str = ""


@dataclass
class HwmonDiscovery:
    """What :func:`discover` found: ``domains`` (counted sensors, one per socket),
    ``skipped`` ((path, why)), ``reason`` (why CPU energy is unknown; None when fine)."""

    domains: list[HwmonSensor] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    reason: str | None = None


def rank_sockets(numbers: list[int]) -> dict[int, int]:
    """{socket number as found: rank}: ``[3, 1, 3, 7]`` -> ``{1: 0, 3: 1, 7: 2}``."""
    return {n: k for k, n in enumerate(sorted(set(numbers)))}


def _text(p: Path) -> str | None:
    try:
        return p.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def discover(root: str | Path = "/sys/class/hwmon") -> HwmonDiscovery:
    """Find the CPU energy and power sensors under ``root`` (one per socket).

    Returns:
        :class:`HwmonDiscovery`; ``reason`` says why nothing is counted, or names a
        counted sensor that cannot be read.
    """
    root = Path(root)
    out = HwmonDiscovery()
    if not root.is_dir():
        out.reason = f"no hwmon tree at {root}"
        return out
    found: list[tuple[int, str, str, float | None, str]] = []  # (socket, path, kind, interval, source)
    for dev in sorted(root.iterdir()):
        name = _text(dev / "name") or dev.name
        for f in sorted(dev.glob("energy*_input")):
            label = _text(f.with_name(f.name.replace("_input", "_label"))) or ""
            m = _SOCKET_RE.search(label) or re.match(r"^Esocket(\d+)$", label)
            if label.lower().startswith("ecore"):
                out.skipped.append((str(f), f"{name} {label}: a core, inside its socket"))
            elif m:
                found.append((int(m.group(1)), str(f), "energy", None, f"{name} {label}"))
            else:
                out.skipped.append((str(f), f"{name} {label or f.name}: not a CPU socket sensor"))
        for f in sorted(dev.glob("power*_average")):
            stem = f.name.removesuffix("_average")
            oem = _text(f.with_name(f"{stem}_oem_info")) or _text(f.with_name(f"{stem}_label")) or ""
            m = _SOCKET_RE.search(oem)
            if not oem:
                out.skipped.append((str(f), f"{name}: a power meter without oem_info covers the platform, not the CPU"))
            elif not _CPU_OEM_RE.search(oem):
                out.skipped.append((str(f), f"{name} {oem!r}: not the CPU (module and SysIO are not CPU energy)"))
            else:
                ms = _text(f.with_name(f"{stem}_average_interval"))
                interval = float(ms) / 1e3 if ms and ms.isdigit() else None
                found.append((int(m.group(1)) if m else 0, str(f), "power", interval, f"{name} {oem}"))
    if not found:
        out.reason = f"no CPU energy or power sensor under {root}"
        return out
    # one sensor per socket: an energy counter beats a power meter; "CPU" beats "Grace" (the CPU rail alone)
    best: dict[int, tuple[int, str, str, float | None, str]] = {}
    for item in found:
        sock, _path, kind, _iv, src = item
        prev = best.get(sock)
        score = (kind == "energy", "cpu" in src.lower())
        if prev is None or score > (prev[2] == "energy", "cpu" in prev[4].lower()):
            if prev is not None:
                out.skipped.append((prev[1], f"{prev[4]}: socket {sock} is counted once ({src})"))
            best[sock] = item
        else:
            out.skipped.append((item[1], f"{src}: socket {sock} is counted once ({prev[4]})"))
    ranks = rank_sockets(list(best))
    for sock, (_s, path, kind, interval, src) in sorted(best.items()):
        out.domains.append(HwmonSensor(f"cpu:package-{ranks[sock]}", path, kind, interval, src))
    bad = []
    for d in out.domains:
        try:
            int(Path(d.path).read_text().strip())
        except PermissionError:
            bad.append(f"{d.path}: permission denied")
        except (OSError, ValueError) as exc:
            bad.append(f"{d.path}: unreadable ({exc})")
    if bad:
        out.reason = "; ".join(bad)
    return out


class HwmonCounter:
    """Cumulative energy of one sensor since the first read, J.

    ``update(raw, t_s)``: an energy counter (uJ) adds its increase (a decrease is a reset:
    the step is dropped and ``resets`` counted); a power meter (uW) adds the trapezoid of
    its readings since the previous one."""

    def __init__(self, kind: str):
        self.kind = kind
        self.prev: float | None = None
        self.prev_t: float | None = None
        self.total_j = 0.0
        self.resets = 0

    def update(self, raw: int, t_s: float) -> tuple[float, float | None]:
        """Returns (energy_j since the first read, power_w of this read or interval)."""
        power_w = None
        if self.kind == "energy":
            if self.prev is not None:
                step = raw - self.prev
                if step < 0:
                    self.resets += 1
                    step = 0
                self.total_j += step / 1e6
                if self.prev_t is not None and t_s > self.prev_t:
                    power_w = step / 1e6 / (t_s - self.prev_t)
        else:
            power_w = raw / 1e6
            if self.prev is not None and self.prev_t is not None:
                self.total_j += (self.prev / 1e6 + power_w) / 2 * (t_s - self.prev_t)
        self.prev, self.prev_t = raw, t_s
        return self.total_j, power_w
