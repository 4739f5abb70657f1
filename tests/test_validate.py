"""Validation rules on crafted trials."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gcbench.energy.base import SAMPLE_COLUMNS
from gcbench.plan.schema import ValidationSettings
from gcbench.validate import check_trial, outliers

SETTINGS = ValidationSettings()


def samples(t, energy=None, power=300.0, reasons=0, device="gpu0"):
    t = np.asarray(t, dtype=float)
    energy = 1000 + power * t if energy is None else np.asarray(energy, dtype=float)
    return pd.DataFrame(
        {
            "t_s": t,
            "device": device,
            "source": "nvml",
            "power_w": power,
            "power_instant_w": power,
            "energy_j": energy,
            "temperature_c": 50.0,
            "sm_clock_mhz": 1980.0,
            "clocks_event_reasons": reasons,
        }
    )[list(SAMPLE_COLUMNS)]


def steady(start=1.0, end=3.0, step_s=0.05):
    """Progress points of a steady window: a step every ``step_s``."""
    t = np.arange(start + step_s, end + 1e-9, step_s)
    return {"main": {"points": [[float(x), i + 1] for i, x in enumerate(t)]}}


def result(start=1.0, end=3.0, flags=(), rel=0.001, limits=None, update_period_s=0.1, progress=None):
    return {
        "status": "ok",
        "exit_code": 0,
        "windows": {"main": {"start_s": start, "end_s": end}},
        "progress": steady(start, end) if progress is None else progress,
        "energy": {
            "main": {
                "gpu_energy_j": 600.0,
                "sample_hz": 20.0,
                "flags": list(flags),
                "gpu": [
                    {
                        "device": "gpu0",
                        "energy_j": 600.0,
                        "method": "nvml-counter-edge-corrected",
                        "cross_check_rel": rel,
                        "update_period_s": update_period_s,
                    }
                ],
            }
        },
        "environment": {
            "gpus": [
                {"label": dev, "min_limit_w": lim["min"], "max_limit_w": lim["max"]}
                for dev, lim in (limits or {}).items()
            ]
        },
    }


def test_good_trial_is_valid():
    v = check_trial(result(), "ok", samples(np.arange(0.5, 3.6, 0.05)), SETTINGS)
    assert v.valid and v.reasons == [] and v.flags == []


def test_failed_trial_is_invalid_with_exit_status():
    r = result()
    r["exit_code"] = 1
    v = check_trial(r, "failed", samples([]), SETTINGS, error="RuntimeError: boom")
    assert not v.valid and v.reasons == ["trial failed (exit status 1): RuntimeError: boom"]


def test_window_shorter_than_ten_sensor_periods_is_invalid():
    v = check_trial(result(1.0, 1.05), "ok", samples(np.arange(0.5, 1.6, 0.01)), SETTINGS)
    assert not v.valid
    assert v.reasons[0].startswith("window too short for the sensor: 0.050 s < 10 update periods of 0.100 s (1.000 s)")


def eval_window(r, start=3.0, end=3.5, rel=0.001, energy_j=40.0):
    """``r`` with a named window ``eval`` (a ResNet run's test-set pass) after its main window."""
    r["windows"]["eval"] = {"start_s": start, "end_s": end}
    r["energy"]["eval"] = {
        "gpu_energy_j": energy_j,
        "gpu": [{"device": "gpu0", "energy_j": energy_j, "cross_check_rel": rel, "update_period_s": 0.1}],
    }
    return r


def test_a_named_window_too_short_for_the_sensor_withholds_its_figures_and_the_trial_stands():
    """CI's ResNet eval of 32 images took 0.500 s (the sensor needs 1 s): it invalidated a
    trial whose 2-s training window was sound. On an H200 an evaluation of 1,000 images
    is shorter still, so every fixed-budget run there would have been invalid."""
    v = check_trial(eval_window(result()), "ok", samples(np.arange(0.5, 3.6, 0.05)), SETTINGS)
    assert v.valid and v.reasons == []
    expected = "window eval too short for the sensor: 0.500 s < 10 update periods of 0.100 s (1.000 s)"
    assert v.withheld == {"eval": expected}
    assert v.flags == [f"{expected}: its energy figures are left out, the main window stands"]


def test_a_named_window_whose_counter_disagrees_or_has_no_energy_is_withheld_not_invalidating():
    r = eval_window(result(), start=3.0, end=4.5, rel=0.30)
    v = check_trial(r, "ok", samples(np.arange(0.5, 4.6, 0.05)), SETTINGS)
    assert v.valid and list(v.withheld) == ["eval"] and "disagree" in v.withheld["eval"]
    r = eval_window(result(), start=3.0, end=4.5, energy_j=None)
    r["energy"]["eval"]["gpu"] = []
    v = check_trial(r, "ok", samples(np.arange(0.5, 4.6, 0.05)), SETTINGS)
    assert v.valid and v.withheld == {"eval": "window eval: GPU energy unknown"}


def test_a_long_enough_named_window_is_kept_and_a_short_main_window_still_invalidates():
    v = check_trial(eval_window(result(), 3.0, 4.2), "ok", samples(np.arange(0.5, 4.6, 0.05)), SETTINGS)
    assert v.valid and v.withheld == {} and v.flags == []
    v = check_trial(eval_window(result(1.0, 1.5), 1.5, 3.0), "ok", samples(np.arange(0.5, 3.6, 0.05)), SETTINGS)
    assert not v.valid and v.reasons[0].startswith("window too short for the sensor: 0.500 s")
    assert v.withheld == {}


def test_gap_in_samples_is_invalid():
    t = np.concatenate([np.arange(0.5, 1.8, 0.05), np.arange(2.6, 3.6, 0.05)])  # 0.8 s hole
    v = check_trial(result(), "ok", samples(t), SETTINGS)
    assert not v.valid and any("gap of 0.8" in r for r in v.reasons)


def test_samples_not_covering_the_window_is_invalid():
    v = check_trial(result(), "ok", samples(np.arange(0.5, 2.0, 0.05)), SETTINGS)
    assert not v.valid and any("do not cover the window" in r for r in v.reasons)


def test_decreasing_counter_is_invalid():
    t = np.arange(0.5, 3.6, 0.05)
    e = 1000 + 300 * t
    e[30] = e[29] - 5
    v = check_trial(result(), "ok", samples(t, energy=e), SETTINGS)
    assert not v.valid and any("energy counter decreased" in r for r in v.reasons)


def _reference(r, rel, allowance=0.0, ref=1000.0):
    dev = r["energy"]["main"]["gpu"][0]
    dev.update(
        cross_check_method="average-power-lag",
        cross_check_rel=rel,
        cross_check_allowance_rel=allowance,
        cross_check_j=ref,
        energy_j=ref * (1 + rel),
    )
    return r


def test_counter_43_percent_below_the_1_s_average_reference_is_invalid():
    v = check_trial(_reference(result(), -0.428, ref=327.0), "ok", samples(np.arange(0.5, 3.6, 0.05)), SETTINGS)
    assert not v.valid and v.reasons == [
        "gpu0: energy counter and 1-s average power differ by -42.80 % (187.0 J against 327.0 J), 42.80 % beyond "
        "the 0.00 % allowed for power steps at the window edges (invalid above 15 %)"
    ]


def test_cross_check_tiers_apply_beyond_the_edge_allowance():
    t = np.arange(0.5, 3.6, 0.05)
    v = check_trial(_reference(result(), +0.08), "ok", samples(t), SETTINGS)  # 8 %: flagged, valid
    assert v.valid and len(v.flags) == 1 and "(flag above 5 %)" in v.flags[0]
    v = check_trial(_reference(result(), +0.08, allowance=0.04), "ok", samples(t), SETTINGS)  # 4 % beyond: ok
    assert v.valid and v.flags == []
    v = check_trial(_reference(result(), -0.20, allowance=0.04), "ok", samples(t), SETTINGS)  # 16 % beyond
    assert not v.valid and "16.00 % beyond the 4.00 % allowed" in v.reasons[0]
    loose = ValidationSettings(cross_check_flag_rel=0.2, cross_check_invalid_rel=0.5)
    v = check_trial(_reference(result(), -0.20, allowance=0.04), "ok", samples(t), loose)
    assert v.valid and v.flags == []


def test_cross_check_left_unmade_for_want_of_reads_is_flagged_not_hidden():
    r = result()
    r["energy"]["main"]["gpu"][0].update(
        cross_check_method="average-power-lag",
        cross_check_rel=None,
        cross_check_reason="1-s average power reads ([0, 3.1] s) do not cover ...",
    )
    v = check_trial(r, "ok", samples(np.arange(0.5, 3.6, 0.05)), SETTINGS)
    assert v.valid and v.flags == [
        "gpu0: energy counter not cross-checked: 1-s average power reads ([0, 3.1] s) do not cover ..."
    ]


def test_result_from_before_the_reference_keeps_the_instant_rule_at_the_invalid_threshold():
    t = np.arange(0.5, 3.6, 0.05)
    v = check_trial(result(rel=-0.428), "ok", samples(t), SETTINGS)  # no cross_check_method
    assert not v.valid and v.reasons == ["gpu0: counter and integrated power disagree by -42.80 % (limit 15 %)"]
    assert check_trial(result(rel=-0.10), "ok", samples(t), SETTINGS).valid


def test_former_cross_check_max_rel_is_read_as_the_invalid_threshold():
    v = ValidationSettings(cross_check_max_rel=0.03)
    assert (v.cross_check_flag_rel, v.cross_check_invalid_rel) == (0.03, 0.03)
    assert ValidationSettings(cross_check_max_rel=0.5).cross_check_flag_rel == 0.05
    assert "cross_check_max_rel" not in ValidationSettings().model_dump()
    with pytest.raises(ValueError, match="former name"):
        ValidationSettings(cross_check_max_rel=0.1, cross_check_invalid_rel=0.2)
    with pytest.raises(ValueError, match="must not exceed"):
        ValidationSettings(cross_check_flag_rel=0.2, cross_check_invalid_rel=0.1)


def test_power_above_the_gpu_limit_is_invalid():
    v = check_trial(
        result(limits={"gpu0": {"min": 200, "max": 700}}),
        "ok",
        samples(np.arange(0.5, 3.6, 0.05), power=1200.0),
        SETTINGS,
    )
    assert not v.valid and any("above the GPU's limit 700 W" in r for r in v.reasons)
    lenient = ValidationSettings(power_limit_margin_rel=1.0)
    assert check_trial(
        result(limits={"gpu0": {"min": 200, "max": 700}}),
        "ok",
        samples(np.arange(0.5, 3.6, 0.05), power=1200.0),
        lenient,
    ).valid


def test_throttling_is_flagged_not_invalid():
    v = check_trial(result(), "ok", samples(np.arange(0.5, 3.6, 0.05), reasons=0x4 | 0x40), SETTINGS)
    assert v.valid and v.flags == ["gpu0: throttled during the window (power cap (SW), thermal (HW))"]


def test_foreign_process_flag_invalidates():
    v = check_trial(result(flags=["foreign_process"]), "ok", samples(np.arange(0.5, 3.6, 0.05)), SETTINGS)
    assert not v.valid and "a foreign process used the GPU during the window" in v.reasons


def test_mad_outlier_rule():
    assert outliers([10.0, 10.1, 9.9, 10.05, 14.0], k=3.5) == [False, False, False, False, True]
    assert outliers([1.0, 1.0, 1.0, 5.0], k=3.5) == [False] * 4  # MAD 0: no outliers
    assert outliers([1.0, float("nan"), 1.1], k=3.5) == [False] * 3


@pytest.mark.parametrize("flag", ["counter_decreased"])
def test_meter_flags_become_reasons(flag):
    v = check_trial(result(flags=[flag]), "ok", samples(np.arange(0.5, 3.6, 0.05)), SETTINGS)
    assert not v.valid and v.reasons == ["energy counter decreased inside the window"]


# ----------------------------------------------------------------------------- groups, stored


def _stored_trial(outdir, spec, step_s):
    """A simulated-device trial folder whose main window [1, 3] s finished a step every ``step_s``."""
    import json

    from gcbench.energy.base import SAMPLE_COLUMNS as COLS

    outdir.mkdir(parents=True, exist_ok=True)
    t = np.arange(0.0, 4.5, 0.05)
    rows = [",".join(COLS)] + [f"{x:.3f},gpu0,simulated,300.0,300.0,{1000 + 300 * x:.3f},40,1980,0" for x in t]
    (outdir / "samples.csv").write_text("\n".join(rows) + "\n")
    r = result(progress=steady(1.0, 3.0, step_s))
    steps = len(r["progress"]["main"]["points"])
    r.update(
        schema=1,
        trial_id=spec.trial_id,
        plan=spec.plan,
        error=None,
        measurement={"backend": "simulated"},
        metrics={
            "duration_s": 2.0,
            "gpu_energy_j": 600.0,
            "steps": steps,
            "window_steps": steps,
            "window_steps_per_s": steps / 2.0,
        },
    )
    r["energy"]["main"]["gpu"][0].update(method="simulated", source="simulated")
    (outdir / "result.json").write_text(json.dumps(r))


@pytest.mark.integration
def test_group_of_two_with_a_stalled_twin_is_inconclusive_as_stored_and_reported(pg_url, tmp_path):
    from gcbench.plan import expand, plan_from_text
    from gcbench.report.analysis import ReportSettings, analyze
    from gcbench.report.build import report_data
    from gcbench.store import db, ingest, queries, runs
    from gcbench.validate import validate_run

    plan = plan_from_text(
        "name: twins\nrepetitions: 2\nworkloads: [{name: n, kind: noop}, "
        "{name: m, kind: noop, settings: {tick_s: 0.02}}]\n"
    )
    specs = expand(plan)
    with db.connection(pg_url) as conn:
        run = runs.register_run(conn, plan, plan.dag_id, "manual__1", "2026-11-01T00:00:00+00:00")
        for spec in specs:
            # workload n: one repetition did 4 steps where its twin did 40 (10x); workload m: twins agree
            slow = spec.workload == "n" and spec.repetition == 1
            _stored_trial(tmp_path / spec.trial_id, spec, 0.5 if slow else 0.05)
            assert ingest.collect_trial(conn, run, spec, tmp_path / spec.trial_id).action == "stored"
        summary = validate_run(conn, run, plan.validation)
        assert summary["valid"] == 4 and summary["inconclusive"] == ["n"]
        df = queries.trials_frame(conn, run)
        for row in df.itertuples():
            twins = [f for f in row.flags if f.startswith("twins disagree")]
            assert len(twins) == (1 if row.workload == "n" else 0), row.flags
        flags_n = df[df["workload"] == "n"]["flags"].iloc[0]
        assert any(
            "ran at 20 and 2 steps/s (10.0x apart, limit 2x); the group is inconclusive" in f
            or "ran at 2 and 20 steps/s (10.0x apart, limit 2x); the group is inconclusive" in f
            for f in flags_n
        )
        # the progress points are stored row by row
        prog = queries.progress_frame(conn, run, specs[0].trial_id)
        assert set(prog["window_key"]) == {"main"} and prog["steps"].is_monotonic_increasing
        assert len(prog) in (4, 40)
        analysis = analyze(report_data(conn, plan, run, "manual__1", None), ReportSettings(n_resamples=200))
    groups = {g.variant: g for g in analysis.groups}
    assert groups["n"].inconclusive and not groups["m"].inconclusive
    assert groups["n"].n_valid == 2 and "10.0x apart" in groups["n"].inconclusive_reason
    assert "2 in groups whose twins disagree" in analysis.measurement.stability


def test_node_figure_below_its_gpu_and_cpu_parts_is_flagged_and_unknown_node_energy_is_said():
    """A node meter's figure contains its GPUs and CPUs: below them, the BMC reads part of the
    node only; unknown node energy keeps the trial valid (GPU and CPU stand) and says why."""
    r = result(flags=["node_below_parts"])
    r["energy"]["main"].update(node={"device": "node", "energy_j": 450.0}, node_energy_j=450.0)
    v = check_trial(r, "ok", samples(np.arange(0.5, 3.6, 0.05)), SETTINGS)
    assert v.valid and v.flags == [
        "node energy 450.0 J is below the GPU + CPU energy it contains: the BMC's sensor may cover part "
        "of the node only (one power supply of two?)"
    ]
    r = result()
    r["energy"]["main"].update(node={"device": "node", "energy_j": None, "reason": "too few BMC readings: x"})
    v = check_trial(r, "ok", samples(np.arange(0.5, 3.6, 0.05)), SETTINGS)
    assert v.valid and v.flags == ["node energy unknown: too few BMC readings: x"]


@pytest.mark.parametrize(
    "text, rule",
    [
        (
            "CPU contention: other processes used 48.1 % of the trial's 2 CPU(s) (0-1) during the window "
            "(0.96 of 2.00 core-s); flagged above 5 %",
            "CPU contention",
        ),
        ("CPU contention unknown in window prefill: not measured", "CPU contention unknown in window prefill"),
        ("unstable window: its slowest 10% of the window ran 9.0x slower", "unstable window"),
        ("outlier: j_per_token more than 3 scaled MADs from the group median", "outlier"),
        ("twins disagree: the two valid repetitions ran at 70 and 1 steps/s", "twins disagree"),
        ("gpu1: throttled during the window (thermal (HW))", "throttled during the window"),
        (
            "gpu0: gap of 0.812 s between samples in the window (limit 5 periods = 0.500 s)",
            "gap of … s between samples in the window",
        ),
        (
            "window prefill: gpu0: counter and integrated power disagree by +12.00 % (limit 10 %)",
            "counter and integrated power disagree by … %",
        ),
        ("trial failed (exit status 1): RuntimeError: boom", "trial failed"),
        ("energy counter decreased inside the window", "energy counter decreased inside the window"),
        ("window_too_short", "window_too_short"),
    ],
)
def test_finding_rule_is_the_rule_words_without_scope_or_values(text, rule):
    from gcbench.validate import finding_rule

    assert finding_rule(text) == rule
