"""Data shapes shared by every energy backend (NVML, nvidia-smi, RAPL, simulated).

These dataclasses are the contract between the sampler, the trial process
(``gcbench.trial``), the store and the report. Every figure says which method
produced it, and ``None`` always means *unknown*, never zero.

Samples file (``samples.csv`` in a trial's output folder), one row per reading,
written while the trial runs and flushed at least once a second so that a killed
trial keeps what was measured:

    t_s,device,source,power_w,power_instant_w,energy_j,temperature_c,sm_clock_mhz,clocks_event_reasons

* ``t_s``: seconds on the host's monotonic clock since the trial's origin
  (``time.monotonic()`` at meter start, recorded in result.json as ``origin_monotonic``).
* ``device``: ``gpu0``, ``gpu1`` ... (host index) or ``cpu:package-0``, ``cpu:dram-0``.
* ``source``: ``nvml``, ``nvidia-smi``, ``rapl`` or ``simulated``.
* ``power_w``: 1-second average power (NVML_FI_DEV_POWER_AVERAGE / power.draw), W.
* ``power_instant_w``: instant power (NVML_FI_DEV_POWER_INSTANT / power.draw.instant), W.
* ``energy_j``: cumulative counter, J (NVML total energy since driver load; RAPL
  wrap-corrected since meter start). Empty when this row has no counter read.
* ``clocks_event_reasons``: NVML clocks-event reasons bitmask as a decimal integer
  (0x4 software power cap, 0x20/0x40 thermal slowdown; 0x1 idle).
* RAPL rows (``source = rapl``): ``power_w`` is the mean power since the previous
  read of that domain.
* empty cells are unknown values (CSV NULL), never 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

SAMPLE_COLUMNS = (
    "t_s",
    "device",
    "source",
    "power_w",
    "power_instant_w",
    "energy_j",
    "temperature_c",
    "sm_clock_mhz",
    "clocks_event_reasons",
)
"""Column order of samples.csv and of the ``samples`` table (after trial_id)."""

Source = Literal["nvml", "nvidia-smi", "rapl", "simulated", "none"]


@dataclass
class DeviceEnergy:
    """Energy of one device over one measured window.

    Attributes:
        device: ``gpu0`` ... or ``cpu:package-0`` ...
        energy_j: energy in joules over the window; None when unknown.
        method: how it was obtained: ``nvml-counter-edge-corrected``,
            ``nvml-counter``, ``nvml-power-integration``, ``nvidia-smi-power-integration``,
            ``rapl``, ``simulated``, or ``unavailable``.
        source: the sensor family (see :data:`Source`).
        reason: why the value is None or degraded; None when fine.
        cross_check_j: the same window's energy by trapezoid of instant power, J.
        cross_check_rel: (energy_j - cross_check_j) / cross_check_j, or None.
        idle_power_w: idle baseline power of this device, W, when measured.
        update_period_s: the sensor's observed update period, s.
        energy_above_idle_j: energy_j minus idle_power_w x window duration, J; None
            when either is unknown.
        power_field: the power field integrated when it is not the default (e.g.
            ``power.draw`` when nvidia-smi's ``power.draw.instant`` is missing).
    """

    device: str
    energy_j: float | None
    method: str
    source: str
    reason: str | None = None
    cross_check_j: float | None = None
    cross_check_rel: float | None = None
    idle_power_w: float | None = None
    update_period_s: float | None = None
    energy_above_idle_j: float | None = None
    power_field: str | None = None


@dataclass
class EnergyResult:
    """All energy figures of one trial's measured window.

    Attributes:
        window_start_s, window_end_s: window edges on the samples' time base (s).
        gpu: one entry per GPU of the trial.
        cpu: one entry per counted RAPL domain (nested or mirrored domains counted once);
            empty with ``cpu_reason`` set when RAPL is unreadable.
        gpu_energy_j: sum over GPUs, J; None if any GPU is unknown.
        cpu_energy_j: sum over counted CPU domains, J; None when unknown.
        cpu_reason: why CPU energy is unknown, or None.
        sample_hz: configured power sampling rate, Hz.
        samples_count: rows written to samples.csv.
        flags: measurement findings for validation, e.g. ``window_too_short``,
            ``counter_decreased``, ``cross_check_disagreement``, ``rapl_wrap_unknown``.
        simulated: True when any figure comes from the simulated device.
        gpu_energy_above_idle_j: sum over GPUs of energy above the idle baseline, J;
            None without a baseline.
        cross_check_threshold: relative disagreement that sets
            ``cross_check_disagreement``.
        backend: ``nvml``, ``nvidia-smi`` or ``simulated``.
        jitter_s: seeded delay slept before the window started, s.
    """

    window_start_s: float
    window_end_s: float
    gpu: list[DeviceEnergy] = field(default_factory=list)
    cpu: list[DeviceEnergy] = field(default_factory=list)
    gpu_energy_j: float | None = None
    cpu_energy_j: float | None = None
    cpu_reason: str | None = None
    sample_hz: float | None = None
    samples_count: int = 0
    flags: list[str] = field(default_factory=list)
    simulated: bool = False
    gpu_energy_above_idle_j: float | None = None
    cross_check_threshold: float | None = None
    backend: str | None = None
    jitter_s: float | None = None

    @property
    def duration_s(self) -> float:
        """Window length in seconds."""
        return self.window_end_s - self.window_start_s

    def to_dict(self) -> dict:
        """Plain dict for result.json (``duration_s`` included)."""
        d = asdict(self)
        d["duration_s"] = self.duration_s
        return d
