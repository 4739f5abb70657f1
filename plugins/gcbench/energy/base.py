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

Utilization file (``utilization.csv`` beside samples.csv, :data:`UTILIZATION_COLUMNS`),
written by the sampler where the backend reads the GPU's utilization (NVML's
``nvmlDeviceGetUtilizationRates``: the percentage of its last sample period, 1/6 s to
1 s by product, in which one or more kernels ran), one row per power read:

    t_s,device,gpu_util_pct

The meter averages it over each window into :attr:`EnergyResult.gpu_busy_share`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

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

UTILIZATION_FILE = "utilization.csv"
UTILIZATION_COLUMNS = ("t_s", "device", "gpu_util_pct")
"""Column order of utilization.csv (module doc)."""

TRIAL_BUSY_METHOD = "simulated-trial-busy-time"
"""Busy-share method where the simulated device is used: the trial's own time in device
work (the workload's ``device_busy_s``: copies and model steps, timed by the host on a
CPU device) over the window's duration. The model itself is busy whenever a window is
open, so its own share would say nothing."""

Source = str
"""The backend that wrote a row or figure: a name of :data:`gcbench.energy.backend.REGISTRY`, or ``none``."""

CROSS_CHECK_FLAG_REL = 0.05
"""Default of ``validation.cross_check_flag_rel``: a counter that differs from the 1-s
average reference by more than this, beyond the edge allowance, is flagged.
docs/measurement.md: 5 % is above the 99th percentile (4.1 %) of the excess over 900
windows of 2-10 s placed at random on the H200 traces; every phase of 2 s or more has
no excess at all."""

CROSS_CHECK_INVALID_REL = 0.15
"""Default of ``validation.cross_check_invalid_rel``: beyond the edge allowance, a
larger difference invalidates the trial. 1.8 x the largest excess of any window of
1 s or more placed at random on the H200 traces (8.4 %), and well below a counter
43 % low (a public Zeus report: 187 J against 327 J)."""


