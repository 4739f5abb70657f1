"""The simulated GPU: a deterministic power model for machines without a GPU.

Its numbers are **not measurements**: every row, DeviceEnergy and EnergyResult built
from it carries ``source = "simulated"`` / ``method = "simulated"`` and
``EnergyResult.simulated = True``.

Model (times in s on the meter's time base, t = 0 at meter start):

* power P(t) = ``idle_w`` (60 W) when no window is open, ``busy_w`` (300 W) while at
  least one measured window is open (the work is assumed to run inside windows);
* instant power = P(t) at the read; 1-s average power = mean of P over [t - 1, t];
* energy counter = integral of P from 0 to the last tick, in whole mJ, ticking every
  ``tick_s`` (100 ms) at phase ``phase_s`` like NVML's counter, so that tick detection
  and edge correction run on it exactly as on a real GPU;
* temperature 35 C idle, 60 C busy; SM clock 345 MHz idle, 1980 MHz busy; clocks-event
  reasons 0x1 (GPU idle) when idle, 0 when busy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gcbench.energy.backend import DeviceFacts, Facts, GpuBackend, Opened


@dataclass
class SimulatedGpu:
    """One simulated GPU; feed it window edges with :meth:`mark`."""

    idle_w: float = 60.0
    busy_w: float = 300.0
    tick_s: float = 0.1
    phase_s: float = 0.0371
    counter_offset_j: float = 1000.0
    edges: list[tuple[float, int]] = field(default_factory=list)

    def mark(self, t_s: float, delta: int) -> None:
        """A window opens (+1) or closes (-1) at ``t_s``."""
        self.edges.append((t_s, delta))
        self.edges.sort()

    def _busy_intervals(self) -> list[tuple[float, float]]:
        out, depth, start = [], 0, 0.0
        for t, d in self.edges:
            if depth == 0 and d > 0:
                start = t
            depth = max(depth + d, 0)
            if depth == 0 and d < 0:
                out.append((start, t))
        if depth > 0:
            out.append((start, math.inf))
        return out

    def power_w(self, t_s: float) -> float:
        """P(t), W."""
        return self.busy_w if any(a <= t_s < b for a, b in self._busy_intervals()) else self.idle_w

    def energy_j(self, t_s: float) -> float:
        """Integral of P from 0 to ``t_s``, J (negative t: idle before the start)."""
        busy = sum(max(0.0, min(b, t_s) - max(a, 0.0)) for a, b in self._busy_intervals()) if t_s > 0 else 0.0
        return self.idle_w * t_s + (self.busy_w - self.idle_w) * busy

    def last_tick_s(self, t_s: float) -> float:
        """Time of the counter's last tick at or before ``t_s``."""
        return math.floor((t_s - self.phase_s) / self.tick_s) * self.tick_s + self.phase_s

    def counter_j(self, t_s: float) -> float:
        """The counter as read at ``t_s``: whole mJ at the last tick, J."""
        return self.counter_offset_j + math.floor(self.energy_j(self.last_tick_s(t_s)) * 1e3) / 1e3

    def read(self, t_s: float, counter: bool = True) -> dict:
        """A sample row at ``t_s`` (same keys as :meth:`NvmlReader.read`)."""
        p = self.power_w(t_s)
        busy = p == self.busy_w
        return {
            "power_w": self.energy_j(t_s) - self.energy_j(t_s - 1.0),
            "power_instant_w": p,
            "energy_j": self.counter_j(t_s) if counter else None,
            "temperature_c": 60.0 if busy else 35.0,
            "sm_clock_mhz": 1980 if busy else 345,
            "clocks_event_reasons": 0 if busy else 1,
        }


# ----------------------------------------------------------------------------- the backend


class SimulatedBackend(GpuBackend):
    """The simulated GPU as a backend: last in ``auto`` order, chosen only when no sensor
    is found, and every figure labelled ``simulated``."""

    facts = Facts(
        name="simulated",
        label="simulated",
        energy_counter=True,
        instant_power=True,
        average_power=True,
        average_period_s=1.0,
        average_lag_s=0.5,  # the model's average is the mean over [t - 1, t]
        update_period_s=0.1,
        temperature=True,
        clocks=True,
        simulated=True,
        counter_resolution_j=0.001,
    )

    def open(self, devices: list[int], env: dict) -> Opened:
        gpus: list[dict] = [
            {"label": f"gpu{i}", "uuid": None, "index": i, "has_counter": True, "counter_reason": None}
            for i in (devices or [0])
        ]
        idle_w, busy_w = self.sim.get("idle_w", 60.0), self.sim.get("busy_w", 300.0)
        return Opened(
            gpus=gpus,
            device_facts={g["label"]: DeviceFacts(self.facts) for g in gpus},
            environment={"gpus": gpus, "simulated_model": {"idle_w": idle_w, "busy_w": busy_w, "tick_s": 0.1}},
            sampler_cfg={"sim": {"idle_w": idle_w, "busy_w": busy_w}},
        )

    def max_temperature_c(self, opened: Opened) -> float | None:
        return 35.0  # the model's idle temperature

    @classmethod
    def reader(cls, cfg: dict) -> SimulatedReader:
        return SimulatedReader(cfg)


class SimulatedReader:
    """Polled reader of the simulated GPUs (each with its own counter phase)."""

    def __init__(self, cfg: dict):
        sim = cfg.get("sim") or {}
        self.sims = [
            SimulatedGpu(
                idle_w=sim.get("idle_w", 60.0), busy_w=sim.get("busy_w", 300.0), phase_s=(0.0371 * (k + 1)) % 0.1
            )
            for k in range(len(cfg["gpus"]))
        ]

    def sample(self, i: int, t_s: float, counter: bool, extras: bool = True) -> dict:
        return self.sims[i].read(t_s, counter=counter)

    def mark(self, t_s: float, delta: int) -> None:
        for s in self.sims:
            s.mark(t_s, delta)
