import sys
import types

import pytest

from gcbench.codecarbon_compare import CodeCarbonTracker, codecarbon_available, relative_error


def test_without_codecarbon_the_result_is_none_with_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "codecarbon", None)  # import fails like an absent package
    ok, reason = codecarbon_available()
    assert not ok and "not installed" in reason
    with CodeCarbonTracker() as cc:
        pass
    assert cc.result.energy_j is None
    assert "codecarbon not installed" in cc.result.reason


class _EmissionsData:
    energy_consumed = 0.002  # kWh
    cpu_energy = 0.0005
    gpu_energy = 0.0014
    ram_energy = 0.0001
    duration = 12.5


class _FakeTracker:
    """Stands in for codecarbon.OfflineEmissionsTracker (the library's boundary)."""

    instances: list = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.started = self.stopped = False
        _FakeTracker.instances.append(self)

    def start(self):
        self.started = True

    def stop(self):
        self.stopped = True
        self.final_emissions_data = _EmissionsData()
        return 0.0004


def test_installed_codecarbon_energy_is_converted_from_kwh_to_joules(monkeypatch):
    fake = types.ModuleType("codecarbon")
    fake.OfflineEmissionsTracker = _FakeTracker
    fake.__version__ = "2.8.0"
    monkeypatch.setitem(sys.modules, "codecarbon", fake)
    with CodeCarbonTracker(gpu_ids=[0, 1], measure_power_secs=0.5) as cc:
        assert cc.result.reason == "running"
    tracker = _FakeTracker.instances[-1]
    assert tracker.started and tracker.stopped
    assert tracker.kwargs["gpu_ids"] == [0, 1]
    assert tracker.kwargs["save_to_file"] is False
    assert cc.result.energy_j == pytest.approx(7200.0)  # 0.002 kWh
    assert cc.result.gpu_energy_j == pytest.approx(5040.0)
    assert cc.result.cpu_energy_j == pytest.approx(1800.0)
    assert cc.result.emissions_kg == pytest.approx(0.0004)
    assert cc.result.version == "2.8.0" and cc.result.reason is None
    assert cc.result.to_dict()["codecarbon_energy_j"] == pytest.approx(7200.0)


def test_a_failing_tracker_never_fails_the_trial(monkeypatch):
    class Broken(_FakeTracker):
        def start(self):
            raise RuntimeError("no RAPL")

    fake = types.ModuleType("codecarbon")
    fake.OfflineEmissionsTracker = Broken
    monkeypatch.setitem(sys.modules, "codecarbon", fake)
    with CodeCarbonTracker() as cc:
        pass
    assert cc.result.energy_j is None and "no RAPL" in cc.result.reason


def test_relative_error_against_direct_measurement():
    assert relative_error(104.09, 100.0) == pytest.approx(0.0409)
    assert relative_error(None, 100.0) is None
    assert relative_error(5.0, 0.0) is None


def test_comparison_is_like_with_like():
    from gcbench.codecarbon_compare import CodeCarbonResult, comparison_metrics

    cc = CodeCarbonResult(energy_j=7200.0, cpu_energy_j=1800.0, gpu_energy_j=5040.0, ram_energy_j=360.0)
    with_cpu = comparison_metrics(cc, gpu_energy_j=5000.0, cpu_energy_j=1600.0)
    assert with_cpu["codecarbon_compared"] == "gpu+cpu"
    assert with_cpu["codecarbon_rel_error"] == pytest.approx((6840.0 - 6600.0) / 6600.0)
    gpu_only = comparison_metrics(cc, gpu_energy_j=5000.0, cpu_energy_j=None)  # no RAPL
    assert gpu_only["codecarbon_compared"] == "gpu"
    assert gpu_only["codecarbon_rel_error"] == pytest.approx(0.008)
    absent = comparison_metrics(CodeCarbonResult(energy_j=None, reason="codecarbon not installed"), 5000.0, None)
    assert absent["codecarbon_rel_error"] is None and absent["codecarbon_reason"] == "codecarbon not installed"
