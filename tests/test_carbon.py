import pytest

from gcbench.carbon import STUDY_INTENSITY, CarbonIntensity, co2e_from_joules, kg_co2e, total_energy_j


def test_study_intensity_is_020_with_band_010_to_030():
    assert (STUDY_INTENSITY.low_kg_per_kwh, STUDY_INTENSITY.kg_per_kwh, STUDY_INTENSITY.high_kg_per_kwh) == (
        0.10,
        0.20,
        0.30,
    )


def test_two_kwh_at_study_intensity_is_040_kg_with_band():
    est = co2e_from_joules(7.2e6)  # 7.2 MJ = 2 kWh
    assert est.energy_kwh == pytest.approx(2.0)
    assert est.kg_co2e == pytest.approx(0.40)
    assert est.kg_co2e_low == pytest.approx(0.20)
    assert est.kg_co2e_high == pytest.approx(0.60)
    assert est.to_dict()["co2e_kg"] == pytest.approx(0.40)


def test_one_trial_of_90_kj_at_custom_intensity():
    est = co2e_from_joules(90_000.0, CarbonIntensity(0.45, 0.30, 0.60))
    assert est.energy_kwh == pytest.approx(0.025)
    assert est.kg_co2e == pytest.approx(0.01125)
    assert est.intensity_kg_per_kwh == 0.45


def test_unknown_energy_has_unknown_footprint_not_zero():
    assert co2e_from_joules(None) is None
    assert total_energy_j(None, 5.0) is None
    assert total_energy_j(10.0, None) == 10.0
    assert total_energy_j(10.0, 5.0) == 15.0


def test_kg_co2e_is_kwh_times_intensity():
    assert kg_co2e(3.0, 0.2) == pytest.approx(0.6)
    with pytest.raises(ValueError):
        kg_co2e(-1.0, 0.2)


def test_band_must_contain_the_central_intensity():
    with pytest.raises(ValueError, match="does not contain"):
        CarbonIntensity(0.5, 0.1, 0.3)
    with pytest.raises(ValueError, match=">= 0"):
        CarbonIntensity(-0.1, -0.2, 0.3)


def test_scope_rule_node_alone_else_module_else_gpu_plus_cpu():
    from gcbench.carbon import energy_total

    # a node figure contains its parts: the total is the node, never node + GPU + CPU
    t = energy_total(1000.0, 200.0, None, 1500.0, node_metered=True)
    assert (t.energy_j, t.scope) == (1500.0, "node") and "never added" in t.adds_up
    unknown = energy_total(1000.0, 200.0, None, None, node_metered=True)
    assert unknown.energy_j is None and unknown.scope == "node" and unknown.reason
    assert energy_total(None, None, 900.0).energy_j == 900.0  # module: the CPU is inside it
    assert (energy_total(1000.0, 200.0).energy_j, energy_total(1000.0, 200.0).scope) == (1200.0, "gpu+cpu")
    assert (energy_total(1000.0, None).energy_j, energy_total(1000.0, None).scope) == (1000.0, "gpu")
    assert energy_total(None, 200.0).energy_j is None


def test_pue_multiplies_facility_energy_explicitly_and_leaves_the_measured_figures():
    from gcbench.carbon import facility_energy_j, trial_co2e

    assert facility_energy_j(3.6e6, 1.4) == pytest.approx(5.04e6)
    assert facility_energy_j(3.6e6, None) is None and facility_energy_j(None, 1.4) is None
    with pytest.raises(ValueError, match="PUE must be >= 1"):
        facility_energy_j(1.0, 0.9)
    out = trial_co2e(2.0, {"intensity_kg_per_kwh": 0.2, "band": [0.1, 0.3], "pue": 1.25}, None)
    assert out["co2e_kg"] == pytest.approx(0.4)  # measured energy x intensity, unscaled
    assert out["facility_energy_kwh"] == pytest.approx(2.5) and out["facility_energy_j"] == pytest.approx(9.0e6)
    assert out["facility_co2e_kg"] == pytest.approx(0.5) and out["pue"] == 1.25
    assert "facility_energy_j" not in trial_co2e(2.0, {"intensity_kg_per_kwh": 0.2, "band": [0.1, 0.3]}, None)


def test_plan_pue_below_one_names_the_field():
    from gcbench.plan.schema import CarbonSettings

    with pytest.raises(ValueError, match="pue"):
        CarbonSettings(pue=0.8)
    assert CarbonSettings().pue is None
