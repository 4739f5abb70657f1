"""Bad input: plans and result files are judged, never trusted (issue 8, section 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_support import complete_rows, noop_plan, query, run_ctx, trial_items, write_samples

from gcbench.errors import PlanError
from gcbench.plan import expand, plan_from_text
from gcbench.spec import TrialSpec

# ----------------------------------------------------------------------------- random plans

PLAN_KEYS = [
    "name",
    "description",
    "schedule",
    "runner",
    "image",
    "devices",
    "repetitions",
    "seed",
    "order",
    "warmup",
    "window",
    "trial_timeout_s",
    "energy",
    "validation",
    "carbon",
    "report",
    "hosts",
    "workloads",
]
INNER_KEYS = [
    "name",
    "kind",
    "settings",
    "matrix",
    "exclude",
    "repetitions",
    "steps",
    "seconds",
    "backend",
    "sample_hz",
    "band",
    "intensity_kg_per_kwh",
    "baseline",
    "compare",
    "queue",
    "gpus",
    "tick_s",
    "note",
    "kill_self_after_s",
    "path",
    "batch_size",
    "devices",
    "window",
    "warmup",
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(
        [
            "noop",
            "tinylm",
            "h2d",
            "resnet_cifar",
            "local",
            "docker",
            "@daily",
            "0 2 * * *",
            "randomized",
            "sequential",
            "simulated",
            "nvml",
            "a",
            "x-y",
            "0 0 * *",
            "2020-01-01",
            "yes",
            "~",
            "1e3",
            ".inf",
            "; rm -rf /",
        ]
    ),
)
KEYS = st.one_of(
    st.sampled_from(PLAN_KEYS + INNER_KEYS), st.text(max_size=8), st.integers(-3, 3), st.booleans(), st.none()
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=5)),
    max_leaves=25,
)
WORKLOAD = st.dictionaries(st.sampled_from(INNER_KEYS), VALUES, max_size=5).map(
    lambda d: {"name": "w", "kind": "noop", **d}
)
PLANS = st.one_of(
    st.fixed_dictionaries(
        {"name": st.one_of(st.just("p"), SCALARS), "workloads": st.lists(WORKLOAD, max_size=3)},
        optional={k: VALUES for k in PLAN_KEYS if k not in ("name", "workloads")},
    ),
    VALUES,
)
YAML_TEXT = st.text(alphabet=st.sampled_from(list("abnk:{}[]-,&*!|>'\"#%@`\n \t019.?<=~\\\x00\ufeffé")), max_size=80)


def _only_plan_errors(text: str) -> None:
    """Load ``text``; PlanError is the only exception allowed. A plan that loads must
    expand, and every trial must read its spec.json back with the same trial id."""
    try:
        plan = plan_from_text(text, "random.yaml")
    except PlanError as exc:
        assert exc.path == "random.yaml" and str(exc).startswith("random.yaml")
        return
    try:
        specs = expand(plan)
    except PlanError:
        return
    for spec in specs:
        assert TrialSpec.model_validate_json(spec.to_json()).compute_id() == spec.trial_id


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(PLANS)
def test_random_yaml_structures_give_only_plan_errors(data):
    try:
        text = yaml.dump(data, allow_unicode=True)  # the full dumper: emits !!python tags for odd values too
    except yaml.YAMLError:
        return
    _only_plan_errors(text)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    st.dictionaries(
        st.sampled_from(["tick_s", "note", "kill_self_after_s", "gpus", "other"]),
        st.lists(st.one_of(SCALARS, st.binary(max_size=4), st.dates()), min_size=1, max_size=3),
        max_size=3,
    ),
    st.dictionaries(st.sampled_from(["tick_s", "note", "kill_self_after_s"]), SCALARS, max_size=2),
    st.one_of(st.integers(-3, 1100), st.floats()),
    st.one_of(st.floats(), st.integers(-1, 3)),
)
def test_random_values_in_a_valid_plan_shape_give_only_plan_errors(matrix, fixed, repetitions, seconds):
    data = {
        "name": "p",
        "repetitions": repetitions,
        "window": {"seconds": seconds},
        "workloads": [{"name": "w", "kind": "noop", "matrix": matrix, "settings": fixed}],
    }
    _only_plan_errors(yaml.dump(data, allow_unicode=True))


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(YAML_TEXT)
def test_random_text_gives_only_plan_errors(text):
    _only_plan_errors(text)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000,
        "a:\n" + "".join("  " * i + "- \n" for i in range(3000)),
        "a: &a [1]\n"
        + "".join(f"a{i}: &a{i} [*a{'' if i == 0 else i - 1}, *a{'' if i == 0 else i - 1}]\n" for i in range(30)),
        "name: p\nworkloads: [{name: w, kind: noop, settings: {note: " + "[" * 5000 + "]" * 5000 + "}}]",
        "\ufeffname: p",
        "name: p\x00",
        "---\n---\n",
        "",
        "  ",
        "!!null",
        "'unterminated",
    ],
)
def test_pathological_yaml_gives_a_plan_error(text):
    with pytest.raises(PlanError):
        plan_from_text(text, "bad.yaml")


# ----------------------------------------------------------------------------- YAML tags


@pytest.mark.parametrize(
    "tag",
    [
        "!!python/object/apply:os.system ['touch {canary}']",
        "!!python/object/new:os.system ['touch {canary}']",
        "!!python/object:os.system {{}}",
        "!!python/name:os.system",
        "!!python/module:os",
        "!!python/tuple [1, 2]",
        "!custom 1",
    ],
)
def test_yaml_python_tags_are_refused_with_file_and_line(tmp_path, tag):
    canary = tmp_path / "canary"
    text = f"name: p\ndescription: ok\nworkloads:\n  - name: w\n    kind: noop\n    settings:\n      note: {tag.format(canary=canary)}\n"
    with pytest.raises(PlanError) as err:
        plan_from_text(text, "tags.yaml")
    assert err.value.line == 7 and "not valid plan YAML" in err.value.message
    assert "could not determine a constructor" in err.value.message
    assert not canary.exists()


@pytest.mark.parametrize(
    "value,line,message",
    [
        (".nan", 6, "plan numbers must be finite"),
        ("-.inf", 6, "plan numbers must be finite"),
        ("!!binary aGVsbG8=", 6, "YAML bytes value is not allowed"),
        ("2026-01-01", 6, "YAML date value is not allowed in a plan; quote it to make it text"),
        ("2026-01-01 10:00:00", 6, "YAML datetime value is not allowed"),
        ("!!set {a, b}", 6, "YAML set value is not allowed"),
        ("{1: x}", 6, "mapping key 1 is a int in YAML, not text"),
        # PostgreSQL text and jsonb cannot hold U+0000: refused here, not when the spec is stored
        ('"a\\0b"', 6, "text holding a NUL character (\\0) is not allowed: PostgreSQL cannot store it"),
        ('"\\x00"', 6, "NUL character"),
        ('{"k\\0": x}', 6, "mapping key 'k\\x00' holds a NUL character"),
    ],
)
def test_values_json_cannot_carry_are_refused_with_field_and_line(value, line, message):
    """These would give a trial another spec (after its JSON round trip) than its id's."""
    text = f"name: p\nworkloads:\n  - name: w\n    kind: noop\n    matrix:\n      note: [{value}]\n"
    with pytest.raises(PlanError) as err:
        plan_from_text(text, "values.yaml")
    assert err.value.line == line and message in err.value.message, err.value
    assert err.value.field.startswith("workloads[0].matrix.note")


