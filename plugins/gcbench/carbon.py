"""Carbon footprint (CO2e) of measured energy.

    kgCO2e = E_kWh x I            with  E_kWh = E_J / 3.6e6

where ``I`` is the carbon intensity of the electricity in kgCO2e/kWh (GHG Protocol,
"location-based" method: energy drawn times the grid's average emission factor). The
intensity of a data centre's grid varies by region and hour and is rarely known
exactly, so every figure comes with a *sensitivity band*: the same energy at a low
and a high intensity. The multi-GPU study uses I = 0.20 kgCO2e/kWh with the band
0.10-0.30 (:data:`STUDY_INTENSITY`).

This module is pure arithmetic (no I/O, no imports beyond the standard library) so
that the report and the DAG processor can use it freely.
"""

from __future__ import annotations

from dataclasses import dataclass

from gcbench.units import J_PER_KWH, j_to_kwh


@dataclass(frozen=True)
class CarbonIntensity:
    """A carbon intensity and its sensitivity band, all in kgCO2e/kWh.

    Attributes:
        kg_per_kwh: the central intensity used for the headline figure.
        low_kg_per_kwh, high_kg_per_kwh: the band's edges
            (``low <= kg_per_kwh <= high``).

    Raises:
        ValueError: a negative value or a band that does not contain the central value.
    """

    kg_per_kwh: float
    low_kg_per_kwh: float
    high_kg_per_kwh: float

    def __post_init__(self) -> None:
        if min(self.kg_per_kwh, self.low_kg_per_kwh, self.high_kg_per_kwh) < 0:
            raise ValueError("carbon intensity must be >= 0 kgCO2e/kWh")
        if not self.low_kg_per_kwh <= self.kg_per_kwh <= self.high_kg_per_kwh:
            raise ValueError(
                f"carbon intensity band [{self.low_kg_per_kwh}, {self.high_kg_per_kwh}] "
                f"does not contain {self.kg_per_kwh} kgCO2e/kWh"
            )


STUDY_INTENSITY = CarbonIntensity(kg_per_kwh=0.20, low_kg_per_kwh=0.10, high_kg_per_kwh=0.30)
"""The multi-GPU study's intensity: 0.20 kgCO2e/kWh, band 0.10-0.30."""


@dataclass(frozen=True)
class CarbonEstimate:
    """CO2e of one energy figure.

    Attributes:
        energy_kwh: the energy, kWh.
        kg_co2e: energy_kwh x intensity, kgCO2e.
        kg_co2e_low, kg_co2e_high: the same at the band's low and high intensity, kgCO2e.
        intensity_kg_per_kwh: the central intensity used, kgCO2e/kWh.
    """

    energy_kwh: float
    kg_co2e: float
    kg_co2e_low: float
    kg_co2e_high: float
    intensity_kg_per_kwh: float

    def to_dict(self) -> dict[str, float]:
        """Plain dict (metric names carry their unit)."""
        return {
            "energy_kwh": self.energy_kwh,
            "co2e_kg": self.kg_co2e,
            "co2e_kg_low": self.kg_co2e_low,
            "co2e_kg_high": self.kg_co2e_high,
            "carbon_intensity_kg_per_kwh": self.intensity_kg_per_kwh,
        }


def kg_co2e(energy_kwh: float, intensity_kg_per_kwh: float) -> float:
    """kgCO2e = kWh x intensity (kgCO2e/kWh).

    Raises:
        ValueError: negative energy or intensity.
    """
    if energy_kwh < 0 or intensity_kg_per_kwh < 0:
        raise ValueError("energy and carbon intensity must be >= 0")
    return energy_kwh * intensity_kg_per_kwh


def co2e_from_joules(energy_j: float | None, intensity: CarbonIntensity = STUDY_INTENSITY) -> CarbonEstimate | None:
    """CO2e of ``energy_j`` joules: kgCO2e = (J / 3.6e6) x intensity, with its band.

    Returns None when the energy is unknown (None): an unknown energy has an unknown
    footprint, never a zero one.

    Example: 7.2 MJ = 2 kWh at 0.20 (0.10-0.30) kgCO2e/kWh gives 0.40 (0.20-0.60) kgCO2e.
    """
    if energy_j is None:
        return None
    kwh = j_to_kwh(energy_j)
    return CarbonEstimate(
        energy_kwh=kwh,
        kg_co2e=kg_co2e(kwh, intensity.kg_per_kwh),
        kg_co2e_low=kg_co2e(kwh, intensity.low_kg_per_kwh),
        kg_co2e_high=kg_co2e(kwh, intensity.high_kg_per_kwh),
        intensity_kg_per_kwh=intensity.kg_per_kwh,
    )


def total_energy_j(gpu_energy_j: float | None, cpu_energy_j: float | None) -> float | None:
    """GPU + CPU energy in J for the footprint; None when the GPU energy is unknown.

    CPU energy is added only when known (RAPL readable); the report states which parts
    a footprint covers, so a missing CPU figure lowers the total rather than hiding it.
    """
    if gpu_energy_j is None:
        return None
    return gpu_energy_j + (cpu_energy_j or 0.0)


__all__ = [
    "CarbonIntensity",
    "CarbonEstimate",
    "STUDY_INTENSITY",
    "J_PER_KWH",
    "kg_co2e",
    "co2e_from_joules",
    "total_energy_j",
]
