"""Optional comparison with CodeCarbon's energy estimate, one tracker per trial.

CodeCarbon (https://github.com/mlco2/codecarbon) estimates the energy of a process
from RAPL or a CPU TDP model, NVML power polled every ``measure_power_secs`` and a
RAM power model; the multi-GPU study compares its estimate with the direct
measurement (median relative error 4.09 %). GC-Bench runs one *offline* tracker
(no network, no API) beside its own meter over the same trial and stores
CodeCarbon's energy in joules (1 kWh = 3.6e6 J) next to the direct figure:

    relative_error = (E_codecarbon - E_measured) / E_measured

CodeCarbon is not a dependency of GC-Bench. Where it is not importable, the tracker
does nothing and its result is ``energy_j = None`` with the reason, so the report can
say "CodeCarbon not installed" instead of showing a number.

Example (in the trial process, around the same span the meter measures)::

    with CodeCarbonTracker(gpu_ids=spec.devices) as cc:
        ...  # the trial's work
    cc.result.energy_j   # J, or None with cc.result.reason
    metrics.update(comparison_metrics(cc.result, gpu_energy_j, cpu_energy_j))

CodeCarbon polls power every ``measure_power_secs`` (1 s here) and needs about that long
to start, so it is compared over long spans (a whole ResNet training budget), not
over sub-second windows.
"""

from __future__ import annotations

import importlib
import logging
import tempfile
from dataclasses import asdict, dataclass
from typing import Any

from gcbench.units import kwh_to_j

log = logging.getLogger(__name__)


