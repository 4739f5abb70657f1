"""The one trial entry point: ``python -m gcbench.trial SPEC.json OUTDIR``.

Both runners (local subprocess and Docker container) run this same code. It

1. checks that OUTDIR is writable *before* anything is measured;
2. starts the energy :class:`~gcbench.energy.meter.Meter` (sampling in another
   process, streaming ``samples.csv`` so a killed trial keeps its samples);
3. runs the workload, whose measured part sits inside ``ctx.window()``;
4. stops the meter, derives the figures (J/token, GB/s, J/GB, ...) and writes
   ``result.json`` atomically (temporary file + rename).

Exit status: 0 the trial ran, 1 it failed (the error and traceback are in
result.json and trial.log), 3 it was skipped on purpose (e.g. no permission to set a
power cap), 2 the command line or the spec file is unusable.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import signal
import socket
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gcbench.carbon import energy_total
from gcbench.errors import SkipTrial, TrialError
from gcbench.spec import TrialSpec
from gcbench.units import bytes_to_gb, j_to_kwh

if TYPE_CHECKING:
    from gcbench.codecarbon_compare import CodeCarbonResult

RESULT_SCHEMA = 1
"""Version of the result.json layout."""

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_SKIPPED = 0, 1, 2, 3


def utcnow() -> str:
    """Current UTC time, ISO 8601."""
    return datetime.now(UTC).isoformat()


MIN_FREE_BYTES = 16 << 20
"""Free space the output folder's file system must have before a trial starts: an
hour of samples at 20 Hz is ~5 MB, result.json and logs far less. A disk that fills
during the window would cost the trial; one that is nearly full is refused before."""


def check_writable(outdir: Path, min_free_bytes: int = MIN_FREE_BYTES) -> None:
    """Create OUTDIR and prove a file can be written there (disk not full, permissions).

    Called before anything is measured (by the trial and, earlier still, by the local
    runner), so a read-only or full output folder is one clear error, not a trial
    that dies in its window.

    Raises:
        TrialError: the folder cannot be created or written (read-only, permissions,
            no space left), or its file system has less than ``min_free_bytes`` free.
    """
    try:
        outdir.mkdir(parents=True, exist_ok=True)
        probe = outdir / ".write-probe"
        try:
            with open(probe, "wb") as f:
                f.write(b"\0" * 65536)
                f.flush()
                os.fsync(f.fileno())
        finally:
            if probe.is_symlink() or probe.exists():
                probe.unlink()
        st = os.statvfs(outdir)
    except OSError as exc:
        raise TrialError(None, f"output folder {outdir} is not writable: {exc.strerror or exc}") from None
    free = st.f_bavail * st.f_frsize
    if free < min_free_bytes:
        raise TrialError(
            None,
            f"output folder {outdir} has only {free} bytes free "
            f"(at least {min_free_bytes} needed for samples and results)",
        )


class _Log:
    def __init__(self, path: Path):
        self._f = open(path, "a", encoding="utf-8", buffering=1)

    def __call__(self, message: str) -> None:
        line = f"{utcnow()} {message}"
        self._f.write(line + "\n")
        print(line, flush=True)

    def close(self) -> None:
        self._f.close()


class Context:
    """The :class:`gcbench.workloads.TrialContext` given to workloads.

    Besides ``with ctx.window(key):`` (the built-in workloads' way), windows can be
    opened and closed by :meth:`begin` / :meth:`end` at given times on the meter's time
    base: the control channel of a user's program (:mod:`gcbench.workloads.program`)
    does so with each event's own time. Counts, steps and metrics go to the innermost
    open window (:meth:`count`, :meth:`step`, :meth:`metric`); what cannot be applied
    (a count outside any window, an ``end`` of a window not open) becomes a problem
    sentence in :attr:`problems`, never an exception.
    """

    def __init__(self, spec: TrialSpec, outdir: Path, meter: Any, log: _Log, cpu_plan: Any = None):
        from gcbench.energy.cpuset import ContentionProbe
        from gcbench.workloads.control import Problems

        self.spec = spec
        self.outdir = outdir
        self.meter = meter
        self.log = log
        self._device: str | None = None
        self.windows: dict[str, dict[str, float]] = {}
        self.progress: dict[str, dict[str, Any]] = {}
        self.codecarbon: CodeCarbonResult | None = None
        self.window_counts: dict[str, dict[str, int | float]] = {}
        """``{window key: {unit: count}}`` of what :meth:`count` attributed to each window."""
        self.own_metrics: dict[str, float] = {}
        """``{name: value}`` given by :meth:`metric` (the workload's own figures)."""
        self.problems = Problems()
        self.control_summary: dict[str, Any] | None = None
        """What the control channel of a user's program carried (lines, windows never ended)."""
        self._open: list[str] = []
        self._progress: dict[str, Any] = {}
        self._tracker: Any = None
        self.cpu_plan = cpu_plan
        """The trial's :class:`gcbench.energy.cpuset.CpuPlan` (None: not pinned)."""
        self.contention = ContentionProbe(cpu_plan.cpus if cpu_plan is not None else sorted(os.sched_getaffinity(0)))
        """CPU time of other processes on the trial's CPUs, per window (:mod:`gcbench.energy.cpuset`)."""
        self.torch_threads: dict[str, Any] = {}

    @property
    def device(self) -> str:
        """Torch device string of the trial's first GPU (``cuda:0``) or ``cpu``; found on
        first use, so a trial whose work is another program never imports torch."""
        if self._device is None:
            self._device = _torch_device(self.spec)
            if self.cpu_plan is not None and "torch" in sys.modules:
                from gcbench.energy.cpuset import apply_torch_threads

                self.torch_threads = apply_torch_threads(self.cpu_plan)
        return self._device

    def _check_key(self, key: str) -> None:
        from gcbench.workloads.control import NAME

        if not isinstance(key, str) or not NAME.match(key):
            raise ValueError(f"window name {key!r} is not lower_snake_case ([a-z][a-z0-9_]*, at most 63 characters)")

    def begin(self, key: str = "main", at_s: float | None = None) -> float:
        """Open window ``key`` now, or at ``at_s`` (s on the meter's time base, for an
        event timed by the program that sent it; no start jitter then).

        Returns:
            the window's start, s.

        Raises:
            ValueError: ``key`` is not lower_snake_case.
            MeasurementError: ``key`` is already open.
        """
        from gcbench.stability import Progress

        self._check_key(key)
        if key == "main" and self.spec.energy.codecarbon and self._tracker is None:
            from gcbench.codecarbon_compare import CodeCarbonTracker

            self._tracker = CodeCarbonTracker(gpu_ids=self.spec.devices or None, output_dir=str(self.outdir))
            self._tracker.__enter__()
        self.contention.begin(key)
        start_s = self.meter.begin_window(key, at_s=at_s)
        self.log(f"window {key} begins at t={start_s:.3f}s")
        self._progress[key] = Progress(self.meter.origin_monotonic, start_s)
        self._open.append(key)
        return start_s

    def end(self, key: str = "main", at_s: float | None = None) -> float:
        """Close window ``key`` now or at ``at_s``; returns its end, s.

        Raises:
            MeasurementError: ``key`` is not open.
        """
        end_s = self.meter.end_window(key, at_s=at_s)
        self.contention.end(key)
        if key in self._open:
            self._open.remove(key)
        progress = self._progress.pop(key, None)
        if progress is not None and progress.steps:
            self.progress[key] = progress.to_dict()
        if key == "main" and self._tracker is not None:
            self._tracker.__exit__(None, None, None)
            self.codecarbon = self._tracker.result
            self._tracker = None
        start_s = self.meter.windows[key][0]
        self.windows[key] = {"start_s": start_s, "end_s": end_s}
        self.log(f"window {key} ends at t={end_s:.3f}s ({end_s - start_s:.3f} s)")
        return end_s

    def is_open(self, key: str) -> bool:
        """Whether window ``key`` is open now."""
        return key in self._open

    def open_windows(self) -> list[str]:
        """Keys of the open windows, outermost first."""
        return list(self._open)

    def rebase_progress(self, key: str, start_s: float) -> None:
        """Start the progress record of open window ``key`` afresh at ``start_s`` (its
        start moved: :meth:`gcbench.energy.meter.Meter.move_window_start`)."""
        from gcbench.stability import Progress

        self._progress[key] = Progress(self.meter.origin_monotonic, start_s)

    @contextmanager
    def window(self, key: str = "main") -> Iterator[None]:
        """Measured window ``key``: energy and time between entry and exit; the step
        loops run inside it report their progress (:mod:`gcbench.stability`)."""
        from gcbench.workloads._loop import recording

        self.begin(key)
        try:
            with recording(self._progress[key]):
                yield
        finally:
            self.end(key)

    def innermost(self) -> str | None:
        """The innermost open window's key, or None."""
        return self._open[-1] if self._open else None

    def count(self, window: str | None = None, **units: int | float) -> None:
        """Add units of work (``tokens=4096``) to window ``window`` (default: the
        innermost open one). A count with no open window, or a negative, non-finite or
        non-numeric one, is recorded as a problem and not counted."""
        import math

        key = window or self.innermost()
        for unit, n in units.items():
            if isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n) or n < 0:
                self.problems.add(f"count {unit} {n!r}: not a non-negative number; not counted")
                continue
            if key is None:
                self.problems.add(f"count {unit} {n!r} outside any window: not attributed to a window")
                continue
            counts = self.window_counts.setdefault(key, {})
            counts[unit] = counts.get(unit, 0) + n

    def step(self, n: int = 1, at_s: float | None = None) -> None:
        """``n`` steps finished in the innermost open window (now, or at ``at_s``)."""
        key = self.innermost()
        if key is None:
            self.problems.add(f"step {n} outside any window: not recorded")
            return
        progress = self._progress[key]
        if at_s is None:
            progress.done(n)
        else:
            clock = progress.clock
            progress.clock = lambda: at_s + self.meter.origin_monotonic
            try:
                progress.done(n)
            finally:
                progress.clock = clock

    def metric(self, name: str, value: float) -> None:
        """Store a figure of the workload's own with the trial (``loss``); the last
        value given wins."""
        from gcbench.workloads.control import MAX_METRICS, NAME

        if not isinstance(name, str) or not NAME.match(name):
            self.problems.add(f"metric name {name!r} is not lower_snake_case: not stored")
        elif name not in self.own_metrics and len(self.own_metrics) >= MAX_METRICS:
            self.problems.add(f"metric {name}: more than {MAX_METRICS} metric names, not stored")
        else:
            self.own_metrics[name] = float(value)

    def close_open(self) -> list[str]:
        """Close every window still open (a program that ended without ``window end``);
        returns their keys."""
        left = list(self._open)
        for key in reversed(left):
            self.end(key)
        return left


def _torch_device(spec: TrialSpec) -> str:
    from gcbench import kinds

    kind = kinds.find(spec.kind)
    if not spec.devices or (kind is not None and not kind.uses_gpu):
        return "cpu"
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda:0" if torch.cuda.is_available() else "cpu"


def same_device_order() -> str | None:
    """Make CUDA number GPUs as NVML does (``CUDA_DEVICE_ORDER=PCI_BUS_ID``) in this
    process, before anything initialises CUDA; returns the order it replaced, if any.

    Both runners set it (C15); a trial started another way (by hand, a third runner)
    would otherwise compute on the fastest GPU while the meter reads the PCI-ordered one."""
    before = os.environ.get("CUDA_DEVICE_ORDER")
    if before == "PCI_BUS_ID":
        return None
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return before or "unset (FASTEST_FIRST)"


def _bare_uuid(uuid: Any) -> str:
    return str(uuid).strip().lower().removeprefix("gpu-")


def device_check(cuda_uuids: list[str] | None, measured_uuids: list[str | None]) -> dict[str, Any]:
    """Whether the trial computed on the GPUs the meter measured (C15).

    Args:
        cuda_uuids: UUIDs of the CUDA devices the workload saw (``torch.cuda
            .get_device_properties(i).uuid``, in CUDA order), or None when CUDA was
            never initialised in the trial process (nothing ran on a GPU here).
        measured_uuids: UUIDs of the GPUs the meter read (NVML's ``GPU-...`` form).

    Returns:
        ``{"cuda_uuids", "measured_uuids", "same": True | False | None, "reason"}``;
        ``same`` None when there is nothing to compare. A ``False`` makes the trial
        invalid (:mod:`gcbench.validate`).
    """
    out: dict[str, Any] = {"cuda_uuids": cuda_uuids, "measured_uuids": measured_uuids, "same": None, "reason": None}
    if not cuda_uuids or not measured_uuids or any(u is None for u in measured_uuids):
        return out
    used = {_bare_uuid(u) for u in cuda_uuids}
    measured = {_bare_uuid(u) for u in measured_uuids if u is not None}
    out["same"] = used <= measured
    if not out["same"]:
        out["reason"] = (
            f"the workload computed on GPU(s) {', '.join(sorted(used - measured))} "
            f"but the meter measured {', '.join(sorted(measured))}"
        )
    return out


def _cuda_uuids() -> list[str] | None:
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None
        return [str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - a CUDA that cannot answer: nothing to compare
        return None


def environment() -> dict[str, Any]:
    """Facts about where the trial ran (host, Python, torch, CUDA)."""
    env: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"),
        "in_container": Path("/.dockerenv").exists(),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        env["cuda_available"] = bool(torch.cuda.is_available())
    return env


def own_cpus(spec: TrialSpec, log: Any = print) -> tuple[Any, dict[str, Any]]:
    """Choose and apply the trial's CPU set and thread counts (:mod:`gcbench.energy.cpuset`).

    Returns:
        ``(CpuPlan or None, record for result.json's cpus)``; never raises: a set that
        cannot be chosen or applied is recorded (``error``) and the trial runs unpinned.
    """
    from gcbench.energy import cpuset

    try:
        plan = cpuset.plan_cpus(spec.devices, spec.settings.get("cpus", "auto"))
    except Exception as exc:  # noqa: BLE001 - an odd /sys must not cost the trial
        log(f"CPU set not chosen: {type(exc).__name__}: {exc}; running on every CPU, unpinned")
        return None, {"applied": False, "error": f"not chosen: {type(exc).__name__}: {exc}"}
    applied = cpuset.apply(plan)
    record = {**plan.to_dict(), **applied}
    threads = plan.threads()
    log(
        f"CPUs {record['cpu_list']} ({len(plan.cpus)}; {plan.how}); threads: torch intra-op "
        f"{threads['torch_intra_op']}, inter-op {threads['torch_inter_op']}, OMP/MKL {threads['OMP_NUM_THREADS']}"
        + (f"; NOT PINNED: {applied['error']}" if applied["error"] else "")
    )
    return plan, record


PER_UNIT_METRICS = ("j_per_token", "gpu_j_per_gb", "samples_per_s", "gpu_j_per_unit")
"""Figures that exist only when the trial counted its unit of work."""


def no_unit_reason(unit: str | None, counts: dict[str, Any]) -> str:
    """Why a trial with energy and time has no J/unit (stored in result.json and shown
    with the trial)."""
    if unit is None:
        return "no unit of work declared (plan: unit: tokens, requests, ...): energy and time only, no J/unit"
    if not counts.get(unit):
        return f"no count of {unit} in the main window (count {unit} N on the control channel): no J/{unit}"
    return f"no GPU energy or duration for the {unit} counted: no J/{unit}"


def _unit_figures(
    counts: dict[str, Any], win: dict[str, Any], unit: str | None, tokenize: dict[str, Any] | None = None
) -> dict[str, Any]:
    """J/unit and units/s of one window from its counts and its energy dict."""
    m: dict[str, Any] = {}
    duration_s = win.get("duration_s")
    gpu_j = win.get("gpu_energy_j")
    cpu_j = win.get("cpu_energy_j")

    def per(value, unit_count):
        return value / unit_count if value is not None and unit_count else None

    tokens = counts.get("tokens")
    if tokens:
        m["tokens_per_s"] = per(tokens, duration_s)
        m["j_per_token"] = m["gpu_j_per_token"] = per(gpu_j, tokens)
        tok = tokenize or {}
        e2e = [gpu_j, cpu_j, tok.get("gpu_energy_j") if tok else 0.0, tok.get("cpu_energy_j") if tok else 0.0]
        m["e2e_j_per_token"] = per(sum(e2e), tokens) if all(x is not None for x in e2e) else None
        if tok:
            m["tokenize_duration_s"] = tok.get("duration_s")
    n_bytes = counts.get("bytes")
    if n_bytes:
        gb = bytes_to_gb(n_bytes)
        m["gb_per_s"] = per(gb, duration_s)
        m["gpu_j_per_gb"] = per(gpu_j, gb)
        m["cpu_j_per_gb"] = per(cpu_j, gb)
    samples = counts.get("samples")
    if samples:
        m["samples_per_s"] = per(samples, duration_s)
    if unit is not None and unit not in ("tokens", "bytes", "samples"):
        n = counts.get(unit)
        if isinstance(n, (int, float)) and not isinstance(n, bool) and n:
            m["units"] = n
            m["units_per_s"] = per(n, duration_s)
            m["gpu_j_per_unit"] = per(gpu_j, n)
            m["cpu_j_per_unit"] = per(cpu_j, n)
            m["unit"] = unit
    return m


def derive_metrics(
    counts: dict[str, Any],
    energy: dict[str, Any],
    windows: dict[str, Any],
    unit: str | None = None,
    window_counts: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The trial's figures from the workload's counts and its windows' energy.

    Args:
        counts: what the workload returned (``tokens``, ``bytes``, ``samples``, ...),
            with what it counted in the main window added.
        energy: ``{window key: EnergyResult.to_dict()}``; ``main`` is the primary window.
        windows: ``{window key: {start_s, end_s}}``.
        unit: the trial's unit of work (:attr:`gcbench.spec.TrialSpec.unit`); a unit
            other than tokens, bytes and samples gives ``units``, ``units_per_s``,
            ``gpu_j_per_unit``, ``cpu_j_per_unit`` and the text metric ``unit``.
        window_counts: ``{window key: {unit: n}}`` counted in the other named windows.

    Returns:
        A flat dict. Energies in J, times in s, rates per s; None where unknown
        (an unknown CPU energy never becomes 0). J/token and J/GB are GPU energy over
        the main window; ``e2e_j_per_token`` adds CPU energy and the external
        tokenization window where those are known. ``gpu_busy_share``,
        ``gpu_idle_share`` (0..1) and ``gpu_busy_method`` are the main window's
        (:class:`gcbench.energy.base.EnergyResult`). Each other named window ``w``
        (``prefill``, ``decode``; not the external ``tokenize`` step) adds
        ``w_duration_s``, ``w_gpu_energy_j``, ``w_cpu_energy_j`` and, from its own
        counts, its figures per unit (``w_j_per_token``, ``w_tokens_per_s``, ...).
    """
    main = energy.get("main") or {}
    m: dict[str, Any] = {k: v for k, v in counts.items() if isinstance(v, (int, float, str, bool)) or v is None}
    duration_s = main.get("duration_s")
    gpu_j = main.get("gpu_energy_j")
    cpu_j = main.get("cpu_energy_j")
    m["duration_s"] = duration_s
    m["gpu_energy_j"] = gpu_j
    m["cpu_energy_j"] = cpu_j
    m["total_energy_j"] = gpu_j + cpu_j if gpu_j is not None and cpu_j is not None else None
    if main.get("module_energy_j") is not None:
        # a superchip's counter covers the whole module (GPU, CPU, memory): never GPU energy
        m["module_energy_j"] = main["module_energy_j"]
    node = main.get("node")
    if node is not None:  # the plan's node meter: the BMC's figure contains GPU, CPU and DRAM
        m["node_energy_j"] = main.get("node_energy_j")
        m["node_method"] = node.get("method")
        if main.get("node_energy_j") is None and node.get("reason"):
            m["node_reason"] = node["reason"]
    # the one scope rule (gcbench.carbon.energy_total): node, else module, else GPU + CPU
    total = energy_total(
        gpu_j, cpu_j, main.get("module_energy_j"), main.get("node_energy_j"), node_metered=node is not None
    )
    # total_energy_j stays GPU + CPU (its name says so); energy_kwh, the basis of kWh and
    # CO2e, is the rule's total, and energy_scope says what it adds up
    m["energy_scope"] = total.scope
    m["energy_kwh"] = j_to_kwh(total.energy_j) if total.energy_j is not None else None
    idle = [d.get("idle_power_w") for d in main.get("gpu", [])]
    if gpu_j is not None and duration_s and idle and all(p is not None for p in idle):
        m["gpu_energy_above_idle_j"] = gpu_j - sum(idle) * duration_s
    m.update(_unit_figures(counts, main, unit, energy.get("tokenize") or {}))
    # why a J/token differs: the GPU's busy and idle share of the main window
    m["gpu_busy_share"] = main.get("gpu_busy_share")
    m["gpu_idle_share"] = main.get("gpu_idle_share")
    m["gpu_busy_method"] = main.get("gpu_busy_method") if main.get("gpu_busy_share") is not None else None
    for key, win in energy.items():
        if key in ("main", "tokenize") or not isinstance(win, dict):
            continue
        m[f"{key}_duration_s"] = win.get("duration_s")
        m[f"{key}_gpu_energy_j"] = win.get("gpu_energy_j")
        m[f"{key}_cpu_energy_j"] = win.get("cpu_energy_j")
        own = (window_counts or {}).get(key) or {}
        for unit_name, n in own.items():
            m[f"{key}_{unit_name}"] = n
        for name, value in _unit_figures(own, win, unit).items():
            if name != "unit":
                m[f"{key}_{name}"] = value
    return m


def apply_trial_busy_share(energy: dict[str, Any], counts: dict[str, Any]) -> None:
    """On the simulated device, the main window's busy share is the trial's own: the
    workload's ``device_busy_s`` (time in copies and model steps) over the window's
    duration, clipped to 0..1, with method :data:`gcbench.energy.base.TRIAL_BUSY_METHOD`.
    Changes ``energy["main"]`` in place; nothing for a sensor's window or a workload
    that reports no busy time."""
    from gcbench.energy.base import TRIAL_BUSY_METHOD

    main = energy.get("main")
    busy = counts.get("device_busy_s")
    if not isinstance(main, dict) or not main.get("simulated") or main.get("gpu_busy_share") is not None:
        return
    duration = main.get("duration_s")
    if not isinstance(busy, (int, float)) or isinstance(busy, bool) or not duration or duration <= 0:
        return
    share = min(1.0, max(0.0, float(busy) / float(duration)))
    main.update(
        gpu_busy_share=share,
        gpu_idle_share=1.0 - share,
        gpu_busy_method=TRIAL_BUSY_METHOD,
        gpu_busy_reads=0,
        gpu_busy_reason=None,
    )


def stability_of(progress: dict[str, Any], windows: dict[str, Any]) -> dict[str, Any]:
    """``{window key: WindowStability dict}`` for every window with progress (defaults
    of the rule; validation recomputes with the plan's settings)."""
    from gcbench.stability import window_stability

    out = {}
    for key, prog in progress.items():
        w = windows.get(key) or {}
        if w.get("start_s") is not None and w.get("end_s") is not None:
            out[key] = window_stability(prog.get("points") or [], w["start_s"], w["end_s"]).to_dict()
    return out


def stability_metrics(stability: dict[str, Any]) -> dict[str, Any]:
    """The main window's stability figures as metrics (stored in the metrics table)."""
    main = stability.get("main")
    if not main:
        return {}
    return {
        "window_steps": main["steps"],
        "window_steps_per_s": main["steps_per_s"],
        "stability_halves_ratio": main["halves_ratio"],
        "stability_stall_ratio": main["stall_ratio"],
        "stability_stall_rel": main["stall_rel"],
        "stability_step_time_cv": main["step_time_cv"],
    }


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON to ``path`` through a temporary file and a rename (no half files)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, default=str, allow_nan=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and obj != obj:  # NaN -> unknown
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def run_trial(spec: TrialSpec, outdir: Path) -> int:
    """Run one trial and write its result.json; returns the exit status."""
    from gcbench import workloads
    from gcbench.energy import hostshare
    from gcbench.energy.meter import Meter
    from gcbench.energy.powercap import TrialPowerCap
    from gcbench.workloads._loop import warmup_log

    check_writable(outdir)
    log = _Log(outdir / "trial.log")
    cpu_notes: list[str] = []
    cpu_plan, cpu_record = own_cpus(spec, cpu_notes.append)  # before the sampler and torch start: both inherit it
    result: dict[str, Any] = {
        "schema": RESULT_SCHEMA,
        "trial_id": spec.trial_id,
        "plan": spec.plan,
        "spec": spec.model_dump(mode="json"),
        "attempt_id": os.environ.get("GCBENCH_ATTEMPT_ID"),  # the runner's attempt (C14); None by hand
        "started_at": utcnow(),
        "status": "failed",
        "error": None,
        "samples_file": "samples.csv",
    }
    status = EXIT_FAILED
    meter = Meter(spec.energy, spec.devices, outdir / "samples.csv", spec.seed)
    ctx: Context | None = None
    counts: dict[str, Any] = {}
    energy: dict[str, Any] = {}
    warmups: list[dict] = []
    # the GPUs' power limits, checked (a leftover cap reset) before anything is measured;
    # the plan's power_cap_w, for every kind, applied around the workload and restored
    power = TrialPowerCap(spec.settings.get("power_cap_w"), spec.devices, outdir, log)
    # in the host's register for its whole life: a window that other trials shared has no CPU energy of its own (C13)
    presence = hostshare.HostPresence(spec.trial_id, f"{spec.variant} #{spec.repetition}").register()
    try:
        log(f"trial {spec.trial_id} {spec.variant} repetition {spec.repetition} starts")
        for note in cpu_notes:
            log(note)
        _arm()
        power.check()
        meter.start()
        result["origin_monotonic"] = meter.origin_monotonic
        # wall clock (epoch s, UTC) of that origin: places the windows in UTC hours (carbon.window_utc)
        result["origin_wall"] = time.time() - (time.monotonic() - meter.origin_monotonic)
        ctx = Context(spec, outdir, meter, log, cpu_plan)
        log(
            f"workload {spec.kind} starts at t={time.monotonic() - meter.origin_monotonic:.3f}s"
            + (" (torch imported)" if "torch" in sys.modules else "")
        )
        with power, warmup_log() as warmups:
            counts = workloads.load(spec.kind)(spec, ctx) or {}
        if "power_cap_w" in spec.settings:
            counts.update(power.metrics())
        for key in (workloads.SETTINGS_EFFECTIVE, workloads.SETTINGS_NOT_IN_EFFECT, "preprocessor"):
            if key in counts:  # what ran (and the build that ran it), at the top of result.json
                result[key] = counts.pop(key)
        status = EXIT_OK
        result["status"] = "ok"
    except SkipTrial as exc:
        _disarm()
        status = EXIT_SKIPPED
        result["status"] = "skipped"
        result["error"] = str(exc)
        result[workloads.SETTINGS_NOT_IN_EFFECT] = dict(getattr(exc, "not_in_effect", None) or {})
        log(f"skipped: {exc}")
    except BaseException as exc:  # noqa: BLE001 - any workload failure is recorded, then re-raised below if fatal
        _disarm()
        result["error"] = f"{type(exc).__name__}: {exc}"
        log("failed:\n" + traceback.format_exc())
        if isinstance(exc, KeyboardInterrupt):
            result["error"] = "interrupted"
    finally:
        _disarm()  # a stop signal from here on is recorded, not raised: the files get written
        left_open: list[str] = []
        if ctx is not None:
            try:
                left_open = ctx.close_open()
            except Exception as exc:  # noqa: BLE001 - the meter's stop() closes them then
                log(f"closing the open windows failed: {exc}")
            for key in left_open:
                ctx.problems.add(f"window {key} was still open when the workload ended: closed then")
        try:
            energy = {k: v.to_dict() for k, v in meter.stop().items()}
        except Exception as exc:  # noqa: BLE001 - a meter failure must not lose the workload's result
            log("energy computation failed:\n" + traceback.format_exc())
            result["energy_error"] = f"{type(exc).__name__}: {exc}"
            if status == EXIT_OK:
                status, result["status"] = EXIT_FAILED, "failed"
                result["error"] = f"energy measurement failed: {exc}"
        windows = ctx.windows if ctx is not None else {}
        if ctx is not None:
            never_ended = [*(ctx.control_summary or {}).get("windows_never_ended", []), *left_open]
            result["control"] = {
                **(ctx.control_summary or {}),
                "windows_never_ended": never_ended,
                "problems": ctx.problems.to_list(),
                "window_counts": ctx.window_counts,
                "metrics": ctx.own_metrics,
            }
            main_counts = ctx.window_counts.get("main") or {}
            for unit, n in main_counts.items():
                counts[unit] = counts.get(unit, 0) + n if isinstance(counts.get(unit, 0), (int, float)) else n
            for name, value in ctx.own_metrics.items():
                counts.setdefault(name, value)
        if energy:
            apply_trial_busy_share(energy, counts)
        if energy and meter.origin_monotonic:
            result["host_share"] = hostshare.apply(energy, windows, meter.origin_monotonic, presence)
        presence.close()
        if status == EXIT_OK and "main" not in windows:
            status, result["status"] = EXIT_FAILED, "failed"
            result["error"] = f"workload {spec.kind} opened no measured window"
        result["windows"] = windows
        result["energy"] = energy
        result["counts"] = counts
        progress = ctx.progress if ctx is not None else {}
        result["progress"] = progress
        result["stability"] = stability_of(progress, windows)
        if warmups:
            result["warmup"] = warmups
            for w in warmups:
                cv = "unknown" if w["cv"] is None else f"{w['cv']:.3f}"
                log(
                    f"warm-up {'settled' if w['settled'] else 'CAPPED at ' + format(w['max_seconds'], 'g') + ' s'} "
                    f"after {w['steps']} steps, {w['seconds']:.2f} s (CV of the last {w['judged_steps']} step times "
                    f"{cv}, limit {w['cv_max']:g})"
                )
        window_counts = ctx.window_counts if ctx is not None else {}
        result["metrics"] = (
            derive_metrics(counts, energy, windows, unit=spec.unit, window_counts=window_counts)
            if status == EXIT_OK
            else {}
        )
        declared = spec.program is not None or spec.unit is not None
        if status == EXIT_OK and declared and not any(result["metrics"].get(m) is not None for m in PER_UNIT_METRICS):
            result["no_unit_reason"] = no_unit_reason(spec.unit, counts)
        if status == EXIT_OK:
            result["metrics"].update(stability_metrics(result["stability"]))
        if status == EXIT_OK and ctx is not None and ctx.codecarbon is not None:
            from gcbench.codecarbon_compare import comparison_metrics

            m = result["metrics"]
            result["metrics"].update(comparison_metrics(ctx.codecarbon, m.get("gpu_energy_j"), m.get("cpu_energy_j")))
            result["codecarbon"] = ctx.codecarbon.to_dict()
        result["cpus"] = cpu_record
        if ctx is not None:
            from gcbench.energy.cpuset import contention_metrics, torch_threads_in_effect

            cpu_record["contention"] = ctx.contention.windows
            cpu_record["torch_threads_in_effect"] = torch_threads_in_effect() or None
            cpu_record["torch_threads_errors"] = {k: v for k, v in ctx.torch_threads.items() if k.endswith("_error")}
            if status == EXIT_OK:
                result["metrics"].update(contention_metrics(ctx.contention.windows))
        if cpu_plan is not None and cpu_plan.not_in_effect and status == EXIT_OK:
            result.setdefault(workloads.SETTINGS_NOT_IN_EFFECT, {})["cpus"] = cpu_plan.not_in_effect
        result["device_state_before"] = power.device_state()
        result["device_check"] = device_check(
            _cuda_uuids(), [g.get("uuid") for g in getattr(meter, "gpus", None) or []]
        )
        result["measurement"] = {"backend": getattr(meter, "backend", None)}
        try:
            result["environment"] = {**environment(), **meter.environment()}
        except Exception as exc:  # noqa: BLE001 - environment facts are best effort
            result["environment"] = {**environment(), "meter_environment_error": str(exc)}
        result["finished_at"] = utcnow()
        result["exit_code"] = status
        write_json_atomic(outdir / "result.json", _json_safe(result))
        log(f"trial {spec.trial_id} ends: {result['status']}")
        log.close()
    return status


class TrialTerminated(BaseException):
    """The trial process was told to stop (SIGTERM, SIGHUP, SIGINT): raised in the main
    thread so that every ``with`` unwinds (a power cap restored, the meter stopped) and
    result.json says so. A BaseException, like KeyboardInterrupt, so no workload's
    ``except Exception`` swallows it."""


def install_stop_signals(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)) -> None:
    """Turn the stop signals into :class:`TrialTerminated` in this process (main thread).

    What stops a trial sends one of them: the runner's time limit and a stop request
    (SIGTERM to the trial's process group, :func:`gcbench.factory.local._stop`),
    ``docker stop`` (SIGTERM to the container's PID 1, which by default ignores it), a
    closed terminal (SIGHUP), Ctrl-C in a shell that runs the trial by hand (SIGINT).
    Python's default for SIGTERM ends the process without unwinding; this raises instead.
    It raises only while the trial is armed (:func:`_arm`: from the device check to the
    end of the workload); a signal before that is raised at arming, one after it (while
    the meter stops and result.json is written) is recorded and the trial finishes its
    files. Only the first signal counts (the runner's SIGKILL after its grace period is
    the backstop)."""

    def _handler(signum, frame):
        if _stop["signal"] is not None:
            return
        _stop["signal"] = signal.Signals(signum).name
        if _stop["armed"]:
            raise TrialTerminated(f"terminated by {_stop['signal']}")

    for sig in signals:
        signal.signal(sig, _handler)


_stop: dict[str, Any] = {"armed": False, "signal": None}


def _arm() -> None:
    """From here on a stop signal raises :class:`TrialTerminated` (at once if one came)."""
    _stop["armed"] = True
    if _stop["signal"] is not None:
        raise TrialTerminated(f"terminated by {_stop['signal']}")


def _disarm() -> None:
    _stop["armed"] = False


def main(argv: list[str] | None = None) -> int:
    """``python -m gcbench.trial SPEC.json OUTDIR``."""
    install_stop_signals()
    replaced_order = same_device_order()
    if replaced_order:
        print(f"gcbench.trial: CUDA_DEVICE_ORDER was {replaced_order}; set to PCI_BUS_ID (NVML's order)", flush=True)
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m gcbench.trial SPEC.json OUTDIR", file=sys.stderr)
        return EXIT_USAGE
    try:
        spec = TrialSpec.from_file(argv[0])
    except (OSError, ValueError) as exc:
        print(f"error: cannot read trial spec {argv[0]}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if spec.trial_id and spec.trial_id != spec.compute_id():
        print(
            f"error: {argv[0]}: trial_id {spec.trial_id} does not match its spec ({spec.compute_id()})", file=sys.stderr
        )
        return EXIT_USAGE
    spec = spec.with_id()
    try:
        return run_trial(spec, Path(argv[1]))
    except TrialError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    status = main()
    # result.json and the logs are written and closed: leave the heap (torch's, for most
    # workloads) out of the collection at exit, which took 0.3-0.4 s per trial with torch
    # loaded; atexit handlers and every finalizer outside cycles still run
    gc.freeze()
    sys.exit(status)
