"""expand_trials checks a run's parameters as the trigger form and the CLI do (gcbench.plan.params)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gcbench.factory.dag import build_dag
from gcbench.plan import load_plan

REPO = Path(__file__).resolve().parents[2]
PARAMS = REPO / "tests" / "fixtures" / "cases" / "params"


def expand_trials_with(monkeypatch, conf: dict):
    """The nightly DAG's expand_trials callable, run with ``conf`` as the run's params."""
    import airflow.sdk

    plan = load_plan(REPO / "plans" / "nightly.yaml")
    ctx = {
        "params": {"repetitions": None, "variants": [], "runner": "local", **conf},
        "run_id": "manual__test",
        "logical_date": None,
    }
    monkeypatch.setattr(airflow.sdk, "get_current_context", lambda: ctx)
    return build_dag(plan).get_task("expand_trials").python_callable


class Expanded(Exception):
    pass


def test_c04_repetitions_2_0_reaches_expand_as_2(monkeypatch):
    from gcbench.plan import trials

    seen = {}

    def spy(plan, repetitions=None, only_variants=None):
        seen.update(repetitions=repetitions, only_variants=only_variants)
        raise Expanded  # stop before the results database

    callable_ = expand_trials_with(monkeypatch, json.loads((PARAMS / "repetitions_float.json").read_text()))
    monkeypatch.setattr(trials, "expand", spy)
    with pytest.raises(Expanded):
        callable_()
    assert seen == {"repetitions": 2, "only_variants": ()} and type(seen["repetitions"]) is int


@pytest.mark.parametrize(
    "conf,line",
    [
        (
            json.loads((PARAMS / "unknown_variant.json").read_text()),
            "variants: unknown variant 'tinylm-infer[path=typo]' (did you mean 'tinylm-infer'?); plan 'nightly' has: "
            "noop, h2d[memory=pinned], h2d[memory=pageable], tinylm-infer",
        ),
        ({"repetitions": 0}, "repetitions: must be a whole number from 1 to 1000 (empty: the plan's), got 0"),
        ({"repetitions": "2"}, "repetitions: must be a whole number from 1 to 1000 (empty: the plan's), got '2'"),
        ({"runner": "dockr"}, "runner: must be one of local, docker (empty: the plan's), got 'dockr'"),
    ],
)
def test_c04_params_that_got_past_the_form_are_refused_in_one_line(monkeypatch, conf, line):
    callable_ = expand_trials_with(monkeypatch, conf)
    with pytest.raises(Exception) as info:  # noqa: PT011 - the type is the failure policy's; the line is ours
        callable_()
    assert line in str(info.value)
    assert "Traceback" not in str(info.value) and "\n" not in line
