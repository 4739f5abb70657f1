"""What each metric is called in a report, its unit, and which metrics each workload
kind leads with (read from the kinds' registry, :mod:`gcbench.kinds`). Pure data: no
pandas, no matplotlib."""

from __future__ import annotations

from dataclasses import dataclass

from gcbench import kinds


@dataclass(frozen=True)
class MetricInfo:
    """How a metric column is shown.

    Attributes:
        name: column name (unit in the name).
        label: words for sentences and axes ("GPU J/token").
        unit: unit shown after numbers ("J/token").
        lower_is_better: True for energy and time, False for rates and accuracy.
    """

    name: str
    label: str
    unit: str
    lower_is_better: bool = True


METRICS: dict[str, MetricInfo] = {
    m.name: m
    for m in (
        MetricInfo("j_per_token", "GPU J/token", "J/token"),
        MetricInfo("gpu_j_per_token", "GPU J/token (main window)", "J/token"),
        MetricInfo("e2e_j_per_token", "end-to-end J/token", "J/token"),
        MetricInfo("tokens_per_s", "throughput", "tokens/s", lower_is_better=False),
        MetricInfo("tokens", "tokens", "tokens", lower_is_better=False),
        MetricInfo("gpu_j_per_gb", "GPU J/GB", "J/GB"),
        MetricInfo("cpu_j_per_gb", "CPU J/GB", "J/GB"),
        MetricInfo("gb_per_s", "bandwidth", "GB/s", lower_is_better=False),
        MetricInfo("bytes", "bytes", "B", lower_is_better=False),
        MetricInfo("gpu_energy_j", "GPU energy", "J"),
        MetricInfo("cpu_energy_j", "CPU energy", "J"),
        MetricInfo("total_energy_j", "total energy (GPU + CPU)", "J"),
        MetricInfo("node_energy_j", "node energy (BMC: contains GPU, CPU and DRAM)", "J"),
        MetricInfo("facility_energy_j", "facility energy (total x PUE)", "J"),
        MetricInfo("facility_energy_kwh", "facility energy (total x PUE)", "kWh"),
        MetricInfo("facility_co2e_kg", "facility CO2e (CO2e x PUE)", "kgCO2e"),
        MetricInfo("pue", "PUE (the plan's)", ""),
        MetricInfo("gpu_energy_above_idle_j", "GPU energy above idle", "J"),
        MetricInfo("module_energy_j", "module energy (GPU + CPU + memory of a superchip)", "J"),
        MetricInfo("duration_s", "time", "s"),
        MetricInfo("samples", "training samples", "samples", lower_is_better=False),
        MetricInfo("samples_per_s", "training throughput", "samples/s", lower_is_better=False),
        MetricInfo("accuracy", "test accuracy", "", lower_is_better=False),
        MetricInfo("energy_kwh", "energy", "kWh"),
        MetricInfo("co2e_kg", "CO2e", "kgCO2e"),
        MetricInfo("codecarbon_energy_j", "CodeCarbon energy", "J"),
        MetricInfo("codecarbon_rel_error", "CodeCarbon relative error", ""),
        MetricInfo("s_per_token", "time per token", "s/token"),
        MetricInfo("s_per_gb", "time per GB", "s/GB"),
        MetricInfo("units", "units of work", "units", lower_is_better=False),
        MetricInfo("units_per_s", "throughput", "units/s", lower_is_better=False),
        MetricInfo("gpu_j_per_unit", "GPU J/unit", "J/unit"),
        MetricInfo("cpu_j_per_unit", "CPU J/unit", "J/unit"),
        MetricInfo("gpu_busy_share", "GPU busy share", "share", lower_is_better=False),
        MetricInfo("gpu_idle_share", "GPU idle share", "share"),
    )
}


def split_window(metric: str) -> tuple[str, str] | None:
    """``("prefill", "j_per_token")`` for a named window's figure ``prefill_j_per_token``
    (:func:`gcbench.trial.derive_metrics`), None for any other column."""
    if metric in METRICS:
        return None
    for i, ch in enumerate(metric):
        if ch == "_" and metric[i + 1 :] in METRICS and i > 0:
            return metric[:i], metric[i + 1 :]
    return None


UNIT_METRICS = ("units", "units_per_s", "gpu_j_per_unit", "cpu_j_per_unit")
"""The metrics counted in a user's own unit of work (a plan's ``unit: requests``)."""

_SAME_SINGULAR = {"series", "species", "news", "status", "bus", "gas"}


def singular(unit: str) -> str:
    """The singular of a plural unit name, for "J/request" from ``unit: requests``: ``-ies``
    to ``-y``, ``-ches``/``-shes``/``-sses``/``-xes`` less ``es``, a final ``s`` dropped
    (not ``-ss``, ``-us``, ``-is``); a name that does not look plural is kept."""
    u = unit.strip()
    low = u.lower()
    if low in _SAME_SINGULAR or len(u) < 3:
        return u
    if low.endswith("ies") and len(u) > 4:
        return u[:-3] + "y"
    if low.endswith(("ches", "shes", "sses", "xes")):
        return u[:-2]
    if low.endswith("s") and not low.endswith(("ss", "us", "is")):
        return u[:-1]
    return u


