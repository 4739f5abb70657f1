"""Expanding a plan into trial specs.

Each variant of a workload (:mod:`gcbench.plan.matrix`) is repeated ``repetitions``
times. The schedule is sequential or a seeded shuffle (``order: randomized``), so
that slow drifts (temperature, clocks) do not line up with one variant.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from gcbench import kinds
from gcbench.errors import PlanError
from gcbench.plan.matrix import combinations, preprocessors_used, variant_label
from gcbench.plan.params import run_params
from gcbench.plan.schema import Plan, WorkloadEntry, first_round
from gcbench.spec import Amount, TrialSpec, derive_seed
from gcbench.tokenizer.preprocessors import preprocessor_of_path

DEFAULT_MAX_MAP_LENGTH = 1024
"""Airflow's default ``[core] max_map_length``: the most instances of one mapped task."""


def max_map_length() -> int:
    """The most trials one DAG run may map: Airflow's ``[core] max_map_length``.

    Read from Airflow's configuration when Airflow is already imported (the DAG
    processor, the workers, ``dag.test()``), else from ``AIRFLOW__CORE__MAX_MAP_LENGTH``,
    else Airflow's default (1024). Airflow is never imported here: validating a plan
    from the CLI stays cheap. A run over the limit is refused with a clear error, not
    split (a split run would be several DAG runs, each with its own report).
    """
    configuration = sys.modules.get("airflow.configuration")
    if configuration is not None and getattr(configuration, "conf", None) is not None:
        try:
            return configuration.conf.getint("core", "max_map_length")
        except (ValueError, LookupError, configuration.AirflowConfigException):
            pass
    try:
        return int(os.environ.get("AIRFLOW__CORE__MAX_MAP_LENGTH") or DEFAULT_MAX_MAP_LENGTH)
    except ValueError:
        return DEFAULT_MAX_MAP_LENGTH


def _devices_for(entry: WorkloadEntry, settings: dict[str, Any], plan: Plan) -> list[int]:
    gpus = settings.get("gpus", 1)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise ValueError(f"gpus must be a positive integer, got {gpus!r}")
    return list(plan.devices[:gpus])


def preprocessor_entries(plan: Plan) -> dict[str, dict[str, Any]]:
    """The spec entries (:meth:`Preprocessor.spec_entry`) of the preprocessors the plan's
    trials use, by name (their sources hashed once per expansion)."""
    used = preprocessors_used(plan)
    if not used:
        return {}
    declared = plan.declared_preprocessors()
    return {name: declared[name].spec_entry() for name in used}


def expand(
    plan: Plan,
    repetitions: int | None = None,
    only_variants: Iterable[str] | None = None,
    totals: Mapping[str, int] | None = None,
) -> list[TrialSpec]:
    """Trial specs of a plan, in schedule order, each with its stable ``trial_id``.

    Args:
        plan: a validated plan.
        repetitions: overrides every workload's repetitions (a run parameter; None: the
            plan's). A workload with a precision target (:class:`RepetitionTarget`) runs
            its ``min`` in the first round.
        only_variants: keep only these variant labels (None or empty: all).
        totals: ``{variant label: total repetitions}`` for the second round of a precision
            target (repetitions 0 .. total-1; the same ids as ``repetitions: total``);
            variants not in it keep their first round.

    Both are checked by :func:`gcbench.plan.params.run_params`, as every run parameter is.

    Raises:
        RunParamsError: repetitions not a whole number from 1 to 1000 (2.0 is taken as
            2), or an unknown variant label (the error lists the plan's variants).
        PlanError: the run would have more trials than Airflow's ``max_map_length``
            (:func:`max_map_length`; the trigger form's repetitions can raise the count
            past what the plan passed).
    """
    if only_variants is not None and not isinstance(only_variants, (str, list, tuple)):
        only_variants = list(only_variants)
    checked = run_params(plan, repetitions=repetitions, variants=only_variants)
    repetitions = checked.repetitions
    wanted = set(checked.variants)
    specs: list[TrialSpec] = []
    entries = preprocessor_entries(plan)
    for w in plan.workloads:
        kind = kinds.find(w.kind)
        setting = kind.preprocessor_setting if kind else None
        reps = repetitions or first_round(plan.repetitions_of(w))
        for combo in combinations(w):
            label = variant_label(w.name, combo)
            if wanted and label not in wanted:
                continue
            settings = {**w.settings, **combo}
            used = preprocessor_of_path(settings.get(setting)) if setting else None
            for rep in range((totals or {}).get(label, reps)):
                spec = TrialSpec(
                    plan=plan.name,
                    workload=w.name,
                    kind=w.kind,
                    variant=label,
                    factors=combo,
                    settings=settings,
                    repetition=rep,
                    seed=derive_seed(plan.seed, label, rep),
                    devices=_devices_for(w, settings, plan),
                    # the plan's Warmup/Window as the spec's plain Amount
                    warmup=Amount.model_validate((w.warmup or plan.warmup).model_dump()),
                    window=Amount.model_validate((w.window or plan.window).model_dump()),
                    energy=plan.energy,
                    program=w.program(),
                    preprocessor=entries.get(used) if used else None,
                )
                specs.append(spec.with_id())
    limit = max_map_length()
    if len(specs) > limit:
        raise PlanError(
            plan.name,
            None,
            "params.repetitions" if repetitions else "repetitions",
            f"this run would have {len(specs)} trials, more than Airflow's max_map_length ({limit}); "
            "lower repetitions, pick fewer variants, or raise [core] max_map_length",
        )
    if plan.order == "randomized":
        random.Random(plan.seed).shuffle(specs)
    return [s.model_copy(update={"order": i}) for i, s in enumerate(specs)]
