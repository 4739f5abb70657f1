"""Plan loading: every kind of bad input gives one PlanError naming file, line and field."""

from pathlib import Path

import pytest

from gcbench.errors import PlanError
from gcbench.plan import load_plan, plan_from_text

GOOD = """\
name: demo
repetitions: 2
seed: 1
window: {steps: 5}
workloads:
  - name: copy
    kind: h2d
    settings: {size_bytes: 1048576}
    matrix:
      memory: [pinned, pageable]
"""


def error_of(text: str, tmp_path: Path) -> PlanError:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    with pytest.raises(PlanError) as info:
        load_plan(path)
    return info.value


def test_valid_plan_loads_with_defaults():
    plan = plan_from_text(GOOD)
    assert plan.name == "demo" and plan.dag_id == "gcbench__demo"
    assert plan.runner == "local" and plan.order == "randomized"
    assert plan.workloads[0].matrix == {"memory": ["pinned", "pageable"]}
    assert plan.energy.sample_hz == 20.0 and plan.carbon.intensity_kg_per_kwh == 0.2


def test_unknown_key_names_file_line_and_field(tmp_path):
    err = error_of(GOOD.replace("    settings:", "    setings:"), tmp_path)
    assert err.path.endswith("plan.yaml") and err.line == 8
    assert err.field == "workloads[0].setings" and "unknown field" in err.message


def test_wrong_type_names_line(tmp_path):
    err = error_of(GOOD.replace("repetitions: 2", "repetitions: two"), tmp_path)
    assert (err.line, err.field) == (2, "repetitions")
    assert "'two'" in err.message


def test_out_of_range_value(tmp_path):
    err = error_of(GOOD.replace("repetitions: 2", "repetitions: 0"), tmp_path)
    assert (err.line, err.field) == (2, "repetitions") and "greater than or equal to 1" in err.message


def test_duplicate_workload_names(tmp_path):
    text = GOOD + "  - name: copy\n    kind: noop\n"
    err = error_of(text, tmp_path)
    assert (err.line, err.field) == (11, "workloads[1].name") and "duplicate" in err.message


def test_duplicate_yaml_key(tmp_path):
    err = error_of(GOOD.replace("seed: 1", "seed: 1\nseed: 2"), tmp_path)
    assert err.line == 4 and err.field == "seed" and "first at line 3" in err.message


def test_empty_factor_list(tmp_path):
    err = error_of(GOOD.replace("[pinned, pageable]", "[]"), tmp_path)
    assert (err.field, err.line) == ("workloads[0].matrix.memory", 10) and "at least 1 item" in err.message


def test_matrix_empty_after_exclude(tmp_path):
    text = GOOD + "    exclude:\n      - {memory: pinned}\n      - {memory: pageable}\n"
    err = error_of(text, tmp_path)
    assert err.field == "workloads[0].exclude" and err.line == 11 and "empty after exclude" in err.message


def test_exclude_naming_unknown_factor(tmp_path):
    err = error_of(GOOD + "    exclude: [{size: 3}]\n", tmp_path)
    assert err.field == "workloads[0]" and "not matrix factors" in err.message


def test_not_yaml(tmp_path):
    err = error_of("name: [unclosed\n", tmp_path)
    assert err.line == 2 and "not valid plan YAML" in err.message


def test_not_a_mapping(tmp_path):
    err = error_of("- 1\n- 2\n", tmp_path)
    assert "must be a YAML mapping" in err.message


def test_python_tags_are_refused(tmp_path):
    err = error_of("name: x\nfoo: !!python/object/apply:os.system ['echo hi']\n", tmp_path)
    assert err.line == 2 and "constructor" in err.message


def test_unknown_workload_setting(tmp_path):
    err = error_of(GOOD.replace("size_bytes", "size_byte"), tmp_path)
    assert err.field == "workloads[0].settings.size_byte" and err.line == 8 and "unknown h2d setting" in err.message


def test_bad_cron_schedule(tmp_path):
    err = error_of("schedule: 'every night'\n" + GOOD, tmp_path)
    assert (err.line, err.field) == (1, "schedule") and "cron" in err.message


def test_missing_file_is_plan_error(tmp_path):
    with pytest.raises(PlanError, match="cannot read plan file"):
        load_plan(tmp_path / "nope.yaml")


def test_cli_validate_exit_codes(tmp_path, capsys):
    from gcbench.cli import app

    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("repetitions: 2", "repetitions: -1"))
    from typer.testing import CliRunner

    runner = CliRunner()
    assert runner.invoke(app, ["plan", "validate", str(good)]).exit_code == 0
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "gcbench.cli", "plan", "validate", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {bad}:2: repetitions: Input should be greater than or equal to 1"
    assert "Traceback" not in proc.stderr


def test_until_stable_is_a_warm_up_only_and_exclusive(tmp_path):
    base = "name: w\nworkloads: [{name: n, kind: noop}]\n"
    assert "exactly one of 'steps', 'seconds' or 'until_stable'" in str(
        error_of(base + "warmup: {steps: 2, until_stable: {}}\n", tmp_path))
    assert "'until_stable' is for warmup only" in str(error_of(base + "window: {until_stable: {}}\n", tmp_path))
    assert "cv_max" in str(error_of(base + "warmup: {until_stable: {cv_max: 0}}\n", tmp_path))
