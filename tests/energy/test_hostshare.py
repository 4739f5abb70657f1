"""C13: one socket's RAPL energy is never booked by two trials
(fixtures/cases/round3/C13-rapl-concurrent-trials).

A fake RAPL tree whose one package draws 100 W in total, whatever runs. Trials on two
GPUs of that host started at the same time outside any lease (the case's overlap.py:
two ``run_local`` threads, as two Airflow tasks would run them) are detected by the host
register and their CPU figures made unknown and flagged; trials one after the other
keep CPU figures that add up to what the socket drew.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gcbench.energy import hostshare
from gcbench.factory.local import run_local
from gcbench.plan.loader import load_plan
from gcbench.plan.trials import expand
from gcbench.spec import EnergySettings

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "cases" / "round3" / "C13-rapl-concurrent-trials"
SOCKET_W = 100.0


@pytest.fixture
def rapl(tmp_path):
    """The case's fake socket (100 W), written by its own process."""
    root = tmp_path / "powercap"
    proc = subprocess.Popen([sys.executable, str(CASE / "rapl_writer.py"), str(root)])
    deadline = time.monotonic() + 30
    while not (root / "intel-rapl:0" / "energy_uj").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    yield root
    proc.kill()
    proc.wait()


@pytest.fixture(autouse=True)
def register(tmp_path, monkeypatch):
    monkeypatch.setenv("GCBENCH_HOST_SHARE_DIR", str(tmp_path / "host-share"))


def case_specs(tmp_path, rapl_root: Path, seconds: float = 3.0):
    text = (CASE / "plan.yaml").read_text().replace("RAPL_ROOT", str(rapl_root))
    text = text.replace("window: {seconds: 3}", f"window: {{seconds: {seconds}}}")
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    specs = expand(load_plan(path))
    return [s.model_copy(update={"devices": [i]}) for i, s in enumerate(specs)]


def main_energy(outdir: Path) -> tuple[dict, dict]:
    r = json.loads((outdir / "result.json").read_text())
    return r["energy"]["main"], r


