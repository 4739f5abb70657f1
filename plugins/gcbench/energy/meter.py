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
from pathlib import Path
from typing import Any

from gcbench.energy import backend, integrate
from gcbench.energy.base import CROSS_CHECK_FLAG_REL, DeviceEnergy, EnergyResult
from gcbench.energy.window import (
    DeviceSeries,
    cpu_window_energy,
    gpu_window_energy,
    read_samples,
    read_utilization,
    window_busy_share,
)
from gcbench.errors import MeasurementError

__all__ = ["DeviceSeries", "Meter", "cpu_window_energy", "gpu_window_energy", "read_samples", "wait_for_cooldown"]

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


# window energy maths: gcbench.energy.window (re-exported here, the meter's public names before it)


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


def _planned_method(df: backend.DeviceFacts) -> str:
    """The method a device's figures will have (before any window is measured)."""
    f = df.facts
    if f.energy_counter:
        return f.method("counter-edge-corrected")
    return f.method("power-integration" if f.instant_power else "average-power-lag-corrected")


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
        hwmon_root: str = "/sys/class/hwmon",
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
        # the CPU backend's discovery: RaplDiscovery, else HwmonDiscovery (the same domains/skipped/reason)
        self._rapl: Any = None
        self._rapl_reason: str | None = None
        self.cpu_backend = "rapl"
        self.hwmon_root = hwmon_root
        self._proc: subprocess.Popen | None = None
        self._started = False
        self._stopped = False
        self._impl: backend.GpuBackend | None = None
        self._opened: backend.Opened | None = None
        self.facts: backend.Facts | None = None
        self.backend_choice: dict | None = None
        self.sampler_stats: dict | None = None
        self.node_probe: Any = None  # gcbench.energy.node.NodeProbe when the plan has a node meter

    # ------------------------------------------------------------------ start
    def _resolve_backend(self) -> None:
        """Open the plan's backend, or with ``auto`` the first registered GPU backend that
        finds a device (:data:`gcbench.energy.backend.REGISTRY` order); why each earlier
        one was passed is kept in :attr:`backend_choice`."""
        wanted = self.settings.backend
        names = backend.gpu_backend_names() if wanted == "auto" else (wanted,)
        why: list[str] = []
        for name in names:
            cls = backend.load(name)
            impl = cls(self.settings, sim={"idle_w": self.sim_idle_w, "busy_w": self.sim_busy_w})
            try:
                opened = impl.open(self.devices, self.env)
            except backend.BackendUnavailable as exc:
                if wanted != "auto":
                    raise
                why.append(str(exc))
                continue
            self._impl, self._opened, self.backend = impl, opened, name
            self.facts = impl.facts
            self.gpus, self.notes = opened.gpus, opened.notes
            self._env_facts = dict(opened.environment)
            self.backend_choice = {"backend": name, "requested": wanted, "passed": why}
            if impl.facts.simulated:
                self._env_facts["why_simulated"] = "; ".join(why) or f"backend {name!r} requested"
            return
        raise MeasurementError("energy", "no energy backend found a GPU: " + "; ".join(why))

    def _max_temperature_c(self) -> float | None:
        assert self._impl is not None and self._opened is not None  # after _resolve_backend
        return self._impl.max_temperature_c(self._opened)

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
        hwmon_cfg: list[dict] = []
        if not rapl_ok:  # the CPU backends in REGISTRY order: RAPL, then hwmon (ARM: no RAPL)
            from gcbench.energy import hwmon

            hw = hwmon.discover(self.hwmon_root)
            if hw.domains:
                self._rapl_reason, self._rapl, self.cpu_backend = self._rapl.reason, hw, "hwmon"
                if hw.reason is None:
                    hwmon_cfg = [{"label": d.label, "path": d.path, "kind": d.kind} for d in hw.domains]
            else:
                self._rapl.reason = f"{self._rapl.reason or 'no RAPL domain'}; {hw.reason}"
        node_cfg = self._open_node()
        self.origin_monotonic = time.monotonic()
        origin_wall = time.time()
        assert self._opened is not None
        cfg = {
            **self._opened.sampler_cfg,
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
            "rapl_interval_s": min(1.0 / s.counter_hz, rapl.max_poll_interval_s(self._rapl.domains if rapl_ok else [])),
            "hwmon": hwmon_cfg,
            "trial_pid": os.getpid(),
            "process_check_s": PROCESS_CHECK_S,
            "tail_s": integrate.reference_tail_s(s.sample_hz),
        }
        if node_cfg is not None:
            from gcbench.energy import node

            cfg["node"] = node_cfg
            cfg["tail_s"] = max(cfg["tail_s"], node.wait_s(s.node))
        self.samples_path.parent.mkdir(parents=True, exist_ok=True)
        pkg_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        if node_cfg is not None and node_cfg.get("password_env") in self.env:
            env[node_cfg["password_env"]] = self.env[node_cfg["password_env"]]
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

    def _open_node(self) -> dict | None:
        """Probe the plan's node meter (``energy.node``), if any: the sampler's config for
        it, or None (no node meter, or it does not answer: :attr:`node_probe` says why and
        every window's node figure is NULL with that reason; the trial goes on)."""
        ns = getattr(self.settings, "node", None)
        if ns is None:
            return None
        from gcbench.energy import node

        _reader, self.node_probe = node.probe_settings(ns, self.env)
        if not self.node_probe.ok:
            return None
        return {
            "settings": ns.model_dump(mode="json"),
            "how": self.node_probe.how,
            "password_env": node.password_env(ns),
        }

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
        from gcbench.energy.base import UTILIZATION_FILE

        util = read_utilization(self.samples_path.with_name(UTILIZATION_FILE))
        busy_method = self.facts.busy_method() if self.facts else None
        n_rows = sum(len(s.t_s) for s in series.values())
        simulated = bool(self.facts and self.facts.simulated)
        device_facts = self._opened.device_facts if self._opened else {}

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
                    facts=device_facts.get(g["label"]),
                    has_counter=g.get("has_counter", True),
                    counter_reason=g.get("counter_reason"),
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
                cpu_reason = (self._rapl.reason if self._rapl else None) or "no CPU energy backend discovered"
            else:
                for dom in self._rapl.domains:
                    s = series.get(dom.label)
                    c = (
                        cpu_window_energy(s, dom.label, a, b)
                        if s is not None
                        else DeviceEnergy(
                            dom.label, None, "unavailable", self.cpu_backend, reason=f"no {self.cpu_backend} samples"
                        )
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
            total_j = sum(gpu_known) if devs and len(gpu_known) == len(devs) else None
            # a module-scope figure (Grace Hopper: GPU + CPU + memory) is module energy, never GPU energy
            modules = [d.device for d in devs if d.scope == "module"]
            gpu_j = None if modules else total_j
            module_j = total_j if modules and len(modules) == len(devs) else None
            if modules:
                flags.append("module_scope")
                inside = f"included in the module energy of {', '.join(modules)} (GPU, CPU and memory of the module)"
                cpu_reason = f"{cpu_reason}; {inside}" if cpu_reason else None
                if cpu_reason is None and cpu:
                    flags.append("cpu_inside_module")  # RAPL beside a module counter: never add the two
            above = [d.energy_above_idle_j for d in devs if d.energy_above_idle_j is not None]
            # cpu_reason is None only when every domain's energy is known
            cpu_j = sum(c.energy_j for c in cpu if c.energy_j is not None) if cpu and cpu_reason is None else None
            node_dev = self._node_energy(series, a, b)
            # the node contains its GPUs and CPUs: a node figure below their measured energy (a
            # simulated GPU's model is never compared) reads the wrong sensor
            parts_j = (0.0 if simulated else gpu_j or 0.0) + (cpu_j or 0.0)
            if node_dev and node_dev.energy_j is not None and parts_j > node_dev.energy_j:
                flags.append("node_below_parts")
            results[key] = EnergyResult(
                window_start_s=a,
                window_end_s=b,
                gpu=devs,
                cpu=cpu,
                gpu_energy_j=gpu_j,
                module_energy_j=module_j,
                energy_scope="module" if modules else "gpu",
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
                node=node_dev,
                node_energy_j=node_dev.energy_j if node_dev else None,
            )
            r = results[key]
            if simulated:  # the trial's own busy time fills it in (gcbench.trial.apply_trial_busy_share)
                r.gpu_busy_method, r.gpu_busy_reason = busy_method, "the workload reported no device busy time"
            elif busy_method is None:
                r.gpu_busy_reason = f"{self.backend} reads no GPU utilization"
            else:
                share, reads, why = window_busy_share(util, [g["label"] for g in self.gpus], a, b)
                r.gpu_busy_method, r.gpu_busy_reads, r.gpu_busy_reason = busy_method, reads, why
                if share is not None:
                    r.gpu_busy_share, r.gpu_idle_share = share, 1.0 - share
        return results

    def _node_energy(self, series: dict, a: float, b: float) -> DeviceEnergy | None:
        """The node meter's figure of window [a, b] (None without a node meter)."""
        ns = getattr(self.settings, "node", None)
        if ns is None or self.node_probe is None:
            return None
        from gcbench.energy import node

        if not self.node_probe.ok:
            return DeviceEnergy(
                node.NODE_LABEL,
                None,
                "unavailable",
                self.node_probe.protocol,
                reason=f"node meter unavailable: {self.node_probe.why_not}",
                scope="node",
            )
        return node.node_window_energy(series.get(node.NODE_LABEL), a, b, ns.period_s, self.node_probe.protocol)

    # ------------------------------------------------------------------ context, environment
    def __enter__(self) -> Meter:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _process_check_status(self) -> str:
        """How foreign processes on the GPUs were looked for (for the report)."""
        if not (self.facts and self.facts.process_list):
            return f"not checked: the {self.backend} backend cannot list GPU processes"
        notes = [f"{e['status']}: {e['reason']}" for e in self.events if e.get("event") == "process_check"]
        return "; ".join(notes) if notes else f"NVML process list every {PROCESS_CHECK_S:g} s and at window edges"

    def environment(self) -> dict:
        """Facts of the measurement: backend, GPUs (name, UUID, PCI, power limits),
        driver and NVML versions, methods, RAPL domains, cool-down, idle baseline."""
        env = {
            "backend": self.backend,
            "simulated": bool(self.facts and self.facts.simulated),
            "backend_choice": self.backend_choice,
            "device_facts": {k: v.to_dict() for k, v in (self._opened.device_facts if self._opened else {}).items()},
            "sample_hz": self.settings.sample_hz,
            "counter_hz": self.settings.counter_hz,
            "cuda_visible_devices": self.env.get("CUDA_VISIBLE_DEVICES"),
            "device_mapping_notes": self.notes,
            "cooldown": self.cooldown,
            "idle_power_w": self.idle_power_w or None,
            "methods": {
                label: _planned_method(df) for label, df in (self._opened.device_facts if self._opened else {}).items()
            },
            "sampler_events": self.events or None,
            "sampler_stats": self.sampler_stats,
            "foreign_process_check": self._process_check_status(),
        }
        if self.node_probe is not None:
            env["node"] = {**self.node_probe.to_dict(), "period_s": self.settings.node.period_s}
        env.update(self._env_facts)
        env["cpu_backend"] = self.cpu_backend if self._rapl is not None and self._rapl.domains else None
        if self._rapl is not None and self.cpu_backend == "hwmon":
            env["hwmon"] = {
                "domains": [f"{d.label}: {d.source} ({d.path})" for d in self._rapl.domains],
                "reason": self._rapl.reason,
                "skipped": [list(x) for x in self._rapl.skipped],
                "rapl_reason": self._rapl_reason,
            }
        elif self._rapl is not None:
            env["rapl"] = {
                "domains": [d.label for d in self._rapl.domains],
                "reason": self._rapl.reason,
                "skipped": [list(x) for x in self._rapl.skipped],
            }
        return env