def test_huge_matrix_is_refused_before_it_is_enumerated():
    factors = ", ".join(f"f{i}: [{', '.join(str(j) for j in range(10))}]" for i in range(12))  # 10^12 combinations
    t0 = time.monotonic()
    with pytest.raises(PlanError, match=r"multiplies out to 1000000000000 combinations, more than 100000"):
        plan_from_text(f"name: p\nworkloads:\n  - name: w\n    kind: noop\n    matrix: {{{factors}}}\n")
    assert time.monotonic() - t0 < 1.0


# ----------------------------------------------------------------------------- max_map_length


def _plan_of(n_variants: int, repetitions: int = 1) -> str:
    values = ", ".join(f"'{i}'" for i in range(n_variants))
    return f"name: big\nrepetitions: {repetitions}\nworkloads:\n  - {{name: w, kind: noop, matrix: {{note: [{values}]}}}}\n"


def test_plan_larger_than_airflow_max_map_length_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("AIRFLOW__CORE__MAX_MAP_LENGTH", raising=False)
    plan_from_text(_plan_of(1024))
    with pytest.raises(PlanError) as err:
        plan_from_text(_plan_of(513, repetitions=2), "big.yaml")
    assert err.value.field == "repetitions" and err.value.line == 2
    assert "expands to 1026 trials, more than Airflow's max_map_length (1024)" in err.value.message
    assert "split it into several plans or lower repetitions" in err.value.message


