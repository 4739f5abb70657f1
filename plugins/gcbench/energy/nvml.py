"""NVML backend: device mapping, per-sample reads, environment facts.

Sources: NVML API reference (docs.nvidia.com/deploy/nvml-api) and the H200 facts in
ARCHITECTURE.md:

* ``nvmlDeviceGetTotalEnergyConsumption``: mJ since driver load, Volta and newer
  (NVML_ERROR_NOT_SUPPORTED before); changes every ~100 ms; one call costs ~4 ms.
* ``nvmlDeviceGetFieldValues`` with ``NVML_FI_DEV_POWER_INSTANT`` and
  ``NVML_FI_DEV_POWER_AVERAGE``: mW; the plain ``nvmlDeviceGetPowerUsage`` is the
  1-second average on Ampere and newer.
* NVML numbers GPUs in PCI bus order; CUDA numbers them fastest-first unless
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. We therefore never map by position: a
  ``CUDA_VISIBLE_DEVICES`` entry is matched by UUID (``GPU-...``) or, for an integer,
  by the PCI bus id of the GPU at that place in PCI order.
* NVML energy is per physical GPU: a MIG instance cannot be measured.
* ``nvmlDeviceGetComputeRunningProcesses`` / ``nvmlDeviceGetGraphicsRunningProcesses``
  list the processes holding a context on a GPU (PIDs). The sampler reads them during
  every window; a PID outside the trial's process tree makes the window
  ``foreign_process`` (:func:`classify_gpu_processes`), which invalidates the trial.

``pynvml`` (package ``nvidia-ml-py``) is imported lazily; tests mock it at this
boundary only.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from gcbench.energy.backend import BackendUnavailable, DeviceFacts, Facts, GpuBackend, Opened, without
from gcbench.errors import MeasurementError

POWER_SCOPE_GPU = 0
POWER_SCOPE_MODULE = 1
MODULE_MARGIN_MW = 1000
"""A module's power exceeds its GPU's by its CPU and memory (tens of W even idle); an
answer within 1 W of the GPU's own is the GPU (a discrete GPU echoing the scope)."""
"""NVML_POWER_SCOPE_MODULE (nvml.h: "Targets the whole module", GPU + CPU + memory of a
superchip); NVML_POWER_SCOPE_GPU is 0. Passed as a field's ``scopeId``."""

INIT_PID_NAMESPACE_INODE = 0xEFFFFFFC
"""Inode of the host's (initial) PID namespace, fixed by the kernel (PROC_PID_INIT_INO)."""


def load():
    """Import and initialise pynvml; returns the module.

    Raises:
        MeasurementError: the bindings are missing, the NVML library cannot be loaded
            (no NVIDIA driver), or initialisation fails; the message says why.
    """
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise MeasurementError("nvml", f"pynvml not importable ({exc}); pip install nvidia-ml-py") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise MeasurementError(
            "nvml", f"nvmlInit failed: {exc} (is the NVIDIA driver installed and libnvidia-ml.so.1 on the loader path?)"
        ) from exc
    except OSError as exc:  # pragma: no cover - ctypes load errors
        raise MeasurementError("nvml", f"cannot load libnvidia-ml: {exc}") from exc
    return pynvml


