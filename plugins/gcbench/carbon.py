"""Carbon footprint (CO2e) of measured energy.

    kgCO2e = E_kWh x I            with  E_kWh = E_J / 3.6e6

where ``I`` is the carbon intensity of the electricity in kgCO2e/kWh (GHG Protocol,
"location-based" method: energy drawn times the grid's average emission factor). The
intensity of a data centre's grid varies by region and hour and is rarely known
exactly, so every figure comes with a *sensitivity band*: the same energy at a low
and a high intensity. The multi-GPU study uses I = 0.20 kgCO2e/kWh with the band
0.10-0.30 (:data:`STUDY_INTENSITY`).

Where the intensity comes from (the plan's ``carbon:`` section, :func:`window_intensity`):

* **fixed** (default): ``intensity_kg_per_kwh`` and its absolute ``band``;
* **a place**: ``place: FRA`` (ISO 3166-1 alpha-3 country) or ``place: gcp:europe-west1``
  (cloud region), looked up offline in the table extracted from CodeCarbon's shipped data
  (``gcbench/data/carbon_intensity_places.csv``, by ``scripts/update_carbon_places.py``):
  its value, year, table and source are stored with each trial;
* **an hourly series**: ``series: grid-2026.csv`` (CSV ``hour_utc,kg_per_kwh``, e.g. an
  export from a grid operator or ElectricityMaps), each trial's CO2e at the time-weighted
  mean intensity of the UTC hours its measured window overlaps (energy taken as spread
  evenly over the window). A window the series does not cover has no CO2e (NULL, with the
  reason); its energy is kept.

For a place or a series the band is ``band_factor`` x the intensity (default 0.5-1.5,
the study's 0.10-0.30 around 0.20). Intensities are *average* (location-based) unless the
plan says ``intensity_kind: marginal`` for a series that is one; the kind is stored with
every figure and one plan never mixes the two (CodeCarbon's tables are average).

What a total adds up (:func:`energy_total`, the one scope rule): the node meter's figure
when the plan has one (it contains GPU, CPU and DRAM: never added to them), else a
superchip's module figure, else GPU + CPU (package and DRAM). A plan's ``pue`` multiplies
that total into a facility figure of its own (:func:`facility_energy_j`), never into the
measured ones.

Standard library only (the report and the DAG processor use it freely); the place table
and series files are read once per process and cached.
"""

from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from gcbench.units import J_PER_KWH, j_to_kwh

INTENSITY_KINDS = ("average", "marginal")
"""Average (location-based: the grid's mean emission factor) or marginal (the emission of
the generation that follows a change in demand); never mixed in one figure."""

DEFAULT_BAND_FACTOR = (0.5, 1.5)
"""Band of a place or series intensity, as factors of it (0.10-0.30 around 0.20)."""

PLACES_FILE = "carbon_intensity_places.csv"
"""The offline table of intensity by place (``gcbench/data/``)."""


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


SCOPE_WORDS = {
    "node": "node (the BMC's whole-node power: contains GPU, CPU and DRAM, never added to them)",
    "module": "module (a superchip's GPU + CPU + memory counter; the CPU figure is inside it)",
    "gpu+cpu": "GPU + CPU (CPU package and DRAM counters)",
    "gpu": "GPU only (CPU energy unknown)",
}
"""What each total scope adds up, in words (the report states it beside every total)."""


@dataclass(frozen=True)
class EnergyTotal:
    """The trial's total energy by the scope rule (:func:`energy_total`).

    Attributes:
        energy_j: the total, J; None when unknown.
        scope: ``node``, ``module``, ``gpu+cpu`` or ``gpu`` (None when unknown).
        reason: why it is unknown (None when known).
    """

    energy_j: float | None
    scope: str | None
    reason: str | None = None

    @property
    def adds_up(self) -> str | None:
        """What the total adds up, in words (:data:`SCOPE_WORDS`)."""
        return SCOPE_WORDS.get(self.scope or "")


