"""The Meter end to end on the simulated device (no GPU here), RAPL from a fake tree,
the nvidia-smi fallback through a fake nvidia-smi, and the cool-down."""

from __future__ import annotations

import itertools
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gcbench.energy import SAMPLE_COLUMNS
from gcbench.energy.meter import Meter, read_samples, wait_for_cooldown
from gcbench.errors import MeasurementError
from gcbench.spec import EnergySettings


def sim(**kw) -> EnergySettings:
    return EnergySettings(backend="simulated", **kw)


def test_simulated_window_is_busy_power_times_duration_and_labelled_simulated(tmp_path):
    m = Meter(sim(idle_baseline_s=0.4), [0], tmp_path / "samples.csv", seed=3)
    with m:
        m.begin_window("main")
        time.sleep(1.3)
        m.end_window("main")
        m.begin_window("blip")
        time.sleep(0.05)
        m.end_window("blip")
    main, blip = m.results["main"], m.results["blip"]
    assert main.simulated and main.backend == "simulated"
    g = main.gpu[0]
    assert (g.device, g.method, g.source) == ("gpu0", "simulated", "simulated")
    assert "not a measurement" in g.reason
    assert g.energy_j == pytest.approx(300.0 * main.duration_s, rel=0.002)  # busy 300 W
    assert g.idle_power_w == pytest.approx(60.0, rel=0.02)  # idle 60 W
    assert main.gpu_energy_above_idle_j == pytest.approx(240.0 * main.duration_s, rel=0.02)
    # the model steps 60 -> 300 -> 60 W at the window's edges: the 1-s average reference
    # smooths both steps, which the edge allowance (0.175 s x 240 W per edge) covers
    assert g.cross_check_verdict == "ok" and main.flags == []
    assert 0.05 < abs(g.cross_check_rel) <= g.cross_check_allowance_rel
    assert g.cross_check_allowance_rel == pytest.approx(0.175 * 480 / g.cross_check_j, rel=0.05)
    assert abs(g.instant_integral_rel) < 0.01
    # 50 ms: flagged as too short for a 100 ms sensor, still reported, never 0 J
    assert "window_too_short" in blip.flags
    assert blip.gpu_energy_j == pytest.approx(300.0 * blip.duration_s, rel=0.05)
    assert main.cpu_energy_j is None and main.cpu_reason.startswith("no RAPL powercap tree")
    rows = (tmp_path / "samples.csv").read_text().splitlines()
    assert rows[0] == ",".join(SAMPLE_COLUMNS)
    assert all(r.split(",")[2] == "simulated" for r in rows[1:])
    assert main.samples_count == len(rows) - 1
    assert m.environment()["simulated"] is True
    assert m.stop() is m.results  # stop twice: same results


def test_jitter_is_seeded_and_within_bounds(tmp_path):
    delays = []
    for _ in range(2):
        m = Meter(sim(jitter_max_s=0.2), [0], tmp_path / "s.csv", seed=42)
        m.start()
        for k in ("a", "b", "c"):
            m.begin_window(k)
            m.end_window(k)
        m.stop()
        delays.append([m.jitter_s[k] for k in ("a", "b", "c")])
    assert delays[0] == delays[1]
    assert all(0 <= d <= 0.2 for d in delays[0]) and len(set(delays[0])) == 3
    assert m.results["a"].jitter_s == delays[0][0]


def test_stop_after_exception_in_window_closes_it_and_flags_it(tmp_path):
    m = Meter(sim(), [0, 1], tmp_path / "s.csv", seed=1)
    with pytest.raises(RuntimeError):
        with m:
            m.begin_window()
            raise RuntimeError("workload crashed")
    r = m.results["main"]
    assert "window_not_ended" in r.flags and [d.device for d in r.gpu] == ["gpu0", "gpu1"]
    with pytest.raises(MeasurementError):
        m.begin_window()


def test_window_errors_are_measurement_errors(tmp_path):
    m = Meter(sim(), [0], tmp_path / "s.csv", seed=1)
    with pytest.raises(MeasurementError):
        m.begin_window()
    m.start()
    with pytest.raises(MeasurementError, match="not open"):
        m.end_window("x")
    m.begin_window("x")
    with pytest.raises(MeasurementError, match="already open"):
        m.begin_window("x")
    m.stop()