def test_configured_max_map_length_is_respected_at_load_and_at_run_time(monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", "10")
    with pytest.raises(PlanError, match=r"expands to 12 trials, more than Airflow's max_map_length \(10\)"):
        plan_from_text(_plan_of(12))
    plan = plan_from_text(_plan_of(5))
    assert len(expand(plan)) == 5
    # the trigger form's repetitions can raise the count past what the plan passed
    with pytest.raises(PlanError) as err:
        expand(plan, repetitions=3)
    assert err.value.field == "params.repetitions" and "this run would have 15 trials" in err.value.message


def test_max_map_length_from_airflow_cfg_when_airflow_is_loaded(tmp_path):
    """In the DAG processor and the workers Airflow is imported: its configuration wins."""
    home = tmp_path / "airflow"
    home.mkdir()
    (home / "airflow.cfg").write_text("[core]\nmax_map_length = 7\nload_examples = False\n")
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW__CORE__MAX_MAP_LENGTH"}
    env["AIRFLOW_HOME"] = str(home)
    code = (
        "import airflow.configuration\n"
        "from gcbench.plan import plan_from_text\n"
        "from gcbench.errors import PlanError\n"
        "import sys\n"
        "try:\n    plan_from_text(sys.stdin.read())\nexcept PlanError as e:\n    print(e.message)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=_plan_of(8), capture_output=True, text=True, env=env, timeout=120
    )
    assert "expands to 8 trials, more than Airflow's max_map_length (7)" in out.stdout, out.stderr[-2000:]


# ----------------------------------------------------------------------------- shell metacharacters

METACHARACTERS = [
    "; rm -rf {victim}",
    "$(rm -rf {victim})",
    "`rm -rf {victim}`",
    "| rm -rf {victim} && touch {canary}",
    "&& touch {canary} || true",
    "'\"; touch {canary}; echo \"'",
    "$HOME ${{PATH}} > {canary} < /dev/null 2>&1 &",
    "{{{{ 7 * 7 }}}} {{% raw %}} \\n \\\\ *.py ~ !! # comment",
]


def test_shell_metacharacters_in_factor_values_reach_the_trial_verbatim(gcbench_env, pg_url):
    """Each value runs a real trial (local runner) and is stored as a text metric."""
    from gcbench.factory.local import run_local, trial_argv
    from gcbench.factory.tasks import collect_run

    victim, canary = gcbench_env / "victim", gcbench_env / "canary"
    victim.write_text("must survive")
    values = [v.format(victim=victim, canary=canary) for v in METACHARACTERS]
    plan = plan_from_text(
        "name: shell\nrepetitions: 1\nwindow: {steps: 1}\nenergy: {backend: simulated}\n"
        "workloads:\n  - name: w\n    kind: noop\n    matrix:\n      note:\n"
        + "".join(f"        - {json.dumps(v)}\n" for v in values)
    )
    specs = expand(plan)
    assert sorted(s.settings["note"] for s in specs) == sorted(values)
    items = trial_items(specs, gcbench_env / "run")
    for spec, item in zip(specs, items, strict=True):
        outdir = Path(item["outdir"])
        argv = trial_argv(item["spec_path"], str(outdir))
        assert argv[1:3] == ["-m", "gcbench.trial"] and not any(spec.settings["note"] in a for a in argv)
        assert run_local(spec, outdir, 60).exit_code == 0, (outdir / "runner.log").read_text()[-2000:]
        on_disk = json.loads((outdir / "spec.json").read_text())
        assert on_disk["settings"]["note"] == spec.settings["note"] == on_disk["factors"]["note"]
        result = json.loads((outdir / "result.json").read_text())
        assert result["counts"]["note"] == spec.settings["note"]  # what the workload received and returned
    collect_run(plan, run_ctx(), items)
    stored = [r[0] for r in query(pg_url, "SELECT text_value FROM metrics WHERE name = 'note'")]
    assert sorted(stored) == sorted(values)
    assert victim.read_text() == "must survive" and not canary.exists()


# ----------------------------------------------------------------------------- result files


def _noop_trials(tmp: Path, n: int) -> tuple:
    from gcbench.factory.local import run_local

    plan = noop_plan("results", repetitions=n)
    specs = expand(plan)
    items = trial_items(specs, tmp)
    for spec, item in zip(specs, items, strict=True):
        assert run_local(spec, Path(item["outdir"]), 60).exit_code == 0
    return plan, items


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _rewrite(p: Path, **changes) -> None:
    data = json.loads(p.read_text())
    data.update(changes)
    p.write_text(json.dumps(data))


CORRUPTIONS = {
    "truncated": (_truncate, "result.json refused: not valid JSON"),
    "not JSON": (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff garbage"), "result.json refused: not valid JSON"),
    "another plan": (
        lambda p: _rewrite(p, plan="someone-else"),
        "result.json refused: it belongs to plan 'someone-else'",
    ),
    "another trial": (lambda p: _rewrite(p, trial_id="0123456789abcdef"), "it belongs to trial '0123456789abcdef'"),
    "cut to a JSON prefix": (
        lambda p: p.write_text(
            json.dumps(
                {k: v for k, v in json.loads(p.read_text()).items() if k in ("schema", "trial_id", "plan", "status")}
            )
        ),
        "result.json refused: truncated, missing metrics, energy",
    ),
    "wrong shape": (lambda p: _rewrite(p, metrics=[1, 2]), "result.json refused: metrics is list, expected dict"),
    "nested too deep": (
        lambda p: p.write_text(p.read_text()[:-1] + ', "x": ' + "[" * 100000 + "]" * 100000 + "}"),
        "result.json refused: not valid JSON (RecursionError",
    ),
}
"""result.json files that are not this trial's result: refused whole, the trial failed, its samples kept."""

REPAIRS = {
    # name: (corruption, SQL of the stored value, expected value, a note that says so)
    "NUL character": (
        lambda p: _rewrite(p, error="bad\u0000byte"),
        "error",
        "bad\ufffdbyte",
        "result.json error: 1 NUL character replaced with U+FFFD",
    ),
    "lone surrogate": (
        lambda p: p.write_text(p.read_text()[:-1] + ', "x": "a\\ud800b"}'),
        "result->>'x'",
        "a\ufffdb",
        "result.json x: 1 lone surrogate (not UTF-8) replaced with U+FFFD",
    ),
    "invalid UTF-8": (
        lambda p: p.write_bytes(p.read_bytes()[:-1] + b', "x": "caf\xc3"}'),
        "result->>'x'",
        "caf\ufffd",
        "result.json: 1 invalid UTF-8 sequence replaced with U+FFFD",
    ),
    "NaN": (
        lambda p: p.write_text(p.read_text()[:-1] + ', "x": NaN}'),
        "result->'x'",
        None,
        "result.json x: nan is not a finite number: stored as null",
    ),
    "1e400": (
        lambda p: p.write_text(p.read_text()[:-1] + ', "x": [1e400, -0, -0.0]}'),
        "result->'x'",
        [None, 0, 0],
        "result.json x[0]: inf is not a finite number",
    ),
    "huge integer": (
        lambda p: p.write_text(p.read_text()[:-1] + ', "x": ' + "9" * 5000 + "}"),
        "result->'x'",
        None,
        "result.json x: an integer of 5000 digits: stored as null",
    ),
    "big integer kept exactly": (lambda p: _rewrite(p, x=2**64 + 1), "result->>'x'", str(2**64 + 1), None),
    # an exit status that is none: the runner's (0) is stored instead
    "bad exit status": (
        lambda p: _rewrite(p, exit_code="zero"),
        "exit_code",
        0,
        "result.json exit_code: 'zero' is not a 32-bit integer: stored as null",
    ),
    "huge exit status": (
        lambda p: _rewrite(p, exit_code=2**40),
        "exit_code",
        0,
        "result.json exit_code: 1099511627776 is not a 32-bit integer",
    ),
    "bad timestamp": (
        lambda p: _rewrite(p, finished_at="yesterday"),
        "finished_at",
        None,
        "result.json finished_at: 'yesterday' is not an ISO 8601 time",
    ),
    "offset PostgreSQL refuses": (
        lambda p: _rewrite(p, finished_at="2026-01-01T20:00:00+20:00"),
        "to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI')",
        "2026-01-01 00:00",
        None,
    ),
    "long error": (
        lambda p: _rewrite(p, error="E" * 100 + "x" * 200_000 + "the end"),
        "right(error, 7)",
        "the end",
        "result.json error: cut from 200107 to 65536 characters",
    ),
    "NUL in a metric name and value": (
        lambda p: _rewrite(p, metrics={**json.loads(p.read_text())["metrics"], "no\u0000te": "a\u0000b"}),
        "(SELECT text_value FROM metrics m WHERE m.trial_pk = t.id AND m.name = 'no\ufffdte')",
        "a\ufffdb",
        "result.json metrics (key)",
    ),
    "metric beyond double precision": (
        lambda p: _rewrite(p, metrics={**json.loads(p.read_text())["metrics"], "huge_j": 10**400}),
        "(SELECT coalesce(value::text, 'NULL') FROM metrics m WHERE m.trial_pk = t.id AND m.name = 'huge_j')",
        "NULL",
        "metrics.huge_j: an integer of 401 digits",
    ),
    "wrong type of a known field": (
        lambda p: _rewrite(p, windows={"main": {"start_s": "soon", "end_s": 2.0}}),
        "result->'windows'->'main'->'start_s'",
        None,
        "result.json windows.main.start_s: 'soon' is not a number: stored as null",
    ),
    "wrong types in device entries": (
        lambda p: _rewrite(
            p,
            energy={
                "main": {
                    **json.loads(p.read_text())["energy"]["main"],
                    "gpu": [
                        7,
                        {**json.loads(p.read_text())["energy"]["main"]["gpu"][0], "method": 3, "energy_j": "lots"},
                    ],
                    "flags": ["ok", 1],
                }
            },
        ),
        "gpu_method",
        "?",
        "result.json energy.main.gpu[0].method: 3 is not text",
    ),
}
"""result.json values PostgreSQL cannot hold or GC-Bench cannot read: the value alone is
repaired (U+FFFD, cut) or stored as null, noted; the rest of the trial is stored."""


def test_files_that_are_not_the_trials_result_are_refused_by_collect_with_the_reason(gcbench_env, pg_url):
    from gcbench.factory.tasks import collect_run

    plan, items = _noop_trials(gcbench_env / "run", len(CORRUPTIONS) + 1)
    expected = {}
    for (name, (corrupt, reason)), item in zip(CORRUPTIONS.items(), items[:-1], strict=True):  # the last: below
        corrupt(Path(item["outdir"]) / "result.json")
        expected[item["trial_id"]] = (name, reason)
    (Path(items[-1]["outdir"]) / "runner.json").write_text('{"exit_co')  # a runner killed mid-write
    rows_written = sum(complete_rows(Path(i["outdir"]) / "samples.csv") for i in items)

    summary = collect_run(plan, run_ctx(), items)
    assert summary["stored"] == len(items) and summary["failed"] == len(CORRUPTIONS)
    stored = {
        t: (s, e, p, n)
        for t, s, e, p, n in query(pg_url, "SELECT trial_id, status, error, samples_partial, samples_count FROM trials")
    }
    for trial_id, (name, reason) in expected.items():
        status, error, partial, n = stored[trial_id]
        assert status == "failed" and reason in error, (name, error)
        assert partial and n > 0, f"{name}: the samples are kept"
    assert stored[items[-1]["trial_id"]][0] == "ok"
    assert query(pg_url, "SELECT count(DISTINCT trial_pk) FROM metrics")[0][0] == 1  # only the intact trial's
    assert query(pg_url, "SELECT count(*) FROM samples")[0][0] == rows_written
    again = collect_run(plan, run_ctx(), items)  # a retry changes nothing and duplicates nothing
    assert again["unchanged"] == 1 and query(pg_url, "SELECT count(*) FROM samples")[0][0] == rows_written


def test_values_postgresql_cannot_hold_cost_that_value_only_and_are_noted(gcbench_env, pg_url):
    from gcbench.factory.tasks import collect_run

    plan, items = _noop_trials(gcbench_env / "run", len(REPAIRS))
    for (corrupt, *_), item in zip(REPAIRS.values(), items, strict=True):
        corrupt(Path(item["outdir"]) / "result.json")
    rows_written = sum(complete_rows(Path(i["outdir"]) / "samples.csv") for i in items)

    summary = collect_run(plan, run_ctx(), items)
    assert (summary["stored"], summary["failed"], summary["samples"]) == (len(items), 0, rows_written)
    assert summary["fields_nulled"] >= 9 and summary["text_repaired"] >= 5
    for (name, (_, column, value, note)), item in zip(REPAIRS.items(), items, strict=True):
        ((status, stored, notes, gpu_j),) = query(
            pg_url,
            f"SELECT status, {column}, ingest_notes, (SELECT value FROM metrics m WHERE m.trial_pk = t.id "
            f"AND m.name = 'gpu_energy_j') FROM trials t WHERE trial_id = %s",
            (item["trial_id"],),
        )
        assert status == "ok" and stored == value, (name, stored)
        assert gpu_j is not None and gpu_j > 0, f"{name}: the trial's energy is kept"
        if note:
            assert any(note in n for n in notes), (name, notes)
    assert query(pg_url, "SELECT count(*) FROM samples")[0][0] == rows_written
    assert collect_run(plan, run_ctx(), items)["unchanged"] == len(items)  # stored once, a retry changes nothing


def test_a_failure_of_the_database_over_the_content_stores_the_trial_failed_with_the_reason(
    gcbench_env, pg_url, monkeypatch
):
    """Content the checks let through and the server still refuses: the trial is stored
    failed with the server's reason, and collect never raises for it (no endless retry)."""
    from gcbench.factory.tasks import collect_run
    from gcbench.store import ingest

    plan, items = _noop_trials(gcbench_env / "run", 2)
    real = ingest._metric_rows

    def refused_by_server(trial_pk, metrics, notes):
        rows = real(trial_pk, metrics, notes)
        return rows + rows[:1]  # a duplicate primary key: IntegrityError from the server

    monkeypatch.setattr(ingest, "_metric_rows", refused_by_server)
    summary = collect_run(plan, run_ctx(), items)
    assert summary["stored"] == 2 and summary["failed"] == 2
    for status, error, notes in query(pg_url, "SELECT status, error, ingest_notes FROM trials"):
        assert status == "failed" and error.startswith("trial files refused by the database: duplicate key")
        assert notes[0].startswith("stored without its files: trial files refused by the database")
    monkeypatch.setattr(ingest, "_metric_rows", real)
    assert collect_run(plan, run_ctx(), items)["stored"] == 2  # the next attempt stores the files
    assert {r[0] for r in query(pg_url, "SELECT status FROM trials")} == {"ok"}


def test_a_trial_that_wrote_over_its_spec_json_is_stored_from_the_plans_spec(gcbench_env, pg_url):
    from gcbench.factory.tasks import collect_run

    plan, items = _noop_trials(gcbench_env / "run", 3)
    (Path(items[0]["outdir"]) / "spec.json").write_bytes(b"\x00\xff not a spec")
    (Path(items[1]["outdir"]) / "spec.json").write_text((Path(items[2]["outdir"]) / "spec.json").read_text())
    orphan_dir = gcbench_env / "run" / "0000000000000000"
    orphan_dir.mkdir()
    (orphan_dir / "spec.json").write_text("{")
    orphan = dict(
        items[2],
        trial_id="0000000000000000",
        outdir=str(orphan_dir),  # no plan trial has this id
        spec_path=str(orphan_dir / "spec.json"),
    )
    summary = collect_run(plan, run_ctx(), items + [orphan])
    assert (summary["stored"], summary["refused"], summary["spec_unreadable"]) == (3, 1, 1)
    stored = dict(query(pg_url, "SELECT trial_id, variant FROM trials WHERE status = 'ok'"))
    assert sorted(stored) == sorted(i["trial_id"] for i in items)


JUNK_TEXT = st.lists(
    st.one_of(st.text(max_size=4), st.sampled_from(["\x00", "\ud800", "\udfff", "\ufffd", '"', "\\"])), max_size=6
).map("".join)
JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**80), 2**80),
        st.floats(),
        JUNK_TEXT,
        st.just(10**400),
        st.just("@@RAW@@"),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(JUNK_TEXT, inner, max_size=3)),
    max_leaves=8,
)
RESULT_PATHS = [
    ("error",),
    ("notes",),
    ("exit_code",),
    ("started_at",),
    ("metrics", "note"),
    ("labels",),
    ("windows", "main", "end_s"),
    ("energy", "main", "flags"),
    ("energy", "main", "cpu_reason"),
    ("energy", "main", "gpu", 0, "method"),
    ("energy", "main", "gpu", 0, "idle_power_w"),
    ("environment", "gpus"),
]


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    path=st.sampled_from(RESULT_PATHS),
    value=JSON_VALUES,
    raw=st.binary(min_size=1, max_size=4).map(lambda b: bytes(x | 0x80 for x in b)),
    column=st.sampled_from(range(9)),
    field=st.binary(max_size=8).filter(lambda b: b"\n" not in b),
)
def test_any_value_in_any_field_never_fails_collect_nor_costs_other_values(
    pg_url, tmp_path_factory, path, value, raw, column, field
):
    """Random values (NUL, lone surrogates, NaN, 1e400, 10^400, invalid UTF-8, nesting) in
    result.json and random bytes in one sample field: the trial is stored, its energy and
    every other sample are kept, and a second collect changes nothing."""
    import uuid

    from gcbench.energy.base import SAMPLE_COLUMNS
    from gcbench.store import db, ingest, runs

    plan = noop_plan("random")
    spec = expand(plan)[0]
    outdir = tmp_path_factory.mktemp("trial")
    good = [f"{i * 0.05:.3f},gpu0,simulated,300.0,301.5,{1000 + 15 * i:.3f},40,1980,0" for i in range(20)]
    bad = b"50.000,gpu0,simulated,300.0,301.5,1750.000,40,1980,0".split(b",")
    bad[column] = field
    (outdir / "samples.csv").write_bytes(
        ("\n".join([",".join(SAMPLE_COLUMNS)] + good) + "\n").encode() + b",".join(bad) + b"\n"
    )
    result = {
        "schema": 1,
        "trial_id": spec.trial_id,
        "plan": spec.plan,
        "status": "ok",
        "exit_code": 0,
        "error": None,
        "windows": {"main": {"start_s": 0.1, "end_s": 0.9}},
        "energy": {
            "main": {
                "gpu_energy_j": 450.0,
                "flags": [],
                "cpu": [],
                "cpu_reason": "no RAPL",
                "gpu": [{"device": "gpu0", "energy_j": 450.0, "method": "simulated"}],
            }
        },
        "metrics": {"gpu_energy_j": 450.0, "duration_s": 0.8},
        "environment": {},
    }
    node = result
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    data = json.dumps(result, allow_nan=True).encode().replace(b"@@RAW@@", raw)
    (outdir / "result.json").write_bytes(data)
    with db.connection(pg_url) as conn:
        pk = runs.register_run(conn, plan, plan.dag_id, f"manual__{uuid.uuid4().hex}", None)
        out = ingest.collect_trial(conn, pk, spec, outdir)
        assert (out.action, out.status) == ("stored", "ok"), out
        assert ingest.collect_trial(conn, pk, spec, outdir).action == "unchanged"
        with conn.cursor() as cur:
            cur.execute(
                "SELECT count(*), count(power_w), sum(energy_j) FROM samples s JOIN trials t ON t.id = s.trial_pk "
                "WHERE t.dag_run_id = %s AND s.t_s < 1.0",
                (pk,),
            )
            assert cur.fetchone() == (20, 20, sum(1000 + 15 * i for i in range(20)))
            cur.execute(
                "SELECT samples_count, samples_dropped, (SELECT value FROM metrics m WHERE m.trial_pk = t.id "
                "AND m.name = 'gpu_energy_j') FROM trials t WHERE dag_run_id = %s",
                (pk,),
            )
            n, dropped, gpu_j = cur.fetchone()
        conn.commit()
    assert n + dropped == 21 and gpu_j == 450.0


