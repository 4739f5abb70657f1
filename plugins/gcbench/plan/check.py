"""Checks of a whole plan, after its schema: settings, matrices, GPU counts, preprocessors.

The schema (:mod:`gcbench.plan.schema`) judges each field alone; :func:`check_plan`
judges what needs the whole plan or a workload kind's declaration: every variant's
effective settings (types from the kind's defaults, then its own ``check_settings``),
matrices that are empty after ``exclude`` or too large, GPU counts against the plan's
devices, the run's size against Airflow's ``max_map_length``, declared preprocessors,
users' programs, and the Airflow identifiers the plan's values become
(:mod:`gcbench.plan.identifiers`). :func:`gcbench.plan.loader.plan_from_text` calls it
with the YAML's lines, so each error names the file, the line and the field.
"""

from __future__ import annotations

from typing import Any

from gcbench import kinds
from gcbench.errors import PlanError
from gcbench.plan.identifiers import check_airflow_identifiers
from gcbench.plan.matrix import MAX_MATRIX_COMBINATIONS, combinations, matrix_size
from gcbench.plan.schema import Plan, WorkloadEntry, most_repetitions
from gcbench.plan.text import yaml11_hint
from gcbench.plan.trials import max_map_length
from gcbench.spec import TRIAL_SETTINGS, trial_setting_problem
from gcbench.tokenizer.errors import TokenizerBuildError
from gcbench.tokenizer.preprocessors import PATH_PREFIX, preprocessor_of_path
from gcbench.workloads import defaults_for


def settings_checker(kind: str):
    """The kind's ``check_settings(cfg)`` (raises ValueError), or None
    (:attr:`gcbench.kinds.WorkloadKind.check_settings`)."""
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
    check_airflow_identifiers(plan, lines, source)


def check_preprocessors(plan: Plan, lines: dict | None = None, source: str = "<plan>") -> None:
    """Every ``external-<name>`` a workload asks for is declared, and every plan
    declaration has its sources on this machine.

    Raises:
        PlanError: an undeclared name (the message lists the declared ones), a plan
            declaration taking a built-in's name, or one whose source folder is missing
            or has no file matching its ``sources``.
    """
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


def _check_program(plan: Plan, w: WorkloadEntry, i: int, lines: dict, source: str) -> None:
    """The kind's plan-time check of a user's program (entry point found, executable
    found, placeholders naming settings, a Docker engine for a container).

    Raises:
        PlanError: naming the program field and its line.
    """
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
