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
    return pd.DataFrame({"t_s": t, "device": device, "source": "nvml", "power_w": power, "power_instant_w": power,
                         "energy_j": energy, "temperature_c": 50.0, "sm_clock_mhz": 1980.0,
                         "clocks_event_reasons": reasons})[list(SAMPLE_COLUMNS)]


def result(start=1.0, end=3.0, flags=(), rel=0.001, limits=None, update_period_s=0.1):
    return {
        "status": "ok", "exit_code": 0,
        "windows": {"main": {"start_s": start, "end_s": end}},
        "energy": {"main": {"gpu_energy_j": 600.0, "sample_hz": 20.0, "flags": list(flags),
                            "gpu": [{"device": "gpu0", "energy_j": 600.0, "method": "nvml-counter-edge-corrected",
                                     "cross_check_rel": rel, "update_period_s": update_period_s}]}},
        "environment": {"gpus": [{"label": dev, "min_limit_w": lim["min"], "max_limit_w": lim["max"]}
                                 for dev, lim in (limits or {}).items()]},
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
    dev.update(cross_check_method="average-power-lag", cross_check_rel=rel, cross_check_allowance_rel=allowance,
               cross_check_j=ref, energy_j=ref * (1 + rel))
    return r


def test_counter_43_percent_below_the_1_s_average_reference_is_invalid():
    v = check_trial(_reference(result(), -0.428, ref=327.0), "ok", samples(np.arange(0.5, 3.6, 0.05)), SETTINGS)
    assert not v.valid and v.reasons == [
        "gpu0: energy counter and 1-s average power differ by -42.80 % (187.0 J against 327.0 J), 42.80 % beyond "
        "the 0.00 % allowed for power steps at the window edges (invalid above 15 %)"]


def test_cross_check_tiers_apply_beyond_the_edge_allowance():
    t = np.arange(0.5, 3.6, 0.05)
    v = check_trial(_reference(result(), +0.08), "ok", samples(t), SETTINGS)          # 8 %: flagged, valid
    assert v.valid and len(v.flags) == 1 and "(flag above 5 %)" in v.flags[0]
    v = check_trial(_reference(result(), +0.08, allowance=0.04), "ok", samples(t), SETTINGS)   # 4 % beyond: ok
    assert v.valid and v.flags == []
    v = check_trial(_reference(result(), -0.20, allowance=0.04), "ok", samples(t), SETTINGS)   # 16 % beyond
    assert not v.valid and "16.00 % beyond the 4.00 % allowed" in v.reasons[0]
    loose = ValidationSettings(cross_check_flag_rel=0.2, cross_check_invalid_rel=0.5)
    v = check_trial(_reference(result(), -0.20, allowance=0.04), "ok", samples(t), loose)
    assert v.valid and v.flags == []


def test_cross_check_left_unmade_for_want_of_reads_is_flagged_not_hidden():
    r = result()
    r["energy"]["main"]["gpu"][0].update(cross_check_method="average-power-lag", cross_check_rel=None,
                                         cross_check_reason="1-s average power reads ([0, 3.1] s) do not cover ...")
    v = check_trial(r, "ok", samples(np.arange(0.5, 3.6, 0.05)), SETTINGS)
    assert v.valid and v.flags == ["gpu0: energy counter not cross-checked: 1-s average power reads ([0, 3.1] s) "
                                   "do not cover ..."]


def test_result_from_before_the_reference_keeps_the_instant_rule_at_the_invalid_threshold():
    t = np.arange(0.5, 3.6, 0.05)
    v = check_trial(result(rel=-0.428), "ok", samples(t), SETTINGS)      # no cross_check_method
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
    v = check_trial(result(limits={"gpu0": {"min": 200, "max": 700}}), "ok",
                    samples(np.arange(0.5, 3.6, 0.05), power=1200.0), SETTINGS)
    assert not v.valid and any("above the GPU's limit 700 W" in r for r in v.reasons)
    lenient = ValidationSettings(power_limit_margin_rel=1.0)
    assert check_trial(result(limits={"gpu0": {"min": 200, "max": 700}}), "ok",
                       samples(np.arange(0.5, 3.6, 0.05), power=1200.0), lenient).valid


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
