"""Units scaled for reading: one unit per table column or plot axis, chosen from the
values shown (2.1e-05 kgCO2e reads 21.0 mgCO2e; 4,430 J reads 1.231 Wh; 0.0166 J/token
reads 16.6 mJ/token). Pure functions, no pandas.

Every metric keeps its stored unit (``gcbench.units``: J, s, kWh, kgCO2e); only the
numbers shown are divided by the chosen unit's factor, and the unit is written in the
column head or axis label, never left to the reader.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from gcbench.units import J_PER_KWH


@dataclass(frozen=True)
class Unit:
    """A display unit of a metric.

    Attributes:
        label: what is written after the numbers or in the head ("mJ/token").
        factor: how many of the metric's stored unit make one of this unit
            (mJ/token for a J/token metric: 1e-3). Shown value = stored / factor.
        from_value: the unit is chosen when the column's typical value, in this unit,
            is at least this (1 for most; 10 for minutes and hours, so that 90 s
            stays 90 s).
    """

    label: str
    factor: float
    from_value: float = 1.0

    def __call__(self, value: float | None) -> float | None:
        """``value`` (stored unit) in this unit; None stays None."""
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return None
        return value / self.factor


def _energy(per: str = "", base_j: float = 1.0) -> tuple[Unit, ...]:
    """mJ, J, Wh, kWh, MWh (``per`` appended), for a metric stored in ``base_j`` joules."""
    return tuple(
        Unit(f"{name}{per}", j / base_j)
        for name, j in (("mJ", 1e-3), ("J", 1.0), ("Wh", 3600.0), ("kWh", J_PER_KWH), ("MWh", 1e3 * J_PER_KWH))
    )


LADDERS: dict[str, tuple[Unit, ...]] = {
    "J": _energy(),
    "kWh": _energy(base_j=J_PER_KWH),
    "J/token": (Unit("µJ/token", 1e-6), Unit("mJ/token", 1e-3), Unit("J/token", 1.0)),
    "J/GB": (Unit("mJ/GB", 1e-3), Unit("J/GB", 1.0), Unit("kJ/GB", 1e3)),
    "kgCO2e": (Unit("mgCO2e", 1e-6), Unit("gCO2e", 1e-3), Unit("kgCO2e", 1.0), Unit("tCO2e", 1e3)),
    "s": (Unit("ms", 1e-3), Unit("s", 1.0), Unit("min", 60.0, 10.0), Unit("h", 3600.0, 10.0)),
    "s/token": (Unit("ns/token", 1e-9), Unit("µs/token", 1e-6), Unit("ms/token", 1e-3), Unit("s/token", 1.0)),
    "s/GB": (Unit("ms/GB", 1e-3), Unit("s/GB", 1.0)),
    "W": (Unit("mW", 1e-3), Unit("W", 1.0), Unit("kW", 1e3)),
    "share": (Unit("%", 0.01),),  # a fraction 0..1 shown in percent
}
"""Display units per stored unit, smallest first. Units not listed (tokens/s, GB/s,
fractions) are shown as stored."""


def typical(values: Iterable[float | None]) -> float | None:
    """Median of the finite, non-zero absolute values (None when there are none)."""
    v = sorted(abs(x) for x in values if x is not None and isinstance(x, (int, float)) and math.isfinite(x) and x != 0)
    if not v:
        return None
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else 0.5 * (v[mid - 1] + v[mid])


def choose_unit(stored_unit: str, values: Iterable[float | None]) -> Unit:
    """The unit to show ``values`` (in ``stored_unit``) in: the largest unit of the
    ladder in which their typical value (:func:`typical`) is at least the unit's
    ``from_value``; the smallest unit when all are below; the stored unit itself when
    it has no ladder or no value is known.

    Example: ``choose_unit("kgCO2e", [2.1e-05, 2.0e-05]).label == "mgCO2e"``.
    """
    ladder = LADDERS.get(stored_unit)
    t = typical(values)
    if not ladder:
        return Unit(stored_unit, 1.0)
    if t is None:
        return next((u for u in ladder if u.factor == 1.0), ladder[0])
    chosen = ladder[0]
    for u in ladder:
        if t / u.factor >= u.from_value:
            chosen = u
    return chosen
