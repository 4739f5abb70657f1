"""From :class:`ReportData` to the report's numbers: groups, comparisons, headlines,
the measurement section and the trial lists. No plotting, no files.

Rules applied here (and stated in the report):

* Statistics use trials with ``status == "ok"`` and ``valid is True`` only. Invalid
  trials are listed with their reasons, failed and skipped trials with their error,
  unvalidated trials (``valid`` None) as such; none of them enters a statistic.
* A group (variant) with fewer valid repetitions than the plan's
  ``validation.min_valid_repetitions`` (default 2), or whose two valid repetitions
  validation found too far apart in throughput (``validation.twin_max_ratio``, flag
  ``twins disagree``), is *inconclusive*: its figures are shown, marked, and it takes
  part in no test.
* A group's energy ratio and rate of the same work (J/token and tokens/s, J/GB and GB/s:
  ``metrics.paired_metrics``) are summarised over the same trials, those where both are
  known; every ratio also gets the pooled estimator sum / sum
  (:func:`gcbench.stats.summarize_ratio`) beside the median of per-trial ratios.
* Headlines are comparisons that have a confidence interval (at least
  ``stats.MIN_N_INTERVAL["pct_change_of_medians"]`` valid trials per side); the others stay in the comparisons table.
* Comparisons are made inside one workload between variants that differ in exactly one
  factor, each non-baseline level against the baseline level. The baseline is the
  study's reference (:func:`baseline_level`, the one rule of the report, the paper
  tables and the trade-off): the plan's ``report.baseline[factor]`` when given, else no
  cap (or the highest cap) for a power-cap factor, FP32 for a precision factor, pure
  PyTorch (``torch``) for ``path``, ``pageable`` for ``memory``, else the first level in
  sorted order (the fewest GPUs, the smallest size). Numeric factors with three or more
  levels (sizes, batch sizes, GPU counts) are sweeps: summarized and plotted, not
  tested, unless named in ``report.compare`` or ``report.baseline``; power caps are
  always compared.
* A requested setting that did not run as asked (a trial's ``settings_not_in_effect``:
  pinned memory or float16 AMP without CUDA, a GPU count on a CPU, a power cap that
  could not be set) marks its group ("memory=pinned requested, not in effect: ..."), and
  no two groups are compared along that setting: such a comparison is listed as "not
  compared" with the reason, never tested, never a headline.
* CO2e = energy (kWh) x the plan's carbon intensity, with the band's low and high
  intensities as sensitivity (``carbon.intensity_kg_per_kwh``, ``carbon.band``).

Modules (numbers only: pure functions over the trials frame, no formatting of output, no files):

* :mod:`.settings` the plan-derived settings; :mod:`.frame` the trials frame;
* :mod:`.groups` groups and their statistics; :mod:`.baseline` the baseline rule;
* :mod:`.comparisons` comparisons and headline sentences; :mod:`.measurement` the
  "How this was measured" section; :mod:`.precision` which groups reached the plan's
  precision target; :mod:`.core` the :class:`Analysis` of one report;
* :mod:`.tradeoff` the energy-time trade-offs, built on an :class:`Analysis`.

:func:`analyze` puts them together.
"""

from __future__ import annotations

from gcbench.report.analysis.baseline import FULL_PRECISION, UNCAPPED, baseline_level, is_precision
from gcbench.report.analysis.comparisons import (
    ComparisonRow,
    build_comparisons,
    context_of,
    headline,
    not_compared_result,
    plan_comparisons,
)
from gcbench.report.analysis.core import Analysis, build_analysis
from gcbench.report.analysis.frame import add_carbon, add_time_per_work, normalize_trials, trial_not_in_effect
from gcbench.report.analysis.groups import (
    PAIRED_DERIVED,
    Group,
    build_groups,
    group_not_in_effect,
    not_compared_reason,
    paired_mask,
    summarise_metric,
    workload_metrics,
)
from gcbench.report.analysis.measurement import (
    Measurement,
    Probe,
    build_measurement,
    cross_check_statement,
    edge_correction_statement,
    observed_rate_hz,
    probe_samples,
    representative_trial,
    simulated_model,
    stability_statement,
)
from gcbench.report.analysis.settings import ReportSettings
from gcbench.report.analysis.tradeoff import build_tradeoffs
from gcbench.report.data import ReportData

__all__ = [
    "FULL_PRECISION",
    "UNCAPPED",
    "Analysis",
    "ComparisonRow",
    "Group",
    "Measurement",
    "PAIRED_DERIVED",
    "Probe",
    "ReportSettings",
    "add_carbon",
    "add_time_per_work",
    "analyze",
    "baseline_level",
    "build_analysis",
    "build_comparisons",
    "build_groups",
    "build_measurement",
    "build_tradeoffs",
    "context_of",
    "cross_check_statement",
    "edge_correction_statement",
    "group_not_in_effect",
    "headline",
    "is_precision",
    "normalize_trials",
    "not_compared_reason",
    "not_compared_result",
    "observed_rate_hz",
    "paired_mask",
    "plan_comparisons",
    "probe_samples",
    "representative_trial",
    "simulated_model",
    "stability_statement",
    "summarise_metric",
    "trial_not_in_effect",
    "workload_metrics",
]


def analyze(data: ReportData, settings: ReportSettings | None = None) -> Analysis:
    """Every number of the report from ``data``: :func:`build_analysis`, then the energy-time
    trade-offs built on it (:func:`build_tradeoffs`), kept in :attr:`Analysis.tradeoffs`."""
    a = build_analysis(data, settings)
    a.tradeoffs = build_tradeoffs(a)
    return a
