"""The one interface of every energy backend, and the registry that lists them.

A *backend* is a source of energy readings for one kind of device (``gpu``, ``cpu`` or
``node``). It **declares** what it can read (:class:`Facts`): an energy counter, instant
power, average power and its averaging period and lag, temperature, clocks, utilization,
power limits and caps, a list of the device's processes; its update period; and what its
counter covers (:data:`Scope`: ``gpu``, ``module``, ``package``, ``dram``, ``node``).
Everything downstream -- edge correction, the cross-check, stability, the sampler's
reads, the method label of each figure -- uses these declared facts (refined per device
when the backend is opened: :class:`DeviceFacts`), never a backend's name.

Adding a backend is one file (a class with :class:`Facts` and the few methods of
:class:`GpuBackend`) plus one line in :data:`REGISTRY`; see docs/energy-backends.md.
``auto`` tries the GPU backends in :data:`REGISTRY` order and takes the first that finds
a device; ``gcbench doctor`` prints that choice and why each earlier one was passed.

This module is cheap to import (the plan schema reads :func:`gpu_backend_names`): the
backend classes are imported on first use, each by its module path.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from gcbench.errors import MeasurementError

if TYPE_CHECKING:
    from collections.abc import Iterator

Scope = Literal["gpu", "module", "package", "dram", "node"]
"""What a counter or power reading covers: one GPU; a superchip *module* (GPU + CPU +
memory, e.g. Grace Hopper); a CPU *package*; its DRAM; the whole *node* at its BMC."""

DeviceKind = Literal["gpu", "cpu", "node"]


@dataclass(frozen=True)
class Facts:
    """What a backend can read at best (each device may offer less: :class:`DeviceFacts`).

    Attributes:
        name: registry name (``nvml``, ``nvidia-smi``, ``amdsmi``, ``simulated`` ...).
        kind: the meter slot it fills: ``gpu``, ``cpu`` or ``node``.
        label: prefix of its method labels (``nvml`` -> ``nvml-counter-edge-corrected``).
        energy_counter: a cumulative energy counter.
        instant_power: an instant power reading.
        average_power: a trailing-average power reading.
        average_period_s: span of that average, s (None without one).
        average_lag_s: lag of the average behind the power it averages, s (its middle:
            docs/measurement.md measured 0.57 s for NVML's 1-s average on an H200).
        update_period_s: how often the sensor's values change, s.
        counter_scope: what the counter (or power) covers (:data:`Scope`).
        temperature, clocks, utilization, power_limits, power_caps, process_list:
            further readings (bools).
        polled: read by polling (True) or streamed by a child process (False).
        simulated: a model, not a sensor: its figures are labelled ``simulated``.
        counter_resolution_j: the counter's step, J (None: unknown / fine).
        counter_wrap_j: the value at which the counter wraps, J (None: does not wrap).
    """

    name: str
    kind: DeviceKind = "gpu"
    label: str = ""
    energy_counter: bool = False
    instant_power: bool = False
    average_power: bool = False
    average_period_s: float | None = None
    average_lag_s: float | None = None
    update_period_s: float = 0.1
    counter_scope: Scope = "gpu"
    temperature: bool = False
    clocks: bool = False
    utilization: bool = False
    power_limits: bool = False
    power_caps: bool = False
    process_list: bool = False
    polled: bool = True
    simulated: bool = False
    counter_resolution_j: float | None = None
    counter_wrap_j: float | None = None

    def method(self, how: str) -> str:
        """Method label of a figure obtained ``how`` (``counter-edge-corrected``,
        ``power-integration``, ``average-power-lag-corrected``, ``counter``): prefixed
        with the backend's label and the scope when it is not one GPU; ``simulated`` for
        a model."""
        if self.simulated:
            return "simulated"
        scope = "" if self.counter_scope in ("gpu", "package", "dram") else f"{self.counter_scope}-"
        return f"{self.label or self.name}-{scope}{how}"

    def busy_method(self) -> str | None:
        """Method label of the GPU busy share this backend gives: its sampled
        utilization (``nvml-utilization-sampled``), the trial's own busy time for the
        simulated device (:data:`gcbench.energy.base.TRIAL_BUSY_METHOD`), or None where
        it reads no utilization."""
        if self.simulated:
            from gcbench.energy.base import TRIAL_BUSY_METHOD

            return TRIAL_BUSY_METHOD
        return f"{self.label or self.name}-utilization-sampled" if self.utilization else None

    def describe(self) -> str:
        """One line of what it reads (for ``gcbench doctor`` and docs)."""
        reads = [
            n
            for n, ok in (
                ("energy counter", self.energy_counter),
                ("instant power", self.instant_power),
                (f"{self.average_period_s:g}-s average power" if self.average_period_s else "", self.average_power),
                ("temperature", self.temperature),
                ("clocks", self.clocks),
                ("utilization", self.utilization),
                ("power limits", self.power_limits),
                ("power caps", self.power_caps),
                ("process list", self.process_list),
            )
            if ok and n
        ]
        return f"{', '.join(reads) or 'nothing'}; updates every {self.update_period_s:g} s; covers {self.counter_scope}"


@dataclass
class DeviceFacts:
    """What one opened device offers (the backend's :class:`Facts`, refined by probing).

    Attributes:
        facts: the backend's declared facts, with fields switched off where this device
            lacks them (e.g. ``energy_counter`` on a GPU before Volta).
        counter_reason: why the device has no counter (None when it has one).
        power_field: the power reading integrated when it is not the default one
            (e.g. nvidia-smi's ``power.draw``).
        scope_reason: how the scope was found (e.g. NVML's module-scope probe).
    """

    facts: Facts
    counter_reason: str | None = None
    power_field: str | None = None
    scope_reason: str | None = None

    @property
    def has_counter(self) -> bool:
        return self.facts.energy_counter

    def to_dict(self) -> dict:
        return {
            "backend": self.facts.name,
            "scope": self.facts.counter_scope,
            "energy_counter": self.facts.energy_counter,
            "instant_power": self.facts.instant_power,
            "average_power": self.facts.average_power,
            "average_period_s": self.facts.average_period_s,
            "average_lag_s": self.facts.average_lag_s,
            "update_period_s": self.facts.update_period_s,
            "counter_reason": self.counter_reason,
            "power_field": self.power_field,
            "scope_reason": self.scope_reason,
        }


class BackendUnavailable(MeasurementError):
    """This backend finds no device here: ``auto`` tries the next one (a forced backend
    raises it to the user). Any other :class:`MeasurementError` from :meth:`GpuBackend.open`
    (a MIG instance, a bad ``CUDA_VISIBLE_DEVICES``) stops the search."""


@dataclass
class Opened:
    """What :meth:`GpuBackend.open` found.

    Attributes:
        gpus: one dict per device: ``label`` (``gpu0`` ...), ``index`` (host index),
            ``uuid``, and any backend-specific keys the sampler needs.
        device_facts: {label: DeviceFacts}.
        notes: device-mapping notes for result.json.
        environment: facts recorded in result.json's environment (driver, limits ...).
        sampler_cfg: extra keys for the sampler's config (backend-specific).
    """

    gpus: list[dict]
    device_facts: dict[str, DeviceFacts]
    notes: list[str] = field(default_factory=list)
    environment: dict = field(default_factory=dict)
    sampler_cfg: dict = field(default_factory=dict)


class GpuBackend:
    """Base of every GPU backend (one file each). Subclasses set :attr:`facts` and
    implement :meth:`open`, :meth:`max_temperature_c` and :meth:`reader`.

    Readers live in the sampler process. A *polled* reader (``facts.polled``) has
    ``read(i, t_s, counter, extras) -> row`` (keys of :data:`gcbench.energy.base.SAMPLE_COLUMNS`
    after ``source``, None for unknown), ``mark(t_s, delta)`` (window edges; a no-op for a
    sensor), and ``processes(i) -> set[int] | None`` when ``facts.process_list``. A
    *streamed* reader has ``argv() -> list[str]`` (the child process to start),
    ``feed(data, t_s) -> (rows, events)`` with rows ``(t_s, index, row)``.
    """

    facts: ClassVar[Facts]

    def __init__(self, settings: Any = None, sim: dict | None = None):
        self.settings = settings
        self.sim = sim or {}

    def open(self, devices: list[int], env: dict) -> Opened:
        """Find the devices (host indices; [] = all) and their facts.

        Raises:
            BackendUnavailable: no device here (``auto`` goes on).
            MeasurementError: a configuration the trial must not run with.
        """
        raise NotImplementedError

    def max_temperature_c(self, opened: Opened) -> float | None:
        """The hottest device's temperature, deg C (None: unknown), for the cool-down."""
        return None

    @classmethod
    def reader(cls, cfg: dict) -> Any:
        """The sampler-side reader built from the sampler config (see the class docstring)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the library (nothing by default)."""


@dataclass(frozen=True)
class Entry:
    """One registered backend: name, device kind, ``module:Class`` path, and whether a
    plan may name it as ``energy.backend`` (GPU backends)."""

    name: str
    kind: DeviceKind
    path: str


REGISTRY: tuple[Entry, ...] = (
    Entry("nvml", "gpu", "gcbench.energy.nvml:NvmlBackend"),
    Entry("amdsmi", "gpu", "gcbench.energy.amdsmi:AmdSmiBackend"),
    Entry("nvidia-smi", "gpu", "gcbench.energy.smi:SmiBackend"),
    Entry("simulated", "gpu", "gcbench.energy.simulated:SimulatedBackend"),
    Entry("rapl", "cpu", "gcbench.energy.rapl:RAPL_FACTS"),
    Entry("hwmon", "cpu", "gcbench.energy.hwmon:HWMON_FACTS"),
    Entry("ipmi", "node", "gcbench.energy.node:IPMI_FACTS"),
    Entry("redfish", "node", "gcbench.energy.node:REDFISH_FACTS"),
)
"""Every backend, in ``auto`` order within its kind: the ONE list. ``simulated`` is last
among GPU backends: it is chosen only when no sensor is found (and says so). The node
meters (BMC over IPMI or Redfish) are never chosen by ``auto``: a plan names one in
``energy.node`` (:mod:`gcbench.energy.node`)."""


def entries(kind: DeviceKind | None = None) -> Iterator[Entry]:
    """Registered backends of ``kind`` (all when None), in ``auto`` order."""
    return (e for e in REGISTRY if kind is None or e.kind == kind)


def gpu_backend_names() -> tuple[str, ...]:
    """Names a plan may give as ``energy.backend`` besides ``auto``."""
    return tuple(e.name for e in entries("gpu"))


def _entry(name: str) -> Entry:
    for e in REGISTRY:
        if e.name == name:
            return e
    raise MeasurementError(
        "energy", f"unknown energy backend {name!r} (registered: {', '.join(e.name for e in REGISTRY)})"
    )


def load(name: str) -> Any:
    """The registered object (a backend class, or the facts of a CPU backend) of ``name``.

    Raises:
        MeasurementError: ``name`` is not registered.
    """
    module, attr = _entry(name).path.split(":")
    return getattr(importlib.import_module(module), attr)


def facts_of(name: str) -> Facts:
    """The declared :class:`Facts` of backend ``name``."""
    obj = load(name)
    return obj if isinstance(obj, Facts) else obj.facts


def without(facts: Facts, **changes: Any) -> Facts:
    """``facts`` with some fields changed (a device that lacks a reading, a module scope)."""
    return replace(facts, **changes)


HOW = {
    "counter-edge-corrected": "energy counter read throughout the window, edge corrected between its ticks",
    "counter": "energy counter read at the window edges, without edge correction",
    "power-integration": "trapezoid integral of instant power (no energy counter)",
    "average-power-lag-corrected": (
        "trailing-average power integrated over the window shifted by the average's lag "
        "(no counter, no instant reading); power steps at the edges leave an uncertainty it records"
    ),
}
"""What each method suffix of :meth:`Facts.method` means."""


def describe_method(method: str | None) -> str | None:
    """A sentence for a method label built by :meth:`Facts.method` (``amdsmi-counter-edge-corrected``,
    ``nvml-module-...``), or None for a label no registered backend builds. A report can
    use this instead of a fixed list of labels."""
    if not method:
        return None
    for e in REGISTRY:
        f = facts_of(e.name)
        if method == (f.label or f.name) and f.kind != "gpu":
            return f"{f.name} energy counters ({f.counter_scope} scope)"
        for how, text in HOW.items():
            if f.kind == "node":
                if method == f.method(how):
                    return f"{f.name}: {text}; covers the whole node at its BMC (GPU, CPU, memory and the rest)"
                continue
            for scope in ("gpu", "module"):
                if method == without(f, counter_scope=scope).method(how) and not f.simulated:
                    covers = "the whole module (GPU, CPU and memory)" if scope == "module" else "one GPU"
                    return f"{f.name}: {text}; covers {covers}"
    return None
