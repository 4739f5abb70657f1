"""The node meter (gcbench/energy/node.py) against a real BMC emulator: OpenIPMI's
``ipmi_sim`` (Debian package openipmi) read with the real ``ipmitool``, both installed
by ``scripts/system_deps.sh ipmi``. Without them the emulator tests skip, except where
``GCBENCH_REQUIRE_IPMI=1`` (CI: .ci/run) makes a missing emulator a failure."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from gcbench.energy import node
from gcbench.energy.meter import Meter
from gcbench.energy.window import DeviceSeries
from gcbench.spec import EnergySettings, NodeSettings

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "ipmi_sim"
PASSWORD = "emulator-only"
HAVE_IPMI = bool(shutil.which("ipmi_sim") and shutil.which("ipmitool"))
REQUIRED = bool(os.environ.get("GCBENCH_REQUIRE_IPMI"))


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Bmc:
    """A running ipmi_sim: ``set_power_w`` writes the file its power sensor polls."""

    def __init__(self, port: int, power_file: Path):
        self.port, self.power_file = port, power_file

    def set_power_w(self, watts: float) -> None:
        tmp = self.power_file.with_suffix(".tmp")
        tmp.write_text(f"{int(watts)}\n")
        tmp.replace(self.power_file)

    def settings(self, **extra) -> NodeSettings:
        return NodeSettings(
            ipmi={"host": "127.0.0.1", "port": self.port, "user": "gcbench", "password_env": "GCB_TEST_BMC_PW"},
            **extra,
        )


@pytest.fixture
def bmc(tmp_path):
    if not HAVE_IPMI:
        if REQUIRED:
            pytest.fail("ipmi_sim or ipmitool missing: run scripts/system_deps.sh ipmi")
        pytest.skip("ipmi_sim/ipmitool absent (scripts/system_deps.sh ipmi installs them)")
    port = _free_udp_port()
    power = tmp_path / "power_w"
    b = Bmc(port, power)
    b.set_power_w(250)
    subst = {"@PORT@": str(port), "@PASSWORD@": PASSWORD, "@POWER_FILE@": str(power)}
    for name in ("lan.conf", "node.emu"):
        text = (FIXTURE / f"{name}.in").read_text()
        for k, v in subst.items():
            text = text.replace(k, v)
        (tmp_path / name).write_text(text)
    (tmp_path / "state").mkdir()
    log = open(tmp_path / "ipmi_sim.log", "w")
    proc = subprocess.Popen(
        [
            "ipmi_sim",
            "-c",
            str(tmp_path / "lan.conf"),
            "-f",
            str(tmp_path / "node.emu"),
            "-s",
            str(tmp_path / "state"),
            "-n",
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    reader = node.NodeReader(b.settings(), PASSWORD, how="sensor:Node Power")
    deadline = time.monotonic() + 10
    while True:
        try:
            reader.read_w()
            break
        except node.NodeReadError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"ipmi_sim did not answer: {(tmp_path / 'ipmi_sim.log').read_text()}") from None
            time.sleep(0.2)
    yield b
    proc.terminate()
    proc.wait(timeout=5)
    log.close()


def test_ipmi_tools_are_installed_where_ci_runs():
    """CI installs ipmi_sim and ipmitool (scripts/system_deps.sh ipmi); only a machine
    without them may skip the emulator tests, and this says so instead of passing."""
    if REQUIRED:
        assert HAVE_IPMI, "ipmi_sim/ipmitool missing: run scripts/system_deps.sh ipmi"
    elif not HAVE_IPMI:
        pytest.skip("ipmi_sim/ipmitool absent on this machine: the node-meter emulator tests did not run")


def test_probe_falls_back_from_dcmi_to_the_one_watts_sensor_of_the_emulator(bmc):
    """ipmi_sim answers DCMI with "Invalid command": auto takes the SDR's one sensor in watts."""
    reader, probe = node.probe_settings(bmc.settings(), {"GCB_TEST_BMC_PW": PASSWORD})
    assert probe.ok, probe.why_not
    assert probe.how == "sensor:Node Power"
    assert probe.power_w == 250.0


def test_forced_dcmi_on_a_bmc_without_it_is_unavailable_with_ipmitools_reason(bmc):
    s = NodeSettings(
        ipmi={"host": "127.0.0.1", "port": bmc.port, "user": "gcbench", "password_env": "PW", "reading": "dcmi"}
    )
    _reader, probe = node.probe_settings(s, {"PW": PASSWORD})
    assert not probe.ok
    assert "dcmi power reading failed" in probe.why_not and "Invalid command" in probe.why_not


