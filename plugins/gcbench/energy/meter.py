"""The energy meter of a trial: one object, a verb pair, plain results.

How it measures
---------------
:class:`Meter` starts a *sampling process* (``python -m gcbench.energy.sampler``, a
plain subprocess, so sampling never holds the trial's GIL and an unguarded
``__main__`` in the trial is never re-imported as with ``multiprocessing`` spawn). The
sampler streams every reading to ``samples.csv`` (flushed at least every 0.5 s, so a
SIGKILLed trial keeps its samples). At :meth:`Meter.stop` the samples are read back and
each window's energy is computed:

* **GPU, NVML (Volta and newer)**: the energy counter (mJ since driver load), edge
  corrected with instant power (:mod:`gcbench.energy.integrate`), and cross-checked
  against the 1-s average power integrated over the window shifted by its lag, with
  an allowance for power steps at the edges (docs/measurement.md). The trapezoid of
  instant power is recorded too, for information.
* **GPU without the counter** (NVML_ERROR_NOT_SUPPORTED) or through **nvidia-smi**:
  trapezoid of instant power (``power.draw`` when ``power.draw.instant`` is missing),
  with the method recorded.
* **simulated** (no GPU): a deterministic model (:mod:`gcbench.energy.simulated`),
  labelled ``simulated`` everywhere, never passed off as a measurement.
* **CPU**: RAPL package + DRAM per socket, wrap-corrected (:mod:`gcbench.energy.rapl`);
  unknown (None, with ``cpu_reason``) when unreadable, never 0.

Traps it avoids: the 1-s averaging of NVML's power reading (the counter is primary),
the counter's 100 ms granularity (edge correction; windows under 10 update periods are
flagged ``window_too_short`` but still reported), another process on the GPU during a
window (NVML's process list, flagged ``foreign_process``), windows aligned with the sensor's
averaging (seeded start jitter), ``CUDA_VISIBLE_DEVICES`` remapping (UUID/PCI mapping,
MIG refused) -- all resolved at :meth:`start`, with errors that say how to fix them.

Example (runs anywhere; simulated on a machine without a GPU)::

    from pathlib import Path
from typing import TYPE_CHECKING, Any
    from gcbench.spec import EnergySettings
    from gcbench.energy.meter import Meter

    with Meter(EnergySettings(), devices=[0], samples_path=Path("samples.csv"), seed=1) as m:
        m.begin_window("main")
        work()
        m.end_window("main")
    result = m.results["main"]          # EnergyResult
    print(result.gpu_energy_j, result.gpu[0].method, result.simulated)
"""

from __future__ import annotations

import json
import os
import random
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gcbench.energy import integrate
from gcbench.energy.base import CROSS_CHECK_FLAG_REL, CROSS_CHECK_INVALID_REL, DeviceEnergy, EnergyResult
from gcbench.errors import MeasurementError

if TYPE_CHECKING:
    from gcbench.energy.rapl import RaplDiscovery

IDLE_KEY = "__idle_baseline__"
PROCESS_CHECK_S = 0.5
"""Seconds between two listings of the GPUs' processes during a window (NVML)."""
SIM_IDLE_W = 60.0
SIM_BUSY_W = 300.0


# ----------------------------------------------------------------------------- cool-down


def wait_for_cooldown(
    read_temp_c,
    max_s: float,
    threshold_c: float,
    stable_s: float = 5.0,
    stable_tol_c: float = 1.0,
    poll_s: float = 0.5,
    clock=time.monotonic,
    sleep=time.sleep,
) -> dict:
    """Wait until the GPU temperature is below ``threshold_c`` or stable, at most ``max_s``.

    Args:
        read_temp_c: returns the hottest measured GPU's temperature, deg C (None: unknown).
        max_s: cap of the wait, s (0: no wait).
        threshold_c: done when the temperature is at or below this.
        stable_s, stable_tol_c: done when the last ``stable_s`` seconds of readings span
            at most ``stable_tol_c``.

    Returns:
        {"waited_s", "temperature_c", "reason"} with reason ``below_threshold``,
        ``stable``, ``timeout``, ``disabled`` or ``unknown_temperature``.
    """
    t0 = clock()
    if max_s <= 0:
        return {"waited_s": 0.0, "temperature_c": read_temp_c(), "reason": "disabled"}
    history: list[tuple[float, float]] = []
    while True:
        now = clock()
        temp = read_temp_c()
        if temp is None:
            return {"waited_s": now - t0, "temperature_c": None, "reason": "unknown_temperature"}
        if temp <= threshold_c:
            return {"waited_s": now - t0, "temperature_c": temp, "reason": "below_threshold"}
        history.append((now, temp))
        recent = [x for t, x in history if t >= now - stable_s]
        if now - history[0][0] >= stable_s and max(recent) - min(recent) <= stable_tol_c:
            return {"waited_s": now - t0, "temperature_c": temp, "reason": "stable"}
        if now - t0 >= max_s:
            return {"waited_s": now - t0, "temperature_c": temp, "reason": "timeout"}
        sleep(min(poll_s, max(0.0, max_s - (now - t0))))