DROPPED_ROWS = [
    b"1.0,gpu0,simulated,300.0,301.5,1000,40,1980\n",  # a field short
    b"1.0,gpu0,simulated,300.0,301.5,1000,40,1980,0,9\n",  # a field too many
    b"1.0,gpu0,,300.0,301.5,1000,40,1980,0\n",  # no source (NOT NULL)
    b",gpu0,simulated,300.0,301.5,1000,40,1980,0\n",  # no time
    b"NaN,gpu0,simulated,300.0,301.5,1000,40,1980,0\n",  # a time that is no time
    b"1e400,gpu0,simulated,300.0,301.5,1000,40,1980,0\n",  # a time beyond double precision
    b"1.0,gpu0,simulated,300.0,301.5,10",  # cut by a kill
]
"""Rows that cannot be placed (no time, device or source; fields out of line): dropped, counted."""

KEPT_ROWS = [
    # (row, column, stored value, counted as)
    (b"1.0,gpu\xff\xfe,simulated,300.0,301.5,1000,40,1980,0\n", "device", "gpu\ufffd\ufffd", "repaired"),  # not UTF-8
    (b"1.0,gpu\x000,simulated,300.0,301.5,1000,40,1980,0\n", "device", "gpu\ufffd0", "repaired"),  # NUL
    (b'1.0,"gpu0,simulated,300.0,301.5,1000,40,1980,0\n', "device", '"gpu0', None),  # a lone quote
    (b"1.0,gpu0,simulated,1_000,301.5,1000,40,1980,0\n", "power_w", None, "nulled"),  # float() takes it, PostgreSQL not
    (b"1.0,gpu0,simulated,1e-400,301.5,1000,40,1980,0\n", "power_w", None, "nulled"),  # underflows
    (b"1.0,gpu0,simulated,1e400,301.5,1000,40,1980,0\n", "power_w", None, "nulled"),  # overflows
    (b"1.0,gpu0,simulated,NaN,301.5,1000,40,1980,0\n", "power_w", None, "nulled"),  # not finite
    (b"1.0,gpu0,simulated,300.0,301.5,1000,inf,1980,0\n", "temperature_c", None, "nulled"),  # not finite either
    (b"1.0,gpu0,simulated,300.0,301.5,1000,40,1980,1.5\n", "clocks_event_reasons", None, "nulled"),  # not an integer
    (b"1.0,gpu0,simulated,300.0,301.5,1000,40,1980,-1\n", "clocks_event_reasons", None, "nulled"),  # not unsigned
    (
        b"1.0,gpu0,simulated,300.0,301.5,1000,40,1980,18446744073709551616\n",
        "clocks_event_reasons",
        None,
        "nulled",
    ),  # 2^64: beyond 64 bits
    (b"1.0,gpu0,simulated,300.0,301.5,1000,40,1980,NaN\n", "clocks_event_reasons", None, "nulled"),
    (
        b"1.0,gpu0,simulated,300.0,301.5,1000,40,1980,18446744073709551615\n",
        "clocks_event_reasons",
        18446744073709551615,
        None,
    ),  # 2^64 - 1: exact
    (
        b"1.0,gpu0,simulated,300.0,301.5,1000,40,1980,0x8000000000000001\n",
        "clocks_event_reasons",
        0x8000000000000001,
        None,
    ),  # hex: exact
    (b"1.0,gpu0,simulated,-0,301.5, 1000.5 ,40,1980,0\n", "energy_j", 1000.5, None),  # spaces around
]
"""Rows with one field no column holds: that field alone is NULL (or the label repaired), the row kept."""


