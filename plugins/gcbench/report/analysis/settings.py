"""Plan-derived settings of one report (:class:`ReportSettings`) and the report's defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gcbench import stats

DEFAULT_INTENSITY = 0.20
DEFAULT_BAND = (0.10, 0.30)
DEFAULT_MIN_VALID = 2


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class ReportSettings:
    """Plan-derived settings of one report.

    Attributes:
        intensity_kg_per_kwh: carbon intensity for CO2e, kgCO2e/kWh.
        band: (low, high) sensitivity intensities, kgCO2e/kWh.
        per_trial_carbon: the plan's intensity is an hourly series: each trial's CO2e is
            at its own window's stored intensity (``gcbench.carbon.trial_co2e``), and
            ``intensity_kg_per_kwh`` and ``band`` become the energy-weighted means of the
            trials' intensities for the report's text (analyze).
        pue: the plan's ``carbon.pue`` (None: no facility figure); facility energy and CO2e
            are the measured ones x PUE, shown as such.
        min_valid_repetitions: fewer valid repetitions make a group inconclusive.
        baseline: factor -> baseline level, from the plan's ``report.baseline``.
        compare: factors to test even if they look like sweeps (``report.compare``).
        n_resamples: bootstrap resamples (10,000).
        confidence: CI level (0.95).
        alpha: significance level after Holm correction (0.05).
        seed: base of the bootstrap seeds.
    """

    intensity_kg_per_kwh: float = DEFAULT_INTENSITY
    band: tuple[float, float] = DEFAULT_BAND
    per_trial_carbon: bool = False
    pue: float | None = None
    min_valid_repetitions: int = DEFAULT_MIN_VALID
    baseline: dict[str, Any] = field(default_factory=dict)
    compare: tuple[str, ...] = ()
    n_resamples: int = stats.DEFAULT_RESAMPLES
    confidence: float = stats.DEFAULT_CONFIDENCE
    alpha: float = stats.DEFAULT_ALPHA
    seed: int = 0

    @classmethod
    def from_plan(cls, plan: dict, **overrides) -> ReportSettings:
        """Read ``carbon``, ``validation`` and ``report`` sections of a plan dict."""
        carbon = plan.get("carbon") or {}
        validation = plan.get("validation") or {}
        report = plan.get("report") or {}
        band = carbon.get("band") or DEFAULT_BAND
        intensity = float(carbon.get("intensity_kg_per_kwh", DEFAULT_INTENSITY))
        if carbon.get("place"):  # one intensity for the plan: the place's (gcbench.carbon)
            from gcbench.carbon import window_intensity

            w = window_intensity(carbon)
            intensity, band = float(w.kg_per_kwh or 0.0), (w.low_kg_per_kwh, w.high_kg_per_kwh)
        kw: dict[str, Any] = dict(
            intensity_kg_per_kwh=intensity,
            band=(float(band[0]), float(band[1])),
            per_trial_carbon=bool(carbon.get("series")),
            pue=float(carbon["pue"]) if carbon.get("pue") is not None else None,
            min_valid_repetitions=int(validation.get("min_valid_repetitions", DEFAULT_MIN_VALID)),
            baseline=dict(report.get("baseline") or {}),
            compare=tuple(report.get("compare") or ()),
            seed=int(plan.get("seed", 0) or 0),
        )
        kw.update(overrides)
        return cls(**kw)
