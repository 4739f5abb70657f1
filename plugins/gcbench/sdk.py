"""Mark windows and counts from inside your own workload: ``import gcbench.sdk``.

The same four calls work in every way GC-Bench runs a user's work
(docs/your-own-workload.md)::

    from gcbench import sdk

    with sdk.window("main"):            # the measured window (any lower_snake_case name)
        for batch in batches:
            out = model(batch)
            sdk.count(tokens=batch.numel())   # units of work done in the open window
            sdk.step()                  # one step finished (the stability rule's progress)
    sdk.metric("loss", 2.31)            # a figure of your own, stored with the trial

* inside a ``kind: python`` workload (and a registered kind), the calls go straight to
  the trial's context (``ctx.window()``, ``ctx.count()``);
* in a program started by ``kind: command`` or ``kind: container`` (or by a Python
  workload), they write lines to the control channel named by ``GCBENCH_CONTROL``
  (:mod:`gcbench.workloads.control` documents the protocol), each stamped with this
  process's ``CLOCK_MONOTONIC``;
* anywhere else (the script run by hand) they do nothing, so the program runs unchanged.

This module imports nothing heavy and nothing else of GC-Bench: a user's program can
copy it (it is one file) instead of installing GC-Bench.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

ENV_VAR = "GCBENCH_CONTROL"
"""Environment variable holding the control channel's path (a named pipe)."""

_context: Any = None
"""The trial context of the Python workload running in this process, or None."""


def bind(ctx: Any) -> None:
    """Route this process's calls to ``ctx`` (a :class:`gcbench.workloads.TrialContext`);
    ``bind(None)`` undoes it. Called by the trial around a Python workload."""
    global _context
    _context = ctx


def send(line: str) -> bool:
    """Write one control line to ``GCBENCH_CONTROL``; False where no channel is set.

    Raises:
        OSError: the channel is set but cannot be written (the trial that made it has
            ended).
    """
    target = os.environ.get(ENV_VAR)
    if not target:
        return False
    fd = os.open(target, os.O_WRONLY)
    try:
        os.write(fd, (line.rstrip("\n") + "\n").encode("utf-8"))
    finally:
        os.close(fd)
    return True


def _stamp() -> str:
    return f"t={time.clock_gettime(time.CLOCK_MONOTONIC):.6f}"


@contextmanager
def window(name: str = "main") -> Iterator[None]:
    """The measured window ``name`` around the ``with`` block."""
    if _context is not None:
        with _context.window(name):
            yield
        return
    send(f"window begin {name} {_stamp()}")
    try:
        yield
    finally:
        send(f"window end {name} {_stamp()}")


def count(**units: int | float) -> None:
    """Units of work done in the innermost open window: ``count(tokens=4096)``."""
    if _context is not None:
        _context.count(**units)
        return
    for unit, n in units.items():
        send(f"count {unit} {n} {_stamp()}")


def step(n: int = 1) -> None:
    """``n`` steps of work finished in the innermost open window."""
    if _context is not None:
        _context.step(n)
        return
    send(f"step {n} {_stamp()}")


def metric(name: str, value: float) -> None:
    """A figure of the workload's own (``loss``, ``perplexity``), stored with the trial."""
    if _context is not None:
        _context.metric(name, value)
        return
    send(f"metric {name} {value!r}")
