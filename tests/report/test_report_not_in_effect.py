"""Requested settings that were not in effect: the group is marked, and no comparison along
that setting is presented as a result (report, CSV, paper), whatever the workload.

On a machine without CUDA an h2d trial asked for pinned memory copies pageable host memory
(result.json: settings_not_in_effect {memory: reason}); "pinned vs pageable" then compares
identical work. The same holds for AMP on a CPU, a GPU count on a CPU, a power cap that
could not be set.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from synthetic import make_report_data

from gcbench.report import write_report
from gcbench.report.analysis import ReportSettings, analyze
from gcbench.report.render.paper import paper_tables, to_latex, to_markdown

FAST = dict(n_resamples=500)  # few resamples: the marks, not the statistics, are under test
NO_PIN = "no CUDA device: pinned memory unavailable, host-to-host copy of pageable memory"
NO_AMP = "no CUDA device: float16 AMP unavailable, bfloat16 autocast on the CPU instead (amp-bf16-cpu)"


def h2d_without_cuda(n_rep: int = 3, only_some: bool = False):
    """Synthetic h2d trials as a machine without CUDA records them: every pinned trial
    says memory was not in effect (with only_some, one pinned trial of each group ran pinned)."""
    data = make_report_data(kinds=("h2d",), n_rep=n_rep, failures=False)
    t = data.trials
    marks = []
    for f, rep in zip(t["factors"], t["repetition"], strict=True):
        pinned = f["memory"] == "pinned" and not (only_some and rep == 0)
        marks.append({"memory": NO_PIN} if pinned else {})
    t["settings_not_in_effect"] = marks
    return data


def _analyze(data):
    return analyze(data, ReportSettings.from_plan(data.plan, **FAST))


def _write(data, tmp_path, paper=True):
    return write_report(data, tmp_path / "r", settings=ReportSettings.from_plan(data.plan, **FAST), paper=paper)


def test_group_is_marked_and_pinned_vs_pageable_is_not_compared(tmp_path):
    data = h2d_without_cuda()
    a = _analyze(data)
    pinned = [g for g in a.groups if g.factors["memory"] == "pinned"]
    pageable = [g for g in a.groups if g.factors["memory"] == "pageable"]
    assert pinned and all(
        g.not_in_effect == {"memory": f"memory=pinned requested, not in effect: {NO_PIN}"} for g in pinned
    )
    assert all(g.not_in_effect == {} for g in pageable)
    rows = [r for r in a.comparisons if r.factor == "memory"]
    assert rows and all(r.not_compared == f"memory=pinned requested, not in effect: {NO_PIN}" for r in rows)
    # never tested, never a change, never a headline; the medians of what ran stay
    assert all(
        r.result.pct_change is None and r.result.p_mannwhitney is None and r.result.significant is None for r in rows
    )
    assert all(r.result.median_treatment is not None for r in rows)
    assert not any("memory=pinned" in h for h in a.headlines)
    assert all(r.headline.endswith(f": not compared (memory=pinned requested, not in effect: {NO_PIN}).") for r in rows)
    # the size sweep inside one memory kind is still summarised; its context says what did not run
    assert a.not_compared() and not a.untested_for_ci()


def test_report_files_say_not_in_effect_and_not_compared(tmp_path):
    paths = _write(h2d_without_cuda(), tmp_path)
    md = paths.markdown.read_text()
    html = paths.html.read_text()
    # the groups table marks the group, and says why under the table
    row = next(line for line in md.splitlines() if line.startswith("| h2d[memory=pinned,size_mib=64]"))
    assert "**memory=pinned not in effect**" in row
    assert f"h2d[memory=pinned,size_mib=64]: memory=pinned requested, not in effect: {NO_PIN}" in md
    assert f"memory=pinned requested, not in effect: {NO_PIN}" in html.split('id="comparisons"')[0]
    # comparisons: no change, a verdict that says why; the headlines say none was made
    comp = [line for line in md.splitlines() if "| memory=pinned vs memory=pageable |" in line]
    assert comp and all(
        f"| not compared (memory=pinned requested, not in effect: {NO_PIN}) |" in c and "| – | – |" in c for c in comp
    )
    heads = md.split("## Headlines")[1].split("## Groups")[0]
    assert "No headline:" in heads and "not made (a requested factor level was not in effect" in heads
    assert "no significant difference" not in heads and "pinned vs pageable" not in heads
    assert "not compared" in html and "raised bandwidth" not in html
    # the Holm family counted in the text is what was tested (p-values), not the rows not compared
    a = _analyze(h2d_without_cuda())
    tested = [r for r in a.comparisons if r.result.p_mannwhitney is not None]
    assert len(tested) < len([r for r in a.comparisons if not r.inconclusive])
    assert f"Holm-adjusted across the {len(tested)} tested comparisons" in md


def test_csv_files_carry_the_marks(tmp_path):
    paths = _write(h2d_without_cuda(), tmp_path, paper=False)
    groups = list(csv.DictReader(paths.csv["groups"].open()))
    assert {r["not_in_effect"] for r in groups if '"memory": "pinned"' in r["factors"]} == {
        f"memory=pinned requested, not in effect: {NO_PIN}"
    }
    assert {r["not_in_effect"] for r in groups if '"memory": "pageable"' in r["factors"]} == {""}
    comps = list(csv.DictReader(paths.csv["comparisons"].open()))
    memory = [r for r in comps if r["factor"] == "memory"]
    assert memory and all(
        r["not_compared"].startswith("memory=pinned requested, not in effect")
        and r["pct_change"] == ""
        and r["significant"] == ""
        for r in memory
    )
    trials = list(csv.DictReader(paths.csv["trials"].open()))
    assert {r["settings_not_in_effect"] for r in trials if '"pinned"' in r["factors"]} == {
        json.dumps({"memory": NO_PIN})
    }
    assert {r["settings_not_in_effect"] for r in trials if '"pageable"' in r["factors"]} == {"{}"}


def test_paper_h2d_table_shows_no_ratio_for_identical_work(tmp_path):
    data = h2d_without_cuda()
    data.trials["copy_target"] = "host"
    a = _analyze(data)
    h2d = next(t for t in paper_tables(a) if t.key == "regime-h2d")
    ratio_cols = [i for i, c in enumerate(h2d.columns) if "ratio" in c]
    assert len(ratio_cols) == 2
    pinned_cols = [i for i, c in enumerate(h2d.columns) if c.startswith(("bandwidth pinned", "GPU J/GB pinned"))]
    assert len(pinned_cols) == 2
    for r in h2d.rows:
        for i in ratio_cols:
            assert r[i] == "not compared: memory=pinned not in effect"
        for i in pinned_cols:  # no figure under a "pinned" head for work that was not pinned
            assert r[i] == "pinned not in effect"
    notes = " ".join(h2d.notes)
    assert f"memory=pinned requested, not in effect: {NO_PIN}" in notes
    assert "host memcpy bandwidth, not a host-to-device copy" in notes
    assert "Ratios: no change here is a result." in notes
    md, tex = to_markdown([h2d], a), to_latex([h2d], a)
    assert "not compared: memory=pinned not in effect" in md and "x [" not in md
    assert "not compared: memory=pinned not in effect" in tex


def test_a_level_in_effect_in_some_trials_only_is_still_marked():
    a = _analyze(h2d_without_cuda(only_some=True))
    g = next(g for g in a.groups if g.factors == {"memory": "pinned", "size_mib": 1})
    assert g.not_in_effect["memory"] == f"memory=pinned requested, not in effect (in 2 of 3 trials): {NO_PIN}"
    assert all(r.not_compared for r in a.comparisons if r.factor == "memory")


def test_trials_stored_before_the_record_fall_back_on_what_they_reported():
    """Runs stored before workloads recorded settings_not_in_effect: h2d said
    memory_effective=pageable and why in its note."""
    data = make_report_data(kinds=("h2d",), n_rep=3, failures=False)
    t = data.trials
    t["memory_effective"] = "pageable"
    t["note"] = [
        NO_PIN if f["memory"] == "pinned" else "no CUDA device: host-to-host copy into a preallocated tensor"
        for f in t["factors"]
    ]
    a = _analyze(data)
    assert {g.factors["memory"]: bool(g.not_in_effect) for g in a.groups} == {"pinned": True, "pageable": False}
    assert all(r.not_compared.endswith(NO_PIN) for r in a.comparisons if r.factor == "memory")


def test_amp_on_a_cpu_is_no_trade_off_and_no_paper_result():
    """The multi-GPU study's precision and GPU-count factors on a CPU: not in effect, so the
    trade-off has no "saved X % energy" headline along them and the paper table no change."""
    data = make_report_data(kinds=("resnet_cifar",), n_rep=5, failures=False)
    t = data.trials
    marks = []
    for f in t["factors"]:
        d = {
            "gpus": f"no CUDA device: {'1 CPU process' if f['gpus'] == 1 else '2 CPU processes (DDP over gloo)'}"
            f", no GPU"
        }
        if f["precision"] == "amp":
            d["precision"] = NO_AMP
        marks.append(d)
    t["settings_not_in_effect"] = marks
    a = _analyze(data)
    t_off = a.tradeoffs[0]
    effects = {(e.factor, e.level): e for e in t_off.effects}
    assert not effects[("precision", "amp")].headline
    assert effects[("precision", "amp")].reason.startswith("not compared: precision=amp requested, not in effect")
    assert not effects[("gpus", 2)].headline
    # the power cap is in effect: its trade-off is still a result
    assert effects[("power_cap_w", 250)].headline
    assert {r.factor for r in a.headline_rows()} == {"power_cap_w"}
    assert all(h.startswith("resnet50-cifar10: power_cap_w=") for h in t_off.headlines)
    assert all("precision=amp (not in effect)" in r.context for r in a.headline_rows() if "precision=amp" in r.context)
    gpu = next(p for p in paper_tables(a) if p.key == "multigpu")
    i = gpu.columns.index("Δ energy")
    for r in gpu.rows:
        assert r[0] in ("1 (not in effect)", "2 (not in effect)")  # GPU count on a CPU
        assert r[1] in ("fp32", "amp (not in effect)") and r[2] in ("200", "250", "300")
        if r[:3] == ["1 (not in effect)", "fp32", "300"]:
            assert r[i] == "baseline"
        elif r[0].startswith("2") or r[1].startswith("amp"):
            assert r[i] == "not compared: see note"
        else:
            assert r[i].startswith(("-", "+")) and "[" in r[i]
    assert any(n.startswith("Not compared with the baseline") and NO_AMP in n for n in gpu.notes)


@pytest.mark.parametrize("factor", ["memory"])
def test_context_of_other_comparisons_says_what_did_not_run(factor):
    """Size comparisons inside memory=pinned still run (the sizes really differ); their context
    names the level that was not in effect."""
    data = h2d_without_cuda(n_rep=4)
    data.plan["report"] = {"compare": ["size_mib"]}
    a = analyze(data, ReportSettings.from_plan(data.plan, n_resamples=300))
    rows = [r for r in a.comparisons if r.factor == "size_mib" and "pinned" in r.context]
    assert rows and all(r.context == "memory=pinned (not in effect)" and not r.not_compared for r in rows)
    assert np.isfinite([r.result.pct_change for r in rows]).all()


def test_paper_h2d_table_withholds_the_busy_share_of_a_side_not_in_effect():
    """The busy share of copies that were not pinned is no "GPU busy share pinned" figure:
    withheld like that side's bandwidth and J/GB; the side in effect keeps its share."""
    data = h2d_without_cuda()
    t = data.trials
    t["gpu_busy_share"] = [0.9967 if f["memory"] == "pinned" else 0.42 for f in t["factors"]]
    t["gpu_idle_share"] = 1 - t["gpu_busy_share"]
    t["gpu_busy_method"] = "simulated-trial-busy-time"
    h2d = next(p for p in paper_tables(_analyze(data)) if p.key == "regime-h2d")
    i_pinned = h2d.columns.index("GPU busy share pinned (%)")
    i_pageable = h2d.columns.index("GPU busy share pageable (%)")
    assert h2d.rows and all(r[i_pinned] == "pinned not in effect" for r in h2d.rows)
    assert all(r[i_pageable] == "42.00" for r in h2d.rows)
    md = to_markdown([h2d], _analyze(data))
    assert "99.67" not in md
