"""The GPU's busy share of a window: NVML utilization sampled into utilization.csv and
averaged by the meter; on the simulated device, the trial's own busy time."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gcbench.energy import backend
from gcbench.energy.base import TRIAL_BUSY_METHOD, UTILIZATION_COLUMNS
from gcbench.energy.sampler import _UtilizationWriter
from gcbench.energy.window import read_utilization, window_busy_share
from gcbench.trial import apply_trial_busy_share, derive_metrics


def test_each_backend_declares_how_it_finds_the_busy_share():
    assert backend.facts_of("nvml").busy_method() == "nvml-utilization-sampled"
    assert backend.facts_of("simulated").busy_method() == TRIAL_BUSY_METHOD == "simulated-trial-busy-time"
    assert backend.without(backend.facts_of("nvml"), utilization=False).busy_method() is None


def test_utilization_file_round_trip_and_window_mean(tmp_path):
    path = tmp_path / "utilization.csv"
    w = _UtilizationWriter(path)
    for k in range(40):  # 20 Hz over 2 s: gpu0 busy 90 % then idle; gpu1 at 50 % throughout
        t = k * 0.05
        w.row(t, "gpu0", 90 if t < 1.0 else 0)
        w.row(t, "gpu1", 50)
    w.close()
    with open(path, "a", encoding="utf-8") as f:
        f.write("1.23,gpu0")  # a line cut by a kill is skipped
    assert path.read_text().splitlines()[0] == ",".join(UTILIZATION_COLUMNS)
    util = read_utilization(path)
    assert set(util) == {"gpu0", "gpu1"} and len(util["gpu0"][0]) == 40
    share, reads, why = window_busy_share(util, ["gpu0"], 0.0, 0.95)
    assert share == pytest.approx(0.90) and reads == 20 and why is None
    share, reads, _ = window_busy_share(util, ["gpu0", "gpu1"], 0.0, 1.95)
    assert share == pytest.approx((0.45 + 0.50) / 2) and reads == 80
    share, reads, why = window_busy_share(util, ["gpu0"], 5.0, 6.0)
    assert share is None and reads == 0 and "no utilization read of gpu0" in why
    assert read_utilization(tmp_path / "absent.csv") == {}


def test_no_file_is_written_without_a_utilization_read(tmp_path):
    w = _UtilizationWriter(tmp_path / "utilization.csv")
    w.flush()
    w.close()
    assert not (tmp_path / "utilization.csv").exists()


def _simulated_main(duration_s: float) -> dict:
    return {"simulated": True, "duration_s": duration_s, "gpu_energy_j": 300.0 * duration_s, "gpu": [], "cpu": []}


def test_simulated_device_takes_the_trials_own_busy_time():
    energy = {"main": _simulated_main(2.0)}
    apply_trial_busy_share(energy, {"device_busy_s": 0.5, "tokens": 100})
    m = derive_metrics({"tokens": 100, "device_busy_s": 0.5}, energy, {})
    assert m["gpu_busy_share"] == pytest.approx(0.25) and m["gpu_idle_share"] == pytest.approx(0.75)
    assert m["gpu_busy_method"] == TRIAL_BUSY_METHOD
    # clipped to 0..1; a sensor's window, or no busy time reported, is left alone
    energy = {"main": _simulated_main(1.0)}
    apply_trial_busy_share(energy, {"device_busy_s": 1.2})
    assert energy["main"]["gpu_busy_share"] == 1.0
    sensor = {"main": {**_simulated_main(1.0), "simulated": False}}
    apply_trial_busy_share(sensor, {"device_busy_s": 0.5})
    assert "gpu_busy_share" not in sensor["main"]
    none = {"main": _simulated_main(1.0)}
    apply_trial_busy_share(none, {"device_busy_s": None})
    m = derive_metrics({}, none, {})
    assert m["gpu_busy_share"] is None and m["gpu_busy_method"] is None


def test_a_real_tinylm_trial_on_the_simulated_device_records_its_busy_share(tmp_path):
    from gcbench.spec import Amount, EnergySettings, TrialSpec
    from gcbench.trial import run_trial

    spec = TrialSpec(
        plan="t",
        workload="lm",
        kind="tinylm",
        variant="lm",
        settings={
            "layers": 1,
            "d_model": 32,
            "heads": 2,
            "context_length": 16,
            "batch_size": 2,
            "vocab_size": 300,
            "cache_dir": str(tmp_path / "cache"),
            "loader": {"workers": 1},
        },
        repetition=0,
        seed=1,
        devices=[],
        window=Amount(seconds=0.6),
        warmup=Amount(steps=1),
        energy=EnergySettings(backend="simulated", sample_hz=20, counter_hz=10),
    ).with_id()
    assert run_trial(spec, tmp_path / "trial") == 0
    result = json.loads((tmp_path / "trial" / "result.json").read_text())
    main = result["energy"]["main"]
    m = result["metrics"]
    assert main["gpu_busy_method"] == m["gpu_busy_method"] == TRIAL_BUSY_METHOD
    assert 0.0 < m["gpu_busy_share"] <= 1.0 and m["gpu_idle_share"] == pytest.approx(1 - m["gpu_busy_share"])
    assert m["gpu_busy_share"] == pytest.approx(result["counts"]["device_busy_s"] / main["duration_s"])
    assert np.isclose(main["gpu_busy_share"], m["gpu_busy_share"])
