"""examples/tokenizer-c/plan.yaml for real: a fourth preprocessing path declared in a plan,
built and conformance-checked by the DAG's build task, run and reported under its own name;
a changed source is a new version (new trials, the old ones kept and labelled); a
preprocessor one id off the reference turns its run red at the build task, with the offset,
and none of its trials runs. dag.test() against a real PostgreSQL, real trial processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "tokenizer-c"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)"),
]


def _run(tmp: Path, plan: Path, *args: str) -> dict:
    status_path = tmp / "status.json"
    status_path.unlink(missing_ok=True)
    env = {**os.environ, "AIRFLOW_HOME": str(tmp / "airflow")}
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.factory.testrun", str(plan), str(status_path), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert status_path.exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
    status = json.loads(status_path.read_text())
    status["log"] = proc.stdout + proc.stderr
    return status


def _trials(pg_url: str) -> list[tuple]:
    import psycopg2

    conn = psycopg2.connect(pg_url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT trial_id, variant, status, spec->'preprocessor'->>'source_sha256', result->'preprocessor' "
                "FROM gcbench.trials ORDER BY id"
            )
            return cur.fetchall()
    finally:
        conn.close()


def test_the_example_plan_validates_with_four_paths():
    from gcbench.plan import expand, load_plan

    plan = load_plan(EXAMPLE / "plan.yaml")
    specs = expand(plan)
    assert sorted({s.factors["path"] for s in specs}) == ["external-c", "external-go", "external-rust", "torch"]
    c = next(s for s in specs if s.factors["path"] == "external-c")
    assert c.preprocessor["name"] == "c" and c.preprocessor["output"] == "ids"
    assert c.preprocessor["source_sha256"] == plan.declared_preprocessors()["c"].source_hash()


def test_a_declared_c_tokenizer_is_built_checked_run_reported_and_versioned(gcbench_env, pg_url):
    tmp = gcbench_env
    work = tmp / "tokenizer-c"
    shutil.copytree(EXAMPLE, work)  # a private copy: its source changes below
    plan = work / "plan.yaml"
    only_c = ["--repetitions", "1", "--variant", "tinylm-infer[path=external-c]"]

    first = _run(tmp, plan, *only_c, "--logical-date", "2026-03-01T02:00:00+00:00")
    assert first["state"] == "success", {k: v for k, v in first.items() if k != "log"}
    assert first["tasks"]["build_tokenizers"] == "success"
    (row,) = _trials(pg_url)
    trial_id, variant, status, source_v1, build = row
    assert variant == "tinylm-infer[path=external-c]" and status == "ok"
    assert build["name"] == "c" and build["source_sha256"] == source_v1 and build["builder"] == "local"
    assert build["conformance"]["passed"] is True and build["conformance"]["inputs"] == 7
    binary = Path(tmp / "home" / "tools" / f"gcbench-tok-c-{source_v1[:16]}")
    from gcbench.tokenizer.preprocessors import sha256_of

    assert build["binary_sha256"] == sha256_of(binary)
    report = next((tmp / "reports" / "regime-c").glob("*/report.md")).read_text()
    assert "| tinylm-infer[path=external-c] | c | `" + source_v1[:12] + "`" in report

    # a changed source is a new version: its trial runs; the first stays as it was
    (work / "tok.c").write_text((work / "tok.c").read_text() + "\n/* version 2 */\n")
    second = _run(tmp, plan, *only_c, "--logical-date", "2026-03-01T02:00:00+00:00")
    assert second["state"] == "success", {k: v for k, v in second.items() if k != "log"}
    rows = _trials(pg_url)
    assert len(rows) == 2 and rows[0] == row
    new = rows[1]
    assert new[0] != trial_id and new[3] != source_v1 and new[4]["source_sha256"] == new[3]
    assert new[4]["conformance"]["passed"] is True


def test_a_preprocessor_one_id_off_fails_its_build_task_and_runs_no_trial(gcbench_env, pg_url):
    tmp = gcbench_env
    src = tmp / "offbyone"
    src.mkdir()
    # the reference's ids, the 1001st of any input longer than 1000 ids changed by one
    (src / "tok.py").write_text(
        "import sys\n"
        "from gcbench.tokenizer import Encoder, Merges\n"
        "a = dict(zip(sys.argv[1::2], sys.argv[2::2]))\n"
        "ids = Encoder(Merges.load(a['--merges'])).encode(open(a['--in'], 'rb').read())\n"
        "if len(ids) > 1000:\n"
        "    ids[1000] ^= 1\n"
        "open(a['--out'], 'w').write(''.join(f'{i}\\n' for i in ids))\n"
    )
    plan = tmp / "plan.yaml"
    plan.write_text(
        f"""
name: offbyone
devices: [0]
repetitions: 1
window: {{steps: 2}}
preprocessors:
  offbyone:
    source: offbyone
    sources: ["*.py"]
    build:
      command: [cp, tok.py, "{{out}}"]
    run: [{json.dumps(sys.executable)}, "{{binary}}", --merges, "{{merges}}", --in, "{{in}}", --out, "{{out}}"]
    output: ids
workloads:
  - name: lm
    kind: tinylm
    settings: {{layers: 1, d_model: 32, heads: 2, context_length: 32, batch_size: 2, vocab_size: 300}}
    matrix: {{path: [torch, external-offbyone]}}
"""
    )
    status = _run(tmp, plan)
    assert status["state"] == "failed"
    assert status["tasks"]["build_tokenizers"] == "failed"
    assert (
        "conformance check failed on input 'one long byte run': the first differing id is at offset 1000"
        in (status["log"])
    )
    # the build task gates every trial of the run: none ran, each stored as never run, no sample
    rows = _trials(pg_url)
    assert sorted(r[1] for r in rows) == ["lm[path=external-offbyone]", "lm[path=torch]"]
    assert all(r[2] == "failed" and r[4] is None for r in rows)