@pytest.mark.parametrize("bad", range(len(DROPPED_ROWS)))
def test_sample_rows_that_cannot_be_placed_are_dropped_and_counted_never_failing_collect(gcbench_env, pg_url, bad):
    from gcbench.factory.tasks import collect_run

    plan = noop_plan("rows")
    items = trial_items(expand(plan), gcbench_env / "run")
    samples = Path(items[0]["outdir"]) / "samples.csv"
    write_samples(samples, 100)
    with open(samples, "ab") as f:
        f.write(DROPPED_ROWS[bad])
        if DROPPED_ROWS[bad].endswith(b"\n"):
            f.write(samples.read_bytes().splitlines(keepends=True)[1])  # a good row after the bad one
    summary = collect_run(plan, run_ctx(), items)
    good = 100 + (1 if DROPPED_ROWS[bad].endswith(b"\n") else 0)
    assert (summary["samples"], summary["samples_dropped"]) == (good, 1)
    assert query(pg_url, "SELECT count(*), min(samples_count), min(samples_dropped) FROM samples, trials")[0] == (
        good,
        good,
        1,
    )
    ((notes,),) = query(pg_url, "SELECT ingest_notes FROM trials")
    assert any(n.startswith("samples.csv: 1 row(s) not stored (1 ") for n in notes), notes


