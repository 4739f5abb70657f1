"""A real, minimal TrialContext for running workloads without the energy meter.

Each window records its ``time.monotonic()`` edges, so tests can check that work
happened inside it; nothing is mocked.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gcbench.spec import Amount, TrialSpec


class RecordingContext:
    """TrialContext whose windows record (start, end) monotonic times per key."""

    def __init__(self, spec: TrialSpec, outdir: Path, device: str = "cpu"):
        self.spec = spec
        self.outdir = outdir
        self.device = device
        self.windows: dict[str, tuple[float, float]] = {}
        self.order: list[str] = []
        self.lines: list[str] = []

    @contextmanager
    def window(self, key: str = "main") -> Iterator[None]:
        if key in self.windows:
            raise AssertionError(f"window {key} opened twice")
        start = time.monotonic()
        try:
            yield
        finally:
            self.windows[key] = (start, time.monotonic())
            self.order.append(key)

    def duration(self, key: str = "main") -> float:
        start, end = self.windows[key]
        return end - start

    def log(self, message: str) -> None:
        self.lines.append(message)


def make_spec(
    kind: str,
    settings: dict | None = None,
    *,
    window: Amount | None = None,
    warmup: Amount | None = None,
    seed: int = 1234,
    devices: list[int] | None = None,
) -> TrialSpec:
    return TrialSpec(
        plan="test",
        workload=kind,
        kind=kind,
        variant=f"{kind}-test",
        settings=settings or {},
        repetition=0,
        seed=seed,
        devices=devices or [],
        warmup=warmup or Amount(steps=0),
        window=window or Amount(steps=1),
    ).with_id()


@pytest.fixture(autouse=True)
def _one_thread():
    """2 shared cores: one torch thread per test process, restored afterwards."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def context(tmp_path):
    """Factory: ``context(spec)`` -> RecordingContext on CPU writing under tmp_path."""

    def make(spec: TrialSpec, device: str = "cpu") -> RecordingContext:
        out = tmp_path / "out"
        out.mkdir(exist_ok=True)
        return RecordingContext(spec, out, device)

    return make


@pytest.fixture(name="make_spec")
def _make_spec_fixture():
    """Factory: ``make_spec(kind, settings, window=..., warmup=..., seed=..., devices=...)``."""
    return make_spec
