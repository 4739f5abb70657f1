"""The sampling process: ``python -m gcbench.energy.sampler`` (started by the Meter).

It runs outside the trial's Python process, so sampling never takes the trial's GIL,
and it cannot fall into the ``multiprocessing`` spawn trap of re-running an unguarded
``__main__`` module. Protocol, one line each:

* stdin, first line: the JSON config (see :class:`gcbench.energy.meter.Meter`).
* stdin, then: ``begin <t_s>``, ``end <t_s>`` (window edges; the simulated GPU is busy
  between them), ``burst`` (locate the next counter ticks), ``stop``. End of file (the
  trial died) stops at once.
* stdout: ``{"ready": ...}`` once sampling runs (a streamed backend: once its first rows are in), ``{"event": ...}`` findings
  (``rapl_wrap_unknown``; from nvidia-smi ``nvidia_smi_error`` naming the GPU,
  ``nvidia_smi_unparsed``, ``nvidia_smi_clock_step``; ``node_read_error`` once per
  distinct failure of the node meter), ``{"done": true, "rows": n}``
  at the end.

nvidia-smi rows are timed on this process's monotonic clock: their printed wall-clock
timestamps give their spacing (checked for steps), the reads anchor them (see
:class:`gcbench.energy.smi.SmiStream`).

The simulated device is a model, not a sensor: once ``stop`` has come, no window edge
can follow, so its remaining reads (the counter burst and the cross-check's power tail,
about 1.3 s at 20 Hz) are computed at their due times at once instead of being waited
for (``fast_forward``): the same rows, the same times, without the wait. The done
message says how far (``simulated_tail_s``). Real backends (NVML, nvidia-smi) and RAPL
are always read in real time.

Rates: power fields at ``sample_hz``; the energy counter at ``counter_hz`` (a read
costs ~4 ms on an H200), and in a *burst* after each window edge and at stop: every
``burst_interval_s`` until the counter has changed ``burst_changes`` times (or
``burst_max_s`` passed), which locates the ticks after each edge to a few ms for edge
correction (see :mod:`gcbench.energy.integrate`). RAPL at least as often as
:func:`gcbench.energy.rapl.max_poll_interval_s`. Rows are flushed to samples.csv at
least every ``flush_s`` (0.5 s), so a killed trial keeps what was sampled.

The node meter (``energy.node``: the BMC over IPMI or Redfish, :mod:`gcbench.energy.node`)
is read in a thread of its own every ``period_s`` (a BMC answers in tens of milliseconds
to seconds: never in the GPU's loop); its readings are written as rows of device
``node`` at each flush.

Foreign processes (NVML only): while a window is open, at its edges and every
``process_check_s`` (0.5 s), the GPUs' running processes are listed; a live PID
outside the trial's process tree (``trial_pid`` and its descendants) is reported once
per window as ``{"event": "foreign_process", "device", "pid", "name", "t_s"}``, and the
Meter flags the window ``foreign_process``. ``{"event": "process_check", ...}`` says
when the check could not run or was limited (no NVML support, a container's own PID
namespace), so "no foreign process" is never claimed where it was not checked.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gcbench.energy import backend
from gcbench.energy.base import SAMPLE_COLUMNS, UTILIZATION_COLUMNS, UTILIZATION_FILE

if TYPE_CHECKING:
    from typing import Any

MAX_EVENTS = 200


def _fmt(v, digits: int = 3) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if v != v:  # NaN is unknown
            return ""
        return f"{v:.{digits}f}"
    return str(v)


class _Writer:
    def __init__(self, path: str):
        self.f = open(path, "w", encoding="utf-8", newline="")
        self.f.write(",".join(SAMPLE_COLUMNS) + "\n")
        self.rows = 0

    def row(self, t_s: float, device: str, source: str, r: dict, energy_digits: int = 3) -> None:
        self.f.write(
            ",".join(
                (
                    f"{t_s:.6f}",
                    device,
                    source,
                    _fmt(r.get("power_w")),
                    _fmt(r.get("power_instant_w")),
                    _fmt(r.get("energy_j"), energy_digits),
                    _fmt(r.get("temperature_c"), 1),
                    _fmt(r.get("sm_clock_mhz"), 0),
                    _fmt(r.get("clocks_event_reasons")),
                )
            )
            + "\n"
        )
        self.rows += 1

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.f.flush()
        self.f.close()


class _UtilizationWriter:
    """utilization.csv beside samples.csv (:data:`gcbench.energy.base.UTILIZATION_COLUMNS`),
    opened at the first utilization read (a backend without one writes no file)."""

    def __init__(self, path: Path):
        self.path = path
        self.f: Any = None

    def row(self, t_s: float, device: str, pct) -> None:
        if self.f is None:
            self.f = open(self.path, "w", encoding="utf-8", newline="")
            self.f.write(",".join(UTILIZATION_COLUMNS) + "\n")
        self.f.write(f"{t_s:.6f},{device},{_fmt(float(pct), 1)}\n")

    def flush(self) -> None:
        if self.f is not None:
            self.f.flush()

    def close(self) -> None:
        if self.f is not None:
            self.f.close()


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Sampler:
    """The loop of the sampling process (also usable in-process by tests)."""

    def __init__(self, cfg: dict, clock=time.monotonic):
        self.cfg = cfg
        self.clock = clock
        self.origin = float(cfg["origin_monotonic"])
        self.backend = cfg["backend"]
        self.gpus = cfg["gpus"]
        self.writer = _Writer(cfg["samples_path"])
        self.util = _UtilizationWriter(Path(cfg["samples_path"]).with_name(UTILIZATION_FILE))
        self.power_dt = 1.0 / float(cfg["sample_hz"])
        self.counter_dt = 1.0 / float(cfg["counter_hz"])
        self.burst_dt = float(cfg.get("burst_interval_s", 0.002))
        self.burst_changes = int(cfg.get("burst_changes", 2))
        self.burst_max_s = float(cfg.get("burst_max_s", 0.5))
        self.flush_dt = float(cfg.get("flush_s", 0.5))
        # power is read this long after the last window's end: the cross-check's 1-s
        # average reference needs reads up to end + lag + 0.5 s (integrate.reference_tail_s)
        self.tail_s = float(cfg.get("tail_s", 0.0))
        self.last_end: float | None = None
        self.stop_not_before: float | None = None
        # simulated backend after stop: virtual seconds added to the clock (see the module docstring)
        self.fast_forward = False
        self.virtual_s = 0.0
        self.events = 0
        self.bursts: dict[int, dict] = {}
        self.last_energy: dict[int, float | None] = {}
        self.stopping = False
        self.stop_deadline: float | None = None
        # what the backend reads decides how it is read (its declared facts, never its name)
        cls = backend.load(self.backend)
        self.facts: backend.Facts = cls.facts
        self.reader: Any = cls.reader(cfg)
        self.child: subprocess.Popen | None = None  # a streamed backend's process
        self.labels = {g["index"]: g["label"] for g in self.gpus}
        if not self.facts.polled:
            argv = self.reader.argv(self.now())
            self.child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.rapl = []
        from gcbench.energy.rapl import RaplCounter, read_int

        self._read_int = read_int
        for d in cfg.get("rapl", []):
            self.rapl.append((d["label"], Path(d["path"]) / "energy_uj", RaplCounter(d.get("max_energy_range_uj"))))
        from gcbench.energy.hwmon import HwmonCounter

        self.hwmon = [(d["label"], Path(d["path"]), HwmonCounter(d["kind"])) for d in cfg.get("hwmon") or []]
        self.cpu_read = bool(self.rapl or self.hwmon)  # a CPU backend's sensors to read
        self.node: Any = None  # the node meter's poller thread (energy.node), started with sampling
        self.node_errors: set[str] = set()
        if cfg.get("node"):
            from gcbench.energy.node import NodePoller, NodeReader
            from gcbench.spec import NodeSettings

            n = cfg["node"]
            settings = NodeSettings.model_validate(n["settings"])
            password = os.environ.get(n["password_env"]) if n.get("password_env") else None
            # a real sensor: timed on the real clock, never the simulated device's fast-forward
            self.node = NodePoller(
                NodeReader(settings, password, how=n["how"]), settings.period_s, lambda: self.clock() - self.origin
            )
        self.rapl_dt = float(cfg.get("rapl_interval_s", 0.1))
        self.rapl_last_t: float | None = None
        self.trial_pid = cfg.get("trial_pid")
        self.process_dt = float(cfg.get("process_check_s", 0.5))
        self.check_processes = self.facts.process_list and self.trial_pid is not None and self.process_dt > 0
        self.open_windows = 0
        self.window_gen = 0
        self.process_due = False
        self.process_notes: set[str] = set()
        self.foreign_seen: set[tuple[str, int, int]] = set()
        self.trial_tree: set[int] = set()
        if self.check_processes:
            from gcbench.energy import nvml as _nvml

            if _nvml.in_host_pid_namespace() is False:
                self._process_note(
                    "limited",
                    "the trial runs in its own PID namespace (a container): NVML's host "
                    "PIDs of other processes may not be visible; run the container with the "
                    "host's PID namespace for a complete check",
                )

    def now(self) -> float:
        return self.clock() - self.origin + self.virtual_s

    # ------------------------------------------------------------ commands
    def command(self, line: str) -> None:
        parts = line.split()
        if not parts:
            return
        if parts[0] in ("begin", "end"):
            t = float(parts[1])
            if self.facts.polled:
                self.reader.mark(t, 1 if parts[0] == "begin" else -1)
            self.start_burst()
            if parts[0] == "begin":
                self.open_windows += 1
                self.window_gen += 1
            else:
                self.open_windows = max(0, self.open_windows - 1)
                self.last_end = t
            self.process_due = self.check_processes
        elif parts[0] == "burst":
            self.start_burst()
        elif parts[0] == "stop":
            self.start_burst()
            self.stopping = True
            self.stop_deadline = self.now() + self.burst_max_s + 0.1
            if self.last_end is not None and self.tail_s > 0:
                self.stop_not_before = self.last_end + self.tail_s
                self.stop_deadline = max(self.stop_deadline, self.stop_not_before + 0.1)

    def start_burst(self) -> None:
        t = self.now()
        for i, g in enumerate(self.gpus):
            if g.get("has_counter", True):
                self.bursts[i] = {"left": self.burst_changes, "until": t + self.burst_max_s}

    # ------------------------------------------------------------ reads
    def read_gpus(self, counter_due: bool, power_due: bool) -> None:
        for i, g in enumerate(self.gpus):
            in_burst = i in self.bursts
            use_counter = g.get("has_counter", True) and (counter_due or in_burst)
            t0 = self.now()
            row = self.reader.sample(i, t0, counter=use_counter, extras=power_due)
            # a model is read at an instant; a sensor read takes time: timed at its middle
            t = t0 if self.facts.simulated else (t0 + self.now()) / 2
            self.writer.row(t, g["label"], self.backend, row)
            if row.get("gpu_util_pct") is not None:
                self.util.row(t, g["label"], row["gpu_util_pct"])
            e = row.get("energy_j")
            if e is not None:
                prev = self.last_energy.get(i)
                self.last_energy[i] = e
                b = self.bursts.get(i)
                if b is not None and prev is not None and e != prev:
                    b["left"] -= 1
            b = self.bursts.get(i)
            if b is not None and (b["left"] <= 0 or t > b["until"]):
                del self.bursts[i]

    def _process_note(self, status: str, reason: str) -> None:
        if status not in self.process_notes and self.events < MAX_EVENTS:
            self.process_notes.add(status)
            self.events += 1
            _emit({"event": "process_check", "status": status, "reason": reason})

    def read_processes(self) -> None:
        """List each GPU's processes; report live ones outside the trial's tree."""
        from gcbench.energy import nvml

        reader, trial_pid = self.reader, self.trial_pid
        assert trial_pid is not None  # check_processes: a backend with a process list, a trial pid
        t = self.now()
        for i, g in enumerate(self.gpus):
            pids = reader.processes(i)
            if pids is None:
                self._process_note("unavailable", f"{g['label']}: NVML cannot list the GPU's processes")
                continue
            if pids <= self.trial_tree:
                continue
            self.trial_tree = nvml.process_tree(int(trial_pid))
            foreign, _gone = nvml.classify_gpu_processes(pids, int(trial_pid), tree=self.trial_tree)
            for pid, name in sorted(foreign.items()):
                key = (g["label"], pid, self.window_gen)
                if key in self.foreign_seen or self.events >= MAX_EVENTS:
                    continue
                self.foreign_seen.add(key)
                self.events += 1
                _emit({"event": "foreign_process", "device": g["label"], "pid": pid, "name": name, "t_s": t})

    def read_rapl(self) -> None:
        t = self.now()
        for label, path, counter in self.rapl:
            try:
                raw = self._read_int(path)
            except (OSError, ValueError):
                continue
            unknown_before = counter.unknown_wraps
            first = counter.previous_uj is None
            step = counter.update(raw)
            dt = t - self.rapl_last_t if self.rapl_last_t is not None else None
            power = step / 1e6 / dt if (dt and not first) else None
            self.writer.row(t, label, "rapl", {"energy_j": counter.total_j, "power_w": power}, energy_digits=6)
            if counter.unknown_wraps > unknown_before and self.events < MAX_EVENTS:
                self.events += 1
                _emit({"event": "rapl_wrap_unknown", "device": label, "t_s": t})
        for label, path, hw in self.hwmon:
            try:
                raw = self._read_int(path)
            except (OSError, ValueError):
                continue  # unreadable now: a gap, never 0
            energy_j, power_w = hw.update(raw, t)
            self.writer.row(t, label, "hwmon", {"energy_j": energy_j, "power_w": power_w}, energy_digits=6)
        self.rapl_last_t = t

    def write_node(self) -> None:
        """Write the node meter's queued readings (a failed read: an event, no row)."""
        if self.node is None:
            return
        source = self.node.reader.protocol
        for t, power_w, why in self.node.drain():
            if power_w is not None:
                self.writer.row(t, "node", source, {"power_instant_w": power_w})
            elif why not in self.node_errors and self.events < MAX_EVENTS:
                self.node_errors.add(str(why))
                self.events += 1
                _emit({"event": "node_read_error", "device": "node", "reason": why, "t_s": t})

    def read_stream(self, data: bytes) -> None:
        """Write the rows of a streamed backend's output just read (timed by its reader)."""
        rows, events = self.reader.feed(data, self.now())
        for t, index, row in rows:
            label = self.labels.get(index)
            if label is not None:
                self.writer.row(t, label, self.backend, row)
        for ev in events:
            if self.events < MAX_EVENTS:
                self.events += 1
                _emit(ev)

    # ------------------------------------------------------------ loop
    def run(self, fd: int | None = 0) -> int:
        t = self.now()
        next_power, next_counter, next_rapl, next_flush = t, t, t, t + self.flush_dt
        next_process = t
        buf = b""
        smi_fd = self.child.stdout.fileno() if self.child and self.child.stdout else None
        gpu_polled = self.facts.polled
        # a streamed backend is ready once its first rows are in (a child process may take
        # a second or more to start on a loaded host): a window opened then is covered
        deadline = time.monotonic() + float(self.cfg.get("stream_start_s", 15.0))
        while smi_fd is not None and self.writer.rows == 0 and time.monotonic() < deadline:
            if select.select([smi_fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                data = os.read(smi_fd, 65536)
                if not data:
                    smi_fd = None
                    break
                self.read_stream(data)
        if self.node is not None:
            self.node.start()
        _emit({"ready": True, "backend": self.backend})
        while True:
            if self.stopping and self.facts.simulated and not self.fast_forward:
                self.fast_forward = True  # no edge can follow: compute the model's last reads at once
            t = self.now()
            wakes = [next_flush]
            if gpu_polled:
                wakes += [next_power, next_counter]
                if self.bursts:
                    wakes.append(t + self.burst_dt)
            if self.cpu_read and not self.fast_forward:
                wakes.append(next_rapl)
            if self.check_processes and (self.open_windows or self.process_due):
                wakes.append(t if self.process_due else next_process)
            if self.stopping and not self.bursts and (self.stop_not_before is None or t >= self.stop_not_before):
                break
            timeout = max(0.0, min(wakes) - t)
            fds = [x for x in (fd, smi_fd) if x is not None]
            if self.fast_forward:
                self.virtual_s += timeout
                ready = select.select(fds, [], [], 0)[0] if fds else []
            elif fds:
                ready = select.select(fds, [], [], timeout)[0]
            else:
                time.sleep(timeout)
                ready = []
            if fd is not None and fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    fd = None
                    if not self.stopping:  # the trial died: keep what we have, stop now
                        self.stopping = True
                        self.bursts.clear()
                else:
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for ln in lines:
                        self.command(ln.decode())
            if smi_fd is not None and smi_fd in ready:
                data = os.read(smi_fd, 65536)
                if data:
                    self.read_stream(data)
                else:
                    smi_fd = None
            t = self.now()
            if gpu_polled:
                power_due = t >= next_power
                counter_due = t >= next_counter
                if power_due or counter_due or self.bursts:
                    self.read_gpus(counter_due, power_due)
                if power_due:
                    next_power = max(next_power + self.power_dt, t)
                if counter_due:
                    next_counter = max(next_counter + self.counter_dt, t)
            if self.cpu_read and t >= next_rapl and not self.fast_forward:  # CPU sensors are real: never virtual
                self.read_rapl()
                next_rapl = max(next_rapl + self.rapl_dt, t)
            if self.check_processes and (self.process_due or (self.open_windows and t >= next_process)):
                self.process_due = False
                self.read_processes()
                next_process = t + self.process_dt
            if t >= next_flush:
                self.write_node()
                self.writer.flush()
                self.util.flush()
                next_flush = t + self.flush_dt
            if self.stopping and self.stop_deadline is not None and t > self.stop_deadline:
                self.bursts.clear()
        simulated_tail_s, self.virtual_s = self.virtual_s, 0.0  # back on the real clock
        if self.cpu_read:
            self.read_rapl()
        if self.node is not None:
            self.node.stop()
            self.write_node()
        if self.child is not None:
            self.child.terminate()
            try:
                self.child.wait(timeout=2)
            except subprocess.TimeoutExpired:  # pragma: no cover
                self.child.kill()
        self.writer.close()
        self.util.close()
        _emit(
            {
                "done": True,
                "rows": self.writer.rows,
                "cpu_s": time.process_time(),
                "wall_s": self.now(),
                "simulated_tail_s": round(simulated_tail_s, 6),
            }
        )
        return 0


def main() -> int:
    """Entry point of the sampling process."""
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(0, 1)
        if not chunk:
            return 2
        line += chunk
    cfg = json.loads(line)
    try:
        sampler = Sampler(cfg)
    except Exception as exc:  # noqa: BLE001 - reported to the meter, which raises MeasurementError
        _emit({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    return sampler.run(0)


if __name__ == "__main__":
    sys.exit(main())
