"""The GPU's busy and idle share beside J/token, in the report and the paper table, on
real data: real TinyLM and H2D trials on the simulated device, stored in PostgreSQL,
validated and reported as the pipeline does."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gcbench.plan import expand, plan_from_text

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLAN = """\
name: busy
seed: 3
repetitions: 3
warmup: {steps: 1}
window: {seconds: 0.5}
energy: {backend: simulated, sample_hz: 20, counter_hz: 10}
validation: {min_window_periods: 2, min_valid_repetitions: 2}
workloads:
  - name: lm
    kind: tinylm
    settings: {layers: 1, d_model: 32, heads: 2, context_length: 16, batch_size: 2, vocab_size: 300, cache_dir: CACHE}
    matrix:
      path: [torch]
      loader: [1, 0]
  - name: copy
    kind: h2d
    settings: {size_bytes: 1048576}
    matrix:
      memory: [pinned, pageable]
"""


@pytest.fixture(scope="module")
def stored_report(tmp_path_factory, pg_server_url):
    import psycopg2
    from psycopg2.extensions import make_dsn, parse_dsn

    from gcbench.report import write_report
    from gcbench.report.analysis import ReportSettings
    from gcbench.report.build import report_data
    from gcbench.store import db, ingest, runs
    from gcbench.trial import run_trial
    from gcbench.validate import validate_run

    tmp = tmp_path_factory.mktemp("busy")
    plan = plan_from_text(PLAN.replace("CACHE", str(tmp / "cache")))
    admin = psycopg2.connect(pg_server_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS t_busy_share")
        cur.execute("CREATE DATABASE t_busy_share")
    url = make_dsn(**{**parse_dsn(pg_server_url), "dbname": "t_busy_share"})
    try:
        with db.connection(url) as conn:
            pk = runs.register_run(conn, plan, plan.dag_id, "manual__1", "2026-12-01T00:00:00+00:00")
            for spec in expand(plan):
                out = tmp / "trials" / spec.trial_id
                assert run_trial(spec, out) == 0
                ingest.collect_trial(conn, pk, spec, out)
            validate_run(conn, pk, plan.validation)
            conn.commit()
            data = report_data(conn, plan, pk, "manual__1", None)
            paths = write_report(
                data, tmp / "report", settings=ReportSettings.from_plan(data.plan, n_resamples=300), paper=True
            )
            trials = data.trials
        yield trials, paths
    finally:
        with admin.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 't_busy_share'")
            cur.execute("DROP DATABASE IF EXISTS t_busy_share")
        admin.close()


def test_every_stored_trial_has_its_busy_share_and_method(stored_report):
    trials, _ = stored_report
    assert len(trials) == 12
    assert (trials["gpu_busy_method"] == "simulated-trial-busy-time").all()
    busy, idle = trials["gpu_busy_share"].astype(float), trials["gpu_idle_share"].astype(float)
    assert ((busy > 0) & (busy <= 1)).all() and ((busy + idle - 1).abs() < 1e-9).all()


def _md_row(md: str, variant: str) -> list[str]:
    line = next(ln for ln in md.splitlines() if ln.startswith("|") and variant in ln)
    return [c.strip() for c in line.strip("|").split("|")]


def test_report_shows_busy_and_idle_share_beside_j_per_token(stored_report):
    trials, paths = stored_report
    md = paths.markdown.read_text(encoding="utf-8")
    head = next(ln for ln in md.splitlines() if "GPU J/token" in ln and "GPU busy share (%)" in ln)
    cols = [c.strip() for c in head.strip("|").split("|")]
    i_busy = next(i for i, c in enumerate(cols) if c.startswith("GPU busy share (%)"))
    i_idle = next(i for i, c in enumerate(cols) if c.startswith("GPU idle share (%)"))
    i_j = next(i for i, c in enumerate(cols) if "GPU J/token" in c)
    assert i_idle == i_busy + 1 and i_j < i_busy
    for loader in (0, 1):
        variant = f"lm[loader={loader},path=torch]"
        row = _md_row(md, variant)
        mine = trials[(trials["variant"] == variant) & (trials["valid"] == True)]  # noqa: E712
        busy = sorted(100 * mine["gpu_busy_share"].astype(float))
        shown = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", row[i_busy].split("[")[0])]
        if row[i_busy].startswith("trials:"):  # fewer valid trials than a median needs
            assert sorted(shown) == pytest.approx(busy, rel=2e-3)
        else:
            assert shown[0] == pytest.approx(float(np.median(busy)), rel=2e-3)
            idle = float(re.match(r"[\d.]+", row[i_idle]).group())
            assert idle == pytest.approx(100 - shown[0], abs=0.06)
    assert "GPU busy share = the share of the measured window in which the GPU ran work" in md
    assert "simulated-trial-busy-time: the trial's own busy time on the simulated device" in md
    assert "On the simulated device the work runs on the CPU, so CPU contention lengthens it" in md
    assert "A GPU J/GB that comes with a large idle share" in md  # the copies' table speaks its figure
    html = paths.html.read_text(encoding="utf-8")
    assert "GPU busy share (%)" in html and "GPU idle share (%)" in html


def test_paper_tables_carry_the_busy_share(stored_report):
    trials, paths = stored_report
    md = paths.paper_md.read_text(encoding="utf-8")
    assert "GPU busy share (%)" in md and "GPU idle share (%)" in md
    assert "GPU busy share pinned (%)" in md and "GPU busy share pageable (%)" in md
    tex = paths.paper_tex.read_text(encoding="utf-8")
    assert "GPU busy share" in tex
    assert "A GPU J/token that comes with a large idle share" in md