def in_work_unit(text: str, unit: str | None) -> str:
    """A head or unit label of a :data:`UNIT_METRICS` column written in the workload's own
    unit: ``GPU J/unit`` -> ``GPU J/request``, ``mJ/unit`` -> ``mJ/request``, ``units/s`` ->
    ``requests/s``, ``units of work`` -> ``requests``, ``Σ units`` (a pooled formula) ->
    ``Σ requests``; unchanged without a unit."""
    if not unit:
        return text
    one = singular(unit)
    text = text.replace("units of work", unit).replace("units/s", f"{unit}/s").replace("Σ units", f"Σ {unit}")
    text = text.replace("/unit", f"/{one}")
    return unit if text == "units" else text


def info(metric: str, work_unit: str | None = None) -> MetricInfo:
    """The :class:`MetricInfo` of a column; a named window's figure is labelled with its
    window (``prefill GPU J/token``); other unknown columns are shown by name. With
    ``work_unit`` (a user's ``unit: requests``), the :data:`UNIT_METRICS` speak it
    (``GPU J/request``, ``requests/s``; :func:`in_work_unit`)."""
    known = METRICS.get(metric)
    if known is not None and work_unit and metric in UNIT_METRICS:
        return MetricInfo(
            metric, in_work_unit(known.label, work_unit), in_work_unit(known.unit, work_unit), known.lower_is_better
        )
    if known is not None:
        return known
    split = split_window(metric)
    if split is not None:
        base = METRICS[split[1]]
        return MetricInfo(metric, f"{split[0]} {base.label}", base.unit, base.lower_is_better)
    return MetricInfo(metric, metric.replace("_", " "), "")


def kind_metrics(kind: str) -> tuple[str, ...]:
    """Summarized metrics of a workload kind, the primary first (the one validation's
    outlier rule and the trial list use): the kind's :attr:`~gcbench.kinds.WorkloadKind.metrics`.
    The :data:`CORE_METRICS` follow them in every table; columns unknown in every trial
    of a workload are dropped, except the core ones. ``gpu_j_per_token`` is not shown: it
    equals ``j_per_token`` by construction; it stays in the CSV exports."""
    k = kinds.find(kind)
    return tuple(k.metrics) if k is not None else DEFAULT_METRICS


CORE_METRICS = ("duration_s", "gpu_energy_j", "cpu_energy_j", "co2e_kg")
"""Columns every workload's table has, in this order after the kind's own metrics (an
unknown one shows "–", never 0): time, GPU energy, CPU energy, CO2e."""

EXTRA_METRICS = frozenset({"accuracy", "codecarbon_rel_error"})
"""Kind metrics shown after the core columns (not energy or time figures)."""


@dataclass(frozen=True)
class Ratio:
    """How a ratio metric is pooled over trials: ``sum(metric x denominator) /
    sum(denominator)``, i.e. sum of the numerator over sum of the denominator.

    Attributes:
        denominator: the trials-frame column of the denominator (``tokens``).
        den_scale: factor from that column to the ratio's denominator unit (bytes to GB:
            1e-9).
        formula: the pooled estimator in words ("Σ GPU energy / Σ tokens").
    """

    denominator: str
    den_scale: float
    formula: str


RATIOS: dict[str, Ratio] = {
    "j_per_token": Ratio("tokens", 1.0, "Σ GPU energy / Σ tokens"),
    "gpu_j_per_token": Ratio("tokens", 1.0, "Σ GPU energy / Σ tokens"),
    "e2e_j_per_token": Ratio("tokens", 1.0, "Σ end-to-end energy / Σ tokens"),
    "tokens_per_s": Ratio("duration_s", 1.0, "Σ tokens / Σ time"),
    "gpu_j_per_gb": Ratio("bytes", 1e-9, "Σ GPU energy / Σ GB"),
    "cpu_j_per_gb": Ratio("bytes", 1e-9, "Σ CPU energy / Σ GB"),
    "gb_per_s": Ratio("duration_s", 1.0, "Σ GB / Σ time"),
    "samples_per_s": Ratio("duration_s", 1.0, "Σ samples / Σ time"),
    "gpu_j_per_unit": Ratio("units", 1.0, "Σ GPU energy / Σ units"),
    "units_per_s": Ratio("duration_s", 1.0, "Σ units / Σ time"),
}
"""Ratio metrics that get a pooled estimator beside the median of per-trial ratios."""


def paired_metrics(kind: str) -> tuple[str, ...]:
    """The energy ratio and the rate of a kind that are always summarised over the same
    trials (those where both, and their denominators, are known), so that a group's
    J/token and tokens/s describe the same work (:attr:`gcbench.kinds.WorkloadKind.paired`)."""
    k = kinds.find(kind)
    return tuple(k.paired) if k is not None else ()


