"""The plan schema (pydantic v2).

A plan is one YAML file under ``plans/``; it says what to compare. Example::

    name: smoke
    runner: local
    devices: [0]
    repetitions: 3
    seed: 7
    order: randomized
    warmup: {steps: 2}
    window: {steps: 8}
    workloads:
      - name: tinylm-infer
        kind: tinylm
        settings: {mode: infer, layers: 2, d_model: 64}
        matrix: {batch_size: [4, 8], path: [torch]}
        exclude: [{batch_size: 8, path: external-go}]

Every model forbids unknown keys, so a typo is an error that names its field.

Plans are YAML 1.2 (:mod:`gcbench.plan.loader`): ``yes``/``no``/``on``/``off`` are text,
``0777`` is refused as ambiguous; anchors, aliases and merge keys (``<<: *common``)
work, and top-level ``x-`` keys are ignored, so shared settings can live in
``x-common: &common``. Values that become Airflow identifiers (the plan name, host
names, GPU sets, queues) are checked against Airflow's rules at load time, and a
``schedule`` with Airflow's own timetable (:mod:`gcbench.plan.schedule`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, PrivateAttr, Tag, field_validator, model_validator

from gcbench.energy.base import CROSS_CHECK_FLAG_REL, CROSS_CHECK_INVALID_REL
from gcbench.spec import Amount, EnergySettings, Scalar
from gcbench.tokenizer.preprocessors import NAME_PATTERN as PREPROCESSOR_NAME
from gcbench.tokenizer.preprocessors import PreprocessorDecl

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
"""Plan and workload names: lower-case letters, digits, ``-`` and ``_`` (they become dag_ids)."""

MAX_REPETITIONS = 1000
"""Most repetitions per variant, in a plan and in a run's parameters."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RepetitionTarget(_Strict):
    """A precision target instead of a fixed count: ``repetitions: {min: 6, max: 30,
    until_ci_rel: 0.02}``. The first round runs ``min`` repetitions per variant; from its
    valid trials, each group's total n is fixed once with Stein's two-stage rule on the
    group's primary metric (:func:`gcbench.stats.planned_repetitions`, at most ``max``),
    and the missing repetitions run as a second round (``min`` .. n-1: the trial ids a
    plain ``repetitions: n`` would give). The report says per group whether its median's
    interval reached ``until_ci_rel`` (relative half-width, a fraction: 0.02 is +-2 %).
    """

    min: int = Field(ge=2, le=MAX_REPETITIONS)
    max: int = Field(ge=2, le=MAX_REPETITIONS)
    until_ci_rel: float = Field(gt=0, lt=1)

    @model_validator(mode="after")
    def _max_at_least_min(self) -> RepetitionTarget:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


def _repetitions_tag(value: Any) -> str:
    return "target" if isinstance(value, (dict, RepetitionTarget)) else "count"


REPETITION_TAGS = ("count", "target")
"""The tags of the ``repetitions`` union (left out of error paths by the loader)."""

Repetitions = int | RepetitionTarget
"""A plan's or workload's ``repetitions``: a count, or a :class:`RepetitionTarget`."""


_RepetitionsField = Annotated[
    Annotated[Annotated[int, Field(ge=1, le=MAX_REPETITIONS)], Tag("count")]
    | Annotated[RepetitionTarget, Tag("target")],
    Discriminator(_repetitions_tag),
]


def first_round(repetitions: Repetitions) -> int:
    """Repetitions per variant of the first (or only) round: the count, or the target's ``min``."""
    return repetitions.min if isinstance(repetitions, RepetitionTarget) else repetitions


def describe_repetitions(repetitions: Repetitions) -> str:
    """``3``, or ``6 to 30, until the median's interval is within +-2 %`` for a target."""
    if isinstance(repetitions, RepetitionTarget):
        return (
            f"{repetitions.min} to {repetitions.max}, until the median's interval is within "
            f"±{repetitions.until_ci_rel * 100:g} %"
        )
    return str(repetitions)


def most_repetitions(repetitions: Repetitions) -> int:
    """The most repetitions per variant a run may have: the count, or the target's ``max``."""
    return repetitions.max if isinstance(repetitions, RepetitionTarget) else repetitions


