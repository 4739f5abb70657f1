"""Contended trials kept in the statistics (a plan that only flags contention) are named
where their figures are read: under the groups table, in the headline sentences, and in
"How this was measured" with every window's share (a new user's demo: torch rep 0 at
1,908 tokens/s and 50.6 % contention fed the median and a +1430 % comparison, silently)."""

from __future__ import annotations

import numpy as np
from synthetic import make_report_data

from gcbench.report.analysis import ReportSettings, analyze
from gcbench.report.analysis.measurement import contention_statement
from gcbench.report.render.tables import workload_table

FLAG = "CPU contention: other processes used 48.1 % of the trial's 2 CPU(s) (0-1) during the window (1.20 of 2.49 core-s); flagged above 5 %"
TORCH = "tinylm-infer[mode=infer,path=torch]"


def _contended(n_rep=6):
    data = make_report_data(kinds=("tinylm",), n_rep=n_rep, failures=False)
    t = data.trials
    hit = (t["variant"] == TORCH) & t["repetition"].isin([0, 1])
    t["flags"] = [list(f) + [FLAG] if h else list(f) for f, h in zip(t["flags"], hit, strict=True)]
    t["cpu_contention_share"] = np.where(hit, 0.481, 0.012)
    t["tokenize_cpu_contention_share"] = np.where(hit, 0.0, 0.3)
    return data, analyze(data, ReportSettings.from_plan(data.plan, n_resamples=300))


def test_groups_table_names_the_contended_groups_and_their_counts():
    _, a = _contended()
    workload, kind, groups = next(w for w in a.workloads() if w[0] == "tinylm-infer")
    torch = next(g for g in groups if g.variant == TORCH)
    assert torch.n_contended == 2 and all(g.n_contended == 0 for g in groups if g is not torch)
    notes = workload_table(a, workload, kind, groups).notes
    (note,) = [n for n in notes if n.startswith("CPU contention:")]
    assert f"kept in these figures: {TORCH} (2 of 6)." in note
    assert "validation.cpu_contention_invalid_share excludes such windows" in note


def test_headlines_of_a_contended_group_carry_the_caveat_others_do_not():
    _, a = _contended()
    rows = [r for r in a.comparisons if r.workload == "tinylm-infer" and r.headline]
    with_torch = [r for r in rows if "path=torch" in (r.treatment_level, r.baseline_level) or "torch" in r.headline]
    assert with_torch
    for r in rows:
        mentions_torch = "path=torch" in r.headline
        caveat = (
            "CPU contention was flagged in 2 of 6 trials of path=torch: part of it may be the host's." in r.headline
        )
        assert caveat == mentions_torch, r.headline


def test_measurement_statement_gives_the_main_and_the_other_windows_shares():
    data, a = _contended()
    text = contention_statement(a.trials, data.plan)
    assert "in the main window others' share was 1.2 % in the median trial and 48.1 % at most" in text
    assert "(in the other windows, tokenize: 30.0 % at most)" in text
