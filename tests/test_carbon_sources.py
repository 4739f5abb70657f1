"""Carbon intensity by place and by hour (issue 25): a place from the offline table with
its source and year, an hourly series crossing an hour boundary inside a window, a series
that does not cover a trial (CO2e NULL with the reason, energy kept), and the plan checks."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gcbench import carbon
from gcbench.errors import PlanError
from gcbench.plan import plan_from_text

SERIES = Path(__file__).resolve().parent / "fixtures" / "carbon" / "grid-2026-11-04.csv"


def _result(start: str, start_s: float, end_s: float) -> dict:
    """A result.json's timing: the meter's origin (epoch s) and the main window on its clock."""
    return {
        "origin_wall": datetime.fromisoformat(start).timestamp(),
        "windows": {"main": {"start_s": start_s, "end_s": end_s}},
    }


def test_a_country_from_the_offline_table_has_its_value_year_and_source():
    fra = carbon.place_intensity("fra")
    # CodeCarbon 3.3.2 global_energy_mix.json: France 56.039 gCO2e/kWh, 2023
    assert (fra.place, fra.name, fra.kg_per_kwh, fra.year) == ("FRA", "France", 0.056039, 2023)
    assert fra.table == "CodeCarbon 3.3.2 global_energy_mix.json"
    out = carbon.trial_co2e(2.0, {"place": "FRA"}, None)
    assert out["co2e_kg"] == pytest.approx(2.0 * 0.056039)
    assert out["co2e_kg_low"] == pytest.approx(2.0 * 0.056039 * 0.5)
    assert out["co2e_kg_high"] == pytest.approx(2.0 * 0.056039 * 1.5)
    assert out["carbon_intensity_source"] == (
        "place FRA (France), 2023: CodeCarbon 3.3.2 global_energy_mix.json "
        "(Our World in Data energy data, as compiled by CodeCarbon)"
    )
    assert out["carbon_intensity_kind"] == "average" and "co2e_reason" not in out


def test_a_cloud_region_names_its_source_and_says_the_year_is_not_given():
    region = carbon.place_intensity("gcp:europe-west1")
    assert region.kg_per_kwh == 0.122 and region.year is None
    assert region.describe().startswith("gcp:europe-west1 (St. Ghislain, Belgium), year not given: CodeCarbon 3.3.2")
    assert region.source == "https://cloud.google.com/sustainability/region-carbon#data"


def test_an_unknown_place_is_a_plan_error_with_the_closest_ones():
    with pytest.raises(ValueError, match=r"unknown place 'FRX' \(did you mean FRO, FRA\?\)"):
        carbon.place_intensity("FRX")
    with pytest.raises(PlanError, match=r"carbon: .*unknown place 'Frnce'"):
        plan_from_text("name: p\ncarbon: {place: Frnce}\nworkloads: [{name: w, kind: noop}]\n")
    with pytest.raises(PlanError, match=r"intensity_kg_per_kwh apply to a fixed intensity"):
        plan_from_text("name: p\ncarbon: {place: DEU, intensity_kg_per_kwh: 0.3}\nworkloads: [{name: w, kind: noop}]\n")
    with pytest.raises(PlanError, match=r"the place table gives average intensities"):
        plan_from_text("name: p\ncarbon: {place: DEU, intensity_kind: marginal}\nworkloads: [{name: w, kind: noop}]\n")


def test_an_hourly_series_window_crossing_an_hour_is_time_weighted():
    series = carbon.load_series(str(SERIES))
    # 01:59:00 .. 02:01:00: one minute at 0.100, one at 0.300
    start, end = datetime(2026, 11, 4, 1, 59, tzinfo=UTC), datetime(2026, 11, 4, 2, 1, tzinfo=UTC)
    value, why = series.mean_kg_per_kwh(start, end)
    assert why is None and value == pytest.approx(0.200)
    # 90 s before the boundary, 30 s after: (90 x 0.1 + 30 x 0.3) / 120
    out = carbon.trial_co2e(1.5, {"series": str(SERIES)}, _result("2026-11-04T01:58:00+00:00", 30.0, 150.0))
    assert out["carbon_intensity_kg_per_kwh"] == pytest.approx(0.15)
    assert out["co2e_kg"] == pytest.approx(1.5 * 0.15)
    assert (out["co2e_kg_low"], out["co2e_kg_high"]) == (pytest.approx(1.5 * 0.075), pytest.approx(1.5 * 0.225))
    assert out["carbon_intensity_source"] == "hourly series grid-2026-11-04.csv"


def test_a_series_that_does_not_cover_the_window_gives_no_co2e_and_says_why():
    out = carbon.trial_co2e(1.5, {"series": str(SERIES)}, _result("2026-11-04T03:59:00+00:00", 0.0, 120.0))
    assert out["co2e_kg"] is None and out["co2e_kg_low"] is None and out["carbon_intensity_kg_per_kwh"] is None
    assert out["co2e_reason"] == (
        "the series grid-2026-11-04.csv has no intensity for 2026-11-04T04:00:00+00:00 "
        "(it covers 2026-11-04T00:00:00+00:00 .. 2026-11-04T03:00:00+00:00)"
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("hour,value\n", ":1: the header must be 'hour_utc,kg_per_kwh'"),
        ("hour_utc,kg_per_kwh\n2026-11-04T01:00:00,0.1\n", ":2: '2026-11-04T01:00:00,0.1': the time has no time zone"),
        ("hour_utc,kg_per_kwh\n2026-11-04T01:30:00Z,0.1\n", ":2: '2026-11-04T01:30:00Z,0.1': not the start of an hour"),
        ("hour_utc,kg_per_kwh\n2026-11-04T01:00:00Z,-0.1\n", ":2: kg_per_kwh must be a finite number >= 0"),
        (
            "hour_utc,kg_per_kwh\n2026-11-04T01:00Z,0.1\n2026-11-04T01:00Z,0.2\n",
            ":3: hour 2026-11-04T01:00:00+00:00 given twice",
        ),
    ],
)
def test_a_bad_series_is_refused_with_file_and_line(tmp_path, text, error):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError) as exc:
        carbon.load_series(str(path))
    assert str(exc.value).startswith(f"{path}{error}")
    with pytest.raises(PlanError, match="bad.csv"):
        plan_from_text(f"name: p\ncarbon: {{series: {path}}}\nworkloads: [{{name: w, kind: noop}}]\n")


def test_the_fixed_intensity_stays_the_default_with_its_band():
    out = carbon.trial_co2e(2.0, {"intensity_kg_per_kwh": 0.2, "band": [0.1, 0.3]}, None)
    assert (out["co2e_kg"], out["co2e_kg_low"], out["co2e_kg_high"]) == pytest.approx((0.4, 0.2, 0.6))
    assert out["carbon_intensity_source"] == "fixed 0.2 kgCO2e/kWh (plan)"


def test_the_window_is_placed_in_utc_from_the_meter_origin_or_the_start_time():
    t0, t1 = carbon.window_utc(_result("2026-11-04T01:58:00+00:00", 30.0, 150.0))
    assert (t0.isoformat(), t1.isoformat()) == ("2026-11-04T01:58:30+00:00", "2026-11-04T02:00:30+00:00")
    older = {"started_at": "2026-11-04T01:58:00Z", "windows": {"main": {"start_s": 1.0, "end_s": 2.0}}}
    assert carbon.window_utc(older)[0].isoformat() == "2026-11-04T01:58:01+00:00"
    assert carbon.window_utc({"windows": {}}) is None


@pytest.mark.integration
def test_collect_stores_each_trials_intensity_and_keeps_the_energy_when_the_series_misses_it(pg_url, tmp_path):
    import importlib.util

    from gcbench.plan import expand
    from gcbench.store import db, ingest, queries, runs

    helper = importlib.util.spec_from_file_location(
        "ingest_helpers", Path(__file__).parent / "store" / "test_ingest.py"
    )
    module = importlib.util.module_from_spec(helper)
    helper.loader.exec_module(module)  # the trial folders the ingest tests write
    PLAN, write_trial = module.PLAN, module.write_trial

    specs = expand(PLAN)[:2]
    cfg = {"series": str(SERIES), "band_factor": [0.5, 1.5], "intensity_kind": "average"}
    with db.connection(pg_url) as conn:
        run_pk = runs.register_run(conn, PLAN, PLAN.dag_id, "manual__carbon", "2026-11-04T00:00:00+00:00")
        for spec, start in zip(specs, ("2026-11-04T01:59:00+00:00", "2026-11-05T09:00:00+00:00"), strict=True):
            result = write_trial(tmp_path / spec.trial_id, spec)
            result["origin_wall"] = datetime.fromisoformat(start).timestamp()
            (tmp_path / spec.trial_id / "result.json").write_text(json.dumps(result))
            assert ingest.collect_trial(conn, run_pk, spec, tmp_path / spec.trial_id, carbon=cfg).status == "ok"
        df = queries.trials_frame(conn, run_pk).set_index("trial_id")
        covered, missed = df.loc[specs[0].trial_id], df.loc[specs[1].trial_id]
        # window 01:59:00.5 .. 01:59:02: inside the 01:00 hour (0.100)
        assert covered.carbon_intensity_kg_per_kwh == pytest.approx(0.100)
        assert covered.co2e_kg == pytest.approx(450.0 / 3.6e6 * 0.100)
        assert missed.gpu_energy_j == 450.0 and missed.co2e_kg != missed.co2e_kg  # NaN: unknown, energy kept
        assert missed.co2e_reason.startswith("the series grid-2026-11-04.csv has no intensity for 2026-11-05T09:00")
        with conn.cursor() as cur:
            cur.execute(
                "SELECT DISTINCT unit FROM metrics WHERE name = 'carbon_intensity_kg_per_kwh' AND value IS NOT NULL"
            )
            assert cur.fetchall() == [("kgCO2e/kWh",)]