def test_c13_concurrent_trials_do_not_both_book_the_socket(tmp_path, rapl):
    specs = case_specs(tmp_path, rapl)
    out = tmp_path / "out"
    threads = [threading.Thread(target=run_local, args=(s, out / s.trial_id, 120)) for s in specs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = []
    for s in specs:
        main, result = main_energy(out / s.trial_id)
        # observed before the fix: cpu_energy_j 301.5 and 301.3 for a socket that drew ~300 J, no flag
        assert "cpu_energy_shared" in main["flags"]
        assert main["cpu_energy_socket_j"] == pytest.approx(SOCKET_W * main["duration_s"], rel=0.05)
        share = result["host_share"]["share"]["main"]
        assert 0.4 < share < 0.75  # both alive for most of the window: about half each
        assert main["cpu_energy_j"] == pytest.approx(share * main["cpu_energy_socket_j"])
        assert [d["method"] for d in main["cpu"]] == ["rapl-apportioned"]
        other = next(o for o in specs if o is not s)
        assert other.trial_id in main["cpu_reason"] and main["cpu_reason"].startswith("shared: 1 other trial(s)")
        w = result["windows"]["main"]
        spans.append((result["origin_monotonic"] + w["start_s"], result["origin_monotonic"] + w["end_s"]))
    union_s = max(b for _, b in spans) - min(a for a, _ in spans)  # the windows overlap
    drawn_j = SOCKET_W * union_s
    booked_j = sum(main_energy(out / s.trial_id)[0]["cpu_energy_j"] for s in specs)
    assert 0.6 * drawn_j < booked_j <= 1.03 * drawn_j  # never counted twice


def test_trials_one_after_the_other_add_up_to_what_the_socket_drew(tmp_path, rapl):
    specs = case_specs(tmp_path, rapl, seconds=1.5)
    out = tmp_path / "out"
    for s in specs:
        assert run_local(s, out / s.trial_id, 120).exit_code == 0
    total_j = 0.0
    for s in specs:
        main, _ = main_energy(out / s.trial_id)
        assert main["flags"] == [] and "cpu_energy_socket_j" not in main
        assert main["cpu_energy_j"] == pytest.approx(SOCKET_W * main["duration_s"], rel=0.05)
        total_j += main["cpu_energy_j"]
    assert total_j == pytest.approx(
        SOCKET_W * sum(main_energy(out / s.trial_id)[0]["duration_s"] for s in specs), rel=0.05
    )


def test_a_trial_without_cpu_energy_still_counts_as_load_on_the_socket(tmp_path, rapl):
    # another input of the kind: the concurrent trial measures nothing host-wide (no RAPL
    # tree of its own, no GPU) but its process still draws from the socket
    measuring = case_specs(tmp_path, rapl)[0]
    quiet = measuring.model_copy(
        update={
            "variant": "cpu-only",
            "devices": [],
            "energy": EnergySettings(backend="simulated", rapl_root=str(tmp_path / "none")),
        }
    ).with_id()
    out = tmp_path / "out"
    threads = [threading.Thread(target=run_local, args=(s, out / s.trial_id, 120)) for s in (measuring, quiet)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    main, _ = main_energy(out / measuring.trial_id)
    assert "cpu-only #0" in main["cpu_reason"] and "cpu_energy_shared" in main["flags"]
    assert main["cpu_energy_j"] < 0.8 * main["cpu_energy_socket_j"]
    quiet_main, _ = main_energy(out / quiet.trial_id)
    assert quiet_main["cpu_energy_j"] is None and "cpu_energy_shared" not in quiet_main["flags"]


def test_share_of_a_window_is_the_time_average_of_one_over_the_trials_alive():
    # [0, 4] s with one other trial over [1, 3] s: 1 + 1/2 + 1/2 + 1 = 3 of 4 s
    assert hostshare.share_of_window(0.0, 4.0, [("b", 1.0, 3.0)]) == pytest.approx(0.75)
    # two others over the whole window: a third each
    assert hostshare.share_of_window(0.0, 2.0, [("b", 0.0, 2.0), ("c", 0.0, 2.0)]) == pytest.approx(1 / 3)
    assert hostshare.share_of_window(0.0, 2.0, []) == 1.0


def test_which_trials_measure_host_wide_energy(tmp_path, rapl):
    assert hostshare.measures_host_energy(EnergySettings(rapl_root=str(rapl)))
    assert not hostshare.measures_host_energy(EnergySettings(rapl_root=str(tmp_path / "none")))
    # the other host-wide meter: CodeCarbon estimates the whole machine
    assert hostshare.measures_host_energy(EnergySettings(rapl_root=str(tmp_path / "none"), codecarbon=True))


def _register_and_vanish(folder):
    """Trial ``deadbeef`` ("killed #0") registers in ``folder`` from a process that then
    exits without closing its entry, as one SIGKILLed would leave it."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from gcbench.energy.hostshare import HostPresence; "
            "HostPresence('deadbeef', 'killed #0', sys.argv[1]).register()",
            str(folder),
        ],
        check=True,
    )


def test_a_process_that_died_before_the_trial_is_not_counted(tmp_path):
    folder = tmp_path / "reg"
    assert _register_and_vanish(folder).returncode == 0
    assert len(list(folder.glob("*.json"))) == 1  # left open, as by SIGKILL
    me = hostshare.HostPresence("t1", "me #0", folder).register()
    now = time.monotonic()
    assert me.concurrent(now - 1, now + 1) == []
    # not counted, but kept: a trial that ran beside the killed one still needs it (only a stale one is deleted)
    assert len(list(folder.glob("*.json"))) == 2
    me.close()


def test_a_node_meter_is_host_wide_and_its_shared_window_is_apportioned(tmp_path):
    """The BMC measures the whole node: a trial with a node meter takes the host lease, and
    a window another trial shared books only its share of the node, flagged."""
    from gcbench.spec import NodeSettings

    node = NodeSettings(ipmi={"host": "bmc", "user": "u"})
    assert hostshare.measures_host_energy(EnergySettings(rapl_root=str(tmp_path / "none"), node=node))
    folder = tmp_path / "reg"
    a = hostshare.HostPresence("a", "A #0", folder).register()
    b = hostshare.HostPresence("b", "B #0", folder).register()  # alive through A's window
    t0 = time.monotonic()
    time.sleep(0.2)
    energy = {
        "main": {
            "node_energy_j": 1000.0,
            "node": {"device": "node", "energy_j": 1000.0, "method": "ipmi-node-power-integration"},
            "cpu_energy_j": None,
            "cpu": [],
            "flags": [],
        }
    }
    out = hostshare.apply(energy, {"main": {"start_s": 0.0, "end_s": 0.2}}, t0, a)
    b.close()
    a.close()
    main = energy["main"]
    assert out["concurrent"]["main"][0].startswith("B #0 (b, pid") and out["share"]["main"] == pytest.approx(0.5)
    assert main["node_energy_whole_j"] == 1000.0 and main["node_energy_j"] == pytest.approx(500.0)
    assert main["node"]["method"] == "ipmi-node-power-integration-apportioned"
    assert "node_energy_shared" in main["flags"] and "B #0" in main["node"]["reason"]


class _Register:
    """A presence whose register holds given lifetimes (monotonic s) of the other trials."""

    note = None

    def __init__(self, lifetimes: dict[str, tuple[float, float]], me: str):
        self.others = {k: v for k, v in lifetimes.items() if k != me}

    def concurrent(self, start: float, end: float) -> list[tuple[str, float, float]]:
        return sorted((k, max(a, start), min(b, end)) for k, (a, b) in self.others.items() if a < end and b > start)


def test_three_partly_overlapping_trials_with_package_and_dram_add_up_to_the_socket():
    # A [0, 3] s, B [1, 4] s, C [2, 5] s on one socket drawing 100 W package + 20 W DRAM
    lifetimes = {"A": (0.0, 3.0), "B": (1.0, 4.0), "C": (2.0, 5.0)}
    totals = {"package": 0.0, "dram": 0.0, "cpu": 0.0}
    for me, (a, b) in lifetimes.items():
        d = b - a
        energy = {
            "main": {
                "cpu_energy_j": 120.0 * d,
                "cpu": [
                    {"device": "package-0", "energy_j": 100.0 * d, "method": "rapl-counter"},
                    {"device": "dram-0", "energy_j": 20.0 * d, "method": "rapl-counter"},
                ],
            }
        }
        out = hostshare.apply(energy, {"main": {"start_s": a, "end_s": b}}, 0.0, _Register(lifetimes, me))
        main = energy["main"]
        assert hostshare.FLAG in main["flags"] and main["cpu_energy_socket_j"] == pytest.approx(120.0 * d)
        assert [dom["method"] for dom in main["cpu"]] == ["rapl-apportioned"] * 2
        assert out["share"]["main"] == pytest.approx({"A": 11 / 18, "B": 4 / 9, "C": 11 / 18}[me])
        totals["package"] += main["cpu"][0]["energy_j"]
        totals["dram"] += main["cpu"][1]["energy_j"]
        totals["cpu"] += main["cpu_energy_j"]
    # the socket ran 5 s: 500 J package, 100 J DRAM, booked once in all
    assert totals == pytest.approx({"package": 500.0, "dram": 100.0, "cpu": 600.0})


def test_the_register_lock_opens_for_every_user_whatever_the_umask(tmp_path):
    # a capped trial's container runs as root: with umask 022 its lock file was 0644 and a
    # worker's trial could not open it (its register 'not writable', concurrency unchecked)
    import os
    import stat

    folder = tmp_path / "reg"
    old = os.umask(0o022)
    try:
        me = hostshare.HostPresence("t1", "me #0", folder).register()
    finally:
        os.umask(old)
    assert me.note is None
    assert stat.S_IMODE((folder / hostshare.LOCK_NAME).stat().st_mode) == 0o666
    assert stat.S_IMODE(folder.stat().st_mode) == 0o1777
    me.close()


def test_prepare_share_dir_makes_the_folder_a_docker_runner_mounts(tmp_path, monkeypatch):
    import stat

    monkeypatch.setenv("GCBENCH_HOST_SHARE_DIR", str(tmp_path / "a" / "share"))
    folder = hostshare.prepare_share_dir()
    assert folder == tmp_path / "a" / "share" and stat.S_IMODE(folder.stat().st_mode) == 0o1777


def test_a_trial_that_started_beside_this_one_and_was_killed_still_counts(tmp_path):
    # B registers after A began and is SIGKILLed before A's window ends: its entry stays
    # open with a dead pid; before the fix A dropped it (not alive, not seen at A's start)
    # and booked the socket's whole energy, B's CPU load included, unflagged
    folder = tmp_path / "reg"
    me = hostshare.HostPresence("t1", "me #0", folder).register()
    start = time.monotonic()
    _register_and_vanish(folder)
    end = time.monotonic() + 1.0
    (found,) = me.concurrent(start, end)
    assert found[0].startswith("killed #0 (deadbeef, pid ") and found[2] == end  # its end unknown: to the window's
    # a trial registered after B died never saw it run: B is left out for it, and kept for A
    later = hostshare.HostPresence("t2", "later #0", folder).register()
    now = time.monotonic()
    assert [label for label, _, _ in later.concurrent(now, now + 1)] == [f"me #0 (t1, pid {os.getpid()})"]
    assert [label.split(" (")[0] for label, _, _ in me.concurrent(start, end)] == ["killed #0", "later #0"]
    later.close()
    me.close()
