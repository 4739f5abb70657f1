"""Expanding a plan into trial specs.

Each workload's matrix is a cartesian product of its factor lists, minus the
combinations matched by an ``exclude`` rule; each remaining combination is a
*variant*, repeated ``repetitions`` times. The schedule is sequential or a seeded
shuffle (``order: randomized``), so that slow drifts (temperature, clocks) do not
line up with one variant.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Mapping
from typing import Any

from gcbench.errors import PlanError
from gcbench.plan.schema import Plan, WorkloadEntry, first_round, most_repetitions
from gcbench.spec import Amount, Scalar, TrialSpec, derive_seed

DEFAULT_MAX_MAP_LENGTH = 1024
"""Airflow's default ``[core] max_map_length``: the most instances of one mapped task."""

MAX_MATRIX_COMBINATIONS = 100_000
"""A workload's matrix may not multiply out to more combinations than this *before*
``exclude`` rules (they are enumerated to apply the rules; a plan of a page of YAML
could otherwise ask for billions)."""


def max_map_length() -> int:
    """The most trials one DAG run may map: Airflow's ``[core] max_map_length``.

    Read from Airflow's configuration when Airflow is already imported (the DAG
    processor, the workers, ``dag.test()``), else from ``AIRFLOW__CORE__MAX_MAP_LENGTH``,
    else Airflow's default (1024). Airflow is never imported here: validating a plan
    from the CLI stays cheap. A run over the limit is refused with a clear error, not
    split (a split run would be several DAG runs, each with its own report).
    """
    import os
    import sys

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


def matrix_size(entry: WorkloadEntry) -> int:
    """Combinations of a workload's matrix before ``exclude`` rules (1 without a matrix)."""
    n = 1
    for values in entry.matrix.values():
        n *= len(values)
    return n


def _fmt(value: Scalar) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def variant_label(workload: str, factors: dict[str, Scalar]) -> str:
    """``tinylm-infer`` + {path: torch, batch_size: 8} -> ``tinylm-infer[batch_size=8,path=torch]``."""
    if not factors:
        return workload
    inner = ",".join(f"{k}={_fmt(factors[k])}" for k in sorted(factors))
    return f"{workload}[{inner}]"


def combinations(entry: WorkloadEntry) -> list[dict[str, Scalar]]:
    """The factor combinations of one workload after ``exclude`` (matrix order).

    Raises:
        PlanError: the matrix has more than :data:`MAX_MATRIX_COMBINATIONS` combinations.
    """
    if matrix_size(entry) > MAX_MATRIX_COMBINATIONS:
        raise PlanError(
            "<plan>",
            None,
            f"{entry.name}.matrix",
            f"the matrix has {matrix_size(entry)} combinations, more than {MAX_MATRIX_COMBINATIONS}",
        )
    keys = list(entry.matrix)
    combos = [dict(zip(keys, values, strict=True)) for values in itertools.product(*(entry.matrix[k] for k in keys))]
    return [c for c in combos if not any(all(c.get(k) == v for k, v in rule.items()) for rule in entry.exclude)]


def variants(plan: Plan) -> list[str]:
    """Every variant label of the plan, in plan order."""
    return [variant_label(w.name, c) for w in plan.workloads for c in combinations(w)]


def _devices_for(entry: WorkloadEntry, settings: dict[str, Any], plan: Plan) -> list[int]:
    gpus = settings.get("gpus", 1)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise ValueError(f"gpus must be a positive integer, got {gpus!r}")
    return list(plan.devices[:gpus])


def settings_checker(kind: str):
    """The kind's ``check_settings(cfg)`` (raises ValueError), or None
    (:attr:`gcbench.kinds.WorkloadKind.check_settings`)."""
    from gcbench import kinds

    return kinds.get(kind).check_settings


def _type_problem(value: Any, default: Any) -> str | None:
    if default is None or value is None:
        return None
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "must be true or false"
    if isinstance(default, int):
        return None if isinstance(value, int) and not isinstance(value, bool) else "must be an integer"
    if isinstance(default, float):
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "must be a number"
    if isinstance(default, str):
        return None if isinstance(value, str) else "must be a string"
    return None


