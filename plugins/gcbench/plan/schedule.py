"""A plan's ``schedule``, checked with Airflow's own timetable.

A cron expression can parse and still never fire (``0 2 30 2 *``: 30 February), or
stop firing (a year field in the past or near future); Airflow then stores no next
run and the DAG silently never runs. :func:`check_schedule` builds the timetable the
scheduler builds for the plan's DAG (``schedule=`` a string, Airflow 3 defaults:
:class:`airflow.timetables.trigger.CronTriggerTimetable` in UTC, the time zone of the
DAG's ``start_date``) and asks it, as the scheduler does, for the first run of a DAG
without catch-up, and for a run :data:`FIRES_AGAIN_WITHIN_YEARS` years later.

Airflow is imported only when a plan has a cron schedule (about a second, once per
process); without ``AIRFLOW_HOME`` it is pointed at GC-Bench's own
(``$GCBENCH_HOME/airflow``, as ``gcbench run`` does), so that validating a plan never
creates ``~/airflow``.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime

START_DATE = "2026-01-01"
"""First logical date of scheduled plans (backfills may start from here): the DAG's
``start_date`` (:func:`gcbench.factory.dag.build_dag`), and where :func:`check_schedule`
asks the timetable for a first run."""

PRESETS = ("@once", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")
"""Schedule presets a plan may use: Airflow's cron presets (``airflow.utils.dates.cron_presets``)
and ``@once``. ``@continuous`` is left out: back-to-back runs make no benchmark series."""

FIRES_AGAIN_WITHIN_YEARS = 5
"""A schedule must still fire after this many years from now (a leap-day cron fires every 4)."""


def _import_timetables():
    if "airflow" not in sys.modules:
        from gcbench import config

        os.environ.setdefault("AIRFLOW_HOME", str(config.home() / "airflow"))
    from airflow.timetables.base import DataInterval, TimeRestriction
    from airflow.timetables.trigger import CronTriggerTimetable

    return CronTriggerTimetable, DataInterval, TimeRestriction


def check_schedule(schedule: str | None) -> str | None:
    """Return ``schedule`` if Airflow will run it, else raise ValueError saying why.

    Args:
        schedule: None (manual runs only), a preset from :data:`PRESETS`, or a cron
            expression (5 fields; Airflow's croniter also takes seconds and years).

    Raises:
        ValueError: an unknown preset, a cron expression Airflow refuses (with
            Airflow's reason), one that never fires, or one that stops firing within
            :data:`FIRES_AGAIN_WITHIN_YEARS` years.
    """
    if schedule is None or schedule == "@once":
        return schedule
    if schedule.startswith("@"):
        if schedule not in PRESETS:
            raise ValueError(f"unknown schedule preset {schedule!r}; Airflow's presets: {', '.join(PRESETS)}")
    import pendulum

    CronTriggerTimetable, DataInterval, TimeRestriction = _import_timetables()
    from airflow.exceptions import AirflowTimetableInvalid
    from croniter import CroniterError

    try:
        timetable = CronTriggerTimetable(schedule, timezone="UTC")
        timetable.validate()
    except (AirflowTimetableInvalid, CroniterError, ValueError, TypeError) as exc:
        raise ValueError(f"{schedule!r} is not a valid cron expression for Airflow: {exc}") from None
    try:
        first = timetable.next_dagrun_info(
            last_automated_data_interval=None,
            restriction=TimeRestriction(earliest=pendulum.parse(START_DATE), latest=None, catchup=False),
        )
    except (CroniterError, ValueError, OverflowError):
        first = None
    if first is None:
        raise ValueError(f"{schedule!r} never fires: Airflow's timetable finds no time that matches it")
    later = pendulum.instance(datetime.now(UTC)).add(years=FIRES_AGAIN_WITHIN_YEARS)
    try:
        again = timetable.next_dagrun_info(
            last_automated_data_interval=DataInterval(later, later),
            restriction=TimeRestriction(earliest=None, latest=None, catchup=True),
        )
    except (CroniterError, ValueError, OverflowError):
        again = None
    if again is None:
        raise ValueError(f"{schedule!r} stops firing: Airflow's timetable finds no run after {later:%Y-%m-%d}")
    return schedule