def energy_total(
    gpu_energy_j: float | None,
    cpu_energy_j: float | None,
    module_energy_j: float | None = None,
    node_energy_j: float | None = None,
    *,
    node_metered: bool = False,
) -> EnergyTotal:
    """The one scope rule of a trial's total energy, J.

    * a node meter in the plan (``node_metered``): the node figure alone, whatever the
      parts say: the BMC measures the whole node, GPU, CPU and DRAM included, so adding
      them would count them twice. Unknown node energy is an unknown total (with the
      reason), never a fallback to the parts, so one plan's totals never mix scopes.
    * else a superchip module counter: the module figure (GPU + CPU + memory; the CPU
      figure is inside it and never added).
    * else GPU + CPU (RAPL/hwmon package and DRAM), or GPU alone when the CPU is unknown
      (scope ``gpu``: the report says so).
    """
    if node_metered:
        if node_energy_j is None:
            return EnergyTotal(None, "node", "node energy unknown (see the node figure's reason)")
        return EnergyTotal(node_energy_j, "node")
    if module_energy_j is not None:
        return EnergyTotal(module_energy_j, "module")
    if gpu_energy_j is None:
        return EnergyTotal(None, None, "GPU energy unknown")
    if cpu_energy_j is None:
        return EnergyTotal(gpu_energy_j, "gpu")
    return EnergyTotal(gpu_energy_j + cpu_energy_j, "gpu+cpu")


def facility_energy_j(total_energy_j: float | None, pue: float | None) -> float | None:
    """Facility energy = total (IT) energy x PUE, J: the plan's ``carbon.pue`` (Power Usage
    Effectiveness, facility energy / IT energy, ISO/IEC 30134-2), applied explicitly and
    shown as its own figure; None without a PUE or a total.

    Raises:
        ValueError: a PUE below 1 (a facility cannot draw less than its IT load).
    """
    if pue is None or total_energy_j is None:
        return None
    if pue < 1.0:
        raise ValueError(f"PUE must be >= 1, got {pue}")
    return total_energy_j * pue


def total_energy_j(gpu_energy_j: float | None, cpu_energy_j: float | None) -> float | None:
    """GPU + CPU energy in J for the footprint; None when the GPU energy is unknown.

    CPU energy is added only when known (RAPL readable); the report states which parts
    a footprint covers, so a missing CPU figure lowers the total rather than hiding it.
    """
    if gpu_energy_j is None:
        return None
    return gpu_energy_j + (cpu_energy_j or 0.0)


# ----------------------------------------------------------------------------- places


@dataclass(frozen=True)
class PlaceIntensity:
    """One row of the offline place table.

    Attributes:
        place: ISO 3166-1 alpha-3 code (``FRA``) or ``<provider>:<region>`` (``gcp:europe-west1``).
        name: the country, or the region's city and country.
        kg_per_kwh: average carbon intensity of its electricity, kgCO2e/kWh.
        year: the year of the figure, None where the table gives none (cloud regions).
        table: the table it comes from (``CodeCarbon 3.3.2 global_energy_mix.json``).
        source: that table's source (a publisher or URL).
    """

    place: str
    name: str
    kg_per_kwh: float
    year: int | None
    table: str
    source: str

    def describe(self) -> str:
        """``FRA (France), 2023: CodeCarbon 3.3.2 global_energy_mix.json (Our World in Data ...)``."""
        year = f"{self.year}" if self.year else "year not given"
        return f"{self.place} ({self.name}), {year}: {self.table} ({self.source})"


@functools.cache
def places() -> dict[str, PlaceIntensity]:
    """The offline place table, keyed by upper-case place (``FRA``, ``GCP:EUROPE-WEST1``)."""
    text = resources.files("gcbench").joinpath("data", PLACES_FILE).read_text(encoding="utf-8")
    out = {}
    for row in csv.DictReader(text.splitlines()):
        out[row["place"].upper()] = PlaceIntensity(
            row["place"],
            row["name"],
            float(row["kg_per_kwh"]),
            int(row["year"]) if row["year"] else None,
            row["table"],
            row["source"],
        )
    return out