SIMULATED_METRICS = frozenset(
    {
        "gpu_energy_j",
        "total_energy_j",
        "gpu_energy_above_idle_j",
        "j_per_token",
        "gpu_j_per_token",
        "e2e_j_per_token",
        "gpu_j_per_gb",
        "energy_kwh",
        "co2e_kg",
        "codecarbon_rel_error",
        "gpu_j_per_unit",
    }
)
"""Metrics computed from GPU energy: the only figures that come from the simulated
device's power model when a trial ran on it. Durations, tokens, bytes, rates, accuracy
and RAPL CPU energy are real measurements even then."""


def is_simulated_metric(metric: str) -> bool:
    """True for a metric derived from GPU energy (see :data:`SIMULATED_METRICS`), a
    named window's included (``prefill_j_per_token``)."""
    if metric in SIMULATED_METRICS:
        return True
    split = split_window(metric)
    return split is not None and split[1] in SIMULATED_METRICS


DEFAULT_METRICS = ("gpu_energy_j", "duration_s")

ENERGY_METRIC_ORDER = ("gpu_energy_j", "total_energy_j", "cpu_energy_j")
"""The energy shown in the per-group box plot: the first known of these."""


BUSY_SHARE_METRICS = ("gpu_busy_share", "gpu_idle_share")
"""The GPU's busy and idle share of the main window, shown beside a kind's own metrics
(J/token ...) wherever a trial knows them (:mod:`gcbench.report.analysis.utilization`)."""


def table_metrics(kind: str) -> tuple[str, ...]:
    """A workload table's metric columns: the kind's metrics (primary first), the GPU's
    busy and idle share (:data:`BUSY_SHARE_METRICS`), then the :data:`CORE_METRICS`, then
    the kind's :data:`EXTRA_METRICS`; each once."""
    km = kind_metrics(kind)
    own = [m for m in km if m not in EXTRA_METRICS]
    extra = [m for m in km if m in EXTRA_METRICS]
    return tuple(dict.fromkeys([*own, *BUSY_SHARE_METRICS, *CORE_METRICS, *extra]))


def kind_compared(kind: str) -> tuple[str, ...]:
    """Metrics tested between variants of a workload kind (each test joins the report's
    Holm family, so only the figures a study makes claims about are tested; CO2e is
    energy times a constant and needs no test of its own):
    :attr:`gcbench.kinds.WorkloadKind.compared`."""
    k = kinds.find(kind)
    return tuple(k.compared) if k is not None else DEFAULT_METRICS[:1]


METHOD_DESCRIPTIONS: dict[str, str] = {
    "nvml-counter-edge-corrected": (
        "NVML total-energy counter (nvmlDeviceGetTotalEnergyConsumption, mJ since driver "
        "load) read throughout the window. The counter only changes every ~100 ms, so the "
        "energy at each window edge is interpolated between the counter ticks around it "
        "(edge correction) instead of taking the last tick, which would err by up to "
        "100 ms x power at each edge."
    ),
    "nvml-counter": (
        "NVML total-energy counter read at the window edges, without edge correction "
        "(error up to 100 ms x power at each edge)."
    ),
    "nvml-power-integration": (
        "Trapezoid integral of NVML instant power (NVML_FI_DEV_POWER_INSTANT) over the "
        "window; used where the energy counter is unavailable (pre-Volta GPUs)."
    ),
    "nvidia-smi-power-integration": (
        "Trapezoid integral of power polled from nvidia-smi (power.draw.instant where "
        "available, else power.draw, a 1-second average); the NVML library was unavailable."
    ),
    "rapl": (
        "Intel RAPL energy counters (/sys/class/powercap/intel-rapl:*/energy_uj, uJ), "
        "corrected for wrap-around at max_energy_range_uj; nested domains counted once."
    ),
    "simulated": (
        "SIMULATED: a deterministic power model of GC-Bench's simulated device, used "
        "because no GPU sensor was found. GPU energy and the figures derived from it are "
        "not measurements; durations, tokens, bytes and accuracy still are."
    ),
    "unavailable": "Not measured: the value is unknown (never counted as 0).",
}


def describe_method(method: str | None) -> str:
    """One-paragraph description of an energy method (``unavailable`` for None)."""
    if method is None or method == "" or method != method:  # None, empty, NaN
        return METHOD_DESCRIPTIONS["unavailable"]
    method = str(method)
    if method.startswith("unavailable"):  # "unavailable: <why>" as the meter records it
        why = method.removeprefix("unavailable").lstrip(":; ").strip()
        return (
            f"Not measured ({why}): the value is unknown (never counted as 0)."
            if why
            else METHOD_DESCRIPTIONS["unavailable"]
        )
    if method in METHOD_DESCRIPTIONS:
        return METHOD_DESCRIPTIONS[method]
    from gcbench.energy.backend import describe_method as backend_sentence

    return backend_sentence(method) or method  # any registered backend's label (amdsmi, module scope, hwmon)
