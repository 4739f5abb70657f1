"""A trial's own CPUs (gcbench.energy.cpuset): the split on fake /sys trees, contention
from fake /proc files with known numbers, and real trials: two at once under two GPU
leases get disjoint sets, and a busy loop on a trial's core makes the rule judge it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gcbench.energy import cpuset
from gcbench.energy.cpuset import CpuPlan, Snapshot, contention, format_cpulist, parse_cpulist, plan_cpus
from gcbench.plan import expand, plan_from_text
from gcbench.plan.schema import ValidationSettings
from gcbench.validate import contention_findings

# ----------------------------------------------------------------------------------
# fake /sys
# ----------------------------------------------------------------------------------


def fake_sys(root: Path, devices: list[tuple[str, str, str, int]], nodes: dict[int, str]) -> Path:
    """A /sys tree: PCI functions (bus id, vendor, class, numa_node) and NUMA nodes' cpulists."""
    for bus, vendor, klass, node in devices:
        d = root / "bus" / "pci" / "devices" / bus
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(klass + "\n")
        (d / "numa_node").write_text(f"{node}\n")
    for node, cpulist in nodes.items():
        d = root / "devices" / "system" / "node" / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpulist + "\n")
    return root


TWO_SOCKETS = [
    ("0000:02:00.0", "0x1a03", "0x030000", -1),  # the BMC's VGA (ASPEED): not a GPU
    ("0000:3b:00.0", "0x10de", "0x030200", 0),
    ("0000:3b:00.1", "0x10de", "0x040300", 0),  # the GPU's HDMI audio function: not a GPU
    ("0000:5e:00.0", "0x10de", "0x030200", 0),
    ("0000:af:00.0", "0x10de", "0x030200", 1),
    ("0000:d8:00.0", "0x10de", "0x030000", 1),
    ("0000:00:1f.0", "0x8086", "0x060100", 0),
]


