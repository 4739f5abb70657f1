"""One check for every way a run's parameters come in: trigger form, REST API conf, gcbench run flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gcbench.errors import PlanError, RunParamsError
from gcbench.plan import load_plan
from gcbench.plan.params import RunParams, param_schemas, run_params, run_params_from_conf

REPO = Path(__file__).resolve().parents[2]
PARAMS = REPO / "tests" / "fixtures" / "cases" / "params"
NIGHTLY_VARIANTS = "noop, h2d[memory=pinned], h2d[memory=pageable], tinylm-infer"


@pytest.fixture(scope="module")
def nightly():
    return load_plan(REPO / "plans" / "nightly.yaml")


@pytest.fixture(scope="module")
def serialized(nightly):
    """The nightly plan's DAG serialized, as the DAG processor stores it for the API server and UI."""
    from airflow.serialization.serialized_objects import DagSerialization

    from gcbench.factory.dag import build_dag

    return DagSerialization.to_dict(build_dag(nightly))


@pytest.fixture(scope="module")
def serialized_dag(serialized):
    """The nightly plan's DAG as the API server and scheduler hold it."""
    from airflow.serialization.serialized_objects import DagSerialization

    return DagSerialization.from_dict(serialized)


def airflow_validate(serialized_dag, conf: dict) -> dict:
    """What Airflow does with a trigger's conf before it creates the run (SerializedDAG.create_dagrun)."""
    return serialized_dag.params.deep_merge(conf).validate()


def test_empty_parameters_mean_the_plans_own(nightly):
    for empty in (None, ""):
        assert run_params(nightly, empty, empty, empty) == RunParams(None, (), "local")
    assert run_params(nightly, variants=[]) == RunParams(None, (), "local")


def test_repetitions_2_0_is_taken_as_2(nightly):
    assert run_params(nightly, repetitions=2.0).repetitions == 2
    assert isinstance(run_params(nightly, repetitions=2.0).repetitions, int)


@pytest.mark.parametrize("value", [0, -1, 1001, 2.5, True, "3", [2], float("nan")])
def test_repetitions_other_than_a_whole_number_from_1_to_1000_are_refused(nightly, value):
    with pytest.raises(RunParamsError) as info:
        run_params(nightly, repetitions=value)
    assert str(info.value) == f"repetitions: must be a whole number from 1 to 1000 (empty: the plan's), got {value!r}"
    assert isinstance(info.value, PlanError) and info.value.exit_code == 2


def test_unknown_variants_are_refused_with_the_plans_variants(nightly):
    with pytest.raises(RunParamsError) as info:
        run_params(nightly, variants=["noop", "tinylm-infer[path=typo]", "h2d[memory=pined]"])
    assert str(info.value) == (
        "variants: unknown variants 'tinylm-infer[path=typo]' (did you mean 'tinylm-infer'?), "
        "'h2d[memory=pined]' (did you mean 'h2d[memory=pinned]'?); "
        f"plan 'nightly' has: {NIGHTLY_VARIANTS}"
    )


def test_long_variant_lists_are_cut_in_errors():
    from gcbench.plan import plan_from_text

    plan = plan_from_text(
        "name: wide\nworkloads: [{name: w, kind: noop, matrix: {tick_s: "
        f"[{', '.join(str(i / 100) for i in range(1, 41))}]}}}}]\n"
    )
    with pytest.raises(
        RunParamsError,
        match=r"plan 'wide' has: w\[tick_s=0.01\], .*w\[tick_s=0.3\], \.\.\. "
        r"\(10 more: gcbench plan expand lists them\)$",
    ):
        run_params(plan, variants=["zzz"])


@pytest.mark.parametrize("value", ["noop", [1], {"noop": 1}])
def test_variants_must_be_a_list_of_labels(nightly, value):
    with pytest.raises(RunParamsError, match=r"^variants: must be a list of variant labels \(empty: all\), got "):
        run_params(nightly, variants=value)


def test_variants_keep_their_order_once_each(nightly):
    assert run_params(nightly, variants=["noop", "tinylm-infer", "noop"]).variants == ("noop", "tinylm-infer")


