"""The metrics a trial yields, by column name (unit in the name), and the one each
workload kind is judged on.

Pure data, low in the package so that every layer can share it: the store reads these
columns back (:mod:`gcbench.store.queries`), validation and the nightly regression
check judge each kind on its primary metric (:mod:`gcbench.kinds`, :mod:`gcbench.validate`,
:mod:`gcbench.regression`), and the report shows them (how each is labelled and which
a kind leads with: :mod:`gcbench.report.metrics`).
"""

from __future__ import annotations

METRIC_COLUMNS = (
    "duration_s",
    "tokens",
    "tokens_per_s",
    "gpu_energy_j",
    "cpu_energy_j",
    "total_energy_j",
    "j_per_token",
    "gpu_j_per_token",
    "e2e_j_per_token",
    "bytes",
    "gb_per_s",
    "gpu_j_per_gb",
    "cpu_j_per_gb",
    "samples",
    "samples_per_s",
    "accuracy",
    "cpu_contention_share",
    "energy_kwh",
    "module_energy_j",
    "node_energy_j",
    "facility_energy_j",
    "facility_energy_kwh",
    "pue",
    "co2e_kg",
    "facility_co2e_kg",
    "carbon_intensity_kg_per_kwh",
    "gpu_energy_above_idle_j",
    "codecarbon_energy_j",
    "codecarbon_rel_error",
    "gpu_busy_share",
    "gpu_idle_share",
)
"""Metric columns a trials frame may carry (unit in the name; NaN = unknown)."""

CO2E_BAND_COLUMNS = ("co2e_kg_low", "co2e_kg_high")
"""The CO2e figure at the low and high end of the plan's carbon-intensity band (kg)."""


def primary_metrics() -> dict[str, str]:
    """``{kind: the metric it is judged on}`` for every installed kind (the first of
    its :attr:`gcbench.kinds.WorkloadKind.primary_metrics`; the regression check's SQL
    maps each trial's kind through it)."""
    from gcbench import kinds

    return {name: k.primary_metric() for name, k in kinds.registry().items()}
