"""A user's own program as a trial's work: what ``command`` and ``container`` share.

The trial process (and so the meter) runs beside the program, which it starts and
waits for; the program marks its windows, steps and counts through the control channel
(:mod:`gcbench.workloads.control`). The rules:

* **The window is the whole program unless it marks one.** ``main`` opens just before
  the program starts (after the plan's start jitter) and closes when it exits. When the
  program writes ``window begin main``, the window starts there instead, and ends at
  its ``window end main``. Other names are windows of their own (``prefill``,
  ``decode``), each with its energy and, from its counts, its J/unit.
* **Counts make the figures.** A count goes to the innermost open window. Counts sent
  before an explicit ``window begin main`` belong to no window (a problem is recorded);
  when the program marks no window at all, they belong to ``main``.
* **Nothing the program does crashes the trial.** A window never ended is closed at the
  program's exit and invalidates the trial with that reason; every other protocol
  mistake is a recorded problem (a flag), and every sample is kept.

Events are applied in the reader's thread under one lock, in line order, while the
trial's main thread only waits for the program.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gcbench.kinds import WorkloadKind
from gcbench.spec import TrialSpec
from gcbench.workloads.control import ENV_VAR, ControlReader, Event

PROGRAM_METRICS = (
    "j_per_token",
    "tokens_per_s",
    "gpu_j_per_gb",
    "gb_per_s",
    "gpu_j_per_unit",
    "units_per_s",
    "samples_per_s",
)
"""What a user's program may yield, by its unit (tokens, bytes, samples, any other);
the report shows those its trials have."""

PROGRAM_PRIMARY = ("j_per_token", "gpu_j_per_gb", "gpu_j_per_unit", "gpu_energy_j")
"""The metric a user's program is judged on: GPU J per its unit, else its GPU energy."""

PROGRAM_COMPARED = (
    "j_per_token",
    "tokens_per_s",
    "gpu_j_per_gb",
    "gb_per_s",
    "gpu_j_per_unit",
    "units_per_s",
    "gpu_energy_j",
    "duration_s",
)
"""Metrics compared between variants of a user's program (those its trials have)."""


def program_kind(name: str, run: str, description: str, program: Mapping[str, bool], **facts: Any) -> WorkloadKind:
    """The :class:`WorkloadKind` of a kind that runs a user's work: free-form settings,
    the unit from the plan, the metrics of :data:`PROGRAM_METRICS`."""
    return WorkloadKind(
        name=name,
        run=run,
        description=description,
        defaults=None,
        program=dict(program),
        primary_metrics=PROGRAM_PRIMARY,
        metrics=PROGRAM_METRICS,
        compared=PROGRAM_COMPARED,
        power_cap=True,
        **facts,
    )


PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
"""``{name}`` in an argument or environment value; ``{{`` and ``}}`` are literal braces."""

RESERVED = ("outdir", "spec", "control", "seed", "repetition", "trial_id")
"""Placeholders every program may use besides its settings: the trial folder, the spec
file, the control channel, the trial's seed, repetition and id."""


def placeholders(template: str) -> list[str]:
    """The placeholder names in ``template`` (``"--n={n}"`` -> ``["n"]``).

    Raises:
        ValueError: a lone ``{`` or ``}``, or an empty ``{}``.
    """
    names: list[str | None] = []

    def take(m: re.Match[str]) -> str:
        names.append(m.group(1))
        return ""

    rest = PLACEHOLDER.sub(take, template)
    if "{" in rest or "}" in rest:
        raise ValueError(f"{template!r}: a lone brace (write {{{{ or }}}} for a literal one)")
    for n in names:
        if n is not None and not re.match(r"^[a-z_][a-z0-9_]*$", n):
            raise ValueError(f"{template!r}: placeholder {{{n}}} is not a setting name")
    return [n for n in names if n is not None]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def substitute(template: str, values: Mapping[str, Any]) -> str:
    """``template`` with each ``{name}`` replaced by ``values[name]`` as text (an
    argument stays one argument whatever its value holds: nothing reaches a shell).

    Raises:
        KeyError: a placeholder with no value.
    """

    def repl(m: re.Match[str]) -> str:
        if m.group(0) == "{{":
            return "{"
        if m.group(0) == "}}":
            return "}"
        return _text(values[m.group(1)])

    return PLACEHOLDER.sub(repl, template)