def test_cpulists_read_and_written_as_the_kernel_does():
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpulist([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert parse_cpulist(format_cpulist([5])) == [5]
    with pytest.raises(ValueError):
        parse_cpulist("3-1")


def test_gpus_are_nvidia_display_functions_in_bus_order_with_their_numa_nodes(tmp_path):
    root = fake_sys(tmp_path, TWO_SOCKETS, {0: "0-7", 1: "8-15"})
    gpus = cpuset.host_gpus(root)
    assert [(g.index, g.bus_id, g.numa_node) for g in gpus] == [
        (0, "0000:3b:00.0", 0),
        (1, "0000:5e:00.0", 0),
        (2, "0000:af:00.0", 1),
        (3, "0000:d8:00.0", 1),
    ]


def test_each_gpu_gets_cpus_of_its_own_numa_node(tmp_path):
    root = fake_sys(tmp_path, TWO_SOCKETS, {0: "0-7", 1: "8-15"})
    avail = list(range(16))
    got = {d: plan_cpus([d], available=avail, sys_root=root) for d in range(4)}
    assert [got[d].cpus for d in range(4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert got[2].numa_nodes == [1] and "NUMA node" in got[2].how and not got[2].shared
    two = plan_cpus([0, 1], available=avail, sys_root=root)
    assert two.cpus == list(range(8)) and two.threads()["torch_intra_op"] == 8
    assert two.threads()["torch_inter_op"] == 1 and two.threads()["OMP_NUM_THREADS"] == 8


def test_numa_node_of_another_size_and_a_restricted_affinity(tmp_path):
    # node 0 has 4 CPUs for 2 GPUs, node 1 has 12 for 2; this process may use only 0-2 and 8-15
    root = fake_sys(tmp_path, TWO_SOCKETS, {0: "0-3", 1: "4-15"})
    avail = [0, 1, 2, *range(8, 16)]
    sets = [plan_cpus([d], available=avail, sys_root=root).cpus for d in range(4)]
    assert sets == [[0], [1, 2], [8, 9, 10, 11], [12, 13, 14, 15]]


def test_unknown_numa_node_falls_back_to_an_even_split(tmp_path):
    devices = [(bus, v, c, -1) for bus, v, c, _ in TWO_SOCKETS]
    root = fake_sys(tmp_path, devices, {0: "0-15"})
    sets = [plan_cpus([d], available=list(range(16)), sys_root=root) for d in range(4)]
    assert [s.cpus for s in sets] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert all("even split" in s.how for s in sets)


def test_without_gpus_in_sys_the_runners_host_devices_are_the_slots(tmp_path):
    empty = tmp_path / "sys"
    empty.mkdir()
    for n_cpus in (1, 2, 3, 7, 16, 64):
        for host in ([0], [0, 1], [0, 1, 2], [0, 1, 2, 3, 4, 5, 6, 7]):
            avail = list(range(n_cpus))
            sets = [plan_cpus([d], available=avail, host_devices=host, sys_root=empty) for d in host]
            assert all(s.cpus for s in sets)
            if n_cpus >= len(host):
                # disjoint, and together every CPU
                assert sorted(c for s in sets for c in s.cpus) == avail, (n_cpus, host)
                assert not any(s.shared for s in sets)
            else:
                assert any(s.shared for s in sets)  # more GPUs than CPUs: said so


def test_the_cpus_setting_count_all_and_too_many(tmp_path):
    empty = tmp_path / "sys"
    empty.mkdir()
    avail = list(range(8))
    assert plan_cpus([1], 2, available=avail, host_devices=[0, 1], sys_root=empty).cpus == [4, 5]
    many = plan_cpus([1], 6, available=avail, host_devices=[0, 1], sys_root=empty)
    assert many.cpus == [4, 5, 6, 7] and "cpus: 6 asked" in many.not_in_effect and "4-7" in many.not_in_effect
    every = plan_cpus([1], "all", available=avail, host_devices=[0, 1], sys_root=empty)
    assert every.cpus == avail and every.shared


@pytest.mark.parametrize("value", [0, -1, 5000, "many", 2.5, True, None])
def test_a_bad_cpus_setting_is_a_plan_error_naming_its_line_and_field(tmp_path, value):
    from gcbench.errors import PlanError
    from gcbench.plan import load_plan

    path = tmp_path / "p.yaml"
    path.write_text(
        "name: p\nworkloads:\n  - name: noop\n    kind: noop\n    settings:\n      cpus: " + json.dumps(value) + "\n"
    )
    with pytest.raises(PlanError) as err:
        load_plan(path)
    text = str(err.value)
    assert f"{path}:6" in text and "settings.cpus" in text and "cpus must be auto, all or a whole number" in text


def test_cpus_is_a_factor_like_any_setting():
    specs = expand(
        plan_from_text("name: p\nworkloads: [{name: n, kind: noop, matrix: {cpus: [1, 2, all]}, repetitions: 1}]\n")
    )
    assert sorted(str(s.settings["cpus"]) for s in specs) == ["1", "2", "all"]


def test_apply_pins_every_thread_and_sets_the_thread_variables():
    mine = sorted(os.sched_getaffinity(0))
    code = (
        "import os, threading, json, time\n"
        "from gcbench.energy.cpuset import CpuPlan, apply\n"
        "t = threading.Thread(target=time.sleep, args=(2,)); t.start()\n"  # a thread started before pinning
        f"out = apply(CpuPlan([{mine[-1]}]))\n"
        "tids = [int(x) for x in os.listdir('/proc/self/task')]\n"
        "print(json.dumps([out, sorted({c for tid in tids for c in os.sched_getaffinity(tid)}),"
        " os.environ['OMP_NUM_THREADS'], os.environ['MKL_NUM_THREADS']]))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "7"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    out, cpus, omp, mkl = json.loads(proc.stdout)
    assert out["applied"] is True and out["replaced_env"] == {"OMP_NUM_THREADS": "7"}
    assert cpus == [mine[-1]] and omp == mkl == "1"


# ----------------------------------------------------------------------------------
# contention from fake /proc
# ----------------------------------------------------------------------------------

STAT_LINE = "cpu{n} {user} {nice} {system} {idle} {iowait} {irq} {softirq} {steal} {guest} 0\n"


def write_proc(root: Path, cpus: dict[int, tuple[int, ...]], procs: dict[int, tuple[int, int, int, int, int]]):
    """/proc/stat (per CPU: user nice system idle iowait irq softirq steal guest) and
    /proc/<pid>/stat (ppid, utime, stime, cutime, cstime; a name with spaces and ')')."""
    root.mkdir(parents=True, exist_ok=True)
    lines = ["cpu  1 2 3 4 5 6 7 8 9 10\n"]
    keys = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest")
    for n, values in sorted(cpus.items()):
        lines.append(STAT_LINE.format(n=n, **dict(zip(keys, values, strict=True))))
    (root / "stat").write_text("".join(lines) + "intr 1 2 3\nctxt 5\n")
    for pid, (ppid, ut, st, cut, cst) in procs.items():
        d = root / str(pid)
        d.mkdir(exist_ok=True)
        fields = ["S", str(ppid), *["0"] * 9, str(ut), str(st), str(cut), str(cst), *["0"] * 30]
        (d / "stat").write_text(f"{pid} (py thon) x) " + " ".join(fields) + "\n")


def test_contention_share_from_proc_files_with_known_numbers(tmp_path):
    # the trial (pid 100) with its sampler (101) and a tokenizer child (102); 200 is someone else
    before, after = tmp_path / "t0", tmp_path / "t1"
    write_proc(
        before,
        {
            0: (1000, 0, 500, 9000, 10, 5, 5, 0, 0),
            1: (2000, 10, 300, 8000, 0, 0, 0, 0, 0),
            2: (1, 1, 1, 1, 1, 1, 1, 1, 0),
        },
        {100: (1, 300, 100, 0, 0), 101: (100, 20, 10, 0, 0), 102: (100, 50, 0, 0, 0), 200: (1, 999, 999, 0, 0)},
    )
    # 2 s later (CLK_TCK 100: 200 ticks per CPU): CPU 0 busy +150 (user 100, system 30, irq 10, softirq 5,
    # steal 5), idle +50; CPU 1 busy +120 (nice 20 + user 100); iowait and guest are not busy (guest is in user)
    write_proc(
        after,
        {
            0: (1100, 0, 530, 9050, 40, 15, 10, 5, 60),
            1: (2100, 30, 300, 8080, 0, 0, 0, 0, 0),
            2: (9, 9, 9, 9, 9, 9, 9, 9, 0),
        },
        # the trial +60, the sampler +10; the tokenizer child ended and was reaped by the trial (its 70
        # ticks, 50 of them before the window, now in the trial's cutime + cstime): own +90 ticks
        {100: (1, 340, 120, 60, 10), 101: (100, 25, 15, 0, 0), 200: (1, 5000, 5000, 0, 0)},
    )
    cpus = [0, 1]
    t0 = Snapshot(10.0, cpuset.cpu_busy_ticks(cpus, before), cpuset.tree_ticks(100, before))
    t1 = Snapshot(12.0, cpuset.cpu_busy_ticks(cpus, after), cpuset.tree_ticks(100, after))
    assert t0.busy == {0: 1510, 1: 2310} and t1.busy == {0: 1660, 1: 2430}
    assert (t0.own, t1.own) == (480, 570)
    c = contention(t0, t1, ticks_per_s=100)
    # busy 150 + 120 = 270 ticks, own 90 ticks: others 180 ticks = 1.8 s of 2 CPUs x 2 s
    assert c["busy_s"] == pytest.approx(2.7) and c["own_s"] == pytest.approx(0.9)
    assert c["others_s"] == pytest.approx(1.8) and c["capacity_s"] == pytest.approx(4.0)
    assert c["share"] == pytest.approx(0.45)
    assert c["per_cpu_busy_share"] == {"0": pytest.approx(0.75), "1": pytest.approx(0.6)}


def test_snapshot_counts_the_trees_processes_and_the_resolution_follows(tmp_path):
    # the tree of 100 holds 100, 101 and 102 (200 is someone else's): 3 processes; on 2 CPUs the
    # whole-tick readings can make up 2 x 2 + 2 x 3 = 10 ticks of "others"
    write_proc(
        tmp_path / "p",
        {0: (1000, 0, 500, 9000, 0, 0, 0, 0, 0), 1: (2000, 0, 300, 8000, 0, 0, 0, 0, 0)},
        {100: (1, 300, 100, 0, 0), 101: (100, 20, 10, 0, 0), 102: (101, 50, 0, 0, 0), 200: (1, 9, 9, 0, 0)},
    )
    snap = cpuset.snapshot([0, 1], pid=100, proc_root=tmp_path / "p")
    assert (snap.own, snap.own_processes) == (480, 3)
    assert cpuset.resolution_ticks(2, 3) == 10
    # 10 ticks of others in a 0.1-s window of 2 CPUs: 50 % by the formula, all of it rounding
    short = contention(Snapshot(0.0, {0: 0, 1: 0}, 0, 3), Snapshot(0.1, {0: 8, 1: 7}, 5, 3), ticks_per_s=100)
    assert short["share"] == pytest.approx(0.5) and short["resolution_s"] == pytest.approx(0.1)
    assert short["beyond_resolution"] is False
    hog = contention(Snapshot(0.0, {0: 0, 1: 0}, 0, 3), Snapshot(1.2, {0: 120, 1: 60}, 60, 3), ticks_per_s=100)
    assert hog["others_s"] == pytest.approx(1.2) and hog["beyond_resolution"] is True


def test_share_within_the_readings_rounding_is_not_judged_but_one_busy_core_of_sixteen_is():
    """A 0.1-s window (a tokenize window of the external paths) reads 20-50 % "others" from
    10-ms rounding alone: no flag. One busy core beside a trial on 16 CPUs is 1/16 = 6.2 %
    of its core-seconds, 120 ticks in 1.2 s, far beyond the 40 ticks rounding can make:
    flagged (subtracting the resolution from the share instead would have hidden it)."""
    reasons, flags = [], []
    short = {"others_s": 0.04, "capacity_s": 0.1, "resolution_s": 0.12, "beyond_resolution": False}
    contention_findings(result_with(0.4, **short), ValidationSettings(cpu_contention_invalid_share=0.2), reasons, flags)
    assert reasons == [] and flags == []
    one_core = {"others_s": 1.2, "capacity_s": 19.2, "n_cpus": 16, "cpus": "0-15"}
    one_core |= {"resolution_s": 0.40, "beyond_resolution": True}
    contention_findings(result_with(0.0625, **one_core), ValidationSettings(), reasons, flags)
    assert reasons == [] and flags == [
        "CPU contention: other processes used 6.2 % of the trial's 16 CPU(s) (0-15) during the window "
        "(1.20 of 19.20 core-s); flagged above 5 %"
    ]


def test_a_tree_busier_than_its_cpus_gives_no_negative_share(tmp_path):
    a, b = Snapshot(0.0, {0: 100}, 0), Snapshot(1.0, {0: 150}, 80)  # a child that widened its affinity
    assert contention(a, b, ticks_per_s=100)["share"] == 0.0


def test_an_offline_cpu_or_unreadable_proc_is_recorded_not_raised(tmp_path):
    write_proc(tmp_path / "p", {0: (1, 0, 0, 1, 0, 0, 0, 0, 0)}, {1: (0, 1, 1, 0, 0)})
    probe = cpuset.ContentionProbe([0, 5], pid=1, proc_root=tmp_path / "p")
    probe.begin("main")
    out = probe.end("main")
    assert out["share"] is None and "5" in out["error"]
    assert cpuset.ContentionProbe([0], proc_root=tmp_path / "missing").end("main") is None


# ----------------------------------------------------------------------------------
# the validation rule
# ----------------------------------------------------------------------------------


def result_with(share: float | None, **extra) -> dict:
    w = {"share": share, "others_s": (share or 0) * 4, "capacity_s": 4.0, "n_cpus": 2, "cpus": "0-1", **extra}
    return {"cpus": {"cpu_list": "0-1", "error": None, "contention": {"main": w}}}


@pytest.mark.parametrize(
    ("share", "flagged", "invalid"), [(0.01, False, False), (0.12, True, False), (0.31, False, True)]
)
def test_rule_flags_and_invalidates_a_contended_window_naming_the_share(share, flagged, invalid):
    reasons, flags = [], []
    contention_findings(result_with(share), ValidationSettings(cpu_contention_invalid_share=0.2), reasons, flags)
    assert bool(flags) == flagged and bool(reasons) == invalid
    for text in reasons + flags:
        assert text.startswith("CPU contention: ") and f"{100 * share:.1f} %" in text and "(0-1)" in text


def test_the_plans_thresholds_decide():
    reasons, flags = [], []
    v = ValidationSettings(cpu_contention_flag_share=0.01, cpu_contention_invalid_share=0.1)
    contention_findings(result_with(0.12), v, reasons, flags)
    assert reasons and "limit 10 %" in reasons[0] and not flags
    with pytest.raises(ValueError, match="cpu_contention_flag_share"):
        ValidationSettings(cpu_contention_flag_share=0.5, cpu_contention_invalid_share=0.2)


def test_unknown_contention_and_an_unpinned_trial_are_flagged_and_old_results_not_judged():
    reasons, flags = [], []
    r = result_with(None, error="/proc unreadable")
    r["cpus"]["error"] = "sched_setaffinity failed"
    contention_findings(r, ValidationSettings(), reasons, flags)
    assert not reasons and len(flags) == 2 and "/proc unreadable" in flags[1]
    contention_findings({}, ValidationSettings(), reasons, flags)
    assert not reasons and len(flags) == 2


# ----------------------------------------------------------------------------------
# real trials
# ----------------------------------------------------------------------------------

NOOP = """\
name: cpus
window: {seconds: WINDOW}
energy: {backend: simulated, sample_hz: 10, counter_hz: 5}
workloads: [{name: noop, kind: noop, repetitions: 2, settings: SETTINGS}]
"""


def noop_specs(window_s: float, settings: str = "{}"):
    return expand(plan_from_text(NOOP.replace("WINDOW", str(window_s)).replace("SETTINGS", settings)))


def test_two_trials_at_once_under_two_gpu_leases_get_disjoint_cpus_and_threads(tmp_path, pg_url):
    from gcbench.factory.local import run_local
    from gcbench.store import gpulock

    specs = [s.model_copy(update={"devices": [i]}) for i, s in enumerate(noop_specs(1.5))]
    out = tmp_path / "out"
    outcomes: list = []

    def one(spec):
        with gpulock.hold_gpus(spec.devices, spec.trial_id, host="h", url=pg_url, log=lambda m: None):
            outcomes.append(run_local(spec, out / spec.trial_id, 120, host_devices=[0, 1]))

    threads = [threading.Thread(target=one, args=(s,)) for s in specs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [o.exit_code for o in outcomes] == [0, 0]
    results = [json.loads((out / s.trial_id / "result.json").read_text()) for s in specs]
    # they did run at once
    assert all(r["host_share"]["concurrent"].get("main") for r in results)
    sets = [set(r["cpus"]["cpus"]) for r in results]
    assert sets[0] and sets[1] and not sets[0] & sets[1]
    assert sets[0] | sets[1] <= os.sched_getaffinity(0)
    for r, s in zip(results, sets, strict=True):
        assert r["cpus"]["applied"] is True and r["cpus"]["shared"] is False
        assert r["cpus"]["threads"] == {
            "torch_intra_op": len(s),
            "torch_inter_op": 1,
            "OMP_NUM_THREADS": len(s),
            "MKL_NUM_THREADS": len(s),
        }
        assert "slice of GPU(s)" in r["cpus"]["how"] and "runner's host devices" in r["cpus"]["how"]
        assert 0 <= r["metrics"]["cpu_contention_share"] <= 1


def test_a_busy_loop_on_the_trials_core_makes_the_rule_judge_its_window(tmp_path):
    spec = noop_specs(1.5, "{cpus: 1}")[0]
    (tmp_path / "spec.json").write_text(spec.to_json())
    core = min(os.sched_getaffinity(0))  # the first CPU of the trial's slice: the one it gets with cpus: 1
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, [{core}])\nwhile True: pass"],
        stdin=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.2)
        proc = subprocess.run(
            [sys.executable, "-m", "gcbench.trial", str(tmp_path / "spec.json"), str(tmp_path / "out")],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        hog.kill()
        hog.wait()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["cpus"]["cpus"] == [core]
    main = result["cpus"]["contention"]["main"]
    # the hog had the core to itself while the no-op trial waited: nearly all of it
    assert main["share"] > 0.8 and result["metrics"]["cpu_contention_share"] == main["share"]
    reasons: list[str] = []
    contention_findings(result, ValidationSettings(cpu_contention_invalid_share=0.2), reasons, [])
    assert reasons and reasons[0].startswith("CPU contention: other processes used") and f"({core})" in reasons[0]
    flags: list[str] = []
    contention_findings(result, ValidationSettings(), [], flags)  # the default: contention flags, never invalidates
    assert flags and flags[0].startswith("CPU contention: other processes used")


def test_a_plan_asking_for_more_cpus_than_its_share_says_so(tmp_path):
    spec = noop_specs(0.3, "{cpus: 4096}")[0]
    (tmp_path / "spec.json").write_text(spec.to_json())
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.trial", str(tmp_path / "spec.json"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert "cpus: 4096 asked" in result["settings_not_in_effect"]["cpus"]
    assert result["cpus"]["cpus"] == sorted(os.sched_getaffinity(0))


def test_cpu_plan_record_is_plain_json():
    d = CpuPlan([0, 1, 2, 5], how="x", available=[0, 1, 2, 3, 4, 5]).to_dict()
    assert d["cpu_list"] == "0-2,5" and d["count"] == 4 and d["available"] == "0-5"
    json.dumps(d)


def test_by_default_contention_flags_and_never_invalidates():
    reasons, flags = [], []
    contention_findings(result_with(0.9), ValidationSettings(), reasons, flags)
    assert reasons == [] and flags and "90.0 %" in flags[0]