@dataclass
class CodeCarbonResult:
    """CodeCarbon's estimate over one trial.

    Attributes:
        energy_j: total energy (CPU + GPU + RAM) by CodeCarbon, J; None when not
            available (see ``reason``).
        cpu_energy_j, gpu_energy_j, ram_energy_j: its parts, J; None when unknown.
        emissions_kg: CodeCarbon's own CO2e estimate with its grid data, kgCO2e;
            GC-Bench's CO2e figures come from :mod:`gcbench.carbon` instead.
        duration_s: the tracker's own duration, s.
        version: CodeCarbon's version string, or None.
        reason: why ``energy_j`` is None (not installed, tracker failed), else None.
    """

    energy_j: float | None
    cpu_energy_j: float | None = None
    gpu_energy_j: float | None = None
    ram_energy_j: float | None = None
    emissions_kg: float | None = None
    duration_s: float | None = None
    version: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict with ``codecarbon_`` prefixed metric names."""
        return {f"codecarbon_{k}": v for k, v in asdict(self).items()}


def _import_codecarbon() -> tuple[Any | None, str | None]:
    try:
        return importlib.import_module("codecarbon"), None
    except ImportError as exc:
        return None, f"codecarbon not installed ({exc})"


def codecarbon_available() -> tuple[bool, str | None]:
    """(True, None) when codecarbon imports, else (False, reason)."""
    module, reason = _import_codecarbon()
    return module is not None, reason


def _kwh_attr_to_j(data: Any, name: str) -> float | None:
    value = getattr(data, name, None)
    if value is None:
        return None
    # CodeCarbon's EmissionsData fields are kWh floats; its Energy objects carry .kWh.
    value = getattr(value, "kWh", value)
    return kwh_to_j(float(value))


class CodeCarbonTracker:
    """One offline CodeCarbon tracker around a trial (a context manager).

    Args:
        gpu_ids: GPUs CodeCarbon should count (host indices); None: all it sees.
        country_iso_code: grid region for CodeCarbon's own CO2e (3-letter ISO code);
            it does not affect the energy figure.
        measure_power_secs: CodeCarbon's polling period, s.
        output_dir: where CodeCarbon may write; a temporary folder by default
            (``save_to_file`` is off, but some versions still create files).

    The tracker never raises out of ``__enter__``/``__exit__``: a CodeCarbon failure
    becomes ``result.reason`` so a trial is never lost because of the comparison.
    """

    def __init__(
        self,
        gpu_ids: list[int] | None = None,
        country_iso_code: str = "USA",
        measure_power_secs: float = 1.0,
        output_dir: str | None = None,
    ):
        self.gpu_ids = gpu_ids
        self.country_iso_code = country_iso_code
        self.measure_power_secs = measure_power_secs
        self.output_dir = output_dir
        self.result = CodeCarbonResult(energy_j=None, reason="tracker not started")
        self._tracker: Any | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None

    def _make_tracker(self, codecarbon: Any) -> Any:
        if self.output_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="gcbench-codecarbon-")
            self.output_dir = self._tmp.name
        kwargs: dict[str, Any] = {
            "country_iso_code": self.country_iso_code,
            "measure_power_secs": self.measure_power_secs,
            "save_to_file": False,
            "output_dir": self.output_dir,
            "log_level": "error",
            "allow_multiple_runs": True,
        }
        if self.gpu_ids is not None:
            kwargs["gpu_ids"] = list(self.gpu_ids)
        try:
            return codecarbon.OfflineEmissionsTracker(**kwargs)
        except TypeError:
            # Versions before 2.5 do not know allow_multiple_runs.
            kwargs.pop("allow_multiple_runs")
            return codecarbon.OfflineEmissionsTracker(**kwargs)

    def __enter__(self) -> CodeCarbonTracker:
        codecarbon, reason = _import_codecarbon()
        if codecarbon is None:
            self.result = CodeCarbonResult(energy_j=None, reason=reason)
            return self
        version = getattr(codecarbon, "__version__", None)
        try:
            self._tracker = self._make_tracker(codecarbon)
            self._tracker.start()
            self.result = CodeCarbonResult(energy_j=None, version=version, reason="running")
        except Exception as exc:  # noqa: BLE001 - an optional comparison must not kill the trial
            log.warning("codecarbon tracker failed to start: %s", exc)
            self._tracker = None
            self.result = CodeCarbonResult(energy_j=None, version=version, reason=f"codecarbon failed to start: {exc}")
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._tracker is None:
            self._cleanup()
            return
        version = self.result.version
        try:
            emissions_kg = self._tracker.stop()
            data = getattr(self._tracker, "final_emissions_data", None)
            if data is not None:
                energy_j = _kwh_attr_to_j(data, "energy_consumed")
                parts = {name: _kwh_attr_to_j(data, name) for name in ("cpu_energy", "gpu_energy", "ram_energy")}
                duration_s = getattr(data, "duration", None)
            else:
                energy_j = _kwh_attr_to_j(self._tracker, "_total_energy")
                parts = {"cpu_energy": None, "gpu_energy": None, "ram_energy": None}
                duration_s = None
            self.result = CodeCarbonResult(
                energy_j=energy_j,
                cpu_energy_j=parts["cpu_energy"],
                gpu_energy_j=parts["gpu_energy"],
                ram_energy_j=parts["ram_energy"],
                emissions_kg=float(emissions_kg) if emissions_kg is not None else None,
                duration_s=float(duration_s) if duration_s is not None else None,
                version=version,
                reason=None if energy_j is not None else "codecarbon reported no energy",
            )
        except Exception as exc:  # noqa: BLE001 - see __enter__
            log.warning("codecarbon tracker failed to stop: %s", exc)
            self.result = CodeCarbonResult(energy_j=None, version=version, reason=f"codecarbon failed: {exc}")
        finally:
            self._tracker = None
            self._cleanup()

    def _cleanup(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def relative_error(codecarbon_j: float | None, measured_j: float | None) -> float | None:
    """(E_codecarbon - E_measured) / E_measured; None when either is unknown or E_measured <= 0."""
    if codecarbon_j is None or measured_j is None or measured_j <= 0:
        return None
    return (codecarbon_j - measured_j) / measured_j


def comparison_metrics(cc: CodeCarbonResult, gpu_energy_j: float | None, cpu_energy_j: float | None) -> dict[str, Any]:
    """CodeCarbon's figures beside the direct measurement of the same span, for result.json.

    ``codecarbon_rel_error`` compares like with like: CodeCarbon's CPU + GPU energy
    against the measured GPU + CPU energy when RAPL was readable, else CodeCarbon's GPU
    energy against the measured GPU energy (``codecarbon_compared`` says which).
    CodeCarbon's RAM estimate has no measured counterpart and is left out of both.
    """
    out = {k: v for k, v in cc.to_dict().items()}
    if cc.energy_j is None:
        out.update({"codecarbon_rel_error": None, "codecarbon_compared": None})
        return out
    estimate: float | None
    measured: float | None
    if cpu_energy_j is not None and cc.cpu_energy_j is not None and cc.gpu_energy_j is not None:
        estimate, measured, scope = (
            cc.cpu_energy_j + cc.gpu_energy_j,
            (None if gpu_energy_j is None else gpu_energy_j + cpu_energy_j),
            "gpu+cpu",
        )
    else:
        estimate, measured, scope = cc.gpu_energy_j, gpu_energy_j, "gpu"
    out["codecarbon_rel_error"] = relative_error(estimate, measured)
    out["codecarbon_compared"] = scope if out["codecarbon_rel_error"] is not None else None
    return out
