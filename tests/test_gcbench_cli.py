"""The gcbench command line: exit codes and one-line errors, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def gcbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gcbench.cli", *args], capture_output=True, text=True, timeout=120)


def test_usage_errors_exit_2_without_traceback():
    bad_runner = gcbench("run", str(REPO / "plans" / "smoke.yaml"), "--runner", "dockr")
    assert bad_runner.returncode == 2 and "Invalid value for '--runner'" in bad_runner.stderr
    unknown = gcbench("bogus")
    assert unknown.returncode == 2 and "No such command 'bogus'" in unknown.stderr
    for proc in (bad_runner, unknown):
        assert "Traceback" not in proc.stderr


def test_bad_workload_setting_is_a_plan_error(tmp_path):
    plan = tmp_path / "p.yaml"
    plan.write_text("name: p\nworkloads:\n  - name: c\n    kind: h2d\n    matrix: {memory: [pinned, pinnned]}\n")
    proc = gcbench("plan", "validate", str(plan))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: {plan}:5: workloads[0].matrix.memory: h2d setting memory must be pinned or pageable, got 'pinnned'"
    )


def test_expand_json_lists_every_trial():
    import json

    proc = gcbench("plan", "expand", str(REPO / "plans" / "smoke.yaml"), "--json")
    trials = json.loads(proc.stdout)
    assert proc.returncode == 0 and len(trials) == 31 and len({t["trial_id"] for t in trials}) == 31


def test_piped_expand_keeps_ids_and_variants_whole():
    proc = gcbench("plan", "expand", str(REPO / "plans" / "regime.yaml"))
    assert "tinylm[loader=4,mode=infer,path=external-rust]" in proc.stdout and "…" not in proc.stdout


def gcbench_in(home: Path, *args: str) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "GCBENCH_HOME": str(home), "GCBENCH_DATABASE_URL": "postgresql://127.0.0.1:1/unreachable"}
    script = Path(sys.executable).with_name("gcbench")  # the installed command, as a user types it
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=120, env=env)


SMOKE_VARIANTS = (
    "noop, h2d[memory=pinned], h2d[memory=pageable], tinylm-infer[path=torch], "
    "tinylm-infer[path=external-go], tinylm-infer[path=external-rust], tinylm-train, resnet"
)


@pytest.mark.parametrize(
    "args,line",
    [
        (
            ["--repetitions", "0"],
            "error: --repetitions: must be a whole number from 1 to 1000 (empty: the plan's), got 0",
        ),
        (
            ["--repetitions", "-1"],
            "error: --repetitions: must be a whole number from 1 to 1000 (empty: the plan's), got -1",
        ),
        (
            ["--repetitions", "1001"],
            "error: --repetitions: must be a whole number from 1 to 1000 (empty: the plan's), got 1001",
        ),
        (
            ["--repetitions", "2.5"],
            "error: Invalid value for '--repetitions': Input should be a valid integer, "
            "unable to parse string as an integer (gcbench run --help)",
        ),
        (
            ["--variant", "noop", "--variant", "tinylm-infer[path=troch]"],
            "error: --variant: unknown variant 'tinylm-infer[path=troch]' (did you mean 'tinylm-infer[path=torch]'?); "
            f"plan 'smoke' has: {SMOKE_VARIANTS}",
        ),
        (
            ["--runner", "dockr"],
            "error: Invalid value for '--runner': 'dockr' is not one of 'local', 'docker' (gcbench run --help)",
        ),
    ],
)
def test_run_argument_errors_exit_2_with_one_line_before_any_dag_runs(tmp_path, args, line):
    proc = gcbench_in(tmp_path / "home", "run", str(REPO / "plans" / "smoke.yaml"), *args)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [line] and proc.stdout == ""
    assert not (tmp_path / "home" / "logs").exists() and not (tmp_path / "home" / "runs").exists()


def test_plan_expand_repetitions_are_checked_the_same_way(tmp_path):
    proc = gcbench_in(tmp_path / "home", "plan", "expand", str(REPO / "plans" / "smoke.yaml"), "--repetitions", "0")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: --repetitions: must be a whole number from 1 to 1000 (empty: the plan's), got 0"
    ]


def test_report_finds_a_run_by_its_id_its_folder_name_or_its_folder(pg_url, tmp_path):
    from gcbench import config
    from gcbench.cli import find_run
    from gcbench.errors import StoreError
    from gcbench.plan import load_plan, plan_from_text
    from gcbench.store import db, runs

    smoke = load_plan(REPO / "plans" / "smoke.yaml")
    other = plan_from_text("name: other\nworkloads: [{name: w, kind: noop}]\n")
    run_id = "manual__2026-11-29T23:31:50.116326+00:00"
    with db.connection(pg_url) as conn:
        runs.register_run(conn, smoke, smoke.dag_id, run_id, None)
        runs.register_run(conn, smoke, smoke.dag_id, "scheduled__2026-11-30T02:00:00+00:00", None)
        runs.register_run(conn, other, other.dag_id, "manual__shared", None)
        runs.register_run(conn, smoke, smoke.dag_id, "manual__shared", None)
        folder = config.run_key(run_id)
        assert folder == "manual__2026-11-29T23_31_50.116326_00_00~007b143be608"
        legacy = "manual__2026-11-29T23_31_50.116326_00_00"  # the folder name before C19's fix
        for given in (run_id, folder, f"reports/smoke/{folder}", f"/abs/reports/smoke/{folder}/", legacy):
            plan_name, found, plan_json = find_run(conn, given)
            assert (plan_name, found, plan_json["name"]) == ("smoke", run_id, "smoke"), given
        with pytest.raises(StoreError, match=r"^no stored run 'manual__2026-11-29T23_31_50' of plan 'smoke'$"):
            find_run(conn, "manual__2026-11-29T23_31_50", "smoke")
        with pytest.raises(StoreError, match=r"exists for several plans \(other, smoke\); give --plan"):
            find_run(conn, "manual__shared")
        assert find_run(conn, "manual__shared", "other")[:2] == ("other", "manual__shared")


@pytest.mark.integration
def test_runs_has_a_header_and_counts_invalid_trials(tmp_path, pg_url):
    """`gcbench runs` as a table with its column heads (as `gcbench plan expand`), the invalid
    trials counted beside the valid and failed ones; --json gives the same rows."""
    import json
    import os

    from gcbench.plan import expand, plan_from_text
    from gcbench.store import db, runs

    plan = plan_from_text("name: listed\nworkloads: [{name: n, kind: noop}]\nrepetitions: 5\n")
    long_report = "/srv/" + "/".join(["a-long-folder-name"] * 12) + "/reports/listed/manual__listed/report.html"
    with db.connection(pg_url) as conn:
        pk = runs.register_run(conn, plan, plan.dag_id, "manual__listed", "2026-12-01T08:17:04.354107+00:00")
        with conn.cursor() as cur:
            for spec, (status, valid) in zip(
                expand(plan),
                [("ok", True), ("ok", True), ("ok", False), ("failed", None), ("skipped", None)],
                strict=True,
            ):
                cur.execute(
                    "INSERT INTO trials (dag_run_id, trial_id, plan_name, variant, workload, kind, repetition, "
                    "spec, status, valid) VALUES (%s, %s, 'listed', %s, 'n', 'noop', %s, %s, %s, %s)",
                    (pk, spec.trial_id, spec.variant, spec.repetition, spec.model_dump_json(), status, valid),
                )
            # a report path far wider than a terminal: piped, it is printed whole, never cut
            cur.execute(
                "INSERT INTO reports (dag_run_id, html_path, md_path) VALUES (%s, %s, %s)",
                (pk, long_report, long_report.replace(".html", ".md")),
            )
        conn.commit()
    env = {**os.environ, "GCBENCH_HOME": str(tmp_path / "home"), "GCBENCH_DATABASE_URL": pg_url}
    script = Path(sys.executable).with_name("gcbench")
    proc = subprocess.run([str(script), "runs"], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    head = next(line for line in lines if "run id" in line)
    assert [c.strip() for c in head.strip("┃│ ").split("┃")] == [
        "plan",
        "run id",
        "logical date",
        "trials",
        "valid",
        "invalid",
        "failed",
        "skipped",
        "report",
    ]
    row = next(line for line in lines if "manual__listed" in line)
    assert [c.strip() for c in row.strip("│ ").split("│")] == [
        "listed",
        "manual__listed",
        "2026-12-01T08:17:04.354107+00:00",
        "5",
        "2",
        "1",
        "1",
        "1",
        long_report,
    ]
    as_json = subprocess.run([str(script), "runs", "--json"], capture_output=True, text=True, timeout=120, env=env)
    assert json.loads(as_json.stdout) == [
        {
            "plan": "listed",
            "run_id": "manual__listed",
            "logical_date": "2026-12-01T08:17:04.354107+00:00",
            "trials": 5,
            "valid": 2,
            "invalid": 1,
            "failed": 1,
            "skipped": 1,
            "report": long_report,
        }
    ]


def test_runs_outside_the_checkout_uses_the_checkouts_home_and_says_which_database(pg_url, tmp_path):
    """Issue 20 item 11: run in another folder, `gcbench runs` made an empty .gcbench/ there
    and said "no stored runs"; now it uses the project found above (or installed) and says
    which database, on stderr (stdout stays the table or JSON)."""
    import json
    import os

    from psycopg2.extensions import parse_dsn

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("GCBENCH_HOME", "GCBENCH_PROJECT_ROOT")}
    env["GCBENCH_DATABASE_URL"] = pg_url
    script = Path(sys.executable).with_name("gcbench")
    proc = subprocess.run(
        [str(script), "runs", "--json"], capture_output=True, text=True, timeout=120, env=env, cwd=elsewhere
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
    dsn = parse_dsn(pg_url)
    where = (dsn.get("host") or "local socket") + (f":{dsn['port']}" if dsn.get("port") else "")
    assert proc.stderr.splitlines() == [
        f"using database {dsn['dbname']} as {dsn.get('user', '?')} on {where} (GCBENCH_DATABASE_URL)"
    ]
    assert not (elsewhere / ".gcbench").exists()
    del env["GCBENCH_DATABASE_URL"]
    doctor = subprocess.run(
        [str(script), "doctor", "--json"], capture_output=True, text=True, timeout=120, env=env, cwd=elsewhere
    )
    assert doctor.stderr.splitlines()[0] == (
        f"using embedded PostgreSQL in {REPO / '.gcbench' / 'pgdata'}; "
        f"home {REPO / '.gcbench'} (the checkout gcbench is installed from)"
    )
    assert not (elsewhere / ".gcbench").exists()


def test_doctor_lists_the_declared_preprocessors_and_whether_their_toolchain_is_here():
    import json
    import shutil

    script = Path(sys.executable).with_name("gcbench")
    proc = subprocess.run(
        [str(script), "doctor", "--json", "--plan", str(REPO / "examples" / "tokenizer-c" / "plan.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)["preprocessors"]
    assert sorted(found) == ["c", "go", "rust"]
    assert found["c"]["source"] == str(REPO / "examples" / "tokenizer-c")
    assert found["c"]["declared_in"].endswith("examples/tokenizer-c/plan.yaml")
    assert found["go"]["declared_in"] == str(REPO / "native" / "preprocessors.yaml")
    cc = "cc found" if shutil.which("cc") else "cc not on PATH"
    assert found["c"]["toolchain"].startswith(cc)