# ----------------------------------------------------------------------------- samples


@dataclass
class DeviceSeries:
    """One device's samples as arrays (NaN = unknown)."""

    t_s: np.ndarray
    power_w: np.ndarray
    power_instant_w: np.ndarray
    energy_j: np.ndarray
    source: str


def read_samples(path: Path) -> dict[str, DeviceSeries]:
    """samples.csv -> {device: DeviceSeries}, rows sorted by time."""
    cols: dict[str, list[list[float]]] = {}
    sources: dict[str, str] = {}

    def num(x: str) -> float:
        return float(x) if x else np.nan

    with open(path, encoding="utf-8") as f:
        header = f.readline().strip().split(",")
        ix = {c: i for i, c in enumerate(header)}
        for line in f:
            parts = line.rstrip("\n").split(",")
            if len(parts) != len(header):
                continue  # a line cut by a kill
            dev = parts[ix["device"]]
            sources.setdefault(dev, parts[ix["source"]])
            cols.setdefault(dev, []).append(
                [
                    num(parts[ix["t_s"]]),
                    num(parts[ix["power_w"]]),
                    num(parts[ix["power_instant_w"]]),
                    num(parts[ix["energy_j"]]),
                ]
            )
    out = {}
    for dev, rows in cols.items():
        a = np.array(rows, dtype=float)
        a = a[np.argsort(a[:, 0], kind="stable")]
        out[dev] = DeviceSeries(a[:, 0], a[:, 1], a[:, 2], a[:, 3], sources[dev])
    return out


