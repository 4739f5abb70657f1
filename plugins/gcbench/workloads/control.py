"""The control channel: how a program GC-Bench did not write marks its windows and counts.

A trial of kind ``command`` or ``container`` (and any program a ``python`` workload
starts) finds the path of a named pipe (FIFO) in the environment variable
``GCBENCH_CONTROL`` and may write lines to it, one event per line (UTF-8, at most
:data:`MAX_LINE_BYTES` bytes; lines up to 4096 bytes are written atomically by a
single ``write``, so several processes may share the pipe)::

    window begin <name> [t=<seconds>]   open the measured window <name> (main: the trial's primary one)
    window end <name> [t=<seconds>]     close it
    step [<n>] [t=<seconds>]            n (default 1) steps of work finished in the innermost open window
    count <unit> <n> [t=<seconds>]      n units of work (tokens, requests, bytes, ...) done in the innermost open window
    metric <name> <value>               a figure of the program's own (loss 2.31), stored with the trial
    # anything                          a comment; blank lines are ignored too

``<name>`` and ``<unit>`` are lower_snake_case (``[a-z][a-z0-9_]*``, at most 63
characters). Each event is timed when its line arrives, on the trial's monotonic clock;
``t=`` gives instead the program's own ``CLOCK_MONOTONIC`` reading in seconds (the same
clock for every process of one host, containers included), for a program that writes
its lines late or in batches. The first-hand numbers therefore go through the same edge
correction, cross-check and stability rules as a built-in workload's windows.

Nothing a program writes can crash the trial or lose a sample: a malformed line, an
``end`` without a ``begin``, a window never closed, a count outside any window, a
timestamp that is not on this host's clock or a flood of lines become *problems*, one
sentence each (at most :data:`MAX_PROBLEMS` kept, the rest counted), recorded on the
trial; memory stays bounded whatever is written (counts are sums, steps go into the
window's progress record, which thins itself, metrics keep their last value).

This module parses and reads; :mod:`gcbench.workloads.program` applies the events to
the trial's windows.
"""

from __future__ import annotations

import math
import os
import re
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gcbench.sdk import ENV_VAR

__all__ = ["ENV_VAR", "ControlLineError", "ControlReader", "Event", "Problems", "parse_line"]


MAX_LINE_BYTES = 4096
"""Longest line taken (PIPE_BUF on Linux: a write up to this size is atomic)."""

MAX_PROBLEMS = 50
"""Problems kept word for word; later ones are only counted."""

MAX_METRICS = 1000
"""Distinct ``metric`` names kept per trial."""

NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
"""Window, unit and metric names."""

