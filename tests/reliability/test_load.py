"""Load: a thousand trials, ten million samples (issue 8, section 3). Slow by design."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from reliability_support import NOOP_PLAN, complete_rows, noop_plan, query, run_ctx, trial_items

from gcbench.energy.base import SAMPLE_COLUMNS
from gcbench.plan import expand

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N_TRIALS = 1000
N_SAMPLES = 10_000_000
MAX_RSS_BYTES = 1 << 30


def test_plan_of_1000_noop_trials_runs_through_the_local_runner_and_all_are_collected(gcbench_env, pg_url):
    """Every trial is a real ``python -m gcbench.trial`` process (plus its sampler)."""
    from gcbench.factory.local import run_local
    from gcbench.factory.tasks import collect_run

    plan = noop_plan("thousand", repetitions=N_TRIALS)
    specs = expand(plan)
    assert len(specs) == N_TRIALS and len({s.trial_id for s in specs}) == N_TRIALS
    items = trial_items(specs, gcbench_env / "run")
    t0 = time.monotonic()
    # a bounded pool, as Airflow's pool slots bound a real run; short trials, so the
    # processes' start-up dominates and 4 workers keep both cores busy
    with ThreadPoolExecutor(4) as pool:
        outcomes = list(
            pool.map(lambda si: run_local(si[0], Path(si[1]["outdir"]), 120), zip(specs, items, strict=True))
        )
    ran_s = time.monotonic() - t0
    assert [o.exit_code for o in outcomes] == [0] * N_TRIALS, "every trial completes"
    rows_written = sum(complete_rows(Path(i["outdir"]) / "samples.csv") for i in items)

    summary = collect_run(plan, run_ctx(), items)
    assert (summary["stored"], summary["failed"], summary["samples"]) == (N_TRIALS, 0, rows_written)
    assert query(pg_url, "SELECT status, count(*) FROM trials GROUP BY status") == [("ok", N_TRIALS)]
    assert query(pg_url, "SELECT count(*) FROM samples")[0][0] == rows_written
    assert query(pg_url, "SELECT count(DISTINCT trial_pk) FROM metrics")[0][0] == N_TRIALS
    print(
        f"{N_TRIALS} trials ran in {ran_s:.1f} s ({ran_s / N_TRIALS * 1000:.0f} ms each, 4 at a time), "
        f"{rows_written} samples"
    )


COLLECT_AND_MEASURE = """
import json, sys, time
from gcbench.factory.tasks import collect_run
from gcbench.plan import plan_from_text
plan = plan_from_text(open(sys.argv[1]).read())
items = json.load(open(sys.argv[2]))
t0 = time.monotonic()
summary = collect_run(plan, {"run_id": "manual__load", "logical_date": None}, items)
summary["seconds"] = time.monotonic() - t0
# VmHWM: the peak resident set of this process image (ru_maxrss would carry over the
# peak of the pytest process this one was forked from)
hwm_kib = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
summary["max_rss_bytes"] = hwm_kib * 1024
print(json.dumps(summary))
"""


def write_many_samples(path: Path, n_rows: int, block_rows: int = 100_000) -> int:
    """samples.csv with ``n_rows`` distinct rows, fast: one block of rows is formatted
    once and written again with its time prefix replaced (t_s = block * 1e5 + row)."""
    assert n_rows % block_rows == 0
    template = b"".join(
        b"@@@@@%05d.5,gpu0,simulated,%.1f,%.1f,%.3f,40.0,1980,0\n" % (j, 250 + j % 100, 251 + j % 100, 1000 + j * 0.3)
        for j in range(block_rows)
    )
    with open(path, "wb") as f:
        f.write((",".join(SAMPLE_COLUMNS) + "\n").encode())
        for block in range(n_rows // block_rows):
            f.write(template.replace(b"@@@@@", b"%05d" % block))
    return n_rows


def test_ingesting_10_million_samples_streams_within_1_gib_and_stores_every_one(gcbench_env, pg_url):
    from gcbench.factory.local import run_local

    plan_text = NOOP_PLAN.format(name="tenmillion", repetitions=1, window="{steps: 1}", extra="")
    plan = noop_plan("tenmillion")
    spec = expand(plan)[0]
    item = trial_items([spec], gcbench_env / "run")[0]
    outdir = Path(item["outdir"])
    assert run_local(spec, outdir, 60).exit_code == 0
    samples = outdir / "samples.csv"
    written = write_many_samples(samples, N_SAMPLES)
    assert complete_rows(samples) == written
    assert samples.stat().st_size > 4 * MAX_RSS_BYTES // 10, "the file is far larger than a small buffer"
    (gcbench_env / "plan.yaml").write_text(plan_text)
    (gcbench_env / "items.json").write_text(json.dumps([item]))

    out = subprocess.run(
        [sys.executable, "-c", COLLECT_AND_MEASURE, str(gcbench_env / "plan.yaml"), str(gcbench_env / "items.json")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    samples.unlink()  # 0.6 GB
    assert summary["samples"] == written
    assert query(pg_url, "SELECT count(*) FROM samples")[0][0] == written
    assert query(pg_url, "SELECT samples_count FROM trials")[0][0] == written
    assert query(pg_url, "SELECT count(DISTINCT t_s) FROM samples")[0][0] == written
    assert summary["max_rss_bytes"] <= MAX_RSS_BYTES, f"peak RSS {summary['max_rss_bytes'] / 2**20:.0f} MiB"
    print(
        f"{written} samples collected in {summary['seconds']:.1f} s, peak RSS {summary['max_rss_bytes'] / 2**20:.0f} MiB"
    )