@pytest.mark.parametrize("bad", range(len(KEPT_ROWS)), ids=[f"{i}-{r[1]}" for i, r in enumerate(KEPT_ROWS)])
def test_sample_field_no_column_holds_costs_that_field_never_the_rows_power_and_energy(gcbench_env, pg_url, bad):
    from gcbench.factory.tasks import collect_run

    row, column, value, counted = KEPT_ROWS[bad]
    row = b"7777.0," + row.split(b",", 1)[1]  # a time no other row has
    plan = noop_plan("fields")
    items = trial_items(expand(plan), gcbench_env / "run")
    samples = Path(items[0]["outdir"]) / "samples.csv"
    write_samples(samples, 100)
    with open(samples, "ab") as f:
        f.write(row)
        f.write(samples.read_bytes().splitlines(keepends=True)[1])  # a good row after it
    summary = collect_run(plan, run_ctx(), items)
    assert (summary["samples"], summary["samples_dropped"]) == (102, 0)
    assert summary["fields_nulled"] == (counted == "nulled") and summary["text_repaired"] == (counted == "repaired")
    ((stored, power, instant, energy),) = query(
        pg_url, f"SELECT {column}, power_w, power_instant_w, energy_j FROM samples WHERE t_s = 7777.0"
    )
    assert (int(stored) if column == "clocks_event_reasons" and stored is not None else stored) == value
    assert instant == 301.5 and energy in (1000.0, 1000.5), "the row's power and energy are kept"
    assert column == "power_w" or power in (300.0, 0.0)
    ((notes,),) = query(pg_url, "SELECT ingest_notes FROM trials")
    if counted:
        assert any(n.startswith(f"samples.csv: {column} ") for n in notes), notes