def _s(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class GpuInfo:
    """One GPU the meter measures.

    Attributes:
        host_index: NVML index (PCI bus order), as in nvidia-smi.
        label: ``gpu<host_index>``.
        uuid: ``GPU-...``; the sampler opens the handle by this UUID.
        pci_bus_id: e.g. ``00000000:00:06.0``.
        name: product name.
        has_counter: the energy counter is supported.
        counter_reason: why not, when it is not.
        cuda_index: position in ``CUDA_VISIBLE_DEVICES`` (the trial's ``cuda:<n>``), or None.
    """

    host_index: int
    label: str
    uuid: str
    pci_bus_id: str
    name: str
    has_counter: bool = True
    counter_reason: str | None = None
    cuda_index: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _all_gpus(pynvml) -> list[dict]:
    out = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        out.append(
            {
                "index": i,
                "handle": h,
                "uuid": _s(pynvml.nvmlDeviceGetUUID(h)),
                "pci_bus_id": _s(pynvml.nvmlDeviceGetPciInfo(h).busId),
                "name": _s(pynvml.nvmlDeviceGetName(h)),
            }
        )
    return out


def parse_cuda_visible_devices(value: str) -> list[str]:
    """``"0,GPU-ab12, 2"`` -> ["0", "GPU-ab12", "2"] (empty entries dropped)."""
    return [e.strip() for e in value.split(",") if e.strip()]


def resolve_devices(
    pynvml, devices: list[int], cuda_visible_devices: str | None = None, cuda_device_order: str | None = None
) -> tuple[list[GpuInfo], list[str]]:
    """Map the trial's GPUs to NVML devices.

    Args:
        pynvml: the initialised module (see :func:`load`).
        devices: host GPU indices from the trial spec; [] means every visible GPU.
        cuda_visible_devices: the trial's ``CUDA_VISIBLE_DEVICES`` (None when unset).
        cuda_device_order: the trial's ``CUDA_DEVICE_ORDER``.

    Returns:
        (gpus, notes): the GPUs to measure and remarks for the environment record.

    Raises:
        MeasurementError: a ``MIG-`` entry or a GPU in MIG mode, an unknown UUID or
            index, or ``devices`` that disagree with ``CUDA_VISIBLE_DEVICES``.
    """
    everything = _all_gpus(pynvml)
    by_pci = sorted(everything, key=lambda g: g["pci_bus_id"].lower())
    notes: list[str] = []
    chosen: list[tuple[dict, int | None]] = []
    if cuda_visible_devices is not None:
        for pos, entry in enumerate(parse_cuda_visible_devices(cuda_visible_devices)):
            if entry.startswith("MIG-"):
                raise MeasurementError(
                    f"cuda:{pos}",
                    f"CUDA_VISIBLE_DEVICES entry {entry} is a MIG instance; NVML "
                    "energy is per physical GPU, so a MIG slice cannot be measured: give "
                    "the trial a whole GPU",
                )
            if entry.startswith("GPU-"):
                hits = [g for g in everything if g["uuid"].startswith(entry)]
                if len(hits) != 1:
                    raise MeasurementError(
                        f"cuda:{pos}",
                        f"CUDA_VISIBLE_DEVICES entry {entry} matches {len(hits)} GPUs by UUID (expected 1)",
                    )
                chosen.append((hits[0], pos))
            else:
                try:
                    n = int(entry)
                except ValueError:
                    raise MeasurementError(
                        f"cuda:{pos}", f"CUDA_VISIBLE_DEVICES entry {entry!r} is neither an index nor a GPU- UUID"
                    ) from None
                if not 0 <= n < len(by_pci):
                    raise MeasurementError(
                        f"cuda:{pos}", f"CUDA_VISIBLE_DEVICES entry {n} but only {len(by_pci)} GPUs are present"
                    )
                chosen.append((by_pci[n], pos))
                if (cuda_device_order or "") != "PCI_BUS_ID":
                    notes.append(
                        "CUDA_VISIBLE_DEVICES has indices but CUDA_DEVICE_ORDER is not PCI_BUS_ID: "
                        "indices read in PCI bus order; set CUDA_DEVICE_ORDER=PCI_BUS_ID in the trial"
                    )
        if devices and sorted(devices) != sorted(g["index"] for g, _ in chosen):
            raise MeasurementError(
                "gpu",
                f"trial devices {devices} are not the GPUs CUDA_VISIBLE_DEVICES="
                f"{cuda_visible_devices} selects (NVML indices "
                f"{[g['index'] for g, _ in chosen]})",
            )
    else:
        wanted = devices or [g["index"] for g in everything]
        for n in wanted:
            hits = [g for g in everything if g["index"] == n]
            if not hits:
                raise MeasurementError(f"gpu{n}", f"no such GPU: NVML sees {len(everything)}")
            chosen.append((hits[0], None))
    gpus = []
    for g, cuda_pos in chosen:
        h = g["handle"]
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(h)
            if current == getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1):
                raise MeasurementError(
                    f"gpu{g['index']}",
                    "MIG mode is enabled: NVML energy is per physical GPU; disable MIG or measure the whole GPU",
                )
        except pynvml.NVMLError:
            pass  # not a MIG-capable GPU
        info = GpuInfo(
            host_index=g["index"],
            label=f"gpu{g['index']}",
            uuid=g["uuid"],
            pci_bus_id=g["pci_bus_id"],
            name=g["name"],
            cuda_index=cuda_pos,
        )
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        except pynvml.NVMLError as exc:
            info.has_counter = False
            info.counter_reason = f"energy counter unavailable ({exc}); energy from integrated power"
        gpus.append(info)
    return gpus, list(dict.fromkeys(notes))