def check_placeholders(templates: list[str], settings: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first placeholder that is neither a setting nor
    one of :data:`RESERVED`."""
    for t in templates:
        for name in placeholders(t):
            if name not in settings and name not in RESERVED:
                known = ", ".join([*sorted(settings), *RESERVED])
                raise ValueError(f"{t!r}: {{{name}}} is not a setting of this workload (known: {known})")


def check_program_placeholders(program: Mapping[str, Any], settings: Mapping[str, Any]) -> None:
    """Plan-time check of a program's ``command`` arguments and ``env`` values
    (:func:`check_placeholders`), shared by the ``command`` and ``container`` kinds.

    Raises:
        gcbench.kinds.ProgramError: naming ``command`` or ``env.NAME``.
    """
    from gcbench.kinds import ProgramError

    try:
        check_placeholders(list(program.get("command") or []), settings)
    except ValueError as exc:
        raise ProgramError("command", str(exc)) from None
    for name, value in (program.get("env") or {}).items():
        try:
            check_placeholders([value], settings)
        except ValueError as exc:
            raise ProgramError(f"env.{name}", str(exc)) from None


def values_for(spec: TrialSpec, outdir: Path, control_path: str) -> dict[str, Any]:
    """The placeholder values of one trial."""
    return {
        **spec.settings,
        "outdir": str(outdir),
        "spec": str(outdir / "spec.json"),
        "control": control_path,
        "seed": spec.seed,
        "repetition": spec.repetition,
        "trial_id": spec.trial_id,
    }


class ProgramWindows:
    """Applies control events to the trial's windows (see the module docstring).

    Args:
        ctx: the trial context (its :meth:`begin`, :meth:`end`, :meth:`count`, ...).
        origin_monotonic: the meter's origin (``time.monotonic()`` at its start).
        started_monotonic: when the program was started; earlier ``t=`` stamps are not
            on this host's clock (or not this program's) and the arrival is used.
    """

    def __init__(self, ctx: Any, origin_monotonic: float):
        self.ctx = ctx
        self.origin = origin_monotonic
        self.lock = threading.Lock()
        self.provisional = True  # main spans the whole program until the program marks it
        self.main_ended = False
        self.started_monotonic = time.monotonic()
        self.pre_counts: dict[str, int | float] = {}
        self.never_ended: list[str] = []

    def _time(self, event: Event, arrival: float) -> float:
        if event.t_s is None:
            return arrival - self.origin
        if not (self.started_monotonic - 1.0 <= event.t_s <= arrival + 0.05):
            self.ctx.problems.add(
                f"control line {event.line_no}: t={event.t_s:.6f} is not on this host's monotonic clock "
                f"(the line arrived at {arrival:.6f}); its arrival time is used"
            )
            return arrival - self.origin
        return event.t_s - self.origin

    def on_event(self, event: Event, arrival: float) -> None:
        """Apply one event (called by the reader thread)."""
        with self.lock:
            try:
                self._apply(event, self._time(event, arrival))
            except Exception as exc:  # noqa: BLE001 - a program's mistake is a problem, never a crash
                self.ctx.problems.add(f"control line {event.line_no} ({event.what} {event.name}): {exc}; ignored")

    def _apply(self, ev: Event, t_s: float) -> None:
        ctx = self.ctx
        if ev.what == "begin":
            if ev.name == "main":
                if self.provisional:
                    ctx.meter.move_window_start("main", t_s)
                    ctx.rebase_progress("main", t_s)
                    self.provisional = False
                    if self.pre_counts:
                        units = ", ".join(f"{u} {n:g}" for u, n in self.pre_counts.items())
                        ctx.problems.add(f"counts before window main began ({units}): not attributed to a window")
                        self.pre_counts.clear()
                    return
                raise ValueError("window main is already open" if not self.main_ended else "window main already ended")
            if ctx.is_open(ev.name):
                raise ValueError(f"window {ev.name} is already open")
            if ev.name in ctx.windows:
                raise ValueError(f"window {ev.name} already ended (a window is measured once per trial)")
            ctx.begin(ev.name, at_s=t_s)
        elif ev.what == "end":
            if ev.name == "main" and self.provisional:
                raise ValueError("window end main without window begin main")
            if not ctx.is_open(ev.name):
                raise ValueError(f"window end {ev.name} without window begin {ev.name}")
            ctx.end(ev.name, at_s=t_s)
            if ev.name == "main":
                self.main_ended = True
        elif ev.what == "count":
            if self.provisional and ctx.innermost() == "main":
                self.pre_counts[ev.name] = self.pre_counts.get(ev.name, 0) + (ev.value or 0)
                return
            if ctx.innermost() is None:
                raise ValueError("count outside any window: not attributed to a window")
            ctx.count(**{ev.name: ev.value})
        elif ev.what == "step":
            ctx.step(int(ev.value or 1), at_s=t_s)
        elif ev.what == "metric":
            ctx.metric(ev.name, float(ev.value or 0.0))

    def finish(self) -> None:
        """The program has exited: close ``main`` (and any window left open)."""
        with self.lock:
            ctx = self.ctx
            if self.provisional:
                for unit, n in self.pre_counts.items():
                    ctx.count(window="main", **{unit: n})
                self.pre_counts.clear()
            for key in list(reversed(ctx.open_windows())):
                if key == "main" and self.provisional:
                    continue
                self.never_ended.append(key)
                ctx.problems.add(f"window {key} was never ended: closed when the program exited")
                ctx.end(key)
            if ctx.is_open("main"):
                ctx.end("main")


def run_program(
    spec: TrialSpec,
    ctx: Any,
    start: Callable[[dict[str, str]], Any],
    wait: Callable[[Any], int],
    stop: Callable[[Any], None],
    describe: str,
) -> dict[str, Any]:
    """Run a user's program as the trial's work, measured as the module docstring says.

    Args:
        spec: the trial.
        ctx: its context, a :class:`gcbench.trial.Context` (the control channel
            needs its ``begin``/``end`` at given times, beyond :class:`TrialContext`).
        start: ``start(extra_env) -> handle`` starts the program with the control
            channel's variables added to its environment.
        wait: ``wait(handle) -> exit status`` blocks until it exits.
        stop: ``stop(handle)`` ends it (called when the trial itself is interrupted).
        describe: the program in words, for errors ("command ./bench", "image my/img").

    Returns:
        The workload's counts: ``{"exit_code": 0, "control_lines": n}`` plus what ran.

    Raises:
        gcbench.errors.TrialError: the program exited with a non-zero status (the error
            names it and the last lines of ``program.log``).
    """
    from gcbench.errors import TrialError
    from gcbench.workloads import effective

    outdir = Path(ctx.outdir)
    control_dir = outdir / "control"
    control_dir.mkdir(parents=True, exist_ok=True)
    control_dir.chmod(0o755)
    fifo = control_dir / "control.fifo"
    if fifo.exists():
        fifo.unlink()
    windows = ProgramWindows(ctx, ctx.meter.origin_monotonic)
    reader = ControlReader(fifo, windows.on_event, ctx.problems)
    reader.open()
    handle = None
    try:
        ctx.begin("main")
        windows.started_monotonic = time.monotonic()
        handle = start({ENV_VAR: str(fifo)})
        code = wait(handle)
        handle = None
    finally:
        if handle is not None:
            stop(handle)
        reader.close()
        windows.finish()
    ctx.control_summary = {
        "lines": reader.lines,
        "windows_never_ended": windows.never_ended,
        "whole_program_window": windows.provisional,
    }
    if code != 0:
        raise TrialError(spec.trial_id, f"{describe} exited with status {code}{log_tail(outdir / 'program.log')}")
    return {"exit_code": code, **effective(dict(spec.settings))}


def log_tail(path: Path, lines: int = 8) -> str:
    """``": last lines of program.log: ..."`` or ``""`` when it is empty or missing."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return f"; last lines of {path.name}: " + " | ".join(text[-lines:]) if text else ""