def test_samples_file_with_a_foreign_header_is_refused_and_the_trial_kept(gcbench_env, pg_url):
    from gcbench.factory.tasks import collect_run

    plan, items = _noop_trials(gcbench_env / "run", 2)
    (Path(items[0]["outdir"]) / "samples.csv").write_text("time,watts\n1,2\n")
    (Path(items[1]["outdir"]) / "samples.csv").write_text("t_s,device,power\n")  # a header of another version
    summary = collect_run(plan, run_ctx(), items)
    assert summary["stored"] == 2
    rows = query(pg_url, "SELECT status, error, samples_partial, samples_count FROM trials ORDER BY trial_id")
    for status, error, partial, n in rows:
        assert status == "ok" and "samples refused" in error and "unexpected samples header" in error
        assert partial is True and n == 0


@pytest.mark.parametrize("cut", [0, 1, 17, None], ids=["empty", "one-byte", "header-cut", "header-whole-no-newline"])
def test_samples_file_a_killed_sampler_left_empty_is_no_samples_not_a_foreign_file(gcbench_env, pg_url, cut):
    """A sampler stopped before it finished its header wrote 0..len(header) bytes and no
    newline: the trial is stored with no samples, a note saying so and no "refused" error
    (which would read as a foreign file); validation then judges a trial with no samples."""
    from gcbench.energy.base import SAMPLE_COLUMNS
    from gcbench.factory.tasks import collect_run

    plan, items = _noop_trials(gcbench_env / "run", 1)
    header = ",".join(SAMPLE_COLUMNS).encode()
    (Path(items[0]["outdir"]) / "samples.csv").write_bytes(header[: len(header) if cut is None else cut])
    summary = collect_run(plan, run_ctx(), items)
    assert summary["stored"] == 1 and summary["samples"] == 0
    ((status, error, partial, n, notes),) = query(
        pg_url, "SELECT status, error, samples_partial, samples_count, ingest_notes FROM trials"
    )
    assert (status, error, partial, n) == ("ok", None, False, 0)
    written = "nothing" if cut == 0 else f"{len(header) if cut is None else cut} byte(s) of its header"
    assert notes == [f"samples.csv: no samples (the sampler wrote {written}: stopped before its first row)"]