_NUMBER = re.compile(r"^[+]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


@dataclass(frozen=True)
class Event:
    """One parsed control line.

    Attributes:
        what: ``begin``, ``end``, ``step``, ``count`` or ``metric``.
        name: window name (begin/end), unit (count) or metric name; ``""`` for step.
        value: steps (step), units (count, int when written as an integer) or the
            metric's value; None for begin/end.
        t_s: the program's own CLOCK_MONOTONIC reading (``t=``), s, or None.
        line_no: 1-based number of the line in the channel.
    """

    what: str
    name: str
    value: float | int | None
    t_s: float | None
    line_no: int


class ControlLineError(ValueError):
    """A control line that does not follow the protocol; the message says why."""


def _number(text: str, what: str) -> float | int:
    if not _NUMBER.match(text):
        raise ControlLineError(f"{what} {text!r} is not a non-negative number")
    if re.fullmatch(r"\+?\d+", text):
        return int(text)
    value = float(text)
    if not math.isfinite(value):
        raise ControlLineError(f"{what} {text!r} is not finite")
    return value


def parse_line(line: str, line_no: int = 0) -> Event | None:
    """One control line as an :class:`Event`; None for a blank line or a comment.

    Raises:
        ControlLineError: the line does not follow the protocol (the message names the
            part that is wrong).
    """
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    parts = text.split()
    t_s: float | None = None
    if parts[-1].startswith("t="):
        stamp = parts.pop()[2:]
        if not stamp:
            raise ControlLineError("t= without a value")
        t_s = float(_number(stamp, "timestamp"))
    head, args = parts[0], parts[1:]
    if head == "window":
        if len(args) != 2 or args[0] not in ("begin", "end"):
            raise ControlLineError("expected 'window begin <name>' or 'window end <name>'")
        if not NAME.match(args[1]):
            raise ControlLineError(f"window name {args[1]!r} is not lower_snake_case")
        return Event(args[0], args[1], None, t_s, line_no)
    if head == "step":
        if len(args) > 1:
            raise ControlLineError("expected 'step' or 'step <n>'")
        n = _number(args[0], "step count") if args else 1
        if not isinstance(n, int):
            raise ControlLineError(f"step count {args[0]!r} is not a whole number")
        return Event("step", "", n, t_s, line_no)
    if head == "count":
        if len(args) != 2:
            raise ControlLineError("expected 'count <unit> <n>'")
        if not NAME.match(args[0]):
            raise ControlLineError(f"unit {args[0]!r} is not lower_snake_case")
        return Event("count", args[0], _number(args[1], "count"), t_s, line_no)
    if head == "metric":
        if len(args) != 2:
            raise ControlLineError("expected 'metric <name> <value>'")
        if not NAME.match(args[0]):
            raise ControlLineError(f"metric name {args[0]!r} is not lower_snake_case")
        try:
            value = float(args[1])
        except ValueError:
            raise ControlLineError(f"metric value {args[1]!r} is not a number") from None
        if not math.isfinite(value):
            raise ControlLineError(f"metric value {args[1]!r} is not finite")
        return Event("metric", args[0], value, t_s, line_no)
    raise ControlLineError(f"unknown event {head!r} (window, step, count, metric)")


class Problems:
    """Sentences about what a program got wrong on the channel, bounded."""

    def __init__(self, limit: int = MAX_PROBLEMS):
        self.limit = limit
        self.kept: list[str] = []
        self.dropped = 0

    def add(self, text: str) -> None:
        """Record one problem (kept word for word while fewer than ``limit``)."""
        if len(self.kept) < self.limit:
            self.kept.append(text)
        else:
            self.dropped += 1

    def to_list(self) -> list[str]:
        """The problems, with one closing line counting those not kept."""
        return self.kept + ([f"... and {self.dropped} more control-channel problems"] if self.dropped else [])


class ControlReader:
    """Reads the control pipe in a thread and hands each event to ``on_event``.

    Args:
        path: where the FIFO is made (it must not exist); removed by :meth:`close`.
        on_event: ``on_event(event, arrival_monotonic_s)``, called in the reader thread,
            in line order.
        problems: where malformed lines are recorded.
        clock: the monotonic clock the arrival is read from.

    The reader keeps a write end of its own open, so a program that opens and closes
    the pipe once per line (a shell's ``echo ... > "$GCBENCH_CONTROL"``) never makes
    it look closed; a program that never opens it simply sends nothing.
    """

    def __init__(
        self,
        path: Path,
        on_event: Callable[[Event, float], None],
        problems: Problems,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.path = Path(path)
        self.on_event = on_event
        self.problems = problems
        self.clock = clock
        self.lines = 0
        self._rfd = -1
        self._wfd = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._buf = b""
        self._lock = threading.Lock()

    def open(self) -> ControlReader:
        """Make the FIFO and start reading; returns self."""
        os.mkfifo(self.path, 0o622)
        os.chmod(self.path, 0o622)  # a container's program may run as another user
        self._rfd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._wfd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._loop, name="gcbench-control", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._rfd], [], [], 0.05)
            if ready:
                self._read_available()

    def _read_available(self) -> None:
        with self._lock:
            while True:
                try:
                    chunk = os.read(self._rfd, 65536)
                except BlockingIOError:
                    return
                except OSError:
                    return
                if not chunk:
                    return
                arrival = self.clock()
                self._buf += chunk
                *lines, self._buf = self._buf.split(b"\n")
                for raw in lines:
                    self._line(raw, arrival)
                if len(self._buf) > MAX_LINE_BYTES:
                    self.lines += 1
                    self.problems.add(f"control line {self.lines}: longer than {MAX_LINE_BYTES} bytes, ignored")
                    self._buf = b""
                    self._skip_rest = True

    _skip_rest = False

    def _line(self, raw: bytes, arrival: float) -> None:
        if self._skip_rest:  # the tail of an over-long line
            self._skip_rest = False
            return
        self.lines += 1
        if len(raw) > MAX_LINE_BYTES:
            self.problems.add(f"control line {self.lines}: longer than {MAX_LINE_BYTES} bytes, ignored")
            return
        try:
            event = parse_line(raw.decode("utf-8"), self.lines)
        except UnicodeDecodeError:
            self.problems.add(f"control line {self.lines}: not UTF-8, ignored")
            return
        except ControlLineError as exc:
            shown = raw[:80].decode("utf-8", errors="replace")
            self.problems.add(f"control line {self.lines} {shown!r}: {exc}; ignored")
            return
        if event is not None:
            self.on_event(event, arrival)

    def close(self) -> None:
        """Read what is left, stop the thread, close and remove the pipe (idempotent)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=5)
        self._thread = None
        self._read_available()
        if self._buf.strip():
            self._line(self._buf, self.clock())  # a last line without its newline
            self._buf = b""
        for fd in (self._rfd, self._wfd):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.path.unlink()
        except OSError:
            pass
