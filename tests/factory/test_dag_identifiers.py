"""Plan values that become Airflow identifiers or labels fit Airflow's rules, checked at validate time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gcbench.errors import PlanError
from gcbench.factory.dag import build_dag
from gcbench.plan import expand, load_plan, plan_from_text
from gcbench.plan.identifiers import (
    AIRFLOW_ID_MAX_CHARS,
    AIRFLOW_KEY_PATTERN,
    AIRFLOW_POOL_MAX_CHARS,
    AIRFLOW_QUEUE_MAX_CHARS,
    MAP_INDEX_LABEL_MAX_CHARS,
    airflow_identifiers,
    trial_label,
)

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "tests" / "fixtures" / "cases" / "plans"

MULTI = """\
name: multi
devices: [0, 1]
hosts:
  gpu-a.rack_4: {queue: gpu-a, devices: [0, 1]}
  beta: {queue: gpu-beta, devices: [0]}
workloads:
  - name: lm
    kind: tinylm
    settings: {mode: infer, layers: 1, d_model: 32, heads: 2}
    matrix: {path: [torch, external-go]}
  - name: two
    kind: noop
    settings: {gpus: 2}
"""


def test_limits_are_airflows():
    from airflow.models.base import ID_LEN
    from airflow.models.pool import Pool
    from airflow.models.taskinstance import TaskInstance
    from airflow.sdk.definitions._internal.node import KEY_REGEX

    assert AIRFLOW_ID_MAX_CHARS == ID_LEN == 250
    assert AIRFLOW_POOL_MAX_CHARS == Pool.__table__.c.pool.type.length
    assert AIRFLOW_QUEUE_MAX_CHARS == TaskInstance.__table__.c.queue.type.length
    assert MAP_INDEX_LABEL_MAX_CHARS == TaskInstance.__table__.c.rendered_map_index.type.length
    ascii_chars = "".join(chr(c) for c in range(32, 127))
    assert {c for c in ascii_chars if AIRFLOW_KEY_PATTERN.fullmatch(c)} == {
        c for c in ascii_chars if KEY_REGEX.match(c)
    }


@pytest.mark.parametrize("text,path", [(MULTI, None), (None, "smoke.yaml"), (None, "multigpu-co2e.yaml")])
def test_identifiers_checked_at_validate_are_those_of_the_built_dag(text, path):
    plan = plan_from_text(text) if text else load_plan(REPO / "plans" / path)
    dag = build_dag(plan)
    built = {("dag id", dag.dag_id)}
    for task in dag.tasks:
        if plan.hosts and task.queue != "default":
            built.add(("queue", task.queue))
        if task.pool != "default_pool":
            built.add(("pool", task.pool))
        if any(ch.isdigit() for ch in task.task_id) or task.task_id.startswith(("collect_", "build_tokenizers_")):
            built.add(("task id", task.task_id))
    assert {(kind, ident) for kind, ident, _ in airflow_identifiers(plan)} == built


def test_c02_host_name_with_spaces_exits_2_at_validate_naming_the_field_and_line():
    plan = CASES / "host_name_with_spaces.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.cli", "plan", "validate", str(plan)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (
        f"error: {plan}:5: hosts.gpu node 1: host name 'gpu node 1' becomes the Airflow task id 'collect_gpu node 1', "
        "which may hold only ASCII letters, digits, '_', '.' and '-' (e.g. 'gpu-node-1')"
    )


@pytest.mark.parametrize(
    "host,name,safe",
    [("gpu/1", "gpu/1", "gpu-1"), ("gpü-1", "gpü-1", "gpu-1"), ("a:b", "a:b", "a-b"), ("gpu\\n1", "gpu\n1", "gpu-1")],
)
def test_host_names_airflow_or_a_shell_would_misread_are_refused(host, name, safe):
    text = MULTI.replace("  beta:", f'  "{host}":')
    with pytest.raises(PlanError) as info:
        plan_from_text(text, "multi.yaml")
    assert info.value.line == 5 and info.value.field == f"hosts.{name}"
    assert info.value.message.endswith(f"which may hold only ASCII letters, digits, '_', '.' and '-' (e.g. {safe!r})")


def test_gpu_sets_that_make_ids_over_250_characters_are_refused():
    devices = list(range(100, 160))
    text = f"name: wide\ndevices: {devices}\nworkloads: [{{name: w, kind: noop, settings: {{gpus: 60}}}}]\n"
    with pytest.raises(PlanError) as info:
        plan_from_text(text, "wide.yaml")
    assert (info.value.line, info.value.field) == (2, "devices")
    assert "characters, more than Airflow's 250" in info.value.message


def test_host_without_enough_gpus_is_a_validate_error_with_the_file():
    text = MULTI.replace("{queue: gpu-a, devices: [0, 1]}", "{queue: gpu-a, devices: [0]}")
    with pytest.raises(PlanError) as info:
        plan_from_text(text, "multi.yaml")
    assert (info.value.path, info.value.line, info.value.field) == ("multi.yaml", 3, "hosts")
    assert "no host lists that many devices" in info.value.message


def test_c03_long_variant_labels_fit_rendered_map_index_and_keep_the_trial_id():
    plan = load_plan(CASES / "long_variant_label.yaml")
    specs = expand(plan, repetitions=3)
    labels = [trial_label(s.variant, s.repetition, s.trial_id) for s in specs]
    assert len(specs[0].variant) > MAP_INDEX_LABEL_MAX_CHARS
    assert all(len(label) == MAP_INDEX_LABEL_MAX_CHARS for label in labels)
    assert len(set(labels)) == len(labels) == 3
    for spec, label in zip(specs, labels, strict=True):
        assert label.endswith(f"… #{spec.repetition} ({spec.trial_id})")
        assert label.startswith("idle-baseline-after-driver-580-upgrade-with-persistence-mode-on[note=node gpu-a17")


def test_short_labels_are_variant_and_repetition():
    assert trial_label("tinylm[path=torch]", 2, "0123456789abcdef") == "tinylm[path=torch] #2"
    variant = "w[note=" + "x" * (MAP_INDEX_LABEL_MAX_CHARS - 11) + "]"
    assert len(trial_label(variant, 0, "0123456789abcdef")) == MAP_INDEX_LABEL_MAX_CHARS  # exactly the limit: kept
    assert trial_label(variant, 0, "0123456789abcdef") == f"{variant} #0"
