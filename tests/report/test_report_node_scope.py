"""The report says which scopes its energy adds up (GPU, CPU, DRAM, node, facility),
never adds a node figure to its own parts, and shows the plan's PUE as its own figure."""

from __future__ import annotations

import numpy as np
import pytest
from synthetic import make_report_data

from gcbench.carbon import SCOPE_WORDS
from gcbench.report.analysis import ReportSettings, analyze


def _node_data(node_w_per_gpu_w: float = 1.6, pue: float | None = 1.5):
    data = make_report_data(kinds=("resnet_cifar",), n_rep=3, failures=False)
    t = data.trials
    # the BMC's node figure: more than GPU + CPU (fans, memory, supplies' losses), and it contains them
    t["node_energy_j"] = t["gpu_energy_j"] * node_w_per_gpu_w + 500.0
    t["energy_kwh"] = t["node_energy_j"] / 3.6e6
    t["energy_scope"] = "node"
    t["node_method"] = "ipmi-node-power-integration"
    if pue is not None:
        data.plan["carbon"]["pue"] = pue
    return data


def test_node_metered_co2e_is_the_node_figure_alone_and_facility_is_times_pue():
    data = _node_data()
    a = analyze(data, ReportSettings.from_plan(data.plan, n_resamples=300))
    t = a.trials
    assert np.allclose(t["co2_energy_kwh"], t["node_energy_j"] / 3.6e6)  # never node + GPU + CPU
    assert not np.allclose(t["co2_energy_kwh"], (t["node_energy_j"] + t["total_energy_j"]) / 3.6e6)
    assert np.allclose(t["facility_energy_kwh"], t["co2_energy_kwh"] * 1.5)
    assert np.allclose(t["facility_co2e_kg"], t["co2e_kg"] * 1.5)
    ct = a.co2e_total
    assert ct["pue"] == 1.5
    assert ct["facility_energy_kwh"] == pytest.approx(ct["energy_kwh"] * 1.5)
    assert ct["facility_co2e_kg"] == pytest.approx(ct["co2e_kg"] * 1.5)
    assert a.measurement.energy_basis == SCOPE_WORDS["node"]
    row = next(m for m in a.measurement.methods if m["role"] == "node")
    assert row["method"] == "ipmi-node-power-integration" and row["trials"] == int((t["status"] == "ok").sum())
    assert row["description"].endswith("covers the whole node at its BMC (GPU, CPU, memory and the rest)")


def test_node_metered_trial_with_unknown_node_energy_stays_unknown_not_gpu_plus_cpu():
    data = _node_data(pue=None)
    data.trials.loc[0, "node_energy_j"] = np.nan
    data.trials.loc[0, "energy_kwh"] = np.nan
    a = analyze(data, ReportSettings.from_plan(data.plan, n_resamples=300))
    assert np.isnan(a.trials.loc[0, "co2_energy_kwh"]) and np.isnan(a.trials.loc[0, "co2e_kg"])
    assert a.co2e_total["facility_energy_kwh"] is None  # no PUE: no facility figure


def test_rendered_report_states_the_scopes_and_the_facility_figure(tmp_path):
    from gcbench.report import write_report

    data = _node_data()
    paths = write_report(data, tmp_path / "r", settings=ReportSettings.from_plan(data.plan, n_resamples=300))
    md = paths.markdown.read_text(encoding="utf-8")
    assert f"Energy adds up: {SCOPE_WORDS['node']}." in md
    assert "Facility energy (total x the plan's PUE of 1.5, an assumed overhead, not measured):" in md
    assert "ipmi-node-power-integration" in md  # the methods table has the node meter's row
    html = paths.html.read_text(encoding="utf-8")
    assert "Energy adds up: node (the BMC" in html and "PUE of 1.5" in html


def test_without_node_or_pue_the_report_says_gpu_plus_cpu_and_no_facility(tmp_path):
    from gcbench.report import write_report

    data = make_report_data(kinds=("resnet_cifar",), n_rep=3, failures=False)
    paths = write_report(data, tmp_path / "r", settings=ReportSettings.from_plan(data.plan, n_resamples=300))
    md = paths.markdown.read_text(encoding="utf-8")
    assert "Energy adds up: GPU + CPU (RAPL) energy." in md
    assert "Facility energy" not in md