def probe_power_scope(pynvml, handle) -> tuple[str, str]:
    """What this GPU's energy counter and power cover: ``("module", why)`` on a superchip
    whose NVML answers module-scope power (GH200, GB200: the counter then covers GPU, CPU
    and memory; Zeus PR #172), else ``("gpu", why)``.

    Probes ``nvmlDeviceGetFieldValues`` with ``NVML_FI_DEV_POWER_INSTANT`` at
    ``scopeId`` GPU and MODULE. A GPU that rejects the module scope, answers it with no
    value, or with its own GPU power (within :data:`MODULE_MARGIN_MW`) is GPU scope: a GB10 reports a C2C link but only GPU scope (Zeus PR
    #242), so the probe, never the product name, decides.
    """
    inst = pynvml.NVML_FI_DEV_POWER_INSTANT
    try:
        g, v = pynvml.nvmlDeviceGetFieldValues(handle, [(inst, POWER_SCOPE_GPU), (inst, POWER_SCOPE_MODULE)])
    except (pynvml.NVMLError, TypeError, ValueError) as exc:
        return "gpu", f"module power scope not supported ({exc})"
    if getattr(v, "nvmlReturn", 1) != 0:
        return "gpu", f"module power scope not supported (NVML return {v.nvmlReturn})"
    mw = _field_value(v)
    if not mw:
        return "gpu", "module power scope answered no value"
    gpu_mw = _field_value(g) if getattr(g, "nvmlReturn", 1) == 0 else None
    if gpu_mw is not None and mw - gpu_mw < MODULE_MARGIN_MW:
        # a module holds a CPU and memory beside the GPU: the same figure is the GPU's own
        return "gpu", f"module scope answers the GPU's own power ({mw / 1e3:.0f} W): GPU scope"
    return "module", (
        f"NVML answers module-scope power ({mw / 1e3:.0f} W): the energy counter covers the whole "
        "module (GPU, CPU and memory), not the GPU alone"
    )


def _field_value(v) -> float | None:
    if v.nvmlReturn != 0:
        return None
    t = v.valueType
    val = v.value
    return float(
        {
            0: val.dVal,
            1: val.uiVal,
            2: val.ulVal,
            3: val.ullVal,
            4: val.sllVal,
            5: getattr(val, "siVal", 0),
            6: getattr(val, "usVal", 0),
        }.get(t, val.uiVal)
    )


def _usage_is_instant(pynvml, handle) -> bool:
    """Whether ``nvmlDeviceGetPowerUsage`` of this GPU is its instant power: GPUs before
    Ampere (``nvmlDeviceGetArchitecture`` below ``NVML_DEVICE_ARCH_AMPERE``); Ampere and
    newer answer the 1-s average. False when the architecture is unknown."""
    try:
        arch = pynvml.nvmlDeviceGetArchitecture(handle)
    except Exception:  # noqa: BLE001 - an old pynvml or driver without the call: unknown
        return False
    ampere = getattr(pynvml, "NVML_DEVICE_ARCH_AMPERE", 7)
    unknown = getattr(pynvml, "NVML_DEVICE_ARCH_UNKNOWN", 0xFFFFFFFF)
    return isinstance(arch, int) and arch != unknown and arch < ampere


