"""The backend interface (gcbench.energy.backend): the registry, the shared contract every
backend passes, and the rule that no module outside energy/ names a backend."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from conftest import Trace

from gcbench.energy import backend, integrate
from gcbench.energy.simulated import SimulatedGpu
from gcbench.energy.window import DeviceSeries, gpu_window_energy

PACKAGE = Path(__file__).resolve().parents[2] / "plugins" / "gcbench"


def test_every_registered_backend_loads_and_declares_its_own_name_and_kind():
    for e in backend.entries():
        f = backend.facts_of(e.name)
        assert (f.name, f.kind) == (e.name, e.kind)
    gpu = backend.gpu_backend_names()
    assert gpu[0] == "nvml" and gpu[-1] == "simulated"  # simulated only when no sensor is found


def test_unknown_backend_name_is_a_clear_error():
    with pytest.raises(Exception, match="unknown energy backend 'nope'.*registered: nvml"):
        backend.load("nope")


def test_plan_energy_backend_accepts_every_registered_name_and_refuses_others():
    import gcbench.energy  # noqa: F401 - registers the names (gcbench.plan does the same)
    from gcbench.spec import EnergySettings

    for name in ("auto", *backend.gpu_backend_names()):
        assert EnergySettings(backend=name).backend == name
    with pytest.raises(ValueError, match="unknown energy backend 'amd'"):
        EnergySettings(backend="amd")


def test_method_labels_come_from_the_declared_facts():
    nv = backend.facts_of("nvml")
    assert nv.method("counter-edge-corrected") == "nvml-counter-edge-corrected"
    assert backend.without(nv, counter_scope="module").method("counter-edge-corrected") == (
        "nvml-module-counter-edge-corrected"
    )
    assert backend.facts_of("simulated").method("counter-edge-corrected") == "simulated"


def _names_outside_energy() -> list[str]:
    names = {e.name for e in backend.entries()} - {"simulated"}  # "simulated" is also a figure's label
    hits = []
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[0] == "energy":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                for c in [node.left, *node.comparators]:
                    for sub in ast.walk(c):
                        if isinstance(sub, ast.Constant) and sub.value in names:
                            hits.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {sub.value!r}")
    return hits


LEFT_TO_THEIR_OWNERS = {"report/analysis/measurement.py"}
"""report/ belongs to another change (issue 21): its measurement table maps the CPU method
label ``rapl`` to its source by name; it should read the figure's ``source`` instead."""


def test_no_module_outside_energy_decides_on_a_backend_name():
    """Only energy/ may compare against a backend's name; everything else asks its facts."""
    hits = [h for h in _names_outside_energy() if h.split(":")[0] not in LEFT_TO_THEIR_OWNERS]
    assert hits == []


# ----------------------------------------------------------------------------- the shared contract


def _h200_busy_window(session: Trace) -> tuple[float, float, float]:
    """A 4-s window inside the first busy phase and its counter energy between ticks (truth)."""
    a, b = session.phase("busy")
    start, end = a + 1.0, a + 5.0
    return (
        start,
        end,
        float(np.interp(end, session.t_s, session.energy_j) - np.interp(start, session.t_s, session.energy_j)),
    )


def _series(t, inst, avg, energy, source) -> DeviceSeries:
    return DeviceSeries(
        np.asarray(t), np.asarray(avg, float), np.asarray(inst, float), np.asarray(energy, float), source
    )


