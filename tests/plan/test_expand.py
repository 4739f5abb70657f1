"""Matrix expansion and trial ids."""

import json
import subprocess
import sys

from gcbench.plan import expand, plan_from_text, variants

PLAN = """\
name: ids
seed: 5
repetitions: 2
workloads:
  - name: copy
    kind: h2d
    matrix:
      memory: [pinned, pageable]
      size_bytes: [1048576, 4194304]
    exclude:
      - {memory: pageable, size_bytes: 4194304}
"""


def test_cartesian_product_minus_exclude():
    plan = plan_from_text(PLAN)
    assert variants(plan) == [
        "copy[memory=pinned,size_bytes=1048576]",
        "copy[memory=pinned,size_bytes=4194304]",
        "copy[memory=pageable,size_bytes=1048576]",
    ]
    specs = expand(plan)
    assert len(specs) == 6
    assert sorted(s.order for s in specs) == list(range(6))
    assert {s.settings["memory"] for s in specs} == {"pinned", "pageable"}


def test_randomized_order_is_seeded_and_sequential_is_plan_order():
    a = [s.trial_id for s in expand(plan_from_text(PLAN))]
    b = [s.trial_id for s in expand(plan_from_text(PLAN))]
    seq = [s.trial_id for s in expand(plan_from_text(PLAN + "order: sequential\n"))]
    assert a == b and sorted(a) == sorted(seq) and a != seq
    seq_specs = expand(plan_from_text(PLAN + "order: sequential\n"))
    assert [(s.variant, s.repetition) for s in seq_specs][:2] == [
        ("copy[memory=pinned,size_bytes=1048576]", 0),
        ("copy[memory=pinned,size_bytes=1048576]", 1),
    ]


def test_trial_ids_are_stable_across_processes():
    code = (
        "from gcbench.plan import expand, plan_from_text; import sys, json; "
        "print(json.dumps(sorted(s.trial_id for s in expand(plan_from_text(sys.stdin.read())))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=PLAN,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"},
    ).stdout
    assert json.loads(out) == sorted(s.trial_id for s in expand(plan_from_text(PLAN)))


def test_trial_id_pinned_value():
    # The id is sha256(plan + "\n" + canonical spec)[:16]; pinning one value catches any
    # accidental change of the canonical form, which would orphan every stored trial.
    spec = next(
        s
        for s in expand(plan_from_text(PLAN))
        if s.variant == "copy[memory=pinned,size_bytes=1048576]" and s.repetition == 0
    )
    assert spec.trial_id == spec.compute_id()
    import hashlib

    assert spec.trial_id == hashlib.sha256(("ids\n" + spec.canonical_json()).encode()).hexdigest()[:16]
    assert '"order"' not in spec.canonical_json() and '"trial_id"' not in spec.canonical_json()


def test_new_variant_adds_ids_and_changes_none():
    old = {s.trial_id for s in expand(plan_from_text(PLAN))}
    grown = PLAN.replace("size_bytes: [1048576, 4194304]", "size_bytes: [1048576, 4194304, 16777216]")
    new = {s.trial_id for s in expand(plan_from_text(grown))}
    assert old < new and len(new - old) == 4  # 2 memory kinds x 1 new size x 2 repetitions
    # an explicit empty settings block gives the same effective settings, hence the same ids
    same = PLAN.replace("kind: h2d", "kind: h2d\n    settings: {}")
    assert {s.trial_id for s in expand(plan_from_text(same))} == old


def test_more_repetitions_keep_existing_ids():
    two = {s.trial_id for s in expand(plan_from_text(PLAN))}
    three = {s.trial_id for s in expand(plan_from_text(PLAN), repetitions=3)}
    assert two < three and len(three) == 9


def test_only_variants_filter():
    specs = expand(plan_from_text(PLAN), only_variants=["copy[memory=pageable,size_bytes=1048576]"])
    assert len(specs) == 2 and {s.variant for s in specs} == {"copy[memory=pageable,size_bytes=1048576]"}


def test_seeds_differ_per_repetition_and_variant():
    specs = expand(plan_from_text(PLAN))
    assert len({s.seed for s in specs}) == len(specs)


def test_ids_do_not_change_with_the_until_stable_warm_up_option():
    """Specs without ``warmup.until_stable`` hash as before it existed (no null key)."""
    spec = expand(plan_from_text(PLAN))[0]
    canonical = json.loads(spec.canonical_json())
    assert "until_stable" not in canonical["warmup"] and "until_stable" not in canonical["window"]
    assert spec.trial_id == "45f2a08475fc8a4e"  # as computed before the option existed
    stable = expand(plan_from_text(PLAN + "warmup: {until_stable: {cv_max: 0.05, max_seconds: 30}}\n"))[0]
    assert stable.warmup.until_stable.cv_max == 0.05 and stable.warmup.until_stable.steps == 5
    assert stable.trial_id != spec.trial_id