def place_intensity(place: str) -> PlaceIntensity:
    """The table's row of ``place`` (case-insensitive).

    Raises:
        ValueError: an unknown place, with the closest known ones.
    """
    import difflib

    table = places()
    row = table.get(place.strip().upper())
    if row is None:
        close = difflib.get_close_matches(place.strip().upper(), list(table), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(table[c].place for c in close)}?)" if close else ""
        raise ValueError(
            f"unknown place {place!r}{hint}: an ISO 3166-1 alpha-3 country code (FRA, DEU, USA) or a "
            f"cloud region such as gcp:europe-west1 ({len(table)} places in {PLACES_FILE})"
        )
    return row


# ----------------------------------------------------------------------------- hourly series


@dataclass(frozen=True)
class HourlySeries:
    """Carbon intensity per UTC hour, kgCO2e/kWh.

    Attributes:
        path: the CSV file (columns ``hour_utc``: ISO 8601 start of the hour, with a time
            zone or ``Z``; ``kg_per_kwh``).
        hours: start of each hour (UTC) -> intensity.
    """

    path: str
    hours: dict[datetime, float]

    def mean_kg_per_kwh(self, start: datetime, end: datetime) -> tuple[float | None, str | None]:
        """Time-weighted mean intensity over ``[start, end]`` (aware datetimes), and None
        or why there is none (an hour of the window missing from the series)."""
        if end < start:
            return None, f"window ends before it starts ({start.isoformat()} .. {end.isoformat()})"
        hour = start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        total_s = (end - start).total_seconds()
        if total_s == 0:
            value = self.hours.get(hour)
            return (value, None) if value is not None else (None, self._missing(hour))
        acc = 0.0
        while hour < end:
            nxt = hour + timedelta(hours=1)
            overlap = (min(end, nxt) - max(start, hour)).total_seconds()
            value = self.hours.get(hour)
            if value is None:
                return None, self._missing(hour)
            acc += value * overlap
            hour = nxt
        return acc / total_s, None

    def _missing(self, hour: datetime) -> str:
        first, last = (min(self.hours), max(self.hours)) if self.hours else (None, None)
        span = f"{first.isoformat()} .. {last.isoformat()}" if first and last else "no hours"
        return f"the series {Path(self.path).name} has no intensity for {hour.isoformat()} (it covers {span})"


def _parse_hour(text: str) -> datetime:
    t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if t.tzinfo is None:
        raise ValueError("the time has no time zone (write 2026-11-04T02:00Z)")
    t = t.astimezone(UTC)
    if (t.minute, t.second, t.microsecond) != (0, 0, 0):
        raise ValueError("not the start of an hour")
    return t


