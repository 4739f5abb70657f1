"""Faults: nothing measured is lost, nothing is stored twice, and what cannot be trusted
is marked so (issue 8, section 1). Real trial processes, real PostgreSQL servers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from reliability_support import (
    FAKE_NVML,
    complete_rows,
    noop_plan,
    query,
    run_ctx,
    small_filesystem,
    trial_items,
    write_samples,
)

pytestmark = pytest.mark.integration


def _collect(plan, items, run_id="manual__reliability"):
    from gcbench.factory.tasks import collect_run

    return collect_run(plan, run_ctx(run_id), items)


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


# ----------------------------------------------------------------------------- SIGKILL mid-window


def test_trial_sigkilled_mid_window_is_failed_with_log_tail_partial_samples_and_no_metric(gcbench_env, pg_url):
    """SIGKILL the trial process itself while its 30 s window is open."""
    from gcbench.energy.nvml import process_tree
    from gcbench.factory.local import RunnerOutcome, trial_argv, trial_env
    from gcbench.plan import expand
    from gcbench.store import db
    from gcbench.validate import validate_run

    plan = noop_plan("killed", window="{seconds: 30}")
    spec = expand(plan)[0]
    item = trial_items([spec], gcbench_env / "run")[0]
    outdir = Path(item["outdir"])
    started = time.monotonic()
    with open(outdir / "runner.log", "ab") as log:
        proc = subprocess.Popen(
            trial_argv(item["spec_path"], str(outdir)),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=trial_env(spec),
            start_new_session=True,
        )
    try:
        _wait_for(
            lambda: (
                "window main begins" in (outdir / "trial.log").read_text() if (outdir / "trial.log").exists() else False
            ),
            60,
            "the window to open",
        )
        # at least two flushes (every 0.5 s) of samples inside the window
        _wait_for(lambda: complete_rows(outdir / "samples.csv") >= 20, 30, "samples to be flushed")
        sampler = process_tree(proc.pid) - {proc.pid}
        assert sampler, "the sampler runs in its own process"
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    RunnerOutcome(spec.trial_id, proc.returncode, time.monotonic() - started, False, str(outdir)).save()
    # the orphaned sampler sees its stdin close, flushes and ends by itself
    _wait_for(lambda: not any(_alive(p) for p in sampler), 10, "the sampler to stop")
    assert time.monotonic() - started < 30, "killed mid-window, not after it"
    assert not (outdir / "result.json").exists()
    written = complete_rows(outdir / "samples.csv")

    summary = _collect(plan, [item])
    assert summary["stored"] == 1 and summary["failed"] == 1 and summary["samples"] == written
    ((status, exit_code, error, tail, partial, n, n_metrics),) = query(
        pg_url,
        "SELECT status, exit_code, error, log_tail, samples_partial, samples_count, "
        "(SELECT count(*) FROM metrics m WHERE m.trial_pk = t.id) FROM trials t",
    )
    assert (status, exit_code, partial, n, n_metrics) == ("failed", -9, True, written, 0)
    assert "exit status -9" in error
    assert "window main begins" in tail and "--- trial.log ---" in tail
    assert query(pg_url, "SELECT count(*) FROM samples")[0][0] == written
    with db.connection() as conn:
        summary = validate_run(conn, query(pg_url, "SELECT id FROM dag_runs")[0][0], plan.validation)
    ((valid, reasons),) = query(pg_url, "SELECT valid, reasons FROM trials")
    assert valid is False and any(r.startswith("trial failed") and "exit status -9" in r for r in reasons)
    assert summary["reasons"] == {"trial failed": 1}  # counted by rule (validate.finding_rule)


def test_trial_killed_mid_window_turns_its_dag_run_red_with_the_reason_after_storing_and_reporting_all(
    gcbench_env, pg_url
):
    """dag.test() of 3 no-op trials; one SIGKILLs itself mid-window (fault injection): the
    others are collected and reported, then check_trials fails the run naming the trial."""
    plan_path = gcbench_env / "dagkill.yaml"
    plan_path.write_text(
        "name: dagkill\ndevices: [0]\nrepetitions: 1\norder: sequential\nwindow: {seconds: 1.2}\n"
        "energy: {backend: simulated}\n"
        "workloads:\n"
        "  - {name: ok, kind: noop, repetitions: 2}\n"
        "  - {name: killed, kind: noop, settings: {kill_self_after_s: 0.6}}\n"
    )
    status_path = gcbench_env / "status.json"
    env = {**os.environ, "AIRFLOW_HOME": str(gcbench_env / "airflow")}
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.factory.testrun", str(plan_path), str(status_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert status_path.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    status = json.loads(status_path.read_text())
    assert status["state"] == "failed", status
    assert {k: v for k, v in status["tasks"].items() if v != "success"} == {"check_trials": "failed"}
    assert sum(k.startswith("run_trial_gpu0[") for k in status["tasks"]) == 3

    rows = query(
        pg_url,
        "SELECT t.workload, t.status, t.exit_code, t.samples_partial, t.samples_count, t.valid, "
        "(SELECT count(*) FROM metrics m WHERE m.trial_pk = t.id), t.trial_id "
        "FROM trials t ORDER BY t.workload, t.repetition",
    )
    assert [(r[0], r[1]) for r in rows] == [("killed", "failed"), ("ok", "ok"), ("ok", "ok")]
    killed = rows[0]
    assert killed[2] == -9 and killed[3] is True and killed[4] > 0 and killed[5] is False and killed[6] == 0
    assert all(r[6] > 0 and r[4] > 0 for r in rows[1:]), "the other trials are stored with metrics and samples"
    report = Path(status["report"]).with_suffix(".md").read_text()
    assert f"`{killed[7]}`" in report and "exit status -9" in report
    reason = proc.stdout + proc.stderr
    assert (
        f"1 trial(s) failed: {killed[7]} (killed #0): trial process ended without a result (exit status -9)" in reason
    ), reason[-3000:]


# ----------------------------------------------------------------------------- PostgreSQL stopped


def test_postgres_stopped_while_collect_runs_fails_the_task_and_the_retry_stores_every_sample_once(
    stoppable_pg, tmp_path
):
    from gcbench.errors import StoreError
    from gcbench.plan import expand

    plan = noop_plan("pgdown", repetitions=6)
    specs = expand(plan)
    items = trial_items(specs, tmp_path / "run")
    written = {}
    for k, item in enumerate(items):
        written[item["trial_id"]] = write_samples(Path(item["outdir"]) / "samples.csv", 150_000 + k)
        (Path(item["outdir"]) / "trial.log").write_text("killed before result.json\n")
    errors: list[BaseException] = []

    def collect():
        try:
            _collect(plan, items)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            errors.append(exc)

    th = threading.Thread(target=collect)
    th.start()
    # stop the server once the first trial is committed, while the next ones are being copied
    _wait_for(lambda: _count(stoppable_pg.url, "trials") >= 1 or not th.is_alive(), 120, "the first trial")
    stoppable_pg.stop()
    th.join(60)
    assert not th.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], StoreError), errors
    assert "results database" in str(errors[0]) or "storing trial" in str(errors[0])

    stoppable_pg.start()
    committed = _count(stoppable_pg.url, "trials")
    assert 1 <= committed < len(items), "the server was stopped in the middle of collect"
    summary = _collect(plan, items)  # Airflow's retry runs the same task body
    assert summary["stored"] + summary["unchanged"] == len(items)
    per_trial = dict(
        query(
            stoppable_pg.url,
            "SELECT t.trial_id, count(s.*) FROM trials t LEFT JOIN samples s ON s.trial_pk = t.id GROUP BY t.trial_id",
        )
    )
    assert per_trial == written
    assert query(stoppable_pg.url, "SELECT trial_id, samples_count FROM trials ORDER BY 1") == sorted(written.items())
    assert (
        query(
            stoppable_pg.url,
            "SELECT count(*) FROM (SELECT trial_pk, t_s FROM samples GROUP BY 1, 2 HAVING count(*) > 1) d",
        )[0][0]
        == 0
    )


def _count(url: str, table: str) -> int:
    try:
        return query(url, f"SELECT count(*) FROM {table}")[0][0]
    except Exception:  # noqa: BLE001 - schema not there yet
        return 0


def test_collect_task_is_retried_with_backoff_on_store_errors():
    from gcbench.factory.dag import build_dag

    dag = build_dag(noop_plan("retries"))
    collect = dag.get_task("collect")
    assert collect.retries >= 1 and collect.retry_exponential_backoff
    assert dag.max_active_runs == 1, "Airflow runs one DAG run of a plan at a time"


# ----------------------------------------------------------------------------- no duplicates


def _real_trials(plan, run_dir: Path) -> list[dict]:
    from gcbench.factory.local import run_local
    from gcbench.plan import expand

    items = trial_items(expand(plan), run_dir)
    for item, spec in zip(items, expand(plan), strict=True):
        assert run_local(spec, Path(item["outdir"]), 60).exit_code == 0
    return items


def _duplicates(url: str) -> int:
    return query(
        url,
        "SELECT (SELECT count(*) FROM (SELECT dag_run_id, trial_id FROM trials GROUP BY 1, 2 "
        "HAVING count(*) > 1) a) + (SELECT count(*) FROM (SELECT trial_pk, t_s, device FROM samples "
        "GROUP BY 1, 2, 3 HAVING count(*) > 1) b) + (SELECT count(*) FROM (SELECT dag_id, run_id "
        "FROM dag_runs GROUP BY 1, 2 HAVING count(*) > 1) c)",
    )[0][0]


def test_collect_run_twice_stores_every_row_once(gcbench_env, pg_url):
    plan = noop_plan("twice", repetitions=3)
    items = _real_trials(plan, gcbench_env / "run")
    first = _collect(plan, items)
    second = _collect(plan, items)
    assert (first["stored"], second["stored"], second["unchanged"]) == (3, 0, 3)
    rows_written = sum(complete_rows(Path(i["outdir"]) / "samples.csv") for i in items)
    assert query(pg_url, "SELECT count(*) FROM samples")[0][0] == rows_written == first["samples"]
    assert query(pg_url, "SELECT count(*) FROM metrics")[0][0] > 0
    assert _duplicates(pg_url) == 0


COLLECT_SCRIPT = """
import json, sys
from gcbench.factory.tasks import collect_run
from gcbench.plan import plan_from_text
plan = plan_from_text(open(sys.argv[1]).read())
items = json.load(open(sys.argv[2]))
print(json.dumps(collect_run(plan, {"run_id": sys.argv[3], "logical_date": None}, items)))
"""


@pytest.mark.parametrize("how", ["threads", "processes"])
def test_two_collectors_of_one_dag_run_at_once_store_no_duplicates(gcbench_env, pg_url, how):
    from reliability_support import NOOP_PLAN

    text = NOOP_PLAN.format(name="concurrent", repetitions=4, window="{steps: 1}", extra="")
    plan = noop_plan("concurrent", repetitions=4)
    items = _real_trials(plan, gcbench_env / "run")
    summaries = _race(how, 2, plan, text, items, ["manual__same", "manual__same"], gcbench_env)
    assert (
        sorted(s["stored"] for s in summaries) in ([0, 4], [1, 3], [2, 2])
        and sum(s["stored"] + s["unchanged"] for s in summaries) == 8
    )
    rows_written = sum(complete_rows(Path(i["outdir"]) / "samples.csv") for i in items)
    assert query(pg_url, "SELECT count(*) FROM trials")[0][0] == 4
    assert query(pg_url, "SELECT count(*) FROM samples")[0][0] == rows_written
    assert _duplicates(pg_url) == 0


def test_two_dag_runs_of_one_plan_collecting_at_once_store_each_run_once(gcbench_env, pg_url):
    from reliability_support import NOOP_PLAN

    text = NOOP_PLAN.format(name="tworuns", repetitions=3, window="{steps: 1}", extra="")
    plan = noop_plan("tworuns", repetitions=3)
    items_a = _real_trials(plan, gcbench_env / "run_a")
    items_b = _real_trials(plan, gcbench_env / "run_b")
    # each run collected twice, all four collectors at once
    _race(
        "processes",
        4,
        plan,
        text,
        [items_a, items_b, items_a, items_b],
        ["manual__a", "manual__b", "manual__a", "manual__b"],
        gcbench_env,
    )
    per_run = dict(
        query(
            pg_url, "SELECT r.run_id, count(t.*) FROM dag_runs r JOIN trials t ON t.dag_run_id = r.id GROUP BY r.run_id"
        )
    )
    assert per_run == {"manual__a": 3, "manual__b": 3}
    rows = sum(complete_rows(Path(i["outdir"]) / "samples.csv") for i in items_a + items_b)
    assert query(pg_url, "SELECT count(*) FROM samples")[0][0] == rows
    assert _duplicates(pg_url) == 0


def _race(how, n, plan, plan_text, items, run_ids, tmp: Path) -> list[dict]:
    """Start ``n`` collectors as close together as possible; returns their summaries."""
    per = items if isinstance(items[0], list) else [items] * n
    if how == "threads":
        barrier = threading.Barrier(n)
        out: list = [None] * n

        def one(k):
            barrier.wait()
            out[k] = _collect(plan, per[k], run_ids[k])

        threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        assert all(s is not None for s in out)
        return out
    (tmp / "plan.yaml").write_text(plan_text)
    procs = []
    for k in range(n):
        (tmp / f"items{k}.json").write_text(json.dumps(per[k]))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", COLLECT_SCRIPT, str(tmp / "plan.yaml"), str(tmp / f"items{k}.json"), run_ids[k]],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr[-3000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    return outs


# ----------------------------------------------------------------------------- output folder


def _trial_in(outdir: Path, tmp: Path) -> subprocess.CompletedProcess:
    from gcbench.factory.local import trial_argv, write_spec
    from gcbench.plan import expand

    spec = expand(noop_plan("outdir", window="{seconds: 5}"))[0]
    spec_path = write_spec(spec, tmp / "spec")
    return subprocess.run(trial_argv(str(spec_path), str(outdir)), capture_output=True, text=True, timeout=60)


def test_read_only_output_folder_is_a_clear_error_before_the_window(tmp_path):
    from gcbench.errors import TrialError
    from gcbench.factory.local import run_local
    from gcbench.plan import expand

    mnt = tmp_path / "ro"
    with small_filesystem(mnt, 1 << 26, read_only=True) as mounted:
        if not mounted:  # not root: permissions make the folder unwritable instead
            mnt.chmod(0o555)
        t0 = time.monotonic()
        out = _trial_in(mnt / "trial", tmp_path)
        assert out.returncode == 1
        assert "output folder" in out.stderr and "is not writable" in out.stderr
        assert ("Read-only file system" if mounted else "Permission denied") in out.stderr
        assert "window" not in out.stdout + out.stderr and time.monotonic() - t0 < 5  # the 5 s window never opened
        with pytest.raises(TrialError, match="is not writable"):
            run_local(expand(noop_plan("outdir"))[0], mnt / "trial", 60)
        assert not (mnt / "trial").exists()


def test_full_output_folder_is_a_clear_error_before_the_window(tmp_path):
    from gcbench.errors import TrialError
    from gcbench.factory.local import run_local
    from gcbench.plan import expand

    mnt = tmp_path / "full"
    with small_filesystem(mnt, 1 << 20) as mounted:
        outdir = mnt / "trial"
        outdir.mkdir(parents=True)
        if mounted:  # fill the 1 MiB file system to the last byte
            fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
            try:
                while True:
                    os.write(fd, b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == 28
            finally:
                os.close(fd)

        def fill() -> None:
            if not mounted:  # not root: the kernel's always-full device answers every write with ENOSPC
                (outdir / ".write-probe").symlink_to("/dev/full")

        fill()
        out = _trial_in(outdir, tmp_path)
        assert out.returncode == 1
        assert "is not writable: No space left on device" in out.stderr
        assert "window" not in out.stdout + out.stderr and not (outdir / "samples.csv").exists()
        fill()
        with pytest.raises(TrialError, match="No space left on device"):
            run_local(expand(noop_plan("outdir"))[0], outdir, 60)


def test_nearly_full_output_folder_is_refused_before_the_window(tmp_path):
    """Room for the probe but not for an hour of samples: refused too."""
    from gcbench.errors import TrialError
    from gcbench.trial import MIN_FREE_BYTES, check_writable

    mnt = tmp_path / "small"
    with small_filesystem(mnt, 4 << 20) as mounted:
        if mounted:
            with pytest.raises(TrialError, match=r"has only \d+ bytes free \(at least 16777216 needed"):
                check_writable(mnt / "trial")
        else:
            free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
            with pytest.raises(TrialError, match="bytes free"):
                check_writable(tmp_path / "trial", min_free_bytes=free + (1 << 40))
    assert MIN_FREE_BYTES == 16 << 20
    check_writable(tmp_path / "roomy")  # and a normal folder passes


# ----------------------------------------------------------------------------- foreign GPU process


def _nvml_trial(tmp: Path, monkeypatch, foreign_pid: int | None):
    from gcbench.factory.local import run_local
    from gcbench.plan import expand, plan_from_text

    monkeypatch.setenv("PYTHONPATH", str(FAKE_NVML) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if foreign_pid is None:
        monkeypatch.delenv("GCBENCH_FAKE_NVML_FOREIGN_PID", raising=False)
    else:
        monkeypatch.setenv("GCBENCH_FAKE_NVML_FOREIGN_PID", str(foreign_pid))
    plan = plan_from_text(
        "name: foreign\ndevices: [0]\nrepetitions: 1\nwindow: {seconds: 1.5}\n"
        "energy: {backend: nvml}\nworkloads: [{name: noop, kind: noop}]\n"
    )
    spec = expand(plan)[0]
    item = trial_items([spec], tmp)[0]
    outcome = run_local(spec, Path(item["outdir"]), 60)
    assert outcome.exit_code == 0, (Path(item["outdir"]) / "runner.log").read_text()[-3000:]
    return plan, item, json.loads((Path(item["outdir"]) / "result.json").read_text())


def test_foreign_process_on_the_gpu_during_the_window_makes_the_trial_invalid(gcbench_env, pg_url, monkeypatch):
    """NVML (pynvml replaced at its module boundary) lists a process that is not the
    trial's: this test's own process, alive and outside the trial's process tree."""
    from gcbench.store import db
    from gcbench.validate import validate_run

    plan, item, result = _nvml_trial(gcbench_env / "run", monkeypatch, foreign_pid=os.getpid())
    main = result["energy"]["main"]
    assert result["measurement"]["backend"] == "nvml" and main["gpu"][0]["method"] == "nvml-counter-edge-corrected"
    assert "foreign_process" in main["flags"]
    events = [e for e in result["environment"]["sampler_events"] if e.get("event") == "foreign_process"]
    assert {e["pid"] for e in events} == {os.getpid()} and events[0]["device"] == "gpu0"
    start, end = result["windows"]["main"]["start_s"], result["windows"]["main"]["end_s"]
    assert all(start <= e["t_s"] <= end + 0.1 for e in events)

    _collect(plan, [item])
    with db.connection() as conn:
        validate_run(conn, query(pg_url, "SELECT id FROM dag_runs")[0][0], plan.validation)
    ((valid, reasons, flags),) = query(pg_url, "SELECT valid, reasons, flags FROM trials")
    assert valid is False and "a foreign process used the GPU during the window" in reasons


def test_gpu_used_only_by_the_trials_own_processes_is_no_foreign_process(tmp_path, monkeypatch):
    _, _, result = _nvml_trial(tmp_path / "run", monkeypatch, foreign_pid=None)
    assert "foreign_process" not in result["energy"]["main"]["flags"]
    assert result["environment"]["foreign_process_check"].startswith("NVML process list every 0.5 s")


def test_process_tree_holds_the_trials_children_and_not_its_parent():
    from gcbench.energy.nvml import classify_gpu_processes, process_tree

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tree = process_tree(os.getpid())
        assert {os.getpid(), child.pid} <= tree and os.getppid() not in tree
        foreign, gone = classify_gpu_processes({os.getpid(), child.pid, os.getppid(), 2**22 + 7}, os.getpid())
        assert set(foreign) == {os.getppid()} and gone == {2**22 + 7}
    finally:
        child.kill()
        child.wait()
