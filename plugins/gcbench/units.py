"""Unit conversions, in one place.

Every energy figure inside GC-Bench is in joules (J), power in watts (W), time in
seconds (s), data in bytes. Sensors report other units: NVML's energy counter in
millijoules (mJ) and its power in milliwatts (mW); RAPL's ``energy_uj`` in
microjoules (uJ); carbon intensity is quoted per kilowatt-hour (kWh).
"""

from __future__ import annotations

J_PER_KWH = 3.6e6
"""Joules in one kilowatt-hour (1 kWh = 1000 W x 3600 s)."""

BYTES_PER_GB = 1e9
"""Bytes in one gigabyte (SI, as in GB/s and J/GB figures)."""


def mj_to_j(millijoules: float) -> float:
    """Millijoules (NVML energy counter) to joules."""
    return millijoules / 1e3


def uj_to_j(microjoules: float) -> float:
    """Microjoules (RAPL ``energy_uj``) to joules."""
    return microjoules / 1e6


def mw_to_w(milliwatts: float) -> float:
    """Milliwatts (NVML power) to watts."""
    return milliwatts / 1e3


def j_to_kwh(joules: float) -> float:
    """Joules to kilowatt-hours."""
    return joules / J_PER_KWH


def kwh_to_j(kwh: float) -> float:
    """Kilowatt-hours to joules."""
    return kwh * J_PER_KWH


def bytes_to_gb(n_bytes: float) -> float:
    """Bytes to SI gigabytes (1e9 bytes)."""
    return n_bytes / BYTES_PER_GB


def j_to_mj(joules: float) -> float:
    """Joules to millijoules."""
    return joules * 1e3


def j_to_uj(joules: float) -> float:
    """Joules to microjoules."""
    return joules * 1e6


def w_to_mw(watts: float) -> float:
    """Watts to milliwatts (NVML power limits are set in mW)."""
    return watts * 1e3


def j_to_wh(joules: float) -> float:
    """Joules to watt-hours."""
    return joules / 3600.0


def energy_j(power_w: float, duration_s: float) -> float:
    """Energy of a constant power over a duration: W x s = J."""
    return power_w * duration_s