class Window(Amount):
    """A measurement window: ``{steps: N}`` or ``{seconds: S}``, exactly one."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Window:
        if self.until_stable is not None:
            raise ValueError("'until_stable' is for warmup only")
        if (self.steps is None) == (self.seconds is None):
            raise ValueError("give exactly one of 'steps' or 'seconds'")
        return self


class Warmup(Amount):
    """A warm-up: ``{steps: N}``, ``{seconds: S}`` or ``{until_stable: {cv_max, steps,
    max_seconds}}`` (:class:`gcbench.spec.StableWarmup`: until the step time settles,
    with a cap), exactly one."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Warmup:
        given = [k for k in ("steps", "seconds", "until_stable") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of 'steps', 'seconds' or 'until_stable'")
        return self


class ValidationSettings(_Strict):
    """Thresholds of the validation rules (``gcbench.validate``).

    Attributes:
        min_window_periods: the window must last at least this many sensor update
            periods (NVML updates every ~100 ms: 10 periods = 1 s).
        max_gap_periods: largest allowed gap between samples, in update periods.
        cross_check_flag_rel: the GPU energy counter is checked against NVML's 1-s
            average power integrated over the window shifted by its lag, with an
            allowance for power steps at the window's edges (docs/measurement.md); a
            relative difference beyond the allowance above this flags the trial.
        cross_check_invalid_rel: ... and above this invalidates it. ``cross_check_max_rel``
            is this setting's former name (when the check used instant power) and is
            still read as it; giving both is an error.
        min_valid_repetitions: below this many valid repetitions a group is inconclusive.
        outlier_mad_k: a trial whose primary metric lies more than k scaled MADs from
            its group median is flagged as an outlier (kept, not dropped).
        power_limit_margin_rel: instant power above (1 + margin) x the GPU's maximum
            power limit invalidates the trial (a sensor fault or a wrong device mapping;
            short excursions above the limit are normal, hence the margin).
        stability_min_steps: a window with fewer finished steps is not judged for
            throughput stability (flagged as such); see gcbench.stability and
            docs/measurement.md.
        stability_drift_flag_ratio / stability_drift_invalid_ratio: one half of the
            window running more than this many times faster than the other flags /
            invalidates the trial.
        stability_stall_flag_ratio: a segment (>= 0.5 s) of the window running more
            than this many times slower than the window's typical throughput (the 90th
            percentile of its segments', gcbench.stability.TYPICAL_PERCENTILE) flags the
            trial.
        stability_stall_invalid_rel: segments slower than the typical throughput losing
            more than this share of the window invalidates it.
        twin_max_ratio: in a group of exactly two valid repetitions, throughputs (steps
            per second of the window) differing by more than this factor flag both and
            make the group inconclusive (with two values nobody can tell which is
            right; from three on, the MAD rule finds the outlier).
        cpu_contention_flag_share: other processes using more than this share of the
            trial's core-seconds during a window (its CPU set, /proc; see
            :mod:`gcbench.energy.cpuset`) flag the trial; cpu_contention_invalid_share:
            ... and more than this invalidates it (None, the default: contention only
            flags; a study plan sets it, plans/regime.yaml 0.2). A single-threaded hog on
            one of n cores shows as about 1/(2n) yet can stall a pool of n threads: keep
            them low.
    """

    min_window_periods: float = Field(default=10.0, ge=0)
    max_gap_periods: float = Field(default=3.0, gt=0)
    cross_check_flag_rel: float = Field(default=CROSS_CHECK_FLAG_REL, gt=0, le=1)
    cross_check_invalid_rel: float = Field(default=CROSS_CHECK_INVALID_REL, gt=0, le=1)
    min_valid_repetitions: int = Field(default=2, ge=1)
    outlier_mad_k: float = Field(default=3.5, gt=0)
    power_limit_margin_rel: float = Field(default=0.25, ge=0, le=10)
    stability_min_steps: int = Field(default=4, ge=2)
    stability_drift_flag_ratio: float = Field(default=1.5, gt=1)
    stability_drift_invalid_ratio: float = Field(default=4.0, gt=1)
    stability_stall_flag_ratio: float = Field(default=3.0, gt=1)
    stability_stall_invalid_rel: float = Field(default=0.5, gt=0, le=1)
    twin_max_ratio: float = Field(default=2.0, gt=1)
    cpu_contention_flag_share: float = Field(default=0.05, ge=0, le=1)
    cpu_contention_invalid_share: float | None = Field(default=None, gt=0, le=1)

    @model_validator(mode="before")
    @classmethod
    def _former_cross_check_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "cross_check_max_rel" in data:
            if "cross_check_invalid_rel" in data:
                raise ValueError("give cross_check_invalid_rel only: cross_check_max_rel is its former name")
            data = dict(data)
            data["cross_check_invalid_rel"] = data.pop("cross_check_max_rel")
            if "cross_check_flag_rel" not in data and isinstance(data["cross_check_invalid_rel"], (int, float)):
                data["cross_check_flag_rel"] = min(CROSS_CHECK_FLAG_REL, data["cross_check_invalid_rel"])
        return data

    @model_validator(mode="after")
    def _flag_below_invalid(self) -> ValidationSettings:
        for flag, invalid in (
            ("cross_check_flag_rel", "cross_check_invalid_rel"),
            ("stability_drift_flag_ratio", "stability_drift_invalid_ratio"),
            ("cpu_contention_flag_share", "cpu_contention_invalid_share"),
        ):
            if getattr(self, invalid) is not None and getattr(self, flag) > getattr(self, invalid):
                raise ValueError(
                    f"{flag} ({getattr(self, flag):g}) must not exceed {invalid} ({getattr(self, invalid):g})"
                )
        return self


class CarbonSettings(_Strict):
    """Carbon intensity for CO2e: kgCO2e = kWh x intensity (kgCO2e/kWh); see :mod:`gcbench.carbon`.

    One source: a fixed ``intensity_kg_per_kwh`` with its absolute ``band`` (default), a
    ``place`` from the offline table (``FRA``, ``gcp:europe-west1``), or an hourly
    ``series`` CSV (``hour_utc,kg_per_kwh``; a relative path is under the project root),
    whose publisher and year ``series_source`` names. For a place or a series the band is
    ``band_factor`` x the intensity. ``intensity_kind`` says whether the intensity is
    average (location-based; the place table's) or marginal. ``pue`` (default none), the
    facility's Power Usage Effectiveness, gives each trial a ``facility_energy_j`` = its
    total energy x PUE (and ``facility_co2e_kg``), shown as such beside the measured figures.
    """

    intensity_kg_per_kwh: float = Field(default=0.20, ge=0, le=5)
    band: tuple[float, float] = (0.10, 0.30)
    place: str | None = None
    series: str | None = None
    series_source: str | None = None
    band_factor: tuple[float, float] = (0.5, 1.5)
    intensity_kind: Literal["average", "marginal"] = "average"
    pue: float | None = Field(default=None, ge=1.0, le=5.0)

    @model_validator(mode="after")
    def _band_brackets(self) -> CarbonSettings:
        low, high = self.band
        if not (0 <= low <= self.intensity_kg_per_kwh <= high):
            raise ValueError("band must satisfy 0 <= low <= intensity_kg_per_kwh <= high")
        f_low, f_high = self.band_factor
        if not (0 <= f_low <= 1 <= f_high):
            raise ValueError("band_factor must satisfy 0 <= low <= 1 <= high")
        fixed = {"intensity_kg_per_kwh", "band"} & self.model_fields_set
        if self.place and self.series:
            raise ValueError("give a place or a series, not both")
        if (self.place or self.series) and fixed:
            raise ValueError(f"{' and '.join(sorted(fixed))} apply to a fixed intensity, not to a place or series")
        if self.series_source and not self.series:
            raise ValueError("series_source names the publisher of a series: give series too")
        if self.place:
            from gcbench.carbon import place_intensity

            place_intensity(self.place)  # ValueError: unknown place, with the closest ones
            if self.intensity_kind == "marginal":
                raise ValueError("the place table gives average intensities: intensity_kind must be average")
        if self.series:
            from gcbench import config
            from gcbench.carbon import load_series, resolve_series_path

            load_series(str(resolve_series_path(self.series, config.project_root())))  # ValueError: FILE:LINE
        return self


class MlflowExport(_Strict):
    """Log each DAG run and its trials into an MLflow tracking server (``gcbench.export.mlflow``).

    Attributes:
        tracking_uri: the server's base URL (``http://127.0.0.1:5000``).
        experiment: the experiment's name; default ``gcbench-<plan>``.
    """

    tracking_uri: str = Field(min_length=1, pattern=r"^https?://")
    experiment: str | None = Field(default=None, min_length=1, max_length=500)


class ExportSettings(_Strict):
    """Where finished runs are exported to (optional; ``GCBENCH_MLFLOW_TRACKING_URI`` also enables MLflow)."""

    mlflow: MlflowExport | None = None


class ReportSettings(_Strict):
    """How the report compares variants.

    Attributes:
        baseline: factor -> level used as the baseline of comparisons, e.g.
            ``{path: external-go}``; factors not named use the report's default
            (highest power cap, else the first level in sorted order).
        compare: numeric factors with three or more levels to test as well (sweeps
            are otherwise summarized and plotted, not tested).
    """

    baseline: dict[str, Scalar] = Field(default_factory=dict)
    compare: list[str] = Field(default_factory=list)


class RegressionSettings(_Strict):
    """The nightly energy-regression check (``gcbench.regression``), for plans with a schedule.

    Attributes:
        baseline_runs: the baseline of a group is its valid trials in the last N
            earlier runs (by logical date) that have any.
        min_baseline_runs: with fewer earlier runs than this, the group is not checked
            (reported as "no baseline yet"), so the first nights never fail.
        threshold_rel: smallest relative increase of the primary metric that counts
            (0.05 = 5 %); smaller changes are noise for this plan, whatever their p-value.
        alpha: significance level of the test, Holm-adjusted over the groups of a run.
        n_resamples: bootstrap resamples of the change's confidence interval.
    """

    baseline_runs: int = Field(default=7, ge=1, le=100)
    min_baseline_runs: int = Field(default=3, ge=1, le=100)
    threshold_rel: float = Field(default=0.05, gt=0, le=10)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    n_resamples: int = Field(default=2000, ge=0, le=100_000)

    @model_validator(mode="after")
    def _min_le_baseline(self) -> RegressionSettings:
        if self.min_baseline_runs > self.baseline_runs:
            raise ValueError("min_baseline_runs must not exceed baseline_runs")
        return self


class WorkloadEntry(_Strict):
    """One workload of a plan: a kind, fixed settings and a factor matrix.

    The matrix is a cartesian product of its factor lists; ``exclude`` removes the
    combinations that match every key of one of its rules. Factor values are overlaid
    on ``settings`` to give each trial's effective settings.

    ``kind`` names an installed workload kind (:mod:`gcbench.kinds`; an unknown one is
    an error listing the installed kinds). The kinds that run a user's own work take
    the program fields (docs/your-own-workload.md): ``entrypoint``
    (``package.module:function``, kind ``python``), ``command`` (an argument list, never
    a shell; ``{setting}`` placeholders are replaced by the trial's setting values;
    kinds ``command`` and ``container``), ``image`` (kind ``container``), ``env``
    (extra environment, values with the same placeholders), ``cwd`` (kind ``command``;
    relative to the project root) and ``unit`` (what the program's counts are in:
    ``tokens``, ``requests``...; J/unit and units/s come from it).
    """

    @field_validator("kind")
    @classmethod
    def _kind_installed(cls, kind: str) -> str:
        from gcbench import kinds

        try:
            kinds.get(kind)
        except kinds.UnknownKind as exc:
            raise ValueError(str(exc)) from None  # lists the installed kinds
        return kind

    @model_validator(mode="after")
    def _program_fields(self) -> WorkloadEntry:
        from gcbench import kinds

        kind = kinds.find(self.kind)
        if kind is None:  # reported by the kind's own validator
            return self
        declared = kind.program
        for fname in ("entrypoint", "command", "image", "env", "cwd", "unit"):
            given = getattr(self, fname) not in (None, {})
            if given and fname not in declared:
                allowed = ", ".join(sorted(declared)) or "none"
                raise ValueError(f"{fname!r} is not a field of kind {self.kind!r} (its program fields: {allowed})")
            if declared.get(fname) and not given:
                raise ValueError(f"kind {self.kind!r} needs {fname!r}")
        return self

    def program(self) -> dict[str, Any] | None:
        """The trial spec's ``program`` (:class:`gcbench.spec.TrialSpec`), or None for a
        kind without program fields."""
        from gcbench import kinds

        if not kinds.get(self.kind).program:
            return None
        out: dict[str, Any] = {}
        for fname in ("entrypoint", "command", "image", "env", "cwd", "unit"):
            value = getattr(self, fname)
            if value not in (None, {}):
                out[fname] = (
                    list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value
                )
        return out

    name: str = Field(pattern=NAME_PATTERN)
    kind: str
    description: str = ""
    entrypoint: str | None = Field(default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
    command: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None, min_length=1)
    image: str | None = Field(default=None, min_length=1, pattern=r"^[^\s]+$")
    env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], str] = Field(default_factory=dict)
    cwd: str | None = None
    unit: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_]{0,62}$")
    settings: dict[str, Any] = Field(default_factory=dict)
    matrix: dict[str, Annotated[list[Scalar], Field(min_length=1)]] = Field(default_factory=dict)
    exclude: list[dict[str, Scalar]] = Field(default_factory=list)
    repetitions: _RepetitionsField | None = None
    warmup: Warmup | None = None
    window: Window | None = None

    @field_validator("matrix")
    @classmethod
    def _factor_lists(cls, matrix: dict[str, list[Scalar]]) -> dict[str, list[Scalar]]:
        for factor, values in matrix.items():
            if not re.match(r"^[a-z][a-z0-9_]*$", factor):
                raise ValueError(f"factor name {factor!r} must be lower_snake_case")
            if not values:
                raise ValueError(f"factor {factor!r} has no values")
            if len(set(map(repr, values))) != len(values):
                raise ValueError(f"factor {factor!r} lists a value twice")
        return matrix

    @model_validator(mode="after")
    def _exclude_names_factors(self) -> WorkloadEntry:
        for i, rule in enumerate(self.exclude):
            unknown = set(rule) - set(self.matrix)
            if not rule:
                raise ValueError(f"exclude[{i}] is empty (it would exclude everything)")
            if unknown:
                raise ValueError(f"exclude[{i}] names {sorted(unknown)}, which are not matrix factors")
        return self


