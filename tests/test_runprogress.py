"""`gcbench run`'s progress bar over a plan with a precision target: the first round's
trials are known before the run, later rounds are not, so the bar grows with the trials
started and says which phase it is in (before, it stopped at the first round's count and
read "collect, validate, report" while round two ran)."""

from __future__ import annotations

from gcbench.plan import plan_from_text
from gcbench.runprogress import bar_state, has_precision_target

TARGET = """\
name: target
window: {seconds: 1}
workloads:
  - {name: noop, kind: noop, repetitions: {min: 6, max: 30, until_ci_rel: 0.02}}
  - {name: copy, kind: h2d}
"""


def test_a_precision_target_anywhere_means_more_rounds_unless_a_count_overrides_it():
    plan = plan_from_text(TARGET)
    assert has_precision_target(plan, None) is True
    assert has_precision_target(plan, 3) is False  # --repetitions 3: one round of 3
    assert (
        has_precision_target(plan_from_text(TARGET.replace("{min: 6, max: 30, until_ci_rel: 0.02}", "4")), None)
        is False
    )


def test_bar_grows_with_the_second_round_and_names_its_phase():
    # first round: 6 noop + 3 copies = 9 trials
    assert bar_state(9, 4, 3, 0, True) == (9, 3, "trials")
    assert bar_state(9, 9, 9, 0, True) == (9, 9, "collect, validate, decide the next round or report")
    assert bar_state(9, 14, 11, 1, True) == (
        14,
        11,
        "trials (1 failed), more rounds until the precision target (5 added)",
    )
    assert bar_state(9, 14, 14, 1, True) == (14, 14, "collect, validate, decide the next round or report")
    assert bar_state(9, 14, 12, 0, True, stopping=True) == (14, 12, "stopping")


def test_a_plan_without_target_keeps_its_known_total():
    assert bar_state(31, 20, 19, 0, False) == (31, 19, "trials")
    assert bar_state(31, 31, 31, 0, False) == (31, 31, "collect, validate, report")
    assert bar_state(0, 0, 0, 0, False) == (0, 0, "trials")