@dataclass
class DeviceEnergy:
    """Energy of one device over one measured window.

    Attributes:
        device: ``gpu0`` ... or ``cpu:package-0`` ...
        energy_j: energy in joules over the window; None when unknown.
        method: how it was obtained, ``<backend label>-<how>`` from the backend's
            declared facts (:meth:`gcbench.energy.backend.Facts.method`):
            ``nvml-counter-edge-corrected``, ``nvml-power-integration``,
            ``nvml-average-power-lag-corrected``, ``nvidia-smi-power-integration``,
            ``nvidia-smi-average-power-lag-corrected``, ``nvml-module-...`` (module scope),
            ``rapl``, ``simulated``, or ``unavailable``.
        source: the sensor family (see :data:`Source`).
        reason: why the value is None or degraded; None when fine.
        cross_check_j: the reference the counter is checked against: the 1-s average
            power integrated over the window shifted by its lag
            (:func:`gcbench.energy.integrate.cross_check_reference`), J; None when
            unchecked. (Results written before ``cross_check_method`` existed hold the
            instant-power trapezoid here.)
        cross_check_rel: (energy_j - cross_check_j) / cross_check_j, or None.
        cross_check_method: ``average-power-lag`` (the reference above); None in older
            results.
        cross_check_allowance_rel: the edge allowance relative to the reference
            (EDGE_ALLOWANCE_S x the power steps at both edges / reference).
        cross_check_excess_rel: max(0, |cross_check_rel| - allowance): what the
            thresholds apply to.
        cross_check_verdict: ``ok``, ``flag``, ``invalid`` at the meter's thresholds
            (validation applies the plan's), or ``unchecked``.
        cross_check_lag_s: the lag of the 1-s average used, s.
        cross_check_reason: why unchecked.
        instant_integral_j: trapezoid of instant power over the window, J; recorded for
            information (it misses bursts shorter than the sensor's ~100 ms refresh).
        instant_integral_rel: (energy_j - instant_integral_j) / instant_integral_j.
        idle_power_w: idle baseline power of this device, W, when measured.
        update_period_s: the sensor's observed update period, s.
        energy_above_idle_j: energy_j minus idle_power_w x window duration, J; None
            when either is unknown.
        power_field: the power field integrated when it is not the default (e.g.
            ``power.draw`` when nvidia-smi's ``power.draw.instant`` is missing).
        scope: what the figure covers (:data:`gcbench.energy.backend.Scope`): ``gpu``,
            ``module`` (a superchip's GPU + CPU + memory), ``package``, ``dram``, ``node``.
        edge_uncertainty_rel: for energy integrated from average power only, the error
            power steps at the edges may leave (EDGE_ALLOWANCE_S x steps / energy); None
            otherwise.
        average_lag_s: the lag the average power was shifted by, s (average power only).
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
    cross_check_method: str | None = None
    cross_check_allowance_rel: float | None = None
    cross_check_excess_rel: float | None = None
    cross_check_verdict: str | None = None
    cross_check_lag_s: float | None = None
    cross_check_reason: str | None = None
    instant_integral_j: float | None = None
    instant_integral_rel: float | None = None
    scope: str = "gpu"
    edge_uncertainty_rel: float | None = None
    average_lag_s: float | None = None


@dataclass
class EnergyResult:
    """All energy figures of one trial's measured window.

    Attributes:
        window_start_s, window_end_s: window edges on the samples' time base (s).
        gpu: one entry per GPU of the trial.
        cpu: one entry per counted RAPL domain (nested or mirrored domains counted once);
            empty with ``cpu_reason`` set when RAPL is unreadable.
        gpu_energy_j: sum over GPUs, J; None if any GPU is unknown or the figures
            cover whole modules (``module_energy_j``).
        cpu_energy_j: sum over counted CPU domains, J; None when unknown.
        cpu_reason: why CPU energy is unknown, or None.
        sample_hz: configured power sampling rate, Hz.
        samples_count: rows written to samples.csv.
        flags: measurement findings for validation, e.g. ``window_too_short``,
            ``counter_decreased``, ``cross_check_disagreement``, ``rapl_wrap_unknown``.
        simulated: True when any figure comes from the simulated device.
        gpu_energy_above_idle_j: sum over GPUs of energy above the idle baseline, J;
            None without a baseline.
        cross_check_threshold: excess over the edge allowance above which the meter
            sets ``cross_check_disagreement`` (:data:`CROSS_CHECK_FLAG_REL` unless
            given); validation applies the plan's thresholds.
        backend: ``nvml``, ``nvidia-smi`` or ``simulated``.
        jitter_s: seeded delay slept before the window started, s.
        module_energy_j: sum over devices whose counter covers a whole superchip module
            (GPU + CPU + memory, e.g. Grace Hopper), J; ``gpu_energy_j`` is then None (a
            module figure is never GPU energy) and ``cpu_reason`` says the CPU is inside it.
        energy_scope: ``gpu`` or ``module``: what the device figures cover.
        node: the node meter's figure (the BMC's whole-node power integrated; scope
            ``node``), None without a node meter in the plan.
        node_energy_j: its energy, J; None when unknown (``node.reason`` says why). It
            contains the GPU, CPU and DRAM figures: never added to them
            (:func:`gcbench.carbon.energy_total`).
        gpu_busy_share: share of the window in which the trial's GPUs ran work, 0..1
            (the mean over GPUs and reads of the backend's utilization, or the trial's
            own busy time on the simulated device); None when unknown.
        gpu_idle_share: 1 - gpu_busy_share; None when unknown.
        gpu_busy_method: how the busy share was found (``nvml-utilization-sampled``,
            :data:`TRIAL_BUSY_METHOD`), or None.
        gpu_busy_reads: utilization reads averaged (0 for the trial's own busy time).
        gpu_busy_reason: why the busy share is unknown, or None.
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
    module_energy_j: float | None = None
    energy_scope: str = "gpu"
    node: DeviceEnergy | None = None
    node_energy_j: float | None = None
    gpu_busy_share: float | None = None
    gpu_idle_share: float | None = None
    gpu_busy_method: str | None = None
    gpu_busy_reads: int = 0
    gpu_busy_reason: str | None = None

    @property
    def duration_s(self) -> float:
        """Window length in seconds."""
        return self.window_end_s - self.window_start_s

    def to_dict(self) -> dict:
        """Plain dict for result.json (``duration_s`` included)."""
        d = asdict(self)
        d["duration_s"] = self.duration_s
        return d
