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
    assert (err.line, err.field) == (2, "repetitions") and err.message.endswith("greater than or equal to 1, got 0")


def test_a_bound_names_the_value_given(tmp_path):
    err = error_of(GOOD + "validation: {cpu_contention_invalid_share: 2}\n", tmp_path)
    assert err.field == "validation.cpu_contention_invalid_share"
    assert err.message == "Input should be less than or equal to 1, got 2"


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

    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.cli", "plan", "validate", str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {bad}:2: repetitions: Input should be greater than or equal to 1, got -1"
    assert "Traceback" not in proc.stderr


def test_until_stable_is_a_warm_up_only_and_exclusive(tmp_path):
    base = "name: w\nworkloads: [{name: n, kind: noop}]\n"
    assert "exactly one of 'steps', 'seconds' or 'until_stable'" in str(
        error_of(base + "warmup: {steps: 2, until_stable: {}}\n", tmp_path)
    )
    assert "'until_stable' is for warmup only" in str(error_of(base + "window: {until_stable: {}}\n", tmp_path))
    assert "cv_max" in str(error_of(base + "warmup: {until_stable: {cv_max: 0}}\n", tmp_path))


# ----------------------------------------------------------------------------- YAML as people write it

MERGED = """\
x-common: &common
  repetitions: 2
  seed: 5
  window: {seconds: 1.5}
x-noop: &noop
  kind: noop
  settings: {tick_s: 0.05}
name: merged
<<: *common
seed: 6
workloads:
  - name: a
    <<: *noop
  - name: b
    <<: *noop
    settings: {tick_s: 0.2}
"""


def test_anchors_aliases_and_merge_keys_work_and_x_keys_are_ignored():
    plan = plan_from_text(MERGED)
    assert (plan.repetitions, plan.seed, plan.window.seconds) == (2, 6, 1.5)  # own keys win over merged ones
    assert [(w.name, w.kind, w.settings) for w in plan.workloads] == [
        ("a", "noop", {"tick_s": 0.05}),
        ("b", "noop", {"tick_s": 0.2}),
    ]


def test_top_level_x_keys_hold_anything_and_are_ignored():
    plan = plan_from_text("x-notes: {owner: ops, since: 2026-01-01, on: [1, 2]}\nx-list: [a]\n" + GOOD)
    assert plan.name == "demo"


def test_a_list_of_merges_takes_each_key_from_the_first_mapping_that_has_it():
    text = (
        "x-a: &a {repetitions: 2, seed: 1}\nx-b: &b {repetitions: 3, order: sequential}\n"
        "name: p\n<<: [*a, *b]\nworkloads: [{name: w, kind: noop}]\n"
    )
    plan = plan_from_text(text)
    assert (plan.repetitions, plan.seed, plan.order) == (2, 1, "sequential")


def test_wrong_field_inside_a_merged_mapping_names_its_own_line(tmp_path):
    err = error_of(MERGED.replace("  seed: 5", "  sed: 5"), tmp_path)
    assert (err.line, err.field, err.message) == (3, "sed", "unknown field")
    err = error_of(MERGED.replace("  settings: {tick_s: 0.05}", "  setings: {tick_s: 0.05}"), tmp_path)
    assert (err.line, err.field, err.message) == (7, "workloads[0].setings", "unknown field")
    err = error_of(MERGED.replace("{tick_s: 0.05}", "{tick_s: fast}"), tmp_path)
    assert (err.line, err.field) == (7, "workloads[0].settings.tick_s") and "must be a number" in err.message


@pytest.mark.parametrize(
    "text,line,message",
    [
        ("x-a: &a {seed: 1}\nname: p\n<<: *a\n<<: *a\nworkloads: [{name: w, kind: noop}]\n", 4, "duplicate key '<<'"),
        ("name: p\n<<: 3\nworkloads: [{name: w, kind: noop}]\n", 2, "takes a mapping or a list of mappings"),
        (
            "name: p\n<<: [{seed: 1}, [2]]\nworkloads: [{name: w, kind: noop}]\n",
            2,
            "takes a mapping or a list of mappings",
        ),
        ("a: &a {<<: *a}\n", 1, "merges a mapping into itself"),
        (
            "x-a: &a {seed: 1, seed: 2}\nname: p\n<<: *a\nworkloads: [{name: w, kind: noop}]\n",
            1,
            "duplicate key 'seed'",
        ),
    ],
)
def test_bad_merge_keys_are_plan_errors_with_their_line(text, line, message):
    with pytest.raises(PlanError) as info:
        plan_from_text(text, "merge.yaml")
    assert info.value.line == line and message in info.value.message, info.value


