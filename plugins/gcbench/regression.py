"""The nightly energy-regression check: tonight's run against the last N valid nights.

For each group (variant) of a scheduled plan, the values compared are the group's
primary metric (:func:`gcbench.metrics.primary_metrics`: J/token for TinyLM, GPU J/GB
for H2D, GPU J for ResNet, seconds for the no-op) of **valid** trials only:

* *tonight*: the valid trials stored under this run's logical date (by this run or an
  earlier run of the same date, so a re-run or a backfill of the night sees the whole
  night);
* *baseline*: the valid trials of the same group **run under the same conditions** in the
  last ``baseline_runs`` earlier nights (logical dates before tonight's) that have any,
  pooled. The conditions (:func:`trial_conditions`) are the trial spec without its
  repetition and seed (workload, settings, factors, warm-up, window, energy settings), the
  GPU model, the driver version, whether the energy was simulated and, where recorded,
  the energy backend that measured (NVML's counter or nvidia-smi's power readings). Nights of an
  earlier plan edit, another GPU model or driver, or simulated against measured energy
  are never pooled with tonight: with too few nights left the group is *not checked*,
  "no comparable baseline", and the note says what changed (case C17: a window edited
  from 1 s to 1.5 s was reported as a +49 % duration regression and failed the run).

Decision rule (all three must hold for a **regression**):

1. the percentage change of the medians, ``100 * (median(tonight) / median(baseline) - 1)``,
   exceeds ``100 * threshold_rel`` (the metrics are costs: higher is worse);
2. the two-sided Mann-Whitney U test (Mann & Whitney 1947) of tonight's values against
   the baseline's, Holm-adjusted (Holm 1979) across the groups checked in this run, has
   p < ``alpha``; Welch's t p-value is computed and reported beside it, not used;
3. where both sides have the values an interval of the change needs to keep its 95 %
   (:data:`gcbench.stats.MIN_N_INTERVAL`, 5 per side), the BCa bootstrap 95 % confidence
   interval of the change (Efron 1987; the two sides resampled independently) lies above
   0. With fewer (a nightly plan's 3 repetitions) no interval is shown, the note says
   "n too small" (case C22: a "95 %" interval from 3 values covers about 75 %), and rules
   1 and 2 decide: the exact test keeps its false-alarm rate at any n.

A change as large in the other direction is reported as an *improvement* and does
not fail anything. Groups with fewer than ``min_baseline_runs`` baseline nights or
fewer than :data:`MIN_TONIGHT` valid trials tonight are reported as not checked, with the reason. All
statistics come from :func:`gcbench.stats.compare` and :func:`gcbench.stats.adjust_holm`.

The rule is a pure function over DataFrames (:func:`check`); :func:`tonight_frame` and
:func:`baseline_frame` read them from the results database and :func:`check_run` does
both for one DAG run.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gcbench.errors import GCBenchError
from gcbench.metrics import JUDGED_METRIC_JOIN, primary_metrics

if TYPE_CHECKING:  # pandas stays out of module level (the DAG processor imports the factory)
    import pandas

    from gcbench.plan.schema import RegressionSettings

MIN_TONIGHT = 3
"""Fewest valid trials of a group tonight for it to be tested: 3 values above a pooled
baseline of 6 (two nights of 3) give the exact two-sided Mann-Whitney p = 2 / C(9, 3) =
0.024, so rule 2 can be met; fewer could not reach alpha = 0.05 against a short history."""

VALUE_COLUMNS = ("variant", "kind", "metric", "trial_id", "value", "conditions")
"""Columns of :func:`tonight_frame` (``conditions``: :func:`conditions_key` of the trial);
:func:`baseline_frame` adds ``night`` and ``run_id``. Frames given to :func:`check` may
leave ``conditions`` out: then every trial counts as run under the same conditions."""

_NOT_CONDITIONS = ("trial_id", "order", "devices", "repetition", "seed")
"""Spec fields that differ between comparable trials: the id, the schedule position, the
placement, the repetition index and the seed derived from it."""


def trial_conditions(
    spec: dict[str, Any] | None,
    gpus: list[dict] | None,
    driver: str | None,
    simulated: bool | None,
    backend: str | None = None,
) -> dict[str, Any]:
    """What two trials of a variant must share to be compared.

    Args:
        spec: the stored trial spec (``trials.spec``); normalised through
            :class:`gcbench.spec.TrialSpec` when it validates, so specs written before a
            field existed compare equal to ones with its default.
        gpus: ``result.json``'s ``environment.gpus`` (each may have a ``name``).
        driver: ``environment.driver`` (NVML's driver version), None if unknown.
        simulated: whether the trial's energy came from the simulated device.
        backend: the energy backend that measured (``measurement.backend``: ``nvml``,
            ``nvidia-smi``, ...): ``energy.backend: auto`` falls back from NVML's energy
            counter to nvidia-smi's power readings, which measure the same GPU otherwise.
            None (unknown, a result written before it was recorded) is left out, so such
            trials still compare with each other. Left out too for simulated energy:
            ``simulated`` already says what made it, and a trial stored without a result
            (or before the backend was recorded) stays comparable with tonight's.

    Returns:
        ``{"spec": ..., "gpu_model": str | None, "driver": str | None, "simulated": bool}``
        and ``"backend"`` when known for measured energy.
    """
    from gcbench.spec import TrialSpec

    data: dict[str, Any] = dict(spec or {})
    try:
        data = json.loads(TrialSpec.model_validate(data).canonical_json())
    except ValueError:  # pydantic's ValidationError is a ValueError: keep the stored JSON
        pass
    names = sorted({str(g["name"]) for g in gpus or [] if isinstance(g, dict) and g.get("name")})
    out = {
        "spec": {k: v for k, v in data.items() if k not in _NOT_CONDITIONS},
        "gpu_model": ", ".join(names) or None,
        "driver": driver or None,
        "simulated": bool(simulated),
    }
    if backend and not simulated:
        out["backend"] = str(backend)
    return out


def conditions_key(conditions: dict[str, Any]) -> str:
    """16 hex digits of the SHA-256 of ``conditions``' canonical JSON (equal iff comparable)."""
    import hashlib

    text = json.dumps(conditions, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def describe_change(before: dict[str, Any], now: dict[str, Any], limit: int = 3) -> str:
    """What differs between two :func:`trial_conditions`, in words: ``window.seconds 1.0 ->
    1.5; simulated before, measured tonight``. At most ``limit`` spec fields are named."""
    parts: list[str] = []
    a, b = _flat(before.get("spec", {})), _flat(now.get("spec", {}))
    fields = sorted(k for k in a.keys() | b.keys() if a.get(k, "unset") != b.get(k, "unset"))
    for k in fields[:limit]:
        parts.append(f"{k} {json.dumps(a.get(k, 'unset'))} -> {json.dumps(b.get(k, 'unset'))}")
    if len(fields) > limit:
        parts.append(f"{len(fields) - limit} more spec field(s)")
    same_kind = bool(before.get("simulated")) == bool(now.get("simulated"))  # else "simulated before" says it
    for key, what in (("gpu_model", "GPU model"), ("driver", "driver"), ("backend", "energy backend")):
        if before.get(key) != now.get(key) and (key != "backend" or same_kind):
            parts.append(f"{what} {before.get(key) or 'unknown'} -> {now.get(key) or 'unknown'}")
    if bool(before.get("simulated")) != bool(now.get("simulated")):
        word = {True: "simulated", False: "measured"}
        parts.append(f"{word[bool(before.get('simulated'))]} before, {word[bool(now.get('simulated'))]} tonight")
    return "; ".join(parts) or "same conditions"


class RegressionError(GCBenchError):
    """Tonight's run regressed: at least one group's energy rose significantly.

    Attributes:
        result: the full :class:`RegressionResult` (every group, not only the regressions).
    """

    def __init__(self, result: RegressionResult):
        self.result = result
        super().__init__(result.message())


@dataclass
class GroupCheck:
    """The check of one group.

    Attributes:
        variant, kind: the group; metric: its primary metric (unit in the name).
        verdict: ``regression``, ``improvement``, ``unchanged`` (tested, not beyond the
            threshold or not significant) or ``not checked`` (see ``note``).
        n_tonight, n_baseline: valid trials used; baseline_nights: nights pooled.
        median_tonight, median_baseline: medians, metric unit.
        pct_change: change of the medians, percent; pct_ci_low/high: its BCa 95 % CI.
        p_mannwhitney, p_mannwhitney_holm, p_welch: p-values (see the module docstring).
        threshold_pct: the plan's threshold, percent.
        note: why a group was not checked, or what was missing.
    """

    variant: str
    kind: str
    metric: str
    verdict: str
    n_tonight: int
    n_baseline: int
    baseline_nights: int
    median_tonight: float | None = None
    median_baseline: float | None = None
    pct_change: float | None = None
    pct_ci_low: float | None = None
    pct_ci_high: float | None = None
    p_mannwhitney: float | None = None
    p_mannwhitney_holm: float | None = None
    p_welch: float | None = None
    threshold_pct: float | None = None
    note: str | None = None

    def sentence(self) -> str:
        """One line for logs and notifications."""
        if self.pct_change is None or self.verdict == "not checked":
            return f"{self.variant}: {self.verdict} ({self.note})"
        ci = (
            f", 95 % CI [{self.pct_ci_low:+.2f}, {self.pct_ci_high:+.2f}] %"
            if self.pct_ci_low is not None and self.pct_ci_high is not None
            else ""
        )
        p = (
            f", Holm-adjusted Mann-Whitney p = {self.p_mannwhitney_holm:.3g}"
            if self.p_mannwhitney_holm is not None
            else ""
        )
        return (
            f"{self.variant}: {self.verdict}: {self.metric} {self.median_tonight:.6g} tonight vs "
            f"{self.median_baseline:.6g} over {self.baseline_nights} nights, {self.pct_change:+.2f} %{ci}{p} "
            f"(n = {self.n_tonight} vs {self.n_baseline}, threshold {self.threshold_pct:g} %)"
        )


@dataclass
class RegressionResult:
    """The check of one DAG run: every group's :class:`GroupCheck`."""

    dag_id: str
    run_id: str
    logical_date: str | None
    groups: list[GroupCheck]

    @property
    def regressions(self) -> list[GroupCheck]:
        """The groups whose verdict is ``regression``."""
        return [g for g in self.groups if g.verdict == "regression"]

    def message(self) -> str:
        """A multi-line summary: headline, then one line per group (regressions first)."""
        order = {"regression": 0, "improvement": 1, "unchanged": 2, "not checked": 3}
        head = (
            f"{self.dag_id} {self.run_id}: {len(self.regressions)} energy regression(s) in {len(self.groups)} group(s)"
            if self.regressions
            else f"{self.dag_id} {self.run_id}: no energy regression in {len(self.groups)} group(s)"
        )
        lines = [g.sentence() for g in sorted(self.groups, key=lambda g: (order.get(g.verdict, 9), g.variant))]
        return "\n".join([head, *("  " + line for line in lines)])

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (XCom, webhook payload)."""
        return {
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "logical_date": self.logical_date,
            "regressions": len(self.regressions),
            "groups": [asdict(g) for g in self.groups],
        }


def check(
    tonight: pandas.DataFrame,
    baseline: pandas.DataFrame,
    settings: RegressionSettings,
    conditions: dict[str, dict[str, Any]] | None = None,
) -> list[GroupCheck]:
    """Apply the decision rule of the module docstring to every group seen tonight.

    Args:
        tonight: one row per valid trial tonight; columns ``variant``, ``kind``,
            ``metric``, ``value`` (the primary metric, its unit).
        baseline: the same columns plus ``night`` (the run's logical date, any
            sortable type): valid trials of earlier nights. Only the last
            ``settings.baseline_runs`` nights of each group are used.
        settings: the plan's regression settings.
        conditions: ``{conditions key: trial_conditions(...)}`` for the keys in the
            frames' ``conditions`` columns (to say what changed); frames without that
            column are compared as before.

    Returns:
        One :class:`GroupCheck` per variant of ``tonight``, sorted by variant. Baseline
        trials whose ``conditions`` differ from tonight's are left out (see the module
        docstring); a variant left with too few nights is "no comparable baseline".
        Groups only in the baseline (a variant dropped from the plan) are ignored.
    """
    from gcbench import stats

    conditions = conditions or {}
    checks: list[GroupCheck] = []
    tested: list[tuple[int, Any]] = []
    threshold_pct = 100.0 * settings.threshold_rel
    for variant, now in sorted(tonight.groupby("variant"), key=lambda kv: str(kv[0])):
        kind = str(now["kind"].iloc[0])
        metric = str(now["metric"].iloc[0])
        past = (
            baseline[(baseline["variant"] == variant) & (baseline["metric"] == metric)] if len(baseline) else baseline
        )
        other = None  # why earlier nights of this variant are not comparable
        if "conditions" in now.columns:
            keys = list(dict.fromkeys(now["conditions"]))
            if len(keys) > 1:
                checks.append(
                    GroupCheck(
                        str(variant),
                        kind,
                        metric,
                        "not checked",
                        n_tonight=len(now),
                        n_baseline=0,
                        baseline_nights=0,
                        threshold_pct=threshold_pct,
                        note=f"tonight's trials ran under {len(keys)} different conditions "
                        f"({describe_change(conditions.get(keys[0], {}), conditions.get(keys[1], {}))})",
                    )
                )
                continue
            if len(past) and "conditions" in past.columns:
                unlike = past[past["conditions"] != keys[0]]
                past = past[past["conditions"] == keys[0]]
                if len(unlike):
                    latest = unlike.sort_values("night").iloc[-1]
                    other = (
                        f"{unlike['night'].nunique()} earlier night(s) ran under other conditions "
                        f"({describe_change(conditions.get(latest['conditions'], {}), conditions.get(keys[0], {}))})"
                    )
        nights = sorted(past["night"].unique())[-settings.baseline_runs :] if len(past) else []
        past = past[past["night"].isin(nights)] if len(past) else past
        now_values = now["value"].to_numpy(dtype=float)
        past_values = past["value"].to_numpy(dtype=float) if len(past) else []
        group = GroupCheck(
            str(variant),
            kind,
            metric,
            "not checked",
            n_tonight=len(now_values),
            n_baseline=len(past_values),
            baseline_nights=len(nights),
            threshold_pct=threshold_pct,
        )
        if len(nights) < settings.min_baseline_runs and other:
            group.note = (
                f"no comparable baseline: {len(nights)} earlier night(s) under tonight's conditions, "
                f"{settings.min_baseline_runs} needed; {other}"
            )
        elif len(nights) < settings.min_baseline_runs:
            group.note = f"no baseline yet: {len(nights)} earlier night(s), {settings.min_baseline_runs} needed"
        elif len(now_values) < MIN_TONIGHT:
            group.note = f"{len(now_values)} valid trial(s) tonight, {MIN_TONIGHT} needed"
        else:
            comparison = stats.compare(
                now_values,
                past_values,
                metric=metric,
                treatment=f"{variant} tonight",
                baseline=f"{variant} baseline",
                n_resamples=settings.n_resamples,
                alpha=settings.alpha,
                # the CI only where it keeps its 95 % (stats.MIN_N_INTERVAL); the verdict then
                # rests on the exact Mann-Whitney test and the threshold (rule 3, C22)
            )
            tested.append((len(checks), comparison))
        checks.append(group)
    adjusted = stats.adjust_holm([c for _, c in tested], alpha=settings.alpha)
    for (i, _), c in zip(tested, adjusted, strict=True):
        g = checks[i]
        g.median_tonight, g.median_baseline = c.median_treatment, c.median_baseline
        g.pct_change, g.pct_ci_low, g.pct_ci_high = c.pct_change, c.pct_ci_low, c.pct_ci_high
        g.p_mannwhitney, g.p_mannwhitney_holm, g.p_welch = c.p_mannwhitney, c.p_mannwhitney_holm, c.p_welch
        g.note = "; ".join(x for x in (c.note, c.ci_reason if c.pct_ci_low is None else None) if x) or None
        if c.pct_change is None or c.p_mannwhitney_holm is None:
            g.verdict = "not checked"
            g.note = g.note or "no percentage change (baseline median 0?)"
            continue
        significant = c.p_mannwhitney_holm < settings.alpha
        # rule 3 where an interval is shown; none (n too small) leaves rules 1 and 2
        if c.pct_change > threshold_pct and significant and (c.pct_ci_low is None or c.pct_ci_low > 0):
            g.verdict = "regression"
        elif c.pct_change < -threshold_pct and significant and (c.pct_ci_high is None or c.pct_ci_high < 0):
            g.verdict = "improvement"
        else:
            g.verdict = "unchanged"
    return checks


def _primary_metric_json() -> str:
    return json.dumps(primary_metrics())


_CONDITION_SQL = (
    "t.spec, t.result #> '{environment,gpus}', t.result #> '{environment,driver}', t.simulated, "
    "t.result #>> '{measurement,backend}'"
)
"""What :func:`trial_conditions` needs of a stored trial."""


def _frame(rows: list[tuple], columns: list[str]) -> pandas.DataFrame:
    """Rows ``(*value columns but conditions, spec, gpus, driver, simulated, backend, *rest)`` as a
    frame with a ``conditions`` key column; ``frame.attrs["conditions"]`` maps each key to
    its :func:`trial_conditions`."""
    import pandas as pd

    n = len(VALUE_COLUMNS) - 1
    table: dict[str, dict[str, Any]] = {}
    out = []
    for row in rows:
        cond = trial_conditions(row[n], row[n + 1], row[n + 2], row[n + 3], row[n + 4])
        key = conditions_key(cond)
        table.setdefault(key, cond)
        out.append((*row[:n], key, *row[n + 5 :]))
    frame = pd.DataFrame(out, columns=columns)
    frame.attrs["conditions"] = table
    return frame


def tonight_frame(conn, dag_id: str, run_id: str) -> pandas.DataFrame:
    """Valid trials' primary metric stored under the logical date of ``run_id``.

    Columns: :data:`VALUE_COLUMNS`. A trial stored by two runs of the date counts once.
    """
    with conn.cursor() as cur:
        cur.execute(
            "WITH me AS (SELECT id, logical_date FROM dag_runs WHERE dag_id = %s AND run_id = %s) "
            f"SELECT DISTINCT ON (t.trial_id) t.variant, t.kind, m.name, t.trial_id, m.value, {_CONDITION_SQL} "
            "FROM me JOIN dag_runs r ON r.dag_id = %s AND (r.id = me.id OR r.logical_date = me.logical_date) "
            f"JOIN trials t ON t.dag_run_id = r.id {JUDGED_METRIC_JOIN} "
            "WHERE t.valid IS TRUE AND t.status = 'ok' "
            "ORDER BY t.trial_id, r.id DESC",
            (dag_id, run_id, dag_id, _primary_metric_json()),
        )
        rows = cur.fetchall()
    conn.commit()
    return _frame(rows, list(VALUE_COLUMNS))


def baseline_frame(conn, dag_id: str, run_id: str, nights: int | None) -> pandas.DataFrame:
    """Valid trials' primary metric of the last ``nights`` earlier nights of each group
    (None: every earlier night, so :func:`check` can pick the last nights run under
    tonight's conditions).

    "Earlier" is by logical date (a run without one: its creation time), strictly
    before the night of ``run_id``. Columns: :data:`VALUE_COLUMNS`, ``night``
    (timestamp), ``run_id``.
    """
    with conn.cursor() as cur:
        cur.execute(
            "WITH me AS (SELECT coalesce(logical_date, created_at) AS night FROM dag_runs "
            "            WHERE dag_id = %s AND run_id = %s), "
            "vals AS (SELECT DISTINCT ON (coalesce(r.logical_date, r.created_at), t.trial_id) "
            f"           t.variant, t.kind, m.name, t.trial_id, m.value, {_CONDITION_SQL}, "
            "           coalesce(r.logical_date, r.created_at) AS night, r.run_id "
            "         FROM dag_runs r JOIN me ON coalesce(r.logical_date, r.created_at) < me.night "
            f"         JOIN trials t ON t.dag_run_id = r.id {JUDGED_METRIC_JOIN} "
            "         WHERE r.dag_id = %s AND t.valid IS TRUE AND t.status = 'ok' "
            "         ORDER BY coalesce(r.logical_date, r.created_at), t.trial_id, r.id DESC), "
            "ranked AS (SELECT *, dense_rank() OVER (PARTITION BY variant ORDER BY night DESC) AS k FROM vals) "
            "SELECT * FROM ranked WHERE %s::int IS NULL OR k <= %s",
            (dag_id, run_id, _primary_metric_json(), dag_id, nights, nights),
        )
        rows = [row[:-1] for row in cur.fetchall()]  # without k
    conn.commit()
    return _frame(rows, [*VALUE_COLUMNS, "night", "run_id"])


def check_run(conn, plan, run_id: str) -> RegressionResult:
    """Check one stored DAG run of ``plan`` (a :class:`gcbench.plan.schema.Plan`).

    Raises:
        gcbench.errors.StoreError: the run is not stored.
    """
    from gcbench.errors import StoreError

    with conn.cursor() as cur:
        cur.execute("SELECT logical_date FROM dag_runs WHERE dag_id = %s AND run_id = %s", (plan.dag_id, run_id))
        row = cur.fetchone()
    conn.commit()
    if row is None:
        raise StoreError(f"no stored run {run_id!r} of {plan.dag_id}")
    settings = plan.regression
    tonight = tonight_frame(conn, plan.dag_id, run_id)
    baseline = baseline_frame(conn, plan.dag_id, run_id, None)  # check() keeps the last comparable nights
    groups = check(tonight, baseline, settings, {**baseline.attrs["conditions"], **tonight.attrs["conditions"]})
    return RegressionResult(plan.dag_id, run_id, row[0].isoformat() if row[0] else None, groups)
