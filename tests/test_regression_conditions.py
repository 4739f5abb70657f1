"""The nightly regression check compares like with like (case C17): only earlier nights
whose trials ran under tonight's conditions (the trial spec without repetition and seed,
the GPU model, the driver, simulated or measured) form the baseline; otherwise the group
is "no comparable baseline" with what changed, never a regression.

The nights are real rows in a real PostgreSQL, their specs expanded from the case's two
plan files (the nightly plan before and after its window was edited from 1 s to 1.5 s)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from gcbench.plan import expand, load_plan
from gcbench.regression import check_run, describe_change, trial_conditions

CASE = Path(__file__).resolve().parent / "fixtures" / "cases" / "round3" / "C17-regression-plan-edit"
NIGHT0 = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
H200 = [{"label": "gpu0", "name": "NVIDIA H200", "index": 0}]
A100 = [{"label": "gpu0", "name": "NVIDIA A100-SXM4-80GB", "index": 0}]

pytestmark = pytest.mark.integration


class Nights:
    """Nights of the case's plan stored as collect + validate would store them."""

    def __init__(self, conn):
        self.conn = conn
        self.plan = load_plan(CASE / "nightly-v1.yaml")
        with conn.cursor() as cur:
            cur.execute("INSERT INTO plans (plan_name, plan_sha256, plan) VALUES (%s, 'x', '{}')", (self.plan.name,))
        conn.commit()
        self.rng = np.random.default_rng(17)

    def night(
        self,
        day: int,
        plan_file: str = "nightly-v1.yaml",
        duration_s: float = 1.0076,
        gpus: list[dict] | None = None,
        driver: str | None = "580.65.06",
        simulated: bool = False,
        backend: str | None = None,
    ) -> str:
        plan = load_plan(CASE / plan_file)
        logical = NIGHT0 + timedelta(days=day)
        run_id = f"scheduled__{logical.isoformat()}"
        result = {
            "environment": {"gpus": H200 if gpus is None else gpus, "driver": driver},
            "measurement": {"backend": backend or ("simulated" if simulated else "nvml")},
        }
        with self.conn.cursor() as cur:
            cur.execute(
                "INSERT INTO dag_runs (plan_name, dag_id, run_id, logical_date) VALUES (%s, %s, %s, %s) RETURNING id",
                (plan.name, plan.dag_id, run_id, logical),
            )
            run_pk = cur.fetchone()[0]
            for spec in expand(plan):
                cur.execute(
                    "INSERT INTO trials (dag_run_id, trial_id, plan_name, variant, workload, kind, repetition, spec, "
                    "status, valid, simulated, result) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'ok', true, %s, %s) "
                    "RETURNING id",
                    (
                        run_pk,
                        spec.trial_id,
                        plan.name,
                        spec.variant,
                        spec.workload,
                        spec.kind,
                        spec.repetition,
                        spec.model_dump_json(),
                        simulated,
                        json.dumps(result),
                    ),
                )
                value = duration_s * (1 + 0.001 * self.rng.standard_normal())
                cur.execute(
                    "INSERT INTO metrics (trial_pk, name, value) VALUES (%s, 'duration_s', %s)",
                    (cur.fetchone()[0], value),
                )
        self.conn.commit()
        return run_id


@pytest.fixture
def nights(pg_url):
    from gcbench.store import db

    with db.connection(pg_url) as conn:
        yield Nights(conn)


def _idle(nights: Nights, run_id: str):
    result = check_run(nights.conn, nights.plan, run_id)
    (group,) = result.groups
    assert group.variant == "idle"
    return result, group


def test_the_case_a_window_edit_is_no_comparable_baseline_not_a_regression(nights):
    for day in range(3):
        nights.night(day)
    tonight = nights.night(3, "nightly-v2.yaml", duration_s=1.5059)  # window 1 s -> 1.5 s
    result, idle = _idle(nights, tonight)
    # 7655493: "idle: regression: duration_s 1.50591 tonight vs 1.00756 over 3 nights, +49.46 %", run failed
    assert result.regressions == [] and idle.verdict == "not checked"
    assert idle.note == (
        "no comparable baseline: 0 earlier night(s) under tonight's conditions, 3 needed; "
        "3 earlier night(s) ran under other conditions (window.seconds 1.0 -> 1.5)"
    )
    assert idle.n_baseline == 0 and idle.pct_change is None