def test_a_named_sensor_the_emulator_lacks_is_the_finding(bmc):
    s = NodeSettings(
        ipmi={"host": "127.0.0.1", "port": bmc.port, "user": "gcbench", "password_env": "PW", "sensor": "PSU1 Power"}
    )
    _reader, probe = node.probe_settings(s, {"PW": PASSWORD})
    assert not probe.ok and probe.how is None
    assert (
        probe.why_not.startswith("DCMI: ") and "; sensor: ipmitool -c sensor reading PSU1 Power failed" in probe.why_not
    )


def test_wrong_password_and_missing_password_are_findings_not_crashes(bmc):
    _r, probe = node.probe_settings(bmc.settings(), {"GCB_TEST_BMC_PW": "wrong"})
    assert not probe.ok and "failed" in probe.why_not
    _r, probe = node.probe_settings(bmc.settings(), {})
    assert not probe.ok and probe.why_not == "environment variable GCB_TEST_BMC_PW is not set"


def test_meter_window_node_energy_is_the_emulators_power_times_duration(tmp_path, bmc):
    """A 4-s window at a fixed 250 W: node energy = 250 W x duration (the sensor's raw
    byte is exact at 2 W steps), labelled node scope, and never added to the GPU."""
    settings = EnergySettings(backend="simulated", node=bmc.settings(period_s=0.5))
    m = Meter(settings, [0], tmp_path / "samples.csv", seed=1, env={**os.environ, "GCB_TEST_BMC_PW": PASSWORD})
    m.start()
    time.sleep(0.6)
    m.begin_window("main")
    time.sleep(4.0)
    m.end_window("main")
    r = m.stop()["main"]
    assert r.node is not None and r.node.scope == "node"
    assert r.node.method == "ipmi-node-power-integration"
    assert r.node_energy_j == pytest.approx(250.0 * r.duration_s, rel=1e-9)
    assert r.gpu_energy_j is not None and r.node_energy_j != r.gpu_energy_j
    env = m.environment()["node"]
    assert env["ok"] and env["how"] == "sensor:Node Power" and env["period_s"] == 0.5


def test_power_step_mid_window_is_integrated_within_one_update_period(tmp_path, bmc):
    """250 W, then 400 W from a known time: energy within the step x (read period +
    the emulator's 100-ms sensor poll) of the true integral."""
    period_s = 0.25
    settings = EnergySettings(backend="simulated", node=bmc.settings(period_s=period_s))
    m = Meter(settings, [0], tmp_path / "samples.csv", seed=1, env={**os.environ, "GCB_TEST_BMC_PW": PASSWORD})
    m.start()
    time.sleep(0.5)
    a = m.begin_window("main")
    time.sleep(2.0)
    step_at = m._now()
    bmc.set_power_w(400)
    time.sleep(2.0)
    b = m.end_window("main")
    r = m.stop()["main"]
    truth = 250.0 * (step_at - a) + 400.0 * (b - step_at)
    assert r.node_energy_j == pytest.approx(truth, abs=150.0 * (period_s + 0.1 + 0.05))
    assert r.node_energy_j > 250.0 * (b - a) + 150.0 * 1.0  # the step was seen


def test_window_shorter_than_two_read_periods_is_null_with_the_reason(tmp_path, bmc):
    settings = EnergySettings(backend="simulated", node=bmc.settings(period_s=1.0))
    m = Meter(settings, [0], tmp_path / "samples.csv", seed=1, env={**os.environ, "GCB_TEST_BMC_PW": PASSWORD})
    m.start()
    m.begin_window("main")
    time.sleep(0.5)
    m.end_window("main")
    r = m.stop()["main"]
    assert r.node_energy_j is None and r.node is not None
    assert "too few BMC readings" in r.node.reason
    assert r.gpu_energy_j is not None  # the GPU figure is kept


def test_unreachable_bmc_leaves_node_null_and_the_trial_measured(tmp_path):
    s = NodeSettings(ipmi={"host": "127.0.0.1", "port": _free_udp_port(), "user": "u"}, timeout_s=1.0)
    m = Meter(EnergySettings(backend="simulated", node=s), [0], tmp_path / "s.csv", seed=1, env={"IPMI_PASSWORD": "x"})
    with m:
        m.begin_window("main")
        time.sleep(0.2)
        m.end_window("main")
    r = m.results["main"]
    assert r.node_energy_j is None and r.node.reason.startswith("node meter unavailable:")
    assert r.gpu_energy_j is not None