class NvmlReader:
    """Reads one sample row per GPU; used inside the sampler process.

    Every failed read is None (unknown), never 0.
    """

    def __init__(self, pynvml, uuids: list[str], scopes: list[str] | None = None):
        self.nv = pynvml
        self.handles = [pynvml.nvmlDeviceGetHandleByUUID(u) for u in uuids]
        fields = [pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_FI_DEV_POWER_AVERAGE]
        # a module-scope counter (Grace Hopper) is edge corrected with module-scope power
        self.fields = [
            [(f, POWER_SCOPE_MODULE) for f in fields] if sc == "module" else fields
            for sc in (scopes or ["gpu"] * len(uuids))
        ]
        self.fields_ok = [True] * len(uuids)
        # nvmlDeviceGetPowerUsage, read when the power fields fail: the 1-s average on
        # Ampere and newer, the instant power before (C16); unknown: the average
        self.usage_role = ["power_instant_w" if _usage_is_instant(pynvml, h) else "power_w" for h in self.handles]
        self._reasons = (
            getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )

    def read(self, i: int, counter: bool, extras: bool = True) -> dict:
        """Sample GPU ``i``: power (W), energy (J, when ``counter``), temperature,
        SM clock, clocks-event reasons and utilization (``gpu_util_pct``,
        nvmlDeviceGetUtilizationRates' ``gpu``) when ``extras``."""
        nv, h = self.nv, self.handles[i]
        row: dict = {
            "power_w": None,
            "power_instant_w": None,
            "energy_j": None,
            "temperature_c": None,
            "sm_clock_mhz": None,
            "clocks_event_reasons": None,
            "gpu_util_pct": None,
        }
        if counter:
            try:
                row["energy_j"] = nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3
            except nv.NVMLError:
                pass
        if self.fields_ok[i]:
            try:
                inst, avg = nv.nvmlDeviceGetFieldValues(h, self.fields[i])
                for key, v in (("power_instant_w", inst), ("power_w", avg)):
                    mw = _field_value(v)
                    row[key] = None if mw is None else mw / 1e3
            except nv.NVMLError:
                self.fields_ok[i] = False
        if row[self.usage_role[i]] is None:
            try:
                row[self.usage_role[i]] = nv.nvmlDeviceGetPowerUsage(h) / 1e3
            except nv.NVMLError:
                pass
        if extras:
            for key, fn in (
                ("temperature_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                ("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                ("clocks_event_reasons", lambda: self._reasons(h)),
                ("gpu_util_pct", lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu),
            ):
                try:
                    row[key] = fn()
                except (nv.NVMLError, AttributeError):  # an old pynvml without the call: unknown
                    pass
        return row

    def sample(self, i: int, t_s: float, counter: bool, extras: bool = True) -> dict:
        """The polled-reader interface (:class:`gcbench.energy.backend.GpuBackend`): :meth:`read`."""
        return self.read(i, counter=counter, extras=extras)

    def mark(self, t_s: float, delta: int) -> None:
        """Window edges change nothing on a sensor."""

    def processes(self, i: int) -> set[int] | None:
        """PIDs holding a compute or graphics context on GPU ``i``; None when NVML cannot
        say (not supported, no permission): unknown, never "no process"."""
        nv, h = self.nv, self.handles[i]
        pids: set[int] = set()
        known = False
        for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            fn = getattr(nv, name, None)
            if fn is None:
                continue
            try:
                pids.update(int(p.pid) for p in fn(h))
                known = True
            except nv.NVMLError:
                pass
        return pids if known else None

    def temperature_c(self, i: int) -> float | None:
        try:
            return float(self.nv.nvmlDeviceGetTemperature(self.handles[i], self.nv.NVML_TEMPERATURE_GPU))
        except self.nv.NVMLError:
            return None


def environment(pynvml, gpus: list[GpuInfo]) -> dict:
    """Driver and NVML versions and per-GPU facts (name, UUID, PCI, power limits in W)."""

    def safe(fn, *a):
        try:
            return fn(*a)
        except pynvml.NVMLError:
            return None

    gpu_list: list[dict[str, Any]] = []
    env = {
        "driver": _s(safe(pynvml.nvmlSystemGetDriverVersion) or "") or None,
        "nvml_version": _s(safe(pynvml.nvmlSystemGetNVMLVersion) or "") or None,
        "gpus": gpu_list,
    }
    for g in gpus:
        h = pynvml.nvmlDeviceGetHandleByUUID(g.uuid)
        cons = safe(pynvml.nvmlDeviceGetPowerManagementLimitConstraints, h)
        mw = {
            "limit_w": safe(pynvml.nvmlDeviceGetPowerManagementLimit, h),
            "enforced_limit_w": safe(pynvml.nvmlDeviceGetEnforcedPowerLimit, h),
            "default_limit_w": safe(pynvml.nvmlDeviceGetPowerManagementDefaultLimit, h),
        }
        d = g.to_dict()
        d.update({k: (v / 1e3 if v is not None else None) for k, v in mw.items()})
        d["min_limit_w"], d["max_limit_w"] = (cons[0] / 1e3, cons[1] / 1e3) if cons else (None, None)
        gpu_list.append(d)
    return env


# ----------------------------------------------------------------------------- foreign processes


def _read_stat(pid: int, proc: str = "/proc") -> tuple[int, str] | None:
    """(parent PID, command name) of a process from ``/proc/<pid>/stat``; None if gone."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses
    head, _, rest = raw.rpartition(")")
    fields = rest.split()
    if len(fields) < 2:
        return None
    return int(fields[1]), head.partition("(")[2]


def process_tree(root_pid: int, proc: str = "/proc") -> set[int]:
    """``root_pid`` and all its descendants now alive (one scan of /proc)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir(proc)
    except OSError:
        return {root_pid}
    for entry in entries:
        if entry.isdigit():
            st = _read_stat(int(entry), proc)
            if st is not None:
                children.setdefault(st[0], []).append(int(entry))
    tree, todo = {root_pid}, [root_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return tree


def in_host_pid_namespace() -> bool | None:
    """True when this process sees the host's PIDs (as NVML reports them); None: unknown."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino == INIT_PID_NAMESPACE_INODE
    except OSError:
        return None


def classify_gpu_processes(
    pids: set[int], trial_pid: int, proc: str = "/proc", tree: set[int] | None = None
) -> tuple[dict[int, str], set[int]]:
    """Sort the PIDs NVML lists on a GPU into the trial's and the others.

    Args:
        pids: from :meth:`NvmlReader.processes`.
        trial_pid: the trial process; it and its descendants (sampler, DataLoader and
            DDP workers, torchrun children) are the trial's.
        tree: the trial's process tree if already scanned.

    Returns:
        (foreign, unattributable): ``{pid: command name}`` of live processes outside
        the trial's tree, and the PIDs not alive in this PID namespace. The latter are
        a process that just ended, or, inside a container with its own PID namespace,
        a host PID that cannot be matched (the sampler then records the check as
        limited); they do not invalidate a trial on their own.
    """
    tree = tree if tree is not None else process_tree(trial_pid, proc)
    foreign: dict[int, str] = {}
    unattributable: set[int] = set()
    for pid in pids:
        if pid in tree:
            continue
        st = _read_stat(pid, proc)
        if st is None:
            unattributable.add(pid)
        else:
            foreign[pid] = st[1]
    return foreign, unattributable


# ----------------------------------------------------------------------------- the backend


class NvmlBackend(GpuBackend):
    """NVIDIA GPUs through NVML (the module docstring has the facts)."""

    facts = Facts(
        name="nvml",
        label="nvml",
        energy_counter=True,
        instant_power=True,
        average_power=True,
        average_period_s=1.0,
        average_lag_s=0.57,  # docs/measurement.md, integrate.AVERAGE_POWER_LAG_S
        update_period_s=0.1,
        counter_scope="gpu",
        temperature=True,
        clocks=True,
        utilization=True,
        power_limits=True,
        power_caps=True,
        process_list=True,
        counter_resolution_j=0.001,
    )

    def open(self, devices: list[int], env: dict) -> Opened:
        """Resolve ``devices`` through ``CUDA_VISIBLE_DEVICES`` (UUID / PCI mapping).

        Raises:
            BackendUnavailable: pynvml or the driver is missing, or NVML finds no GPU.
            MeasurementError: MIG, a ``cuda:`` device or ``CUDA_VISIBLE_DEVICES`` that
                cannot be mapped (the trial must not run on a guess).
        """
        try:
            nv = load()
            if nv.nvmlDeviceGetCount() == 0:
                raise MeasurementError("nvml", "NVML finds no GPU")
            gpus, notes = resolve_devices(nv, devices, env.get("CUDA_VISIBLE_DEVICES"), env.get("CUDA_DEVICE_ORDER"))
        except MeasurementError as exc:
            if "MIG" in str(exc) or exc.device.startswith("cuda:") or "CUDA_VISIBLE_DEVICES" in str(exc):
                raise
            raise BackendUnavailable(exc.device, str(exc).split(": ", 1)[-1]) from exc
        self._nv = nv
        scopes = {g.label: probe_power_scope(nv, nv.nvmlDeviceGetHandleByUUID(g.uuid)) for g in gpus}
        facts = {}
        for g in gpus:
            f = self.facts if g.has_counter else without(self.facts, energy_counter=False)
            scope, why = scopes[g.label]
            if scope == "module":
                f = without(f, counter_scope="module")
            facts[g.label] = DeviceFacts(f, counter_reason=g.counter_reason, scope_reason=why)
        env = environment(nv, gpus)
        for d in env["gpus"]:
            d["scope"], d["scope_reason"] = scopes[d["label"]]
        return Opened(
            gpus=[
                {
                    "label": g.label,
                    "uuid": g.uuid,
                    "index": g.host_index,
                    "has_counter": g.has_counter,
                    "counter_reason": g.counter_reason,
                    "scope": scopes[g.label][0],
                }
                for g in gpus
            ],
            device_facts=facts,
            notes=notes,
            environment=env,
        )

    def max_temperature_c(self, opened: Opened) -> float | None:
        nv = self._nv
        temps = []
        for g in opened.gpus:
            try:
                h = nv.nvmlDeviceGetHandleByUUID(g["uuid"])
                temps.append(float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)))
            except nv.NVMLError:
                return None
        return max(temps) if temps else None

    @classmethod
    def reader(cls, cfg: dict) -> NvmlReader:
        return NvmlReader(load(), [g["uuid"] for g in cfg["gpus"]], [g.get("scope", "gpu") for g in cfg["gpus"]])