def test_rapl_from_fake_tree_gives_cpu_energy_per_domain(tmp_path):
    root = tmp_path / "powercap"
    z = root / "intel-rapl:0"
    z.mkdir(parents=True)
    (z / "name").write_text("package-0\n")
    (z / "max_energy_range_uj").write_text("262143328850\n")
    (z / "energy_uj").write_text("262143000000\n")
    m = Meter(sim(rapl_root=str(root)), [0], tmp_path / "s.csv", seed=1)
    m.start()
    m.begin_window()
    time.sleep(0.3)
    (z / "energy_uj").write_text("1000000\n")  # wraps: +1328850 uJ
    time.sleep(0.3)
    m.end_window()
    r = m.stop()["main"]
    assert [c.device for c in r.cpu] == ["cpu:package-0"] and r.cpu[0].method == "rapl"
    assert r.cpu_energy_j == pytest.approx(1.32885, abs=1e-6) and r.cpu_reason is None
    assert r.simulated  # the GPU part is simulated, the CPU part is not
    assert r.cpu[0].source == "rapl"


def test_rapl_decrease_with_unknown_range_is_flagged(tmp_path):
    root = tmp_path / "powercap"
    z = root / "intel-rapl:0"
    z.mkdir(parents=True)
    (z / "name").write_text("package-0\n")
    (z / "energy_uj").write_text("9000000\n")
    m = Meter(sim(rapl_root=str(root)), [0], tmp_path / "s.csv", seed=1)
    m.start()
    m.begin_window()
    time.sleep(0.3)
    (z / "energy_uj").write_text("1000\n")
    time.sleep(0.3)
    m.end_window()
    r = m.stop()["main"]
    assert "rapl_wrap_unknown" in r.flags and r.cpu_energy_j == 0.0


