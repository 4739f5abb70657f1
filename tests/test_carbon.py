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