def gpu_window_energy(
    series: DeviceSeries,
    label: str,
    start_s: float,
    end_s: float,
    *,
    has_counter: bool = True,
    counter_reason: str | None = None,
    power_field: str | None = None,
    cross_check_threshold: float = CROSS_CHECK_FLAG_REL,
    cross_check_invalid: float = CROSS_CHECK_INVALID_REL,
) -> tuple[DeviceEnergy, list[str]]:
    """One GPU's energy over [start_s, end_s] from its samples.

    Args:
        cross_check_threshold, cross_check_invalid: flag and invalid thresholds of the
            cross-check (:func:`gcbench.energy.integrate.cross_check_reference`); the
            meter flags ``cross_check_disagreement`` above the first; validation
            re-applies the plan's thresholds to the recorded figures.

    Returns:
        (DeviceEnergy, flags). ``energy_j`` is None only when no sample covers the window.
    """
    flags: list[str] = []
    src = series.source
    simulated = src == "simulated"
    inst_ok = np.isfinite(series.power_instant_w)
    if inst_ok.any():
        pt, pw = series.t_s[inst_ok], series.power_instant_w[inst_ok]
        power_note = None
    else:
        ok = np.isfinite(series.power_w)
        pt, pw = series.t_s[ok], series.power_w[ok]
        power_note = "instant power unavailable: 1-s average power integrated (lags up to 1 s)"
    e_ok = np.isfinite(series.energy_j)
    ticks = integrate.detect_ticks(series.t_s[e_ok], series.energy_j[e_ok]) if e_ok.sum() >= 2 else None
    period = (ticks.period_s if ticks and ticks.period_s else None) or integrate.DEFAULT_UPDATE_PERIOD_S
    dev = DeviceEnergy(
        device=label, energy_j=None, method="unavailable", source=src, update_period_s=period, power_field=power_field
    )
    if integrate.too_short(end_s - start_s, period):
        flags.append("window_too_short")
    covered = pt.size > 0 and pt[0] <= start_s + 2 * period and pt[-1] >= end_s - 2 * period
    if not covered:
        dev.reason = "no power samples cover the window (sampler stopped or never ran)"
        flags.append("samples_incomplete")
        return dev, flags
    integrated = integrate.power_integral_j(pt, pw, start_s, end_s)
    cw = integrate.counter_window_energy_j(ticks, pt, pw, start_s, end_s) if ticks and has_counter else None
    if cw is not None:
        dev.energy_j = cw.energy_j
        dev.method = "simulated" if simulated else "nvml-counter-edge-corrected"
        if cw.decreased:
            flags.append("counter_decreased")
        if power_note is None:  # the instant trapezoid, for information
            dev.instant_integral_j = integrated
            dev.instant_integral_rel = integrate.cross_check(cw.energy_j, integrated)[0]
        avg_ok = np.isfinite(series.power_w)
        cc = integrate.cross_check_reference(
            cw.energy_j,
            series.t_s[avg_ok],
            series.power_w[avg_ok],
            start_s,
            end_s,
            flag_rel=cross_check_threshold,
            invalid_rel=cross_check_invalid,
        )
        dev.cross_check_method = "average-power-lag"
        dev.cross_check_j, dev.cross_check_rel = cc.reference_j, cc.rel
        dev.cross_check_allowance_rel, dev.cross_check_excess_rel = cc.allowance_rel, cc.excess_rel
        dev.cross_check_verdict, dev.cross_check_lag_s, dev.cross_check_reason = cc.verdict, cc.lag_s, cc.reason
        if cc.verdict in ("flag", "invalid"):
            flags.append("cross_check_disagreement")
    else:
        dev.energy_j = integrated
        dev.method = (
            "simulated" if simulated else f"{'nvidia-smi' if src == 'nvidia-smi' else 'nvml'}-power-integration"
        )
        dev.reason = counter_reason or (
            "no counter on this backend"
            if src == "nvidia-smi" or not has_counter
            else "no counter tick after the window end: power integrated"
        )
    if ticks and any(start_s <= t <= end_s for t in ticks.decreased_t_s) and "counter_decreased" not in flags:
        flags.append("counter_decreased")
    notes = [n for n in (dev.reason, power_note) if n]
    if simulated:
        notes.insert(0, "simulated device: deterministic power model, not a measurement")
    dev.reason = "; ".join(notes) or None
    return dev, flags


def cpu_window_energy(series: DeviceSeries, label: str, start_s: float, end_s: float) -> DeviceEnergy:
    """One RAPL domain's energy over the window: cumulative counter interpolated at the edges."""
    ok = np.isfinite(series.energy_j)
    t, e = series.t_s[ok], series.energy_j[ok]
    dev = DeviceEnergy(device=label, energy_j=None, method="rapl", source="rapl")
    if t.size < 2 or t[0] > start_s + 1.0 or t[-1] < end_s - 1.0:
        dev.method, dev.reason = "unavailable", "RAPL samples do not cover the window"
        return dev
    dev.energy_j = float(np.interp(end_s, t, e) - np.interp(start_s, t, e))
    dev.update_period_s = float(np.median(np.diff(t)))
    return dev


# ----------------------------------------------------------------------------- meter


def _span(key: str, window: list[float | None]) -> tuple[float, float]:
    """``(start_s, end_s)`` of an ended window.

    Raises:
        MeasurementError: the window has no end (stop() ends every window first).
    """
    start_s, end_s = window
    if start_s is None or end_s is None:
        raise MeasurementError("meter", f"window {key!r} has no end")
    return start_s, end_s