def load_series(path: str) -> HourlySeries:
    """Read an hourly series CSV (header ``hour_utc,kg_per_kwh``; ``#`` lines are comments),
    cached per file version (path, modification time, size).

    Raises:
        ValueError: ``FILE:LINE: ...`` for a missing file, a bad header, an unparsable or
            repeated hour, or an intensity that is not a finite number >= 0.
    """
    try:
        st = Path(path).stat()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the carbon-intensity series: {exc.strerror or exc}") from exc
    return _load_series(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _load_series(path: str, mtime_ns: int, size: int) -> HourlySeries:
    try:
        lines = Path(path).read_text(encoding="utf-8-sig").splitlines()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the carbon-intensity series: {exc.strerror or exc}") from exc
    rows = [(i, line) for i, line in enumerate(lines, 1) if line.strip() and not line.lstrip().startswith("#")]
    if not rows:
        raise ValueError(f"{path}: empty carbon-intensity series")
    head_line, head = rows[0]
    names = [c.strip() for c in next(csv.reader([head]))]
    if names[:2] != ["hour_utc", "kg_per_kwh"]:
        raise ValueError(f"{path}:{head_line}: the header must be 'hour_utc,kg_per_kwh', got {head.strip()!r}")
    hours: dict[datetime, float] = {}
    for i, line in rows[1:]:
        cells = next(csv.reader([line]))
        try:
            hour = _parse_hour(cells[0])
            value = float(cells[1])
        except (ValueError, IndexError) as exc:
            raise ValueError(f"{path}:{i}: {line.strip()!r}: {exc}") from exc
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{path}:{i}: kg_per_kwh must be a finite number >= 0, got {cells[1].strip()!r}")
        if hour in hours:
            raise ValueError(f"{path}:{i}: hour {hour.isoformat()} given twice")
        hours[hour] = value
    return HourlySeries(str(path), hours)


# ----------------------------------------------------------------------------- per trial


@dataclass(frozen=True)
class WindowIntensity:
    """The intensity that applies to one measured window.

    Attributes:
        kg_per_kwh: central intensity, kgCO2e/kWh; None when unknown (see ``reason``).
        low_kg_per_kwh, high_kg_per_kwh: the sensitivity band, kgCO2e/kWh.
        source: where the value comes from, in words (stored with the trial, shown in the report).
        kind: ``average`` or ``marginal``.
        reason: why there is no intensity, else None.
    """

    kg_per_kwh: float | None
    low_kg_per_kwh: float | None
    high_kg_per_kwh: float | None
    source: str
    kind: str
    reason: str | None = None


def resolve_series_path(series: str, root: Path | None = None) -> Path:
    """An absolute series path as given, a relative one under ``root`` (the project root)."""
    p = Path(series)
    return p if p.is_absolute() or root is None else root / p


def window_intensity(
    carbon: dict[str, Any] | None, start: datetime | None = None, end: datetime | None = None
) -> WindowIntensity:
    """The intensity of a window from the plan's ``carbon`` settings (a plain dict).

    Args:
        carbon: ``{"intensity_kg_per_kwh", "band"}`` (fixed), or with ``place`` or
            ``series`` (an absolute path, or relative to the project root); optional
            ``band_factor``, ``intensity_kind``, ``series_source``.
        start, end: the window in UTC (aware datetimes); needed by a series only.
    """
    carbon = carbon or {}
    kind = str(carbon.get("intensity_kind") or "average")
    f_low, f_high = carbon.get("band_factor") or DEFAULT_BAND_FACTOR
    if carbon.get("place"):
        row = place_intensity(str(carbon["place"]))
        k = row.kg_per_kwh
        return WindowIntensity(k, k * f_low, k * f_high, f"place {row.describe()}", kind)
    if carbon.get("series"):
        from gcbench import config

        path = resolve_series_path(str(carbon["series"]), config.project_root())
        named = f"hourly series {path.name}" + (f" ({carbon['series_source']})" if carbon.get("series_source") else "")
        if start is None or end is None:
            return WindowIntensity(None, None, None, named, kind, "the window's UTC time is unknown")
        try:
            series = load_series(str(path))
        except ValueError as exc:
            return WindowIntensity(None, None, None, named, kind, str(exc))
        value, why = series.mean_kg_per_kwh(start, end)
        if value is None:
            return WindowIntensity(None, None, None, named, kind, why)
        return WindowIntensity(value, value * f_low, value * f_high, named, kind)
    k = float(carbon.get("intensity_kg_per_kwh", STUDY_INTENSITY.kg_per_kwh))
    low, high = carbon.get("band") or (STUDY_INTENSITY.low_kg_per_kwh, STUDY_INTENSITY.high_kg_per_kwh)
    return WindowIntensity(k, float(low), float(high), f"fixed {k:g} kgCO2e/kWh (plan)", kind)


def window_utc(result: dict[str, Any]) -> tuple[datetime, datetime] | None:
    """The main window of a trial's result.json in UTC: the meter's wall-clock origin
    (``origin_wall``, epoch s; else ``started_at``) plus the window's ``start_s``/``end_s``
    on the trial's monotonic clock. None when the result lacks them."""
    window = (result.get("windows") or {}).get("main") or {}
    try:
        t0, t1 = float(window["start_s"]), float(window["end_s"])
        if isinstance(result.get("origin_wall"), (int, float)):
            origin = datetime.fromtimestamp(float(result["origin_wall"]), UTC)
        else:
            origin = datetime.fromisoformat(str(result["started_at"]).replace("Z", "+00:00")).astimezone(UTC)
    except (KeyError, TypeError, ValueError):
        return None
    return origin + timedelta(seconds=t0), origin + timedelta(seconds=t1)


def trial_co2e(
    energy_kwh: float | None, carbon: dict[str, Any] | None, result: dict[str, Any] | None
) -> dict[str, Any]:
    """The CO2e metrics of one trial: ``co2e_kg``, ``co2e_kg_low``, ``co2e_kg_high``
    (kgCO2e; None when the energy or the intensity is unknown), ``carbon_intensity_kg_per_kwh``
    and its band ``carbon_intensity_low_kg_per_kwh``/``_high_`` (kgCO2e/kWh),
    ``carbon_intensity_source`` and ``carbon_intensity_kind`` (text), and
    ``co2e_reason`` (text) when there is no CO2e. kgCO2e = kWh x intensity. With a
    ``pue`` in the carbon settings, also ``pue``, ``facility_energy_j`` and
    ``facility_energy_kwh`` (energy x PUE) and ``facility_co2e_kg`` (CO2e x PUE): the
    facility's overhead as figures of their own, the measured ones unscaled."""
    window = window_utc(result or {}) if carbon and carbon.get("series") else None
    w = window_intensity(carbon, *(window or (None, None)))
    out: dict[str, Any] = {
        "carbon_intensity_kg_per_kwh": w.kg_per_kwh,
        "carbon_intensity_low_kg_per_kwh": w.low_kg_per_kwh,
        "carbon_intensity_high_kg_per_kwh": w.high_kg_per_kwh,
        "carbon_intensity_source": w.source,
        "carbon_intensity_kind": w.kind,
    }
    out["co2e_kg"] = out["co2e_kg_low"] = out["co2e_kg_high"] = None
    if energy_kwh is not None and w.kg_per_kwh is not None:
        out["co2e_kg"] = kg_co2e(energy_kwh, w.kg_per_kwh)
        if w.low_kg_per_kwh is not None and w.high_kg_per_kwh is not None:
            out["co2e_kg_low"] = kg_co2e(energy_kwh, w.low_kg_per_kwh)
            out["co2e_kg_high"] = kg_co2e(energy_kwh, w.high_kg_per_kwh)
    if w.reason:
        out["co2e_reason"] = w.reason
    pue = carbon.get("pue") if carbon else None
    if pue is not None:
        # facility overhead, explicit and apart: the measured (IT) figures are never scaled
        out["pue"] = float(pue)
        fac = facility_energy_j(energy_kwh * J_PER_KWH if energy_kwh is not None else None, float(pue))
        out["facility_energy_j"] = fac
        out["facility_energy_kwh"] = fac / J_PER_KWH if fac is not None else None
        out["facility_co2e_kg"] = out["co2e_kg"] * float(pue) if out["co2e_kg"] is not None else None
    return out


__all__ = [
    "CarbonIntensity",
    "CarbonEstimate",
    "STUDY_INTENSITY",
    "J_PER_KWH",
    "kg_co2e",
    "co2e_from_joules",
    "total_energy_j",
    "energy_total",
    "EnergyTotal",
    "SCOPE_WORDS",
    "facility_energy_j",
    "INTENSITY_KINDS",
    "PlaceIntensity",
    "places",
    "place_intensity",
    "HourlySeries",
    "load_series",
    "WindowIntensity",
    "window_intensity",
    "window_utc",
    "trial_co2e",
]