def test_after_the_edit_only_nights_of_the_new_plan_are_the_baseline(nights):
    for day in range(3):
        nights.night(day)
    for day in range(3, 6):
        nights.night(day, "nightly-v2.yaml", duration_s=1.5059)
    tonight = nights.night(6, "nightly-v2.yaml", duration_s=1.5059 * 1.10)  # a real +10 % under v2
    result, idle = _idle(nights, tonight)
    assert idle.verdict == "regression" and idle.baseline_nights == 3 and idle.n_baseline == 9
    assert idle.median_baseline == pytest.approx(1.5059, rel=0.005)
    assert idle.pct_change == pytest.approx(10.0, abs=0.6)


def test_a_real_regression_under_unchanged_conditions_is_still_found(nights):
    for day in range(3):
        nights.night(day)
    result, idle = _idle(nights, nights.night(3, duration_s=1.0076 * 1.10))
    assert idle.verdict == "regression" and idle.baseline_nights == 3


@pytest.mark.parametrize(
    ("tonight_kwargs", "change"),
    [
        ({"gpus": A100}, "GPU model NVIDIA H200 -> NVIDIA A100-SXM4-80GB"),
        ({"driver": "590.10"}, "driver 580.65.06 -> 590.10"),
        # energy.backend auto fell back from NVML's counter to nvidia-smi's power readings
        ({"backend": "nvidia-smi"}, "energy backend nvml -> nvidia-smi"),
        (
            {"simulated": True, "gpus": [{"label": "gpu0", "index": 0}], "driver": None},
            "GPU model NVIDIA H200 -> unknown; driver 580.65.06 -> unknown; measured before, simulated tonight",
        ),
    ],
)
def test_another_gpu_driver_or_simulated_energy_is_no_comparable_baseline(nights, tonight_kwargs, change):
    for day in range(3):
        nights.night(day)
    result, idle = _idle(nights, nights.night(3, duration_s=1.0076 * 1.5, **tonight_kwargs))
    assert result.regressions == [] and idle.verdict == "not checked"
    assert idle.note.endswith(f"3 earlier night(s) ran under other conditions ({change})")


def test_conditions_ignore_repetition_seed_placement_and_normalise_old_specs():
    plan = load_plan(CASE / "nightly-v1.yaml")
    a, b, c = expand(plan)
    assert a.seed != b.seed and a.trial_id != b.trial_id
    ca = trial_conditions(json.loads(a.model_dump_json()), H200, "580", False)
    cb = trial_conditions(json.loads(b.model_dump_json()) | {"devices": [3], "order": 9}, H200, "580", False)
    assert ca == cb
    old = json.loads(a.model_dump_json())
    old["warmup"].pop("until_stable", None)  # a spec stored before the field existed
    assert trial_conditions(old, H200, "580", False) == ca
    v2 = expand(load_plan(CASE / "nightly-v2.yaml"))[0]
    assert describe_change(ca, trial_conditions(json.loads(v2.model_dump_json()), H200, "580", False)) == (
        "window.seconds 1.0 -> 1.5"
    )


def test_a_new_preprocessor_version_is_another_condition_and_says_so():
    """Issue 22: a changed tokenizer source is a new version; its nights are never the
    baseline of the old version's (nor the other way round), and the note names it."""
    plan = load_plan(Path(__file__).resolve().parents[1] / "examples" / "tokenizer-c" / "plan.yaml")
    spec = next(s for s in expand(plan) if s.factors["path"] == "external-c")
    v1 = json.loads(spec.model_dump_json())
    v2 = json.loads(spec.model_dump_json())
    v2["preprocessor"]["source_sha256"] = "0" * 64
    c1, c2 = (trial_conditions(s, H200, "580", False) for s in (v1, v2))
    assert c1 != c2
    before = v1["preprocessor"]["source_sha256"]
    assert describe_change(c1, c2) == f'preprocessor.source_sha256 "{before}" -> "{"0" * 64}"'


def test_simulated_energy_compares_whatever_backend_was_recorded():
    """Simulated energy is a condition of its own (``simulated``); its backend adds nothing,
    so a night stored without a result (no ``measurement.backend``) stays comparable with
    tonight's simulated trials, while measured energy keeps its backend."""
    from gcbench.regression import conditions_key, trial_conditions

    spec = {"workload": "noop", "kind": "noop"}
    without = trial_conditions(spec, None, None, True, None)
    assert conditions_key(without) == conditions_key(trial_conditions(spec, None, None, True, "simulated"))
    assert "backend" not in without
    measured = trial_conditions(spec, [{"name": "NVIDIA H200"}], "570.1", False, "nvml")
    assert measured["backend"] == "nvml"
    assert conditions_key(measured) != conditions_key(
        trial_conditions(spec, [{"name": "NVIDIA H200"}], "570.1", False, "nvidia-smi")
    )