class HostSettings(_Strict):
    """A GPU host of a multi-host deployment (CeleryExecutor): its queue and GPUs.

    The host's name (its key under ``hosts:``) becomes part of Airflow task ids and
    pool names: ASCII letters, digits, ``_ . -`` only (checked by
    :func:`gcbench.plan.identifiers.check_airflow_identifiers`).
    """

    queue: str = Field(pattern=NAME_PATTERN)
    devices: list[int] = Field(default_factory=lambda: [0])


class Plan(_Strict):
    """A GC-Bench plan. See the module docstring for an example.

    Attributes:
        name: plan name; the DAG id is ``gcbench__<name>``.
        schedule: cron expression or preset (``@daily``), or None for manual runs; checked
            with Airflow's own timetable (:mod:`gcbench.plan.schedule`): it must fire, and
            still fire years from now.
        runner: ``local`` (subprocess) or ``docker`` (DockerOperator).
        image: trial container image for the docker runner.
        devices: host GPU indices the plan may use.
        repetitions: repetitions per variant (a workload may override), or a precision
            target :class:`RepetitionTarget` ``{min, max, until_ci_rel}``.
        seed: plan seed; trial seeds and the randomized order derive from it.
        order: ``randomized`` (seeded shuffle, against drift) or ``sequential``.
        warmup, window: defaults for every workload.
        energy: measurement settings; validation: rule thresholds; carbon: CO2e;
            report: baselines of the report's comparisons; regression: the nightly
            energy-regression check (used when ``schedule`` is set); export: where
            finished runs are logged (MLflow).
        hosts: optional multi-host mapping name -> queue and devices.
        preprocessors: the plan's own preprocessing implementations by name
            (:class:`gcbench.tokenizer.preprocessors.PreprocessorDecl`); each becomes a
            valid TinyLM ``path: external-<name>`` beside the built-in ``go`` and ``rust``.
        workloads: at least one workload, names unique.
    """

    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    schedule: str | None = None
    runner: Literal["local", "docker"] = "local"
    image: str = "gcbench/trial:latest"
    devices: list[int] = Field(default_factory=lambda: [0])
    repetitions: _RepetitionsField = 3
    seed: int = 0
    order: Literal["randomized", "sequential"] = "randomized"
    warmup: Warmup = Warmup(steps=0)
    window: Window = Window(steps=10)
    trial_timeout_s: float = Field(default=3600, gt=0, le=7 * 24 * 3600)
    energy: EnergySettings = EnergySettings()
    validation: ValidationSettings = ValidationSettings()
    carbon: CarbonSettings = CarbonSettings()
    report: ReportSettings = ReportSettings()
    regression: RegressionSettings = RegressionSettings()
    export: ExportSettings = ExportSettings()
    hosts: dict[str, HostSettings] = Field(default_factory=dict)
    preprocessors: dict[str, PreprocessorDecl] = Field(default_factory=dict)
    workloads: list[WorkloadEntry] = Field(min_length=1)
    _source: str = PrivateAttr(default="<plan>")
    _dir: Any = PrivateAttr(default=None)

    @field_validator("schedule")
    @classmethod
    def _schedule_fires(cls, schedule: str | None) -> str | None:
        from gcbench.plan.schedule import check_schedule

        return check_schedule(schedule)

    @field_validator("devices")
    @classmethod
    def _devices_unique(cls, devices: list[int]) -> list[int]:
        if any(d < 0 for d in devices):
            raise ValueError("device indices must be >= 0")
        if len(set(devices)) != len(devices):
            raise ValueError("a device is listed twice")
        return devices

    @field_validator("preprocessors")
    @classmethod
    def _preprocessor_names(cls, decls: dict[str, PreprocessorDecl]) -> dict[str, PreprocessorDecl]:
        for name in decls:
            if not re.match(PREPROCESSOR_NAME, name):
                raise ValueError(f"preprocessor name {name!r} must match {PREPROCESSOR_NAME} (it follows 'external-')")
        return decls

    def declared_preprocessors(self) -> dict:
        """The built-in preprocessors and the plan's own, resolved on this machine
        (:func:`gcbench.tokenizer.preprocessors.declared`; sources relative to the plan
        file's folder, else the project).

        Raises:
            ValueError: a plan declaration takes a built-in's name.
        """
        from gcbench.tokenizer.preprocessors import declared

        return declared(self.preprocessors, self._dir, self._source)

    def set_source(self, source: str) -> None:
        """Remember the plan's file (its folder resolves relative preprocessor sources)."""
        from pathlib import Path

        self._source = source
        path = Path(source)
        self._dir = path.resolve().parent if path.is_file() else None

    @field_validator("workloads")
    @classmethod
    def _names_unique(cls, workloads: list[WorkloadEntry]) -> list[WorkloadEntry]:
        seen: set[str] = set()
        for w in workloads:
            if w.name in seen:
                raise ValueError(f"duplicate workload name {w.name!r}")
            seen.add(w.name)
        return workloads

    def repetitions_of(self, workload: WorkloadEntry) -> Repetitions:
        """The workload's repetitions: its own, else the plan's."""
        return workload.repetitions if workload.repetitions is not None else self.repetitions

    @property
    def has_target(self) -> bool:
        """Whether any workload runs to a precision target (the DAG then has a second round)."""
        return any(isinstance(self.repetitions_of(w), RepetitionTarget) for w in self.workloads)

    @property
    def dag_id(self) -> str:
        """Airflow DAG id of this plan."""
        return f"gcbench__{self.name}"