def check_values(settings: dict[str, Any], defaults: dict[str, Any] | None, checker) -> tuple[str, str] | None:
    """(setting, message) for the first bad value of one variant's effective settings, or None.

    The setting is dotted (``loader.workers``) when the kind's check raised a
    :class:`gcbench.kinds.SettingError` naming a field inside a structured setting.

    Types follow the workload's defaults (an integer setting takes integers, ...);
    then the workload's own ``check_settings`` judges choices and ranges, so a plan
    with ``memory: pinnned`` fails at validation, not when its trials run.
    """
    from gcbench.spec import TRIAL_SETTINGS, trial_setting_problem

    for key, value in settings.items():
        if key in TRIAL_SETTINGS and (defaults is None or key not in defaults):
            problem = trial_setting_problem(key, value)
            if problem:
                return key, problem
    if defaults is None:
        return None
    settings = {k: v for k, v in settings.items() if k in defaults or k not in TRIAL_SETTINGS}
    for key, value in settings.items():
        problem = _type_problem(value, defaults.get(key))
        if problem:
            from gcbench.plan.loader import yaml11_hint

            return key, f"{problem}, got {value!r}{yaml11_hint(value)}"
    if checker is not None:
        try:
            checker({**defaults, **settings})
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            message = str(exc)
            field = getattr(exc, "field", None)  # kinds.SettingError: a dotted path (loader.workers)
            if isinstance(field, str) and field.split(".")[0] in settings:
                return field, message
            key = next((k for k in settings if k in message), next(iter(settings), ""))
            return key, message
    return None


def check_plan(plan: Plan, lines: dict | None = None, source: str = "<plan>") -> None:
    """Checks that need the whole plan: non-empty matrices, known settings, GPU counts.

    Raises:
        PlanError: naming the workload's field and line.
    """
    lines = lines or {}
    from gcbench.spec import TRIAL_SETTINGS
    from gcbench.workloads import defaults_for

    if plan.energy.node is not None and plan.runner == "docker":
        # the meter reads the BMC from the trial's process: a trial container has no network
        raise PlanError(
            source,
            lines.get(("energy", "node"), lines.get(("energy",))),
            "energy.node",
            "the node meter reads the BMC from the trial process, and the docker runner's trial "
            "containers have no network (network_mode none): use runner: local for node power",
        )

    for i, w in enumerate(plan.workloads):
        if matrix_size(w) > MAX_MATRIX_COMBINATIONS:
            raise PlanError(
                source,
                lines.get(("workloads", i, "matrix"), lines.get(("workloads", i))),
                f"workloads[{i}].matrix",
                f"the matrix multiplies out to {matrix_size(w)} combinations, "
                f"more than {MAX_MATRIX_COMBINATIONS}: split it into several workloads or plans",
            )
        combos = combinations(w)
        if not combos:
            field = f"workloads[{i}].exclude" if w.exclude else f"workloads[{i}].matrix"
            line_key = ("workloads", i, "exclude" if w.exclude else "matrix")
            raise PlanError(
                source,
                lines.get(line_key, lines.get(("workloads", i))),
                field,
                "the matrix is empty after exclude rules: no trial to run",
            )
        defaults = defaults_for(w.kind)
        if defaults is not None:
            for where, keys in (("settings", w.settings), ("matrix", w.matrix)):
                for key in keys:
                    if key not in defaults and key != "gpus" and key not in TRIAL_SETTINGS:
                        raise PlanError(
                            source,
                            lines.get(("workloads", i, where, key)),
                            f"workloads[{i}].{where}.{key}",
                            f"unknown {w.kind} setting; known: {', '.join(sorted({*defaults, *TRIAL_SETTINGS}))}",
                        )
        checker = settings_checker(w.kind)
        _check_program(plan, w, i, lines, source)
        for combo in combos:
            settings = {**w.settings, **combo}
            problem = check_values(settings, defaults, checker)
            if problem is not None:
                key, message = problem
                top = key.split(".")[0]  # a dotted key names a field inside a structured setting
                where = "matrix" if top in combo else "settings"
                line = lines.get(("workloads", i, where, *key.split(".")))
                if line is None:
                    line = lines.get(("workloads", i, where, top), lines.get(("workloads", i)))
                raise PlanError(
                    source,
                    line,
                    f"workloads[{i}].{where}.{key}",
                    message,
                )
            gpus = settings.get("gpus", 1)
            if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
                raise PlanError(
                    source,
                    lines.get(("workloads", i)),
                    f"workloads[{i}].gpus",
                    f"gpus must be a positive integer, got {gpus!r}",
                )
            if gpus > max(1, len(plan.devices)):
                raise PlanError(
                    source,
                    lines.get(("workloads", i)),
                    f"workloads[{i}].gpus",
                    f"needs {gpus} GPUs but the plan lists devices {plan.devices}",
                )
    # a precision target counts at its max: the second round may reach it
    n = sum(len(combinations(w)) * most_repetitions(plan.repetitions_of(w)) for w in plan.workloads)
    limit = max_map_length()
    if n > limit:
        raise PlanError(
            source,
            lines.get(("repetitions",)),
            "repetitions",
            f"the plan expands to {n} trials, more than Airflow's max_map_length "
            f"({limit}); split it into several plans or lower repetitions",
        )
    check_preprocessors(plan, lines, source)
    from gcbench.plan.identifiers import check_airflow_identifiers

    check_airflow_identifiers(plan, lines, source)