# ----------------------------------------------------------------------------- window rules, parsers


def _series(t, p, source="ipmi"):
    t = np.asarray(t, float)
    nan = np.full(t.size, np.nan)
    return DeviceSeries(t, nan, np.asarray(p, float), nan, source)


def test_node_window_needs_a_reading_within_one_period_of_each_edge():
    s = _series([0.0, 1.0, 2.0, 3.0], [100, 100, 100, 100])
    assert node.node_window_energy(s, 0.5, 2.5, 1.0).energy_j == pytest.approx(200.0)
    late = node.node_window_energy(s, 0.5, 4.5, 1.0)
    assert late.energy_j is None and "none within one period" in late.reason
    assert node.node_window_energy(None, 0, 5, 1.0).reason == "no node readings (the BMC did not answer)"
    assert node.node_window_energy(None, 0, 5, 1.0, "redfish").source == "redfish"


def test_dcmi_answer_of_ipmitool_is_parsed_and_a_deactivated_reading_refused():
    text = (
        "    Instantaneous power reading:                   312 Watts\n"
        "    Minimum during sampling period:                 96 Watts\n"
        "    Sampling period:                          00000001 Seconds.\n"
        "    Power reading state is:                   activated\n"
    )
    assert node.parse_dcmi_power(text) == 312.0
    with pytest.raises(node.NodeReadError, match="deactivated"):
        node.parse_dcmi_power(text.replace("activated", "deactivated"))


def test_redfish_power_and_environment_metrics_readings():
    """DMTF's schema shapes: Power 1.x PowerControl and the newer EnvironmentMetrics."""
    assert node.parse_redfish_power({"PowerControl": [{"PowerConsumedWatts": 344}]}) == 344.0
    assert node.parse_redfish_power({"PowerWatts": {"Reading": 512.5}}) == 512.5
    with pytest.raises(node.NodeReadError):
        node.parse_redfish_power({"PowerControl": [{"PowerConsumedWatts": None}]})


def test_plan_node_settings_refuse_a_password_and_need_one_protocol():
    with pytest.raises(ValueError, match="a password never goes in a plan"):
        NodeSettings(ipmi={"host": "h", "user": "u", "password": "secret"})
    with pytest.raises(ValueError, match="exactly one of ipmi or redfish"):
        NodeSettings()


def test_ipmitool_argv_is_a_list_without_the_password():
    s = NodeSettings(ipmi={"host": "bmc", "port": 6230, "user": "admin"}).ipmi
    argv = node.ipmitool_argv(s, "dcmi", "power", "reading")
    assert argv[1:] == [
        "-I", "lanplus", "-H", "bmc", "-p", "6230", "-U", "admin", "-E", "-N", "2", "-R", "1", "-C", "3",
        "dcmi", "power", "reading",
    ]  # fmt: skip


def test_a_plan_with_a_bmc_password_names_file_line_and_field():
    from gcbench.errors import PlanError
    from gcbench.plan.loader import plan_from_text

    text = (Path(__file__).resolve().parents[2] / "plans" / "smoke.yaml").read_text()
    bad = text.replace("energy:\n", "energy:\n  node:\n    ipmi: {host: bmc, user: admin, password: hunter2}\n", 1)
    line = bad.splitlines().index("    ipmi: {host: bmc, user: admin, password: hunter2}") + 1
    with pytest.raises(PlanError) as err:
        plan_from_text(bad, "p.yaml")
    assert str(err.value).startswith(f"p.yaml:{line}: energy.node.ipmi: a password never goes in a plan")
    ok = text.replace("energy:\n", "energy:\n  node:\n    ipmi: {host: bmc, user: admin}\n    period_s: 2\n", 1)
    assert plan_from_text(ok, "p.yaml").energy.node.period_s == 2.0


