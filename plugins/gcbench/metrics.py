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


def primary_metrics() -> dict[str, list[str]]:
    """``{kind: the metrics it may be judged on, in order}`` for every installed kind
    (:attr:`gcbench.kinds.WorkloadKind.primary_metrics`): a trial is judged on the first
    of its kind's list that it stored (a user's program with ``unit: requests`` on
    ``gpu_j_per_unit``, one without a unit on ``gpu_energy_j``). Its JSON is the one
    parameter of :data:`JUDGED_METRIC_JOIN`."""
    from gcbench import kinds

    return {name: list(k.primary_metrics) for name, k in kinds.registry().items()}


JUDGED_METRIC_JOIN = (
    "JOIN LATERAL (SELECT c.name, jm.value FROM jsonb_array_elements_text(%s::jsonb -> t.kind) "
    "WITH ORDINALITY AS c(name, pos) JOIN metrics jm ON jm.trial_pk = t.id AND jm.name = c.name "
    "WHERE jm.value IS NOT NULL ORDER BY c.pos LIMIT 1) m ON true"
)
"""SQL joining each trial ``t`` to the metric it is judged on, as ``m.name`` and ``m.value``:
the first of its kind's candidates it stored with a value (one ``%s`` parameter, the JSON of
:func:`primary_metrics`); a trial of a kind not installed, or with none of them, joins nothing.
Used by the regression check and the report's nightly trend, so both judge the same figure."""


WINDOW_SENSOR_FIGURES = (
    "gpu_energy_j",
    "cpu_energy_j",
    "j_per_token",
    "gpu_j_per_token",
    "gpu_j_per_gb",
    "cpu_j_per_gb",
    "gpu_j_per_unit",
    "cpu_j_per_unit",
)
"""The figures of a named window (``eval``, ``prefill``) that come from the energy
sensors: :func:`gcbench.trial.derive_metrics` stores them as ``<window>_<figure>``.
Its duration, counts and rates are the workload's own and stand even when the window
was too short for the sensor."""


def withheld_metrics(withheld_windows: dict[str, str] | None) -> set[str]:
    """The metric names validation left out of the statistics: each sensor figure
    (:data:`WINDOW_SENSOR_FIGURES`) of a window in ``withheld_windows`` (``{window key:
    reason}``, stored in ``trials.windows_withheld`` by :func:`gcbench.validate.validate_run`).
    The stored values are kept."""
    return {f"{key}_{figure}" for key in withheld_windows or {} for figure in WINDOW_SENSOR_FIGURES}
