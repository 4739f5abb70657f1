"""Unit conversions in one place (gcbench.units): mJ, uJ, J, W, kWh."""

from __future__ import annotations

import pytest

from gcbench import units


def test_nvml_counter_mj_and_power_mw_to_si():
    assert units.mj_to_j(2397136) == pytest.approx(2397.136)  # h200_nvml_probe.json energy_mJ
    assert units.mw_to_w(79988) == pytest.approx(79.988)  # power_mW
    assert units.w_to_mw(700.0) == 700000.0  # limit_mW of the H200
    assert units.j_to_mj(units.mj_to_j(12014)) == pytest.approx(12014)


def test_rapl_microjoules_to_joules_and_back():
    assert units.uj_to_j(1328850) == pytest.approx(1.32885)
    assert units.j_to_uj(1.32885) == pytest.approx(1328850)


def test_kwh_is_3_6_megajoules():
    assert units.J_PER_KWH == 3.6e6
    assert units.j_to_kwh(3.6e6) == 1.0 and units.kwh_to_j(0.5) == 1.8e6
    assert units.j_to_wh(3600.0) == 1.0


def test_energy_from_power_and_duration():
    assert units.energy_j(300.0, 2.5) == 750.0
    assert units.j_to_kwh(units.energy_j(700.0, 3600.0)) == pytest.approx(0.7)