def test_doctor_with_a_plan_probes_its_node_meter_on_the_emulator(tmp_path, bmc, monkeypatch):
    import json

    from typer.testing import CliRunner

    from gcbench.cli import app

    text = (Path(__file__).resolve().parents[2] / "plans" / "smoke.yaml").read_text()
    node_yaml = (
        f"  node:\n    ipmi: {{host: 127.0.0.1, port: {bmc.port}, user: gcbench, password_env: GCB_TEST_BMC_PW}}\n"
    )
    plan = tmp_path / "plan.yaml"
    plan.write_text(text.replace("energy:\n", "energy:\n" + node_yaml, 1))
    monkeypatch.setenv("GCB_TEST_BMC_PW", PASSWORD)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    res = CliRunner().invoke(app, ["doctor", "--json", "--plan", str(plan), "--rapl-root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    nd = json.loads(res.stdout)["node"]
    assert nd["ok"] and nd["how"] == "sensor:Node Power" and nd["power_w"] == 250.0
    res = CliRunner().invoke(app, ["doctor", "--plan", str(plan), "--rapl-root", str(tmp_path)])
    assert "ok  node (BMC)    ipmi sensor:Node Power: 250 W now, read every 1 s" in res.output
    monkeypatch.delenv("GCB_TEST_BMC_PW")
    res = CliRunner().invoke(app, ["doctor", "--plan", str(plan), "--rapl-root", str(tmp_path)])
    assert "NO  node (BMC)    environment variable GCB_TEST_BMC_PW is not set" in res.output


def test_a_trial_with_a_node_meter_stores_node_energy_as_its_kwh_basis(tmp_path, bmc):
    """The whole path: plan -> spec -> ``python -m gcbench.trial`` (the password only in
    the environment) -> result.json with the node figure, energy_kwh from it alone."""
    import json
    import sys

    from gcbench.plan import expand, plan_from_text

    plan = (
        "name: nodetest\nwindow: {seconds: 3.0}\n"
        "energy:\n  backend: simulated\n  node:\n"
        f"    ipmi: {{host: 127.0.0.1, port: {bmc.port}, user: gcbench, password_env: GCB_TEST_BMC_PW}}\n"
        "    period_s: 0.5\n"
        "workloads: [{name: noop, kind: noop}]\n"
    )
    spec = expand(plan_from_text(plan))[0]
    assert PASSWORD not in spec.to_json()
    (tmp_path / "spec.json").write_text(spec.to_json())
    out = tmp_path / "out"
    env = {**os.environ, "GCB_TEST_BMC_PW": PASSWORD}
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.trial", str(tmp_path / "spec.json"), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((out / "result.json").read_text())
    main, m = result["energy"]["main"], result["metrics"]
    assert main["node"]["method"] == "ipmi-node-power-integration"
    assert main["node_energy_j"] == pytest.approx(250.0 * main["duration_s"], rel=1e-9)
    assert m["energy_scope"] == "node" and m["energy_kwh"] == pytest.approx(main["node_energy_j"] / 3.6e6)
    assert m["node_energy_j"] == main["node_energy_j"]
    assert result["environment"]["node"]["how"] == "sensor:Node Power"
    rows = [ln for ln in (out / "samples.csv").read_text().splitlines() if ",node,ipmi," in ln]
    assert len(rows) >= 6 and all(",250.000," in ln for ln in rows)
    assert PASSWORD not in (out / "result.json").read_text()


def test_meter_flags_a_node_figure_below_the_measured_cpu_it_contains(tmp_path, bmc):
    """A fake RAPL tree counting 400 W beside a BMC reading 250 W: impossible for a whole
    node (it contains the CPU), so the window is flagged node_below_parts. (GPU figures
    of the simulated device are never compared: a model.)"""
    root = tmp_path / "powercap" / "intel-rapl:0"
    root.mkdir(parents=True)
    (root / "name").write_text("package-0\n")
    (root / "max_energy_range_uj").write_text("262143328850\n")
    (root / "energy_uj").write_text("0\n")
    settings = EnergySettings(
        backend="simulated", rapl_root=str(tmp_path / "powercap"), node=bmc.settings(period_s=0.5)
    )
    m = Meter(settings, [0], tmp_path / "s.csv", seed=1, env={**os.environ, "GCB_TEST_BMC_PW": PASSWORD})
    m.start()
    m.begin_window("main")
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2.5:  # the CPU counter runs at 400 W
        (root / "energy_uj").write_text(f"{int(400e6 * (time.monotonic() - t0))}\n")
        time.sleep(0.02)
    m.end_window("main")
    r = m.stop()["main"]
    assert r.cpu_energy_j is not None and r.node_energy_j is not None
    assert r.node_energy_j < r.cpu_energy_j and "node_below_parts" in r.flags


# ----------------------------------------------------------------------------- Redfish: sushy-tools

REPO = Path(__file__).resolve().parents[2]
SUSHY = os.environ.get("GCBENCH_TEST_SUSHY") or shutil.which("sushy-emulator") or ""
if not SUSHY and (REPO / ".gcbench-test" / "sushy" / "bin" / "sushy-emulator").exists():
    SUSHY = str(REPO / ".gcbench-test" / "sushy" / "bin" / "sushy-emulator")


@pytest.fixture
def sushy(tmp_path):
    """sushy-tools' Redfish emulator (fake systems driver) on a free port: its URL."""
    if not SUSHY:
        if os.environ.get("GCBENCH_REQUIRE_REDFISH"):
            pytest.fail("sushy-emulator missing: make test-python installs it in .gcbench-test/sushy")
        pytest.skip("sushy-emulator absent (make test-python installs it in .gcbench-test/sushy)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path / "sushy.log", "w")
    proc = subprocess.Popen(
        [SUSHY, "--fake", "-i", "127.0.0.1", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    import urllib.request

    while True:
        try:
            urllib.request.urlopen(url + "/redfish/v1/", timeout=1).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"sushy-emulator did not answer: {(tmp_path / 'sushy.log').read_text()}") from None
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=10)
    log.close()


def test_redfish_client_walks_the_emulators_chassis_and_says_it_reports_no_power(sushy):
    """sushy-tools serves a chassis without Power or EnvironmentMetrics: the probe names
    the chassis it read and why there is no node figure, never a number."""
    import urllib.request

    chassis = json.loads(urllib.request.urlopen(sushy + "/redfish/v1/Chassis", timeout=5).read())["Members"]
    path = chassis[0]["@odata.id"]
    _r, probe = node.probe_settings(NodeSettings(redfish={"url": sushy}), {})
    assert not probe.ok and probe.power_w is None
    assert probe.why_not == f"no Redfish chassis reports power: {path}: no EnvironmentMetrics or Power"
    named = NodeSettings(redfish={"url": sushy, "chassis": path.rsplit("/", 1)[1]})
    assert node.probe_settings(named, {})[1].why_not.endswith(f"{path}: no EnvironmentMetrics or Power")
    _r, missing = node.probe_settings(NodeSettings(redfish={"url": sushy, "chassis": "no-such"}), {})
    assert not missing.ok and "GET /redfish/v1/Chassis/no-such" in missing.why_not


def test_redfish_meter_without_power_leaves_node_null_and_the_trial_measured(tmp_path, sushy):
    m = Meter(EnergySettings(backend="simulated", node={"redfish": {"url": sushy}}), [0], tmp_path / "s.csv", seed=1)
    with m:
        m.begin_window("main")
        time.sleep(0.2)
        m.end_window("main")
    r = m.results["main"]
    assert r.node_energy_j is None and r.node.source == "redfish"
    assert r.node.reason.startswith("node meter unavailable: no Redfish chassis reports power")
    assert r.gpu_energy_j is not None


def test_a_node_meter_with_the_docker_runner_is_refused_at_its_line():
    """Trial containers have no network: the BMC cannot be read from them, so the plan says so."""
    from gcbench.errors import PlanError
    from gcbench.plan.loader import plan_from_text

    plan = (
        "name: nodedocker\nrunner: docker\n"
        "energy:\n  node:\n    ipmi: {host: bmc, user: admin}\n"
        "workloads: [{name: noop, kind: noop}]\n"
    )
    with pytest.raises(PlanError) as err:
        plan_from_text(plan, "p.yaml")
    assert str(err.value).startswith("p.yaml:4: energy.node: the node meter reads the BMC from the trial process")


def test_in_band_ipmi_needs_no_address_or_password_and_says_why_without_dev_ipmi0():
    """interface: open reads the local BMC through /dev/ipmi0 (the real ipmitool; this
    machine has no BMC device, so the probe says ipmitool's reason)."""
    s = NodeSettings(ipmi={"interface": "open"})
    assert node.ipmitool_argv(s.ipmi, "dcmi", "power", "reading")[1:] == ["-I", "open", "dcmi", "power", "reading"]
    assert node.password_env(s) is None
    with pytest.raises(ValueError, match="interface lanplus needs host and user"):
        NodeSettings(ipmi={"host": "bmc"})
    with pytest.raises(ValueError, match="no host or user"):
        NodeSettings(ipmi={"interface": "open", "host": "bmc"})
    if not HAVE_IPMI or Path("/dev/ipmi0").exists():
        return  # the probe's reason below is that of a machine without the device
    _r, probe = node.probe_settings(s, {})
    assert not probe.ok and probe.why_not.startswith("DCMI: ipmitool dcmi power reading failed")
    assert "; sensor: ipmitool -c sdr list full failed" in probe.why_not and "/dev/ipmi0" in probe.why_not
