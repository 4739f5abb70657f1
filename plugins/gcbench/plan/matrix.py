"""What a workload's matrix multiplies out to: its factor combinations and variant labels.

Each workload's matrix is a cartesian product of its factor lists, minus the
combinations matched by an ``exclude`` rule; each remaining combination is a
*variant*, named by :func:`variant_label`. Trial specs are built from these by
:func:`gcbench.plan.trials.expand`.

Pure: no Airflow import; the one lookup is a kind's ``preprocessor_setting`` in the
registry (:mod:`gcbench.kinds`).
"""

from __future__ import annotations

import itertools

from gcbench import kinds
from gcbench.errors import PlanError
from gcbench.plan.schema import Plan, WorkloadEntry
from gcbench.spec import Scalar
from gcbench.tokenizer.preprocessors import preprocessor_of_path

MAX_MATRIX_COMBINATIONS = 100_000
"""A workload's matrix may not multiply out to more combinations than this *before*
``exclude`` rules (they are enumerated to apply the rules; a plan of a page of YAML
could otherwise ask for billions)."""


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


def preprocessors_used(plan: Plan) -> list[str]:
    """Names of the declared preprocessors the plan's trials use (the DAG builds these):
    every ``external-<name>`` value of a kind's ``preprocessor_setting``, sorted."""
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
