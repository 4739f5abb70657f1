"""AMD GPUs through AMD SMI (the ``amdsmi`` package on PyPI, ROCm 6+): energy counter,
socket power, temperature, clocks, utilization, power caps.

Facts (AMD SMI Python API, ``amdsmi_interface.py`` of amdsmi 7.0.2; ROCm documentation,
"Power Queries"):

* ``amdsmi_get_energy_count(h)`` -> ``{"energy_accumulator": counts, "counter_resolution":
  uJ per count (float, e.g. 15.259), "timestamp": ns}``: energy = counts x resolution. The
  accumulator is unsigned 64-bit (:data:`COUNTER_BITS`); a decrease is a wrap (counted
  modulo 2^bits) when the modular step is plausible, otherwise a reset (dropped and
  flagged like NVML's ``counter_decreased``). Not supported on a VM guest.
* ``amdsmi_get_power_info(h)`` -> ``current_socket_power`` (instant, W; ``"N/A"`` on
  MI300, which has only the average), ``average_socket_power`` (W), ``power_limit``.
  Any ``"N/A"`` is unknown (None), never 0.
* ``amdsmi_get_power_cap_info(h)`` -> ``power_cap``, ``default_power_cap``,
  ``min_power_cap``, ``max_power_cap`` in microwatts.
* ``amdsmi_get_temp_metric(h, AmdSmiTemperatureType.HOTSPOT, AmdSmiTemperatureMetric.CURRENT)``
  (deg C), ``amdsmi_get_clock_info(h, AmdSmiClkType.GFX)["clk"]`` (MHz),
  ``amdsmi_get_gpu_activity(h)["gfx_activity"]`` (%).
* Devices: ``amdsmi_get_processor_handles()``; host index = place in PCI (BDF) order,
  as NVML's. ``ROCR_VISIBLE_DEVICES`` (indices or ``GPU-<uuid>``) selects first, then
  ``HIP_VISIBLE_DEVICES`` (or ``CUDA_VISIBLE_DEVICES``, which HIP also honours) indexes
  into what ROCR left, like ``CUDA_VISIBLE_DEVICES`` for NVIDIA. A GPU in a compute
  partition mode other than SPX is several logical devices over one sensor: refused
  like a MIG slice.
* The average's span is not documented; it is taken as 1 s with its middle 0.5 s back
  (an assumption, stated in :attr:`AmdSmiBackend.facts`), so the cross-check allows for it.

The library is imported lazily (:func:`load`); tests replay recorded replies through a
stand-in module shaped like the real API (tests/energy/test_amdsmi.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gcbench.energy.backend import BackendUnavailable, DeviceFacts, Facts, GpuBackend, Opened, without
from gcbench.errors import MeasurementError

COUNTER_BITS = 64
"""Width of the energy accumulator (amdsmi_get_energy_count's uint64_t)."""

MAX_PLAUSIBLE_POWER_W = 3000.0
"""A modular step implying more than this between two reads is a reset, not a wrap."""


def load() -> Any:
    """Import and initialise amdsmi; returns the module.

    Raises:
        BackendUnavailable: the package or ``libamd_smi`` is missing, or init fails.
    """
    try:
        import amdsmi
    except Exception as exc:  # noqa: BLE001 - without ROCm, amdsmi 7's import raises KeyError('libamd_smi.so')
        raise BackendUnavailable(
            "amdsmi", f"amdsmi not importable ({type(exc).__name__}: {exc}); pip install 'gcbench[amd]' with ROCm"
        ) from exc
    try:
        amdsmi.amdsmi_init()
    except Exception as exc:  # noqa: BLE001 - AmdSmiException and ctypes load errors alike
        raise BackendUnavailable("amdsmi", f"amdsmi_init failed: {exc} (is the amdgpu driver loaded?)") from exc
    return amdsmi


def _num(v: Any) -> float | None:
    """An amdsmi value: ``"N/A"`` and non-numbers are unknown (None)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _uuid_key(text: str) -> str:
    return text.lower().removeprefix("gpu-").replace("-", "")


@dataclass
class AmdGpu:
    """One AMD GPU to measure: ``label`` gpuN (host index N), its handle's place in
    ``amdsmi_get_processor_handles()``, BDF and UUID, and whether it has the counter."""

    label: str
    host_index: int
    handle_index: int
    bdf: str
    uuid: str
    has_counter: bool = True
    counter_reason: str | None = None


def _split(value: str | None) -> list[str] | None:
    return None if value is None else [e.strip() for e in value.split(",") if e.strip()]


def resolve_devices(smi: Any, devices: list[int], env: dict) -> tuple[list[AmdGpu], list[str]]:
    """Map the trial's GPUs to amdsmi devices through ROCR/HIP visibility.

    Args:
        smi: the initialised module (:func:`load`).
        devices: host indices from the trial spec ([] = every visible GPU).
        env: the trial's environment (``ROCR_VISIBLE_DEVICES``, ``HIP_VISIBLE_DEVICES``,
            ``CUDA_VISIBLE_DEVICES``).

    Raises:
        BackendUnavailable: amdsmi finds no GPU.
        MeasurementError: an entry that is neither an index nor a known UUID, an index
            out of range, a partitioned GPU, or ``devices`` that disagree with the
            visibility variables.
    """
    handles = list(smi.amdsmi_get_processor_handles())
    if not handles:
        raise BackendUnavailable("amdsmi", "amdsmi finds no GPU")
    info: list[dict[str, Any]] = []
    for k, h in enumerate(handles):
        info.append(
            {"k": k, "bdf": str(smi.amdsmi_get_gpu_device_bdf(h)), "uuid": str(smi.amdsmi_get_gpu_device_uuid(h))}
        )
    by_pci = sorted(info, key=lambda g: g["bdf"].lower())
    for i, g in enumerate(by_pci):
        g["host"] = i
    notes: list[str] = []
    selected = list(by_pci)
    rocr = _split(env.get("ROCR_VISIBLE_DEVICES"))
    if rocr is not None:
        selected = [_pick(by_pci, e, "ROCR_VISIBLE_DEVICES", pos) for pos, e in enumerate(rocr)]
    hip_var = "HIP_VISIBLE_DEVICES" if env.get("HIP_VISIBLE_DEVICES") is not None else "CUDA_VISIBLE_DEVICES"
    hip = _split(env.get(hip_var))
    if hip is not None:
        selected = [_pick(selected, e, hip_var, pos) for pos, e in enumerate(hip)]
    if rocr is not None or hip is not None:
        if devices and sorted(devices) != sorted(g["host"] for g in selected):
            raise MeasurementError(
                "gpu",
                f"trial devices {devices} are not the GPUs the visibility variables select "
                f"(host indices {[g['host'] for g in selected]})",
            )
        if rocr is not None and hip is not None:
            notes.append(f"{hip_var} indexes into the GPUs ROCR_VISIBLE_DEVICES left visible")
    elif devices:
        missing = [n for n in devices if not 0 <= n < len(by_pci)]
        if missing:
            raise MeasurementError(f"gpu{missing[0]}", f"no such GPU: amdsmi sees {len(by_pci)}")
        selected = [by_pci[n] for n in devices]
    gpus = []
    for g in selected:
        h = handles[g["k"]]
        partition = _partition(smi, h)
        if partition not in (None, "SPX"):
            raise MeasurementError(
                f"gpu{g['host']}",
                f"compute partition mode {partition}: energy is per physical GPU; set SPX or measure the whole GPU",
            )
        gpu = AmdGpu(f"gpu{g['host']}", g["host"], g["k"], g["bdf"], g["uuid"])
        try:
            smi.amdsmi_get_energy_count(h)
        except Exception as exc:  # noqa: BLE001 - AmdSmiLibraryException (not supported on a VM guest)
            gpu.has_counter, gpu.counter_reason = False, f"energy counter unavailable ({exc}); energy from power"
        gpus.append(gpu)
    return gpus, notes


def _pick(pool: list[dict[str, Any]], entry: str, var: str, pos: int) -> dict[str, Any]:
    if entry.lower().startswith("gpu-") or "-" in entry:
        hits = [g for g in pool if _uuid_key(g["uuid"]).startswith(_uuid_key(entry))]
        if len(hits) != 1:
            raise MeasurementError(f"hip:{pos}", f"{var} entry {entry} matches {len(hits)} GPUs by UUID (expected 1)")
        return hits[0]
    try:
        n = int(entry)
    except ValueError:
        raise MeasurementError(f"hip:{pos}", f"{var} entry {entry!r} is neither an index nor a GPU- UUID") from None
    if not 0 <= n < len(pool):
        raise MeasurementError(f"hip:{pos}", f"{var} entry {n} but only {len(pool)} GPUs are visible")
    return pool[n]


def _partition(smi: Any, h: Any) -> str | None:
    fn = getattr(smi, "amdsmi_get_gpu_compute_partition", None)
    if fn is None:
        return None
    try:
        return str(fn(h)).upper() or None
    except Exception:  # noqa: BLE001 - not supported: not partitioned
        return None


class EnergyAccumulator:
    """The energy accumulator unwrapped: joules since the first read.

    Args:
        bits: the accumulator's width (:data:`COUNTER_BITS`).

    :meth:`update` takes one reply of ``amdsmi_get_energy_count`` and returns the
    cumulative energy, J; a decrease counts as a wrap when the modular step over the
    time since the counter last changed (reply timestamps) stays under
    :data:`MAX_PLAUSIBLE_POWER_W`, else as a reset
    (``resets`` counts them; the step is dropped).
    """

    def __init__(self, bits: int = COUNTER_BITS):
        self.modulus = 1 << bits
        self.prev: int | None = None
        self.prev_ns: int | None = None
        self.total_j = 0.0
        self.wraps = 0
        self.resets = 0

    def update(self, reply: dict) -> float:
        counts = int(reply["energy_accumulator"])
        res_uj = float(reply["counter_resolution"])
        ts = reply.get("timestamp")
        if self.prev is not None:
            step = counts - self.prev
            if step < 0:
                wrapped = step % self.modulus
                # since the counter's last change: it steps once per update, not per read
                dt_s = (int(ts) - int(self.prev_ns)) / 1e9 if ts is not None and self.prev_ns is not None else None
                if dt_s is not None and dt_s > 0 and wrapped * res_uj / 1e6 / dt_s <= MAX_PLAUSIBLE_POWER_W:
                    self.wraps += 1
                    step = wrapped
                else:
                    self.resets += 1
                    step = 0
            self.total_j += step * res_uj / 1e6
        if counts != self.prev or self.prev_ns is None:
            self.prev_ns = int(ts) if ts is not None else None
        self.prev = counts
        return self.total_j


class AmdSmiReader:
    """Polled reader of the sampler (the interface of :class:`gcbench.energy.backend.GpuBackend`)."""

    def __init__(self, smi: Any, handle_indices: list[int]):
        self.smi = smi
        handles = list(smi.amdsmi_get_processor_handles())
        self.handles = [handles[k] for k in handle_indices]
        self.counters = [EnergyAccumulator() for _ in self.handles]

    def sample(self, i: int, t_s: float, counter: bool, extras: bool = True) -> dict:
        smi, h = self.smi, self.handles[i]
        row: dict = dict.fromkeys(
            ("power_w", "power_instant_w", "energy_j", "temperature_c", "sm_clock_mhz", "clocks_event_reasons")
        )
        if counter:
            try:
                row["energy_j"] = self.counters[i].update(smi.amdsmi_get_energy_count(h))
            except Exception:  # noqa: BLE001 - a failed read is unknown
                pass
        try:
            p = smi.amdsmi_get_power_info(h)
            row["power_instant_w"] = _num(p.get("current_socket_power"))
            row["power_w"] = _num(p.get("average_socket_power"))
        except Exception:  # noqa: BLE001
            pass
        if extras:
            try:
                row["temperature_c"] = _num(
                    smi.amdsmi_get_temp_metric(
                        h, smi.AmdSmiTemperatureType.HOTSPOT, smi.AmdSmiTemperatureMetric.CURRENT
                    )
                )
            except Exception:  # noqa: BLE001
                pass
            try:
                row["sm_clock_mhz"] = _num(smi.amdsmi_get_clock_info(h, smi.AmdSmiClkType.GFX).get("clk"))
            except Exception:  # noqa: BLE001
                pass
        return row

    def mark(self, t_s: float, delta: int) -> None:
        """Window edges change nothing on a sensor."""


class AmdSmiBackend(GpuBackend):
    """AMD GPUs through amdsmi (the module docstring has the facts)."""

    facts = Facts(
        name="amdsmi",
        label="amdsmi",
        energy_counter=True,
        instant_power=True,
        average_power=True,
        average_period_s=1.0,  # assumed (not documented by AMD)
        average_lag_s=0.5,  # assumed: the middle of a 1-s trailing average
        update_period_s=0.001,  # the SMU accumulates every ~1 ms; the observed tick period is used when seen
        counter_scope="gpu",
        temperature=True,
        clocks=True,
        utilization=True,
        power_limits=True,
        power_caps=True,
        counter_wrap_j=None,  # per device: 2^64 counts x its resolution
    )

    def open(self, devices: list[int], env: dict) -> Opened:
        smi = load()
        gpus, notes = resolve_devices(smi, devices, env)
        self._smi = smi
        handles = list(smi.amdsmi_get_processor_handles())
        device_facts = {}
        env_gpus = []
        for g in gpus:
            h = handles[g.handle_index]
            res_uj = None
            if g.has_counter:
                try:
                    res_uj = float(smi.amdsmi_get_energy_count(h)["counter_resolution"])
                except Exception:  # noqa: BLE001
                    res_uj = None
            f = self.facts if g.has_counter else without(self.facts, energy_counter=False)
            if res_uj:
                f = without(f, counter_resolution_j=res_uj / 1e6, counter_wrap_j=(1 << COUNTER_BITS) * res_uj / 1e6)
            instant = _num(_safe(lambda h=h: smi.amdsmi_get_power_info(h), {}).get("current_socket_power"))
            if instant is None:  # MI300: only the average
                f = without(f, instant_power=False)
            device_facts[g.label] = DeviceFacts(f, counter_reason=g.counter_reason)
            caps = _safe(lambda h=h: smi.amdsmi_get_power_cap_info(h), {})
            env_gpus.append(
                {
                    "label": g.label,
                    "index": g.host_index,
                    "uuid": g.uuid,
                    "pci_bus_id": g.bdf,
                    "name": _safe(lambda h=h: smi.amdsmi_get_gpu_asic_info(h), {}).get("market_name"),
                    "counter_resolution_uj": res_uj,
                    **{
                        k: (v / 1e6 if (v := _num(caps.get(src))) is not None else None)
                        for k, src in (
                            ("limit_w", "power_cap"),
                            ("default_limit_w", "default_power_cap"),
                            ("min_limit_w", "min_power_cap"),
                            ("max_limit_w", "max_power_cap"),
                        )
                    },
                }
            )
        return Opened(
            gpus=[
                {
                    "label": g.label,
                    "uuid": g.uuid,
                    "index": g.host_index,
                    "handle_index": g.handle_index,
                    "has_counter": g.has_counter,
                    "counter_reason": g.counter_reason,
                }
                for g in gpus
            ],
            device_facts=device_facts,
            notes=notes,
            environment={"gpus": env_gpus},
        )

    def max_temperature_c(self, opened: Opened) -> float | None:
        smi = self._smi
        handles = list(smi.amdsmi_get_processor_handles())
        temps = []
        for g in opened.gpus:
            t = _safe(
                lambda g=g: smi.amdsmi_get_temp_metric(
                    handles[g["handle_index"]], smi.AmdSmiTemperatureType.HOTSPOT, smi.AmdSmiTemperatureMetric.CURRENT
                ),
                None,
            )
            if _num(t) is None:
                return None
            temps.append(float(t))
        return max(temps) if temps else None

    @classmethod
    def reader(cls, cfg: dict) -> AmdSmiReader:
        smi = load()
        return AmdSmiReader(smi, [g["handle_index"] for g in cfg["gpus"]])

    def close(self) -> None:
        smi = getattr(self, "_smi", None)
        if smi is not None:
            _safe(smi.amdsmi_shut_down, None)


def _safe(fn, default):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - an unreadable fact is unknown
        return default
