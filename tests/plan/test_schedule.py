"""A plan's schedule is checked with Airflow's own timetable: it must parse, fire, and keep firing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gcbench.errors import PlanError
from gcbench.plan import load_plan, plan_from_text
from gcbench.plan.schedule import PRESETS, check_schedule

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "plans"
PLAN = "name: p\nschedule: {schedule}\nworkloads: [{{name: w, kind: noop}}]\n"


def test_c01_a_schedule_that_never_fires_names_schedule_and_its_line():
    with pytest.raises(PlanError) as info:
        load_plan(CASES / "schedule_never_fires.yaml")
    err = info.value
    assert (err.line, err.field) == (14, "schedule")
    assert err.message == "'0 2 30 2 *' never fires: Airflow's timetable finds no time that matches it"


def test_c01_plan_validate_exits_2_with_one_line():
    plan = CASES / "schedule_never_fires.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.cli", "plan", "validate", str(plan)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (
        f"error: {plan}:14: schedule: '0 2 30 2 *' never fires: Airflow's timetable finds no time that matches it"
    )


@pytest.mark.parametrize(
    "schedule,message",
    [
        ("'0 0 31 2,4,6,9,11 *'", "never fires"),  # 31st of months that have 30 days or fewer
        ("'0 0 1 1 * 0 2020'", "never fires"),  # a year field in the past
        ("'0 0 1 1 * 0 2020-2028'", "stops firing: Airflow's timetable finds no run after"),
        ("'61 * * * *'", "is not a valid cron expression for Airflow: [61 * * * *] is not acceptable, out of range"),
        ("'every night'", "is not a valid cron expression for Airflow"),
        ("'@midnight'", "unknown schedule preset '@midnight'; Airflow's presets: @once, @hourly"),
        ("'@continuous'", "unknown schedule preset"),
    ],
)
def test_schedules_airflow_would_not_run_are_refused(schedule, message):
    with pytest.raises(PlanError) as info:
        plan_from_text("# nightly\n" + PLAN.format(schedule=schedule), "s.yaml")
    assert (info.value.line, info.value.field) == (3, "schedule") and message in info.value.message, info.value


@pytest.mark.parametrize("schedule", ["0 2 * * *", "0 0 29 2 *", "*/15 * * * 1-5", "0 0 1 1 * 0 2020-2099", *PRESETS])
def test_schedules_that_fire_are_kept(schedule):
    assert plan_from_text(PLAN.format(schedule=f"'{schedule}'")).schedule == schedule


def test_presets_are_airflows():
    from airflow.utils.dates import cron_presets

    assert set(PRESETS) == set(cron_presets) | {"@once"}


def test_manual_plans_need_no_schedule():
    assert check_schedule(None) is None