def test_killed_trial_keeps_flushed_samples(tmp_path):
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from gcbench.spec import EnergySettings
        from gcbench.energy.meter import Meter
        m = Meter(EnergySettings(backend="simulated"), [0], Path({str(tmp_path / "s.csv")!r}), 1)
        m.start()
        m.begin_window()
        print("running", flush=True)
        time.sleep(60)
    """)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "running"
    time.sleep(1.2)
    p.send_signal(signal.SIGKILL)
    p.wait()
    time.sleep(0.3)  # the sampler sees EOF on its stdin and exits
    series = read_samples(tmp_path / "s.csv")["gpu0"]
    assert series.t_s.size >= 15 and series.t_s[-1] >= 1.0


FAKE_SMI = """#!{python}
import datetime, os, sys, time
args = sys.argv[1:]
fields = [a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")][0].split(",")
if "-L" in args:
    print("GPU 0: NVIDIA H200 (UUID: GPU-00000000-1111-2222-3333-444444444444)"); sys.exit(0)
values = {{"index": "0", "name": "NVIDIA H200", "uuid": "GPU-00000000-1111-2222-3333-444444444444",
          "pci.bus_id": "00000000:00:06.0", "power.draw": "122.52", "power.draw.average": "122.52",
          "power.draw.instant": os.environ.get("FAKE_SMI_INSTANT", "[N/A]"), "temperature.gpu": "35",
          "clocks.sm": "1980"}}
for f in fields:
    if f not in values and f != "timestamp":
        print(f'Field "{{f}}" is not a valid field to query.'); print(); sys.exit(2)
step_after = int(os.environ.get("FAKE_SMI_STEP_AFTER", "-1"))   # lines before the wall clock steps back 2 s
error_at = int(os.environ.get("FAKE_SMI_ERROR_AT", "-1"))       # line printed as an error message
def line(n):
    now = datetime.datetime.now() - datetime.timedelta(seconds=2 if 0 <= step_after <= n else 0)
    if n == error_at:
        return "Unable to determine the device handle for GPU 0000:06:00.0: Unknown Error"
    now = now.strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    return ", ".join(now if f == "timestamp" else values[f] for f in fields)
if "-lms" in args:
    ms = int(args[args.index("-lms") + 1])
    n = 0
    while True:
        print(line(n), flush=True); time.sleep(ms / 1000); n += 1
print(line(-2))
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "nvidia-smi"
    exe.write_text(FAKE_SMI.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return monkeypatch


@pytest.mark.parametrize("instant", ["[N/A]", "[Requested functionality has been deprecated]"])
def test_nvidia_smi_fallback_integrates_power_draw_as_average_power_lag_corrected_when_instant_is_missing_c16(
    tmp_path, fake_smi, instant
):
    fake_smi.setenv("FAKE_SMI_INSTANT", instant)  # C08: a marker outside the known list is missing too
    m = Meter(EnergySettings(backend="nvidia-smi"), [0], tmp_path / "s.csv", seed=1)
    m.start()
    m.begin_window()
    time.sleep(1.2)
    m.end_window()
    r = m.stop()["main"]
    g = r.gpu[0]
    assert m.backend == "nvidia-smi" and g.source == "nvidia-smi"
    # power.draw is the 1-s average (C16): it fills the average role, never the instant one, and is lag-corrected
    assert g.method == "nvidia-smi-average-power-lag-corrected" and g.power_field == "power.draw.average"
    fields = m.environment()["nvidia_smi_fields"]
    assert fields["power_w"] == "power.draw.average" and "power_instant_w" not in fields
    assert "1-s average power integrated, shifted by its lag of 0.57 s" in g.reason
    assert g.energy_j == pytest.approx(122.52 * r.duration_s, rel=0.02)
    assert not r.simulated


def test_nvidia_smi_wall_clock_step_of_minus_2_s_moves_no_sample(tmp_path, fake_smi):
    fake_smi.setenv("FAKE_SMI_STEP_AFTER", "15")  # after 15 lines (~0.75 s at 20 Hz) the printed time is 2 s back
    m = Meter(EnergySettings(backend="nvidia-smi", idle_baseline_s=0, jitter_max_s=0), [0], tmp_path / "s.csv", seed=1)
    m.start()
    m.begin_window()
    time.sleep(1.5)
    m.end_window()
    r = m.stop()["main"]
    t = read_samples(tmp_path / "s.csv")["gpu0"].t_s
    raw = [float(ln.split(",")[0]) for ln in (tmp_path / "s.csv").read_text().splitlines()[1:]]
    assert raw == sorted(raw), "rows written out of time order"
    inside = t[(t >= r.window_start_s) & (t <= r.window_end_s)]
    assert len(inside) >= 20 and (inside[1:] - inside[:-1]).max() < 0.25  # no gap (20 Hz)
    steps = [e for e in m.events if e.get("event") == "nvidia_smi_clock_step"]
    assert len(steps) == 1 and steps[0]["step_s"] == pytest.approx(-2.0, abs=0.1)
    assert r.gpu[0].energy_j == pytest.approx(122.52 * r.duration_s, rel=0.03)


def test_nvidia_smi_error_line_mid_stream_flags_the_window_and_keeps_the_good_rows(tmp_path, fake_smi):
    fake_smi.setenv("FAKE_SMI_ERROR_AT", "12")
    m = Meter(EnergySettings(backend="nvidia-smi", idle_baseline_s=0, jitter_max_s=0), [0], tmp_path / "s.csv", seed=1)
    m.start()
    m.begin_window()
    time.sleep(1.2)
    m.end_window()
    r = m.stop()["main"]
    errors = [e for e in m.events if e.get("event") == "nvidia_smi_error"]
    assert [e["device"] for e in errors] == ["GPU 0000:06:00.0"]
    assert "nvidia_smi_error" in r.flags
    assert r.gpu[0].energy_j == pytest.approx(122.52 * r.duration_s, rel=0.03)


def _tail_rows(path, device: str, after_s: float):
    return [
        float(ln.split(",")[0])
        for ln in path.read_text().splitlines()[1:]
        if ln.split(",")[1] == device and float(ln.split(",")[0]) > after_s
    ]


def test_simulated_tail_is_computed_at_once_with_the_reads_the_cross_check_needs(tmp_path):
    from gcbench.energy.integrate import reference_tail_s

    m = Meter(sim(), [0], tmp_path / "s.csv", seed=1)
    m.start()
    m.begin_window()
    time.sleep(1.1)
    m.end_window()
    r = m.stop()["main"]
    tail = _tail_rows(tmp_path / "s.csv", "gpu0", r.window_end_s)
    # the model's reads reach end + lag + 0.5 s + 2 periods, at 20 Hz as the loop reads them ...
    assert tail[-1] >= r.window_end_s + reference_tail_s(20.0)
    power_reads = [t for t in tail if t > r.window_end_s + 0.6]  # past the counter burst
    assert len(power_reads) >= 10 and max(b - a for a, b in itertools.pairwise(power_reads)) < 0.06
    # ... but were computed, not waited for: they lie after the sampler's own (real) end
    stats = m.sampler_stats
    assert stats["simulated_tail_s"] > 0.9 and tail[-1] > stats["wall_s"]
    g = r.gpu[0]
    assert g.cross_check_verdict == "ok" and g.cross_check_j is not None and r.flags == []


def test_rapl_is_never_read_at_a_simulated_time(tmp_path):
    root = tmp_path / "powercap"
    z = root / "intel-rapl:0"
    z.mkdir(parents=True)
    (z / "name").write_text("package-0\n")
    (z / "max_energy_range_uj").write_text("262143328850\n")
    (z / "energy_uj").write_text("5000000\n")
    m = Meter(sim(rapl_root=str(root)), [0], tmp_path / "s.csv", seed=1)
    m.start()
    m.begin_window()
    time.sleep(0.4)
    m.end_window()
    r = m.stop()["main"]
    rapl_t = [
        float(ln.split(",")[0])
        for ln in (tmp_path / "s.csv").read_text().splitlines()[1:]
        if ln.split(",")[2] == "rapl"
    ]
    assert m.sampler_stats["simulated_tail_s"] > 0.5
    assert rapl_t and max(rapl_t) <= m.sampler_stats["wall_s"]  # real reads, on the real clock
    assert r.cpu_energy_j == pytest.approx(0.0) and r.cpu_reason is None


def test_nvidia_smi_tail_is_read_in_real_time(tmp_path, fake_smi):
    from gcbench.energy.integrate import reference_tail_s

    fake_smi.setenv("FAKE_SMI_INSTANT", "150.0")
    m = Meter(EnergySettings(backend="nvidia-smi"), [0], tmp_path / "s.csv", seed=1)
    m.start()
    m.begin_window()
    time.sleep(1.1)
    m.end_window()
    r = m.stop()["main"]
    tail = _tail_rows(tmp_path / "s.csv", "gpu0", r.window_end_s)
    stats = m.sampler_stats
    assert stats["simulated_tail_s"] == 0.0
    assert tail[-1] >= r.window_end_s + reference_tail_s(20.0) - 0.1 and stats["wall_s"] >= tail[-1]


def test_forced_nvml_without_driver_is_a_clear_error(tmp_path):
    m = Meter(EnergySettings(backend="nvml"), [0], tmp_path / "s.csv", seed=1)
    with pytest.raises(MeasurementError, match="nvml"):
        m.start()


def test_cooldown_waits_until_below_threshold_or_stable_or_timeout():
    clock = {"t": 0.0}

    def tick(s):
        clock["t"] += s

    temps = iter([70, 65, 60, 55, 49, 48])
    r = wait_for_cooldown(lambda: next(temps), 60, 50, poll_s=1.0, clock=lambda: clock["t"], sleep=tick)
    assert r == {"waited_s": 4.0, "temperature_c": 49, "reason": "below_threshold"}
    clock["t"] = 0.0
    r = wait_for_cooldown(lambda: 70.2, 60, 50, stable_s=5, poll_s=1.0, clock=lambda: clock["t"], sleep=tick)
    assert r["reason"] == "stable" and r["waited_s"] == 5.0
    clock["t"] = 0.0
    hot = iter(range(90, 0, -1))
    r = wait_for_cooldown(lambda: next(hot), 3, 10, poll_s=1.0, clock=lambda: clock["t"], sleep=tick)
    assert r["reason"] == "timeout" and r["waited_s"] == 3.0
    assert wait_for_cooldown(lambda: 80, 0, 50)["reason"] == "disabled"


def test_nvidia_smi_of_a_driver_before_530_records_power_draw_as_averaged_power_c16(tmp_path, monkeypatch):
    """C16b: the case's fake nvidia-smi (A100, no power.draw.instant, no power.draw.average)."""
    case = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "round3" / "C16-average-power-lag"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "nvidia-smi"
    exe.write_text(
        (case / "bin" / "nvidia-smi").read_text().replace("#!/usr/bin/env python3", f"#!{sys.executable}", 1)
    )
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    m = Meter(EnergySettings(backend="nvidia-smi", sample_hz=10), [0], tmp_path / "s.csv", seed=1)
    m.start()
    m.begin_window()
    time.sleep(1.5)
    m.end_window()
    r = m.stop()["main"]
    g = r.gpu[0]
    env = m.environment()
    assert env["nvidia_smi_fields"]["power_w"] == "power.draw" and "power_instant_w" not in env["nvidia_smi_fields"]
    assert env["methods"] == {"gpu0": "nvidia-smi-average-power-lag-corrected"}
    assert env["device_facts"]["gpu0"]["instant_power"] is False
    assert g.method == "nvidia-smi-average-power-lag-corrected" and g.power_field == "power.draw"
    assert "1-s average power integrated, shifted by its lag of 0.57 s" in g.reason
    assert g.energy_j == pytest.approx(244.0 * r.duration_s, rel=0.02)  # steady: the shift costs nothing
    assert g.edge_uncertainty_rel == pytest.approx(0.0, abs=1e-9)