def check_preprocessors(plan: Plan, lines: dict | None = None, source: str = "<plan>") -> None:
    """Every ``external-<name>`` a workload asks for is declared, and every plan
    declaration has its sources on this machine.

    Raises:
        PlanError: an undeclared name (the message lists the declared ones), a plan
            declaration taking a built-in's name, or one whose source folder is missing
            or has no file matching its ``sources``.
    """
    from gcbench import kinds
    from gcbench.tokenizer.errors import TokenizerBuildError
    from gcbench.tokenizer.preprocessors import PATH_PREFIX, preprocessor_of_path

    lines = lines or {}
    try:
        declared = plan.declared_preprocessors()
    except ValueError as exc:
        name = next((n for n in plan.preprocessors if str(exc).startswith(f"preprocessor {n!r}")), "")
        raise PlanError(source, lines.get(("preprocessors", name)), f"preprocessors.{name}", str(exc)) from None
    for name in plan.preprocessors:
        try:
            declared[name].source_files()
        except TokenizerBuildError as exc:
            raise PlanError(
                source,
                lines.get(("preprocessors", name, "source"), lines.get(("preprocessors", name))),
                f"preprocessors.{name}.source",
                f"{exc.message}: {exc.path}",
            ) from None
    for i, w in enumerate(plan.workloads):
        kind = kinds.find(w.kind)
        setting = kind.preprocessor_setting if kind else None
        if setting is None:
            continue
        for where, values in (("settings", [w.settings.get(setting)]), ("matrix", list(w.matrix.get(setting, [])))):
            for value in values:
                used = preprocessor_of_path(value)
                if used is not None and used not in declared:
                    raise PlanError(
                        source,
                        lines.get(("workloads", i, where, setting), lines.get(("workloads", i))),
                        f"workloads[{i}].{where}.{setting}",
                        f"{value!r} names no declared preprocessor; declared: "
                        + ", ".join(PATH_PREFIX + n for n in sorted(declared))
                        + " (a plan declares its own under preprocessors:)",
                    )


def preprocessor_entries(plan: Plan) -> dict[str, dict[str, Any]]:
    """The spec entries (:meth:`Preprocessor.spec_entry`) of the preprocessors the plan's
    trials use, by name (their sources hashed once per expansion)."""
    used = preprocessors_used(plan)
    if not used:
        return {}
    declared = plan.declared_preprocessors()
    return {name: declared[name].spec_entry() for name in used}


def _check_program(plan: Plan, w: WorkloadEntry, i: int, lines: dict, source: str) -> None:
    """The kind's plan-time check of a user's program (entry point found, executable
    found, placeholders naming settings, a Docker engine for a container).

    Raises:
        PlanError: naming the program field and its line.
    """
    from gcbench import kinds

    kind = kinds.get(w.kind)
    program = w.program()
    if kind.check_program is None or program is None:
        return
    settings = {**w.settings, **{k: v[0] for k, v in w.matrix.items()}}
    try:
        kind.check_program(program, settings, plan.runner)
    except kinds.ProgramError as exc:
        top = exc.field.split(".")[0]
        key = ("workloads", i, *exc.field.split("."))
        line = lines.get(key, lines.get(("workloads", i, top), lines.get(("workloads", i))))
        raise PlanError(source, line, f"workloads[{i}].{exc.field}", str(exc)) from None


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
    from gcbench.plan.params import run_params

    if only_variants is not None and not isinstance(only_variants, (str, list, tuple)):
        only_variants = list(only_variants)
    checked = run_params(plan, repetitions=repetitions, variants=only_variants)
    repetitions = checked.repetitions
    wanted = set(checked.variants)
    specs: list[TrialSpec] = []
    entries = preprocessor_entries(plan)
    from gcbench import kinds
    from gcbench.tokenizer.preprocessors import preprocessor_of_path

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


def preprocessors_used(plan: Plan) -> list[str]:
    """Names of the declared preprocessors the plan's trials use (the DAG builds these):
    every ``external-<name>`` value of a kind's ``preprocessor_setting``, sorted."""
    from gcbench import kinds
    from gcbench.tokenizer.preprocessors import preprocessor_of_path

    names = set()
    for w in plan.workloads:
        kind = kinds.find(w.kind)
        setting = kind.preprocessor_setting if kind else None
        if setting is None:
            continue
        for value in [*w.matrix.get(setting, []), w.settings.get(setting)]:
            name = preprocessor_of_path(value)
            if name is not None:
                names.add(name)
    return sorted(names)