class Meter:
    """Zeus-like energy meter of one trial (see the module docstring for the method).

    Args:
        settings: the trial's :class:`gcbench.spec.EnergySettings`.
        devices: host GPU indices (NVML numbering); [] means every visible GPU.
        samples_path: where samples.csv is streamed.
        seed: seeds the window start jitter.
        cross_check_threshold: excess of the counter over the 1-s average reference,
            beyond the edge allowance, that flags a window ``cross_check_disagreement``
            (``settings.cross_check_threshold`` is used instead when the settings have
            it); validation applies the plan's own thresholds to the recorded figures.
        env: environment to read ``CUDA_VISIBLE_DEVICES`` / ``CUDA_DEVICE_ORDER`` from
            (default ``os.environ``).

    Attributes:
        origin_monotonic: ``time.monotonic()`` at :meth:`start`; samples' ``t_s`` are
            relative to it.
        backend: ``nvml``, ``nvidia-smi`` or ``simulated`` once started.
        results: what :meth:`stop` returned.

    Raises (from :meth:`start`):
        MeasurementError: forced backend unavailable, MIG, bad device mapping, sampler
            failed to start.
    """

    def __init__(
        self,
        settings,
        devices: list[int],
        samples_path: Path,
        seed: int,
        *,
        cross_check_threshold: float = CROSS_CHECK_FLAG_REL,
        env: dict | None = None,
        sim_idle_w: float = SIM_IDLE_W,
        sim_busy_w: float = SIM_BUSY_W,
    ):
        self.settings = settings
        self.devices = list(devices)
        self.samples_path = Path(samples_path)
        self.seed = seed
        # a plan-set threshold (EnergySettings.cross_check_threshold, when the spec has it) wins
        self.cross_check_threshold = getattr(settings, "cross_check_threshold", None) or cross_check_threshold
        self.env = dict(os.environ if env is None else env)
        self.sim_idle_w, self.sim_busy_w = sim_idle_w, sim_busy_w
        self.rng = random.Random(seed)
        self.origin_monotonic: float = 0.0
        self.backend: str = "unresolved"
        self.results: dict[str, EnergyResult] = {}
        self.gpus: list[dict] = []
        self.windows: dict[str, list[float | None]] = {}
        self.events: list[dict] = []
        self.notes: list[str] = []
        self.cooldown: dict | None = None
        self.idle_power_w: dict[str, float | None] = {}
        self.jitter_s: dict[str, float] = {}
        self._env_facts: dict = {}
        self._rapl: RaplDiscovery | None = None
        self._proc: subprocess.Popen | None = None
        self._started = False
        self._stopped = False
        self._nvml: Any = None  # the pynvml module with the nvml backend
        self._smi_roles: dict[str, str] | None = None
        self.sampler_stats: dict | None = None

    # ------------------------------------------------------------------ start
    def _resolve_backend(self) -> None:
        from gcbench.energy import nvml, smi

        wanted = self.settings.backend
        why: list[str] = []
        if wanted in ("auto", "nvml"):
            try:
                nv = nvml.load()
                if nv.nvmlDeviceGetCount() == 0:
                    raise MeasurementError("nvml", "NVML finds no GPU")
                gpus, notes = nvml.resolve_devices(
                    nv, self.devices, self.env.get("CUDA_VISIBLE_DEVICES"), self.env.get("CUDA_DEVICE_ORDER")
                )
                self._nvml, self.backend, self.notes = nv, "nvml", notes
                self.gpus = [
                    {
                        "label": g.label,
                        "uuid": g.uuid,
                        "index": g.host_index,
                        "has_counter": g.has_counter,
                        "counter_reason": g.counter_reason,
                    }
                    for g in gpus
                ]
                self._env_facts = nvml.environment(nv, gpus)
                return
            except MeasurementError as exc:
                if (
                    wanted == "nvml"
                    or "MIG" in str(exc)
                    or exc.device.startswith("cuda:")
                    or "CUDA_VISIBLE_DEVICES" in str(exc)
                ):
                    raise
                why.append(str(exc))
        if wanted in ("auto", "nvidia-smi"):
            path = smi.find_nvidia_smi()
            listed = smi.list_gpus(nvidia_smi=path) if path else []
            if path and listed:
                if any(str(e).startswith("MIG-") for e in (self.env.get("CUDA_VISIBLE_DEVICES") or "").split(",")):
                    raise MeasurementError(
                        "cuda",
                        "CUDA_VISIBLE_DEVICES names a MIG instance: energy is per "
                        "physical GPU; give the trial a whole GPU",
                    )
                wanted_idx = self.devices or [g["index"] for g in listed]
                by_idx = {g["index"]: g for g in listed}
                missing = [i for i in wanted_idx if i not in by_idx]
                if missing:
                    raise MeasurementError(f"gpu{missing[0]}", f"nvidia-smi lists no GPU {missing[0]}")
                self._smi_roles = smi.probe_fields(wanted_idx, nvidia_smi=path)
                self.backend = "nvidia-smi"
                self.gpus = [
                    {
                        "label": f"gpu{i}",
                        "uuid": by_idx[i]["uuid"],
                        "index": i,
                        "has_counter": False,
                        "counter_reason": "nvidia-smi has no energy counter",
                        "name": by_idx[i]["name"],
                    }
                    for i in wanted_idx
                ]
                self._env_facts = {"gpus": self.gpus, "nvidia_smi": path, "nvidia_smi_fields": self._smi_roles}
                self._nvidia_smi = path
                return
            why.append("nvidia-smi not found on PATH" if not path else "nvidia-smi lists no GPU")
            if wanted == "nvidia-smi":
                raise MeasurementError("nvidia-smi", "; ".join(why))
        self.backend = "simulated"
        self.gpus = [
            {"label": f"gpu{i}", "uuid": None, "index": i, "has_counter": True, "counter_reason": None}
            for i in (self.devices or [0])
        ]
        self._env_facts = {
            "gpus": self.gpus,
            "simulated_model": {"idle_w": self.sim_idle_w, "busy_w": self.sim_busy_w, "tick_s": 0.1},
            "why_simulated": "; ".join(why) or "backend 'simulated' requested",
        }

    def _max_temperature_c(self) -> float | None:
        if self.backend == "nvml":
            temps = []
            for g in self.gpus:
                try:
                    h = self._nvml.nvmlDeviceGetHandleByUUID(g["uuid"])
                    temps.append(float(self._nvml.nvmlDeviceGetTemperature(h, self._nvml.NVML_TEMPERATURE_GPU)))
                except self._nvml.NVMLError:
                    return None
            return max(temps) if temps else None
        if self.backend == "nvidia-smi":
            from gcbench.energy import smi

            rc, out = smi.run_argv(
                smi.query_argv(["temperature.gpu"], [g["index"] for g in self.gpus], nvidia_smi=self._nvidia_smi)
            )
            try:
                vals = [r["temperature.gpu"] for r in smi.parse_query_csv(out, ["temperature.gpu"])] if rc == 0 else []
            except ValueError:
                return None
            return max(vals) if vals and None not in vals else None
        return 35.0  # simulated idle temperature

    def start(self) -> None:
        """Resolve backend and devices, cool down, start sampling, measure idle baseline.

        Raises:
            MeasurementError: see the class docstring.
        """
        if self._started:
            raise MeasurementError("meter", "start() called twice")
        from gcbench.energy import rapl

        self._resolve_backend()
        s = self.settings
        self.cooldown = wait_for_cooldown(self._max_temperature_c, s.cooldown_max_s, s.cooldown_temp_c)
        self._rapl = rapl.discover(s.rapl_root)
        rapl_ok = self._rapl.reason is None and self._rapl.domains
        self.origin_monotonic = time.monotonic()
        origin_wall = time.time()
        cfg = {
            "backend": self.backend,
            "samples_path": str(self.samples_path),
            "origin_monotonic": self.origin_monotonic,
            "origin_wall": origin_wall,
            "sample_hz": s.sample_hz,
            "counter_hz": s.counter_hz,
            "gpus": self.gpus,
            "rapl": [
                {"label": d.label, "path": d.path, "max_energy_range_uj": d.max_energy_range_uj}
                for d in self._rapl.domains
            ]
            if rapl_ok
            else [],
            "rapl_interval_s": min(1.0 / s.counter_hz, rapl.max_poll_interval_s(self._rapl.domains)),
            "smi_roles": self._smi_roles,
            "nvidia_smi": getattr(self, "_nvidia_smi", None),
            "sim": {"idle_w": self.sim_idle_w, "busy_w": self.sim_busy_w},
            "trial_pid": os.getpid(),
            "process_check_s": PROCESS_CHECK_S,
            "tail_s": integrate.reference_tail_s(s.sample_hz),
        }
        self.samples_path.parent.mkdir(parents=True, exist_ok=True)
        pkg_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        log = open(self.samples_path.with_suffix(".sampler.log"), "w", encoding="utf-8")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "gcbench.energy.sampler"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
        )
        log.close()
        self._started = True
        self._send(json.dumps(cfg))
        msg = self._read_message(timeout_s=60.0)
        if not msg or not msg.get("ready"):
            self._kill()
            raise MeasurementError(
                "sampler",
                f"sampling process did not start: {msg or 'no answer'} "
                f"(see {self.samples_path.with_suffix('.sampler.log')})",
            )
        if s.idle_baseline_s > 0:
            self._send("burst")
            t0 = time.monotonic() - self.origin_monotonic
            time.sleep(s.idle_baseline_s)
            t1 = time.monotonic() - self.origin_monotonic
            self._send("burst")
            self.windows[IDLE_KEY] = [t0, t1]

    def _send(self, line: str) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            return  # no sampler started
        try:
            proc.stdin.write((line + "\n").encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError, AttributeError, ValueError):
            pass  # the sampler is gone; stop() reports what it wrote

    def _read_message(self, timeout_s: float) -> dict | None:
        if self._proc is None or self._proc.stdout is None:
            return None  # no sampler started: no answer
        fd = self._proc.stdout.fileno()
        line = b""
        deadline = time.monotonic() + timeout_s
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            ch = os.read(fd, 1)
            if not ch:
                return None
            line += ch
        try:
            return json.loads(line)
        except ValueError:
            return {"unparsed": line.decode(errors="replace")}

    # ------------------------------------------------------------------ windows
    def _now(self) -> float:
        return time.monotonic() - self.origin_monotonic

    def begin_window(self, key: str = "main", at_s: float | None = None) -> float:
        """Sleep a seeded random delay in [0, jitter_max_s], then open window ``key``.

        Args:
            key: the window's name.
            at_s: open it at this time instead (s since :attr:`origin_monotonic`), with
                no jitter: an edge timed by the program that marked it (the control
                channel). It may lie a little in the past; the sampler reads the
                counter at a high rate from the moment it is told.

        Returns:
            the window's start, s since :attr:`origin_monotonic`.

        Raises:
            MeasurementError: meter not started, or ``key`` already open.
        """
        if not self._started or self._stopped:
            raise MeasurementError("meter", "begin_window() outside start()/stop()")
        if key in self.windows and self.windows[key][1] is None:
            raise MeasurementError("meter", f"window {key!r} is already open")
        if at_s is None:
            delay = self.rng.uniform(0.0, self.settings.jitter_max_s) if self.settings.jitter_max_s > 0 else 0.0
            self.jitter_s[key] = delay
            if delay:
                time.sleep(delay)
            t = self._now()
        else:
            t = float(at_s)
        self._send(f"begin {t:.6f}")
        self.windows[key] = [t, None]
        return t

    def end_window(self, key: str = "main", at_s: float | None = None) -> float:
        """Close window ``key`` now (or at ``at_s``, as :meth:`begin_window`); returns
        its end, s since :attr:`origin_monotonic`.

        Raises:
            MeasurementError: ``key`` was not opened or is already closed, or ``at_s``
                lies before its start.
        """
        w = self.windows.get(key)
        if w is None or w[1] is not None:
            raise MeasurementError("meter", f"window {key!r} is not open")
        t = self._now() if at_s is None else float(at_s)
        if w[0] is not None and t < w[0]:
            raise MeasurementError("meter", f"window {key!r} would end at {t:.6f} s, before its start {w[0]:.6f} s")
        w[1] = t
        self._send(f"end {t:.6f}")
        return t

    def move_window_start(self, key: str, start_s: float) -> None:
        """Start the open window ``key`` at ``start_s`` instead (s since
        :attr:`origin_monotonic`, not before its current start): a user's program that
        marks its own window inside the span first opened for it.

        Raises:
            MeasurementError: ``key`` is not open, or ``start_s`` is before its start.
        """
        w = self.windows.get(key)
        if w is None or w[1] is not None:
            raise MeasurementError("meter", f"window {key!r} is not open")
        if w[0] is not None and start_s < w[0]:
            raise MeasurementError("meter", f"window {key!r} cannot start at {start_s:.6f} s, before {w[0]:.6f} s")
        w[0] = float(start_s)
        self.jitter_s.pop(key, None)
        self._send("burst")

    # ------------------------------------------------------------------ stop
    def _kill(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def stop(self, cross_check_threshold: float | None = None) -> dict[str, EnergyResult]:
        """Stop sampling (after one more counter tick past the last edge, and not before
        power has been read for :func:`gcbench.energy.integrate.reference_tail_s` after
        the last window's end, about 1.2 s at 20 Hz, for the cross-check) and compute
        every window. Safe to call twice (returns the same results) and after an
        exception. A window still open is closed now and flagged ``window_not_ended``.

        Returns:
            {window key: EnergyResult} (the idle baseline is not a key; it is in each
            DeviceEnergy's ``idle_power_w``).
        """
        if self._stopped or not self._started:
            return self.results
        self._stopped = True
        if cross_check_threshold is not None:
            self.cross_check_threshold = cross_check_threshold
        not_ended = [k for k, w in self.windows.items() if w[1] is None]
        for k in not_ended:
            self.end_window(k)
        self._send("stop")
        try:
            if self._proc is not None and self._proc.stdin is not None:
                self._proc.stdin.close()
        except OSError:
            pass
        while True:
            msg = self._read_message(timeout_s=10.0)
            if msg is None or msg.get("done"):
                self.sampler_stats = msg
                break
            if msg.get("event"):
                self.events.append(msg)
            if msg.get("error"):
                self.events.append(msg)
        self._kill()
        self.results = self._compute(not_ended)
        return self.results

    def _compute(self, not_ended: list[str]) -> dict[str, EnergyResult]:
        series = read_samples(self.samples_path) if self.samples_path.exists() else {}
        n_rows = sum(len(s.t_s) for s in series.values())
        simulated = self.backend == "simulated"
        power_field = (self._smi_roles or {}).get("power_instant_w") if self.backend == "nvidia-smi" else None

        def gpu_list(a: float, b: float) -> tuple[list[DeviceEnergy], list[str]]:
            devs, flags = [], []
            for g in self.gpus:
                s = series.get(g["label"])
                if s is None:
                    devs.append(
                        DeviceEnergy(g["label"], None, "unavailable", self.backend, reason="no samples from this GPU")
                    )
                    flags.append("samples_incomplete")
                    continue
                d, f = gpu_window_energy(
                    s,
                    g["label"],
                    a,
                    b,
                    has_counter=g.get("has_counter", True),
                    counter_reason=g.get("counter_reason"),
                    power_field=power_field,
                    cross_check_threshold=self.cross_check_threshold,
                )
                devs.append(d)
                flags += f
            return devs, flags

        # stop() has ended every window
        spans = {k: _span(k, w) for k, w in self.windows.items()}
        if IDLE_KEY in spans:
            a, b = spans[IDLE_KEY]
            for d in gpu_list(a, b)[0]:
                self.idle_power_w[d.device] = d.energy_j / (b - a) if d.energy_j is not None else None
            for dom in self._rapl.domains if self._rapl else []:
                if dom.label in series:
                    c = cpu_window_energy(series[dom.label], dom.label, a, b)
                    self.idle_power_w[dom.label] = c.energy_j / (b - a) if c.energy_j is not None else None
        results = {}
        for key, (a, b) in spans.items():
            if key == IDLE_KEY:
                continue
            devs, flags = gpu_list(a, b)
            for d in devs:
                d.idle_power_w = self.idle_power_w.get(d.device)
                if d.energy_j is not None and d.idle_power_w is not None:
                    d.energy_above_idle_j = d.energy_j - d.idle_power_w * (b - a)
            cpu: list[DeviceEnergy] = []
            cpu_reason: str | None = None
            if self._rapl is None or not self._rapl.domains or self._rapl.reason:
                cpu_reason = (self._rapl.reason if self._rapl else None) or "RAPL not discovered"
            else:
                for dom in self._rapl.domains:
                    s = series.get(dom.label)
                    c = (
                        cpu_window_energy(s, dom.label, a, b)
                        if s is not None
                        else DeviceEnergy(dom.label, None, "unavailable", "rapl", reason="no RAPL samples")
                    )
                    c.idle_power_w = self.idle_power_w.get(dom.label)
                    if c.energy_j is not None and c.idle_power_w is not None:
                        c.energy_above_idle_j = c.energy_j - c.idle_power_w * (b - a)
                    cpu.append(c)
                if any(c.energy_j is None for c in cpu):
                    cpu_reason = "; ".join(f"{c.device}: {c.reason}" for c in cpu if c.energy_j is None)
            labels = {g["label"] for g in self.gpus}
            for ev in self.events:
                if ev.get("event") == "rapl_wrap_unknown" and a <= ev.get("t_s", -1) <= b + 1.0:
                    flags.append("rapl_wrap_unknown")
                if ev.get("event") == "nvidia_smi_error" and a <= ev.get("t_s", -1) <= b + 1.0:
                    flags.append("nvidia_smi_error")  # a GPU's line was an error: its good rows are kept
                # checked at both edges and during the window; the end check runs a few ms after b
                if (
                    ev.get("event") == "foreign_process"
                    and ev.get("device") in labels
                    and a <= ev.get("t_s", -1) <= b + 0.1
                ):
                    flags.append("foreign_process")
            if key in not_ended:
                flags.append("window_not_ended")
            gpu_known = [d.energy_j for d in devs if d.energy_j is not None]
            gpu_j = sum(gpu_known) if devs and len(gpu_known) == len(devs) else None
            above = [d.energy_above_idle_j for d in devs if d.energy_above_idle_j is not None]
            # cpu_reason is None only when every domain's energy is known
            cpu_j = sum(c.energy_j for c in cpu if c.energy_j is not None) if cpu and cpu_reason is None else None
            results[key] = EnergyResult(
                window_start_s=a,
                window_end_s=b,
                gpu=devs,
                cpu=cpu,
                gpu_energy_j=gpu_j,
                cpu_energy_j=cpu_j,
                cpu_reason=cpu_reason,
                sample_hz=self.settings.sample_hz,
                samples_count=n_rows,
                flags=list(dict.fromkeys(flags)),
                simulated=simulated,
                gpu_energy_above_idle_j=sum(above) if above and len(above) == len(devs) else None,
                cross_check_threshold=self.cross_check_threshold,
                backend=self.backend,
                jitter_s=self.jitter_s.get(key),
            )
        return results

    # ------------------------------------------------------------------ context, environment
    def __enter__(self) -> Meter:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _process_check_status(self) -> str:
        """How foreign processes on the GPUs were looked for (for the report)."""
        if self.backend != "nvml":
            return f"not checked: the {self.backend} backend cannot list GPU processes"
        notes = [f"{e['status']}: {e['reason']}" for e in self.events if e.get("event") == "process_check"]
        return "; ".join(notes) if notes else f"NVML process list every {PROCESS_CHECK_S:g} s and at window edges"

    def environment(self) -> dict:
        """Facts of the measurement: backend, GPUs (name, UUID, PCI, power limits),
        driver and NVML versions, methods, RAPL domains, cool-down, idle baseline."""
        env = {
            "backend": self.backend,
            "simulated": self.backend == "simulated",
            "sample_hz": self.settings.sample_hz,
            "counter_hz": self.settings.counter_hz,
            "cuda_visible_devices": self.env.get("CUDA_VISIBLE_DEVICES"),
            "device_mapping_notes": self.notes,
            "cooldown": self.cooldown,
            "idle_power_w": self.idle_power_w or None,
            "methods": {
                g["label"]: (
                    "simulated"
                    if self.backend == "simulated"
                    else "nvml-counter-edge-corrected"
                    if g.get("has_counter") and self.backend == "nvml"
                    else f"{self.backend}-power-integration"
                )
                for g in self.gpus
            },
            "sampler_events": self.events or None,
            "sampler_stats": self.sampler_stats,
            "foreign_process_check": self._process_check_status(),
        }
        env.update(self._env_facts)
        if self._rapl is not None:
            env["rapl"] = {
                "domains": [d.label for d in self._rapl.domains],
                "reason": self._rapl.reason,
                "skipped": [list(x) for x in self._rapl.skipped],
            }
        return env