def _contract_inputs(
    session: Trace,
) -> dict[str, list[tuple[str, DeviceSeries, backend.DeviceFacts, float, float, float, float]]]:
    """{backend: [(how, series, facts, start, end, true_j, rel_tol)]}: each backend's
    fixture restricted to what it declares it reads (and to what a device may lack)."""
    start, end, true_j = _h200_busy_window(session)
    nan = np.full_like(session.t_s, np.nan)
    every20 = np.arange(0, session.t_s.size, max(1, session.t_s.size // int((session.t_s[-1] - session.t_s[0]) * 20)))
    t20 = session.t_s[every20]
    nvml = backend.facts_of("nvml")
    smi = backend.facts_of("nvidia-smi")
    sim = SimulatedGpu()
    sim.mark(2.0, 1)
    sim.mark(6.0, -1)
    ts = np.arange(0.0, 9.0, 0.005)
    rows = [sim.read(t) for t in ts]
    # amdsmi (an MI300X: counter and average power, no instant reading): the counter's
    # joules as amdsmi replies (counts of 15.259 uJ) whose 64-bit accumulator wraps mid-window
    from gcbench.energy.amdsmi import EnergyAccumulator

    res_uj = 15.259
    e0 = session.energy_j - session.energy_j[0]
    counts = np.round(e0 * 1e6 / res_uj).astype(np.int64)
    wrap_k = int(np.searchsorted(session.t_s, (start + end) / 2))
    top = (1 << 64) - int(counts[wrap_k])
    acc = EnergyAccumulator()
    amd_j = [
        acc.update(
            {"energy_accumulator": (top + int(c)) % (1 << 64), "counter_resolution": res_uj, "timestamp": int(t * 1e9)}
        )
        for c, t in zip(counts, session.t_s, strict=True)
    ]
    assert acc.wraps == 1
    amd = backend.facts_of("amdsmi")
    return {
        "amdsmi": [
            (
                "counter-edge-corrected",
                _series(session.t_s, nan, session.average_w, amd_j, "amdsmi"),
                backend.DeviceFacts(backend.without(amd, instant_power=False)),
                start,
                end,
                true_j,
                0.002,
            ),
        ],
        "nvml": [
            (
                "counter-edge-corrected",
                _series(session.t_s, session.instant_w, session.average_w, session.energy_j, "nvml"),
                backend.DeviceFacts(nvml),
                start,
                end,
                true_j,
                0.002,
            ),
            (
                "power-integration",
                _series(session.t_s, session.instant_w, session.average_w, nan, "nvml"),
                backend.DeviceFacts(backend.without(nvml, energy_counter=False)),
                start,
                end,
                true_j,
                0.03,
            ),
        ],
        "nvidia-smi": [
            (
                "power-integration",
                _series(t20, session.instant_w[every20], session.average_w[every20], nan[every20], "nvidia-smi"),
                backend.DeviceFacts(smi),
                start,
                end,
                true_j,
                0.03,
            ),
            (
                "average-power-lag-corrected",
                _series(t20, nan[every20], session.average_w[every20], nan[every20], "nvidia-smi"),
                backend.DeviceFacts(backend.without(smi, instant_power=False)),
                start,
                end,
                true_j,
                0.01,
            ),
        ],
        "simulated": [
            (
                "counter-edge-corrected",
                _series(
                    ts,
                    [r["power_instant_w"] for r in rows],
                    [r["power_w"] for r in rows],
                    [r["energy_j"] for r in rows],
                    "simulated",
                ),
                backend.DeviceFacts(backend.facts_of("simulated")),
                2.0,
                6.0,
                300.0 * 4.0,
                1e-4,
            ),
        ],
    }


def test_every_gpu_backend_has_a_contract_fixture(session):
    assert set(_contract_inputs(session)) == set(backend.gpu_backend_names())


@pytest.mark.parametrize("name", backend.gpu_backend_names())
def test_the_same_window_through_each_backend_gives_its_declared_method_and_the_right_energy(name, session):
    for how, series, facts, start, end, true_j, tol in _contract_inputs(session)[name]:
        dev, flags = gpu_window_energy(series, "gpu0", start, end, facts=facts)
        assert dev.method == facts.facts.method(how), how
        assert dev.energy_j == pytest.approx(true_j, rel=tol), how
        assert dev.scope == facts.facts.counter_scope
        assert "samples_incomplete" not in flags


# ----------------------------------------------------------------------------- C16: averaged power


def _c16_series(t, true_p, dt):
    avg = np.array([true_p[(t > x - 1.0) & (t <= x)].mean() for x in t])  # trailing 1-s mean
    nan = np.full_like(t, np.nan)
    return DeviceSeries(t, avg, nan, nan, "nvml")


@pytest.mark.parametrize(
    ("start", "end", "true_j", "verdict"),
    [
        (10.0, 11.0, 300.0, "invalid"),
        (10.0, 12.0, 600.0, "invalid"),
        (10.0, 15.0, 780.0, "flag"),
        (4.0, 8.0, 240.0, "ok"),
    ],
)
def test_average_power_only_is_lag_corrected_and_short_windows_with_edge_steps_are_flagged_or_invalid_c16(
    start, end, true_j, verdict
):
    """C16's input: 300 W for 2 s after 60 W idle, read at 20 Hz as NVML's trailing 1-s average, no counter."""
    from gcbench.plan.schema import ValidationSettings
    from gcbench.validate import average_power_finding

    dt = 0.05
    t = np.arange(0, 20, dt)
    true_p = np.where((t >= 10) & (t < 12), 300.0, 60.0)
    dev, flags = gpu_window_energy(
        _c16_series(t, true_p, dt), "gpu0", start, end, has_counter=False, counter_reason="energy counter unavailable"
    )
    assert dev.method == "nvml-average-power-lag-corrected"
    assert dev.average_lag_s == integrate.AVERAGE_POWER_LAG_S
    assert "1-s average power integrated, shifted by its lag of 0.57 s" in dev.reason
    # within the edge uncertainty it records, which the unshifted integral (-36 %, -18 %) was not
    assert abs(dev.energy_j - true_j) <= dev.edge_uncertainty_rel * dev.energy_j + 1e-9
    tier, _ = average_power_finding(dataclass_dict(dev), end - start, ValidationSettings())
    assert tier == verdict
    assert ("average_power_edges_uncertain" in flags) == (verdict != "ok")


def test_average_power_only_on_the_real_h200_trace_short_window_is_close_after_the_lag_shift(session):
    """Another input of the kind: 2-s windows of the recorded H200 at a busy phase's start, average power only."""
    a, _b = session.phase("busy")
    nan = np.full_like(session.t_s, np.nan)
    s = DeviceSeries(session.t_s, session.average_w, nan, nan, "nvml")
    truth = float(np.interp(a + 2.0, session.t_s, session.energy_j) - np.interp(a, session.t_s, session.energy_j))
    dev, flags = gpu_window_energy(s, "gpu0", a, a + 2.0, has_counter=False)
    unshifted = integrate.power_integral_j(session.t_s, session.average_w, a, a + 2.0)
    assert abs(dev.energy_j / truth - 1) < abs(unshifted / truth - 1) / 2
    assert abs(dev.energy_j - truth) <= dev.edge_uncertainty_rel * dev.energy_j
    assert "average_power_edges_uncertain" in flags


def dataclass_dict(dev) -> dict:
    from dataclasses import asdict

    return asdict(dev)


@pytest.mark.parametrize("name", [e.name for e in backend.entries("cpu")])
def test_the_same_window_through_each_cpu_backend_gives_its_declared_method_and_the_right_energy(name):
    """The CPU backends' fixture: a cumulative counter of a 95 W socket read every 50 ms
    (RAPL's energy_uj after wrap correction, hwmon's counter or integrated power meter)."""
    from gcbench.energy.window import cpu_window_energy

    f = backend.facts_of(name)
    t = np.arange(0.0, 10.0, 0.05)
    s = DeviceSeries(t, np.full_like(t, 95.0), np.full_like(t, np.nan), 95.0 * t + 1234.5, name)
    dev = cpu_window_energy(s, "cpu:package-0", 2.0, 7.5)
    assert dev.method == f.label and dev.source == name and dev.scope == f.counter_scope == "package"
    assert dev.energy_j == pytest.approx(95.0 * 5.5)
    short = DeviceSeries(t[t < 3.0], s.power_w[t < 3.0], s.power_instant_w[t < 3.0], s.energy_j[t < 3.0], name)
    gone = cpu_window_energy(short, "cpu:package-0", 2.0, 7.5)
    assert gone.energy_j is None and gone.method == "unavailable" and name in gone.reason


@pytest.mark.parametrize("name", [e.name for e in backend.entries("node")])
def test_the_same_window_through_each_node_backend_gives_its_declared_method_and_the_right_energy(name):
    """The node backends' fixture: a BMC reading 400 W every second, 650 W from t = 5 s
    (instant node power, the rows the sampler writes for device ``node``)."""
    from gcbench.energy.node import node_window_energy

    f = backend.facts_of(name)
    assert (f.kind, f.counter_scope, f.instant_power, f.energy_counter) == ("node", "node", True, False)
    assert f.update_period_s >= 1.0  # a BMC is slow: its own period, never the GPU's
    t = np.arange(0.0, 12.0, 1.0)
    p = np.where(t < 5.0, 400.0, 650.0)
    nan = np.full_like(t, np.nan)
    dev = node_window_energy(DeviceSeries(t, nan, p, nan, name), 2.0, 9.0, 1.0)
    assert dev.method == f.method("power-integration") == f"{name}-node-power-integration"
    assert dev.source == name and dev.scope == "node"
    # trapezoid: 400 W for 2-4 s, the 4-5 s ramp at 525 W, 650 W for 5-9 s
    assert dev.energy_j == pytest.approx(400.0 * 2 + 525.0 + 650.0 * 4)
    few = node_window_energy(DeviceSeries(t, nan, p, nan, name), 2.0, 3.5, 1.0)
    assert few.energy_j is None and few.method == "unavailable" and "too few BMC readings" in few.reason
    assert backend.describe_method(dev.method).endswith(
        "covers the whole node at its BMC (GPU, CPU, memory and the rest)"
    )


def test_every_method_label_a_backend_builds_has_a_description():
    assert "trailing-average power integrated" in backend.describe_method("nvidia-smi-average-power-lag-corrected")
    assert "whole module" in backend.describe_method("nvml-module-counter-edge-corrected")
    assert backend.describe_method("amdsmi-counter-edge-corrected").startswith("amdsmi: energy counter")
    assert backend.describe_method("hwmon") == "hwmon energy counters (package scope)"
    assert backend.describe_method("no-such-method") is None


def test_instant_power_draw_of_a_gpu_before_ampere_is_integrated_unshifted_c16():
    """A Turing GPU on a driver before 530: power.draw is instant (smi.power_draw_roles puts it
    in the instant role); 300 W for 2 s after 60 W idle, read at 20 Hz. In the average role
    it would be shifted by 0.57 s: the burst's last second would read 163 J."""
    t = np.arange(0, 20, 0.05)
    p = np.where((t >= 10) & (t < 12), 300.0, 60.0)
    nan = np.full_like(t, np.nan)
    dev, _ = gpu_window_energy(DeviceSeries(t, nan, p, nan, "nvidia-smi"), "gpu0", 11.0, 12.0, has_counter=False)
    assert dev.method == "nvidia-smi-power-integration" and dev.energy_j == pytest.approx(300.0, rel=0.025)
    shifted, _ = gpu_window_energy(DeviceSeries(t, p, nan, nan, "nvidia-smi"), "gpu0", 11.0, 12.0, has_counter=False)
    assert shifted.energy_j < 0.55 * dev.energy_j  # 0.43 s of 300 W and 0.57 s of 60 W: -45 %
