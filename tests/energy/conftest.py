"""Fixtures of the energy tests: the recorded H200 traces and nvidia-smi outputs."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GPU_DIR = FIXTURES / "gpu"
SMI_DIR = FIXTURES / "nvidia-smi"


@dataclass
class Trace:
    """One raw NVML trace (tests/fixtures/gpu/trace_*.csv), ~250 reads/s."""

    t_s: np.ndarray  # midpoint of each read, s
    instant_w: np.ndarray
    average_w: np.ndarray
    energy_j: np.ndarray  # counter, J
    phases: list[tuple[str, float, float]]

    def phase(self, name: str, nth: int = 0) -> tuple[float, float]:
        return [(a, b) for n, a, b in self.phases if n == name][nth]


def load_trace(name: str) -> Trace:
    lines = (GPU_DIR / f"trace_{name}.csv").read_text().splitlines()
    phases = []
    for ln in lines:
        if ln.startswith("# phase"):
            parts = ln.split()
            phases.append((parts[2], float(parts[3].split("=")[1]), float(parts[4].split("=")[1])))
    data = np.genfromtxt(
        io.StringIO("\n".join(ln for ln in lines if not ln.startswith("#"))), delimiter=",", names=True
    )
    return Trace(
        t_s=(data["t_before_s"] + data["t_after_s"]) / 2,
        instant_w=data["instant_mw"] / 1e3,
        average_w=data["average_mw"] / 1e3,
        energy_j=data["energy_mj"] / 1e3,
        phases=phases,
    )


@pytest.fixture(scope="session")
def traces() -> dict[str, Trace]:
    return {n: load_trace(n) for n in ("idle_busy_idle", "bursty", "short_windows")}


def load_session() -> Trace:
    """The three traces as the one recording they are (consecutive reads of one GPU on
    one clock: trace_bursty starts 11 ms after trace_idle_busy_idle ends, and so on), so
    that every phase has the reads that follow it (the reference needs ~1 s of them)."""
    parts = [load_trace(n) for n in ("idle_busy_idle", "bursty", "short_windows")]
    return Trace(
        *(np.concatenate([getattr(p, k) for p in parts]) for k in ("t_s", "instant_w", "average_w", "energy_j")),
        phases=[ph for p in parts for ph in p.phases],
    )


@pytest.fixture(scope="session")
def session() -> Trace:
    """:func:`load_session`."""
    return load_session()