def test_runner_from_its_choices(nightly):
    assert run_params(nightly, runner="docker").runner == "docker"
    with pytest.raises(
        RunParamsError, match=r"^--runner: must be one of local, docker \(empty: the plan's\), got 'dockr'$"
    ):
        run_params(nightly, runner="dockr", names={"runner": "--runner"})


def test_expand_goes_through_the_same_check(nightly):
    from gcbench.plan import expand

    assert len(expand(nightly, repetitions=2.0)) == 4 * 2
    with pytest.raises(RunParamsError, match=r"^variants: unknown variant 'x'; plan 'nightly' has"):
        expand(nightly, only_variants=["x"])
    with pytest.raises(RunParamsError, match=r"^repetitions: .* got 0$"):
        expand(nightly, repetitions=0)


# ----------------------------------------------------------------------------- C04 through Airflow's own validation


def test_c04_repetitions_2_0_passes_airflows_validation_and_runs_2_repetitions(nightly, serialized_dag):
    conf = json.loads((PARAMS / "repetitions_float.json").read_text())
    assert conf == {"repetitions": 2.0}
    params = airflow_validate(serialized_dag, conf)  # JSON Schema counts 2.0 as an integer
    assert params["repetitions"] == 2.0
    assert run_params_from_conf(nightly, params) == RunParams(2, (), "local")


def test_c04_unknown_variant_is_refused_by_airflow_and_by_expand_trials(nightly, serialized_dag):
    from airflow.exceptions import ParamValidationError

    conf = json.loads((PARAMS / "unknown_variant.json").read_text())
    with pytest.raises(
        ParamValidationError,
        match=r"Invalid input for param variants: 'tinylm-infer\[path=typo\]' "
        r"is not one of \['noop', ",
    ):
        airflow_validate(serialized_dag, conf)
    with pytest.raises(RunParamsError) as info:  # a run that got past the form anyway
        run_params_from_conf(nightly, conf)
    assert str(info.value) == (
        "variants: unknown variant 'tinylm-infer[path=typo]' (did you mean 'tinylm-infer'?); "
        f"plan 'nightly' has: {NIGHTLY_VARIANTS}"
    )


@pytest.mark.parametrize(
    "conf",
    [
        {"repetitions": 0},
        {"repetitions": -1},
        {"repetitions": 2.5},
        {"repetitions": "3"},
        {"variants": "noop"},
        {"variants": ["noop", "noop"]},
        {"runner": "dockr"},
    ],
)
def test_airflow_refuses_what_the_param_schemas_can_say(nightly, serialized_dag, conf):
    from airflow.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        airflow_validate(serialized_dag, conf)


@pytest.mark.parametrize(
    "conf",
    [
        {},
        {"repetitions": None, "variants": None},
        {"variants": []},
        {"repetitions": 3, "variants": ["tinylm-infer", "noop"], "runner": "docker"},
    ],
)
def test_airflow_accepts_what_run_params_accepts(nightly, serialized_dag, conf):
    params = airflow_validate(serialized_dag, conf)
    run_params_from_conf(nightly, params)


def test_trigger_form_marks_only_runner_required(serialized_dag):
    """Airflow 3's UI marks a Param required unless its schema type includes "null"
    (airflow/ui/src/components/FlexibleForm/isParamRequired.tsx); empty variants mean all."""
    from airflow.api_fastapi.core_api.datamodels.dags import DAGDetailsResponse

    params = DAGDetailsResponse.get_params(serialized_dag.params)  # what the UI's form is built from
    schemas = {name: p["schema"] for name, p in params.items()}

    def required(schema):
        kind = schema.get("type")
        return bool(kind) and (not isinstance(kind, list) or "null" not in kind)

    assert {name for name, s in schemas.items() if required(s)} == {"runner"}  # never empty: a dropdown with a default
    assert params["variants"]["value"] == [] and params["runner"]["value"] == "local"
    variants = schemas["variants"]  # shown as a multi-select of the plan's variants (FieldSelector.tsx)
    assert [t for t in variants["type"] if t != "null"][0] == "array"
    assert variants["examples"] == variants["items"]["enum"] == NIGHTLY_VARIANTS.split(", ")


def test_param_schemas_are_the_dags_params(nightly):
    from gcbench.factory.dag import dag_params

    params = dag_params(nightly)
    for name, schema in param_schemas(nightly).items():
        assert {k: v for k, v in params[name].schema.items() if k in schema} == schema
