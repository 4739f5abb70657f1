"""The parameters of one run of a plan, checked the same way whichever way they come in.

A run has three parameters: ``repetitions`` (per variant; empty: the plan's),
``variants`` (the variant labels to run; empty: all) and ``runner`` (``local`` or
``docker``; empty: the plan's). They come in three ways:

* the Airflow trigger form and a REST API ``conf``: Airflow validates them against
  the DAG's Params (:func:`param_schemas`, JSON Schema) when the run is created, and
  refuses the run (HTTP 400, or a message in the form) when they do not fit;
* ``gcbench run`` flags (``--repetitions``, ``--variant``, ``--runner``), checked by
  the CLI before any DAG runs (exit 2, one line);
* whatever reaches ``expand_trials`` (a run created another way, or from a DAG
  version whose variants have changed since): checked again there.

:func:`run_params` is the one check behind all three; JSON Schema cannot say
everything (``2.0`` is an integer to it), so it also normalizes: ``repetitions`` 2.0
is taken as 2, and 2.5, ``True``, ``"3"``, 0 and -1 are refused.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gcbench.errors import RunParamsError
from gcbench.plan.matrix import variants as plan_variants
from gcbench.plan.schema import MAX_REPETITIONS, Plan

RUNNERS = ("local", "docker")
"""Where trials run: a subprocess per trial, or a container per trial (DockerOperator)."""

MAX_LISTED_VARIANTS = 30
"""An unknown-variant error lists at most this many valid variants (``gcbench plan expand`` lists all)."""


@dataclass(frozen=True)
class RunParams:
    """Checked parameters of one run.

    Attributes:
        repetitions: repetitions per variant, 1 to :data:`MAX_REPETITIONS`; None: each
            workload's own (or the plan's).
        variants: variant labels to run, in the order given, each once; empty: all.
        runner: ``local`` or ``docker``.
    """

    repetitions: int | None
    variants: tuple[str, ...]
    runner: str


def _repetitions(value: Any, plan: Plan, name: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_REPETITIONS:
        return value
    raise RunParamsError(
        plan.name, name, f"must be a whole number from 1 to {MAX_REPETITIONS} (empty: the plan's), got {value!r}"
    )


def _variants(value: Any, plan: Plan, name: str) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise RunParamsError(plan.name, name, f"must be a list of variant labels (empty: all), got {value!r}")
    known = plan_variants(plan)
    unknown = [v for v in dict.fromkeys(value) if v not in known]
    if unknown:
        hints = [
            f"{v!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(v, known, n=1)) else repr(v)
            for v in unknown
        ]
        listed = ", ".join(known[:MAX_LISTED_VARIANTS])
        if len(known) > MAX_LISTED_VARIANTS:
            listed += f", ... ({len(known) - MAX_LISTED_VARIANTS} more: gcbench plan expand lists them)"
        raise RunParamsError(
            plan.name,
            name,
            f"unknown variant{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; plan {plan.name!r} has: {listed}",
        )
    return tuple(dict.fromkeys(value))


def _runner(value: Any, plan: Plan, name: str) -> str:
    if value is None or value == "":
        return plan.runner
    if value in RUNNERS:
        return value
    raise RunParamsError(plan.name, name, f"must be one of {', '.join(RUNNERS)} (empty: the plan's), got {value!r}")


def run_params(
    plan: Plan,
    repetitions: Any = None,
    variants: Any = None,
    runner: Any = None,
    *,
    names: Mapping[str, str] | None = None,
) -> RunParams:
    """Check the parameters of one run of ``plan`` (see the module docstring).

    Args:
        plan: the validated plan.
        repetitions, variants, runner: as given (trigger form, REST ``conf``, CLI
            flags); None or empty means the plan's own.
        names: how the caller spells each parameter in errors, e.g.
            ``{"repetitions": "--repetitions"}`` for the CLI; default the Param names.

    Returns:
        The normalized :class:`RunParams` (``2.0`` repetitions -> 2).

    Raises:
        RunParamsError: the first bad parameter, in one line naming it, the value,
            and what is allowed (for unknown variants: the plan's variants).
    """
    names = {"repetitions": "repetitions", "variants": "variants", "runner": "runner", **(names or {})}
    return RunParams(
        repetitions=_repetitions(repetitions, plan, names["repetitions"]),
        variants=_variants(variants, plan, names["variants"]),
        runner=_runner(runner, plan, names["runner"]),
    )


def run_params_from_conf(plan: Plan, params: Mapping[str, Any]) -> RunParams:
    """:func:`run_params` of an Airflow run's ``params`` (trigger form or REST ``conf``)."""
    return run_params(plan, params.get("repetitions"), params.get("variants"), params.get("runner"))


def param_schemas(plan: Plan) -> dict[str, dict[str, Any]]:
    """JSON Schemas of the DAG's Params (``{name: schema}``), as much of :func:`run_params`
    as JSON Schema can say, so that Airflow refuses a bad trigger before a run exists.

    Optional parameters allow ``null``: Airflow's UI marks a Param required (red
    asterisk) unless its type includes ``"null"`` (``isParamRequired.tsx``), and its
    multi-select sends ``null`` when cleared.
    """
    labels = plan_variants(plan)
    return {
        "repetitions": {"type": ["null", "integer"], "minimum": 1, "maximum": MAX_REPETITIONS},
        "variants": {
            "type": ["null", "array"],
            "items": {"type": "string", "enum": labels},
            "uniqueItems": True,
            "examples": labels,
        },
        "runner": {"type": "string", "enum": list(RUNNERS)},
    }