def test_merge_chains_cannot_multiply_the_keys():
    # Each level merges the previous one twice: 2**40 pairs if merges were concatenated.
    text = "l0: &l0 {a: 1, b: 2}\n" + "".join(
        f"l{i}: &l{i} {{<<: [*l{i - 1}, *l{i - 1}], k{i}: 1}}\n" for i in range(1, 41)
    )
    from gcbench.plan.loader import parse_yaml

    data, _ = parse_yaml(text)
    assert len(data["l40"]) == 42


def test_yaml_1_1_booleans_and_numbers_stay_text_as_in_yaml_1_2():
    text = (
        "name: p\nworkloads:\n  - name: w\n    kind: noop\n    matrix:\n"
        "      note: [no, yes, on, off, y, n, NO, On, 1:20, 1_000, 0b101, =, '0777']\n"
        "      tick_s: [0o17, 0x1F, 1e3, .5, +2]\n"
    )
    plan = plan_from_text(text)
    assert plan.workloads[0].matrix == {
        "note": ["no", "yes", "on", "off", "y", "n", "NO", "On", "1:20", "1_000", "0b101", "=", "0777"],
        "tick_s": [15, 31, 1000.0, 0.5, 2],
    }
    assert plan_from_text("name: p\nworkloads: [{name: w, kind: noop, matrix: {note: [no]}}]").workloads[0].matrix == {
        "note": ["no"]
    }


@pytest.mark.parametrize(
    "value,message",
    [
        (
            "0777",
            "0777 is ambiguous: YAML 1.1 reads it as octal 511, YAML 1.2 as 777; write 777 or 0o777, "
            "or quote it ('0777') if it is text",
        ),
        ("08", "08 is ambiguous: YAML 1.1 reads it as text, YAML 1.2 as 8; write 8, or quote it ('08') if it is text"),
        ("-010", "-010 is ambiguous: YAML 1.1 reads it as octal -8, YAML 1.2 as -10"),
    ],
)
def test_numbers_that_yaml_1_1_and_1_2_read_differently_are_refused(tmp_path, value, message):
    err = error_of(f"name: p\nworkloads:\n  - name: w\n    kind: noop\n    matrix: {{note: [a, {value}]}}\n", tmp_path)
    assert (err.line, err.field) == (5, "workloads[0].matrix.note[1]") and err.message.startswith(message)


@pytest.mark.parametrize(
    "field_text,field,hint",
    [
        (
            "repetitions: 1:20",
            "repetitions",
            "YAML 1.1 would read 1:20 as 80, but plans are read as YAML 1.2, where it is text: write 80",
        ),
        ("seed: 0b101", "seed", "YAML 1.1 would read 0b101 as 5"),
    ],
)
def test_yaml_1_1_number_where_a_number_is_expected_says_how_to_write_it(tmp_path, field_text, field, hint):
    err = error_of(f"name: p\n{field_text}\nworkloads: [{{name: w, kind: noop}}]\n", tmp_path)
    assert (err.line, err.field) == (2, field) and hint in err.message


def test_yaml_1_1_forms_in_workload_settings_say_how_to_write_them(tmp_path):
    err = error_of("name: p\nworkloads:\n  - name: c\n    kind: h2d\n    settings: {size_bytes: 1_048_576}\n", tmp_path)
    assert (err.line, err.field) == (5, "workloads[0].settings.size_bytes")
    assert err.message == (
        "must be an integer, got '1_048_576'; YAML 1.1 would read 1_048_576 as 1048576, "
        "but plans are read as YAML 1.2, where it is text: write 1048576"
    )


def test_yaml_1_1_boolean_where_a_boolean_is_expected_is_refused_with_a_hint():
    from gcbench.plan.check import check_values

    key, message = check_values({"flag": "yes"}, {"flag": False}, None)
    assert key == "flag" and message.endswith(
        "YAML 1.1 would read yes as true, but plans are read as YAML 1.2, where it is text: write true"
    )


def test_yaml_1_2_keys_yes_and_on_are_text_keys(tmp_path):
    err = error_of(GOOD + "on: push\n", tmp_path)
    assert (err.line, err.field, err.message) == (11, "on", "unknown field")


@pytest.mark.parametrize(
    "number,message",
    [("0" + "1" * 5000, "is a number with a leading zero"), ("1" * 5000, "an integer of 5000 characters is too long")],
)
def test_numbers_too_long_for_python_are_plan_errors(number, message):
    with pytest.raises(PlanError) as info:
        plan_from_text(f"name: p\nseed: {number}\nworkloads: [{{name: w, kind: noop}}]\n", "long.yaml")
    assert info.value.line == 2 and message in info.value.message and len(str(info.value)) < 200
