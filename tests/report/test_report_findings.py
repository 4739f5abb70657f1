"""What the report says about validity: the throughput-stability rule as the code judges
it, the reasons and flags counted by rule (not by text), and each trial's reasons and
flags told apart in the all-trials table. Data: SYNTHETIC (tests/report/synthetic.py)."""

from __future__ import annotations

import re

import pandas as pd
from synthetic import make_report_data

from gcbench.report import write_report
from gcbench.report.analysis import ReportSettings

FAST = dict(n_resamples=300)  # few resamples: the texts, not the statistics, are under test

UNSTABLE = (
    "unstable window: its slowest 10% of the window ran 9.0x slower than its typical throughput, "
    "60 % of the window lost (invalid above 50 % lost)"
)


def _contention(share: float) -> str:
    return (
        f"CPU contention: other processes used {share:.1f} % of the trial's 2 CPU(s) (0-1) during the window "
        f"(0.96 of 2.00 core-s); flagged above 5 %"
    )


def _report(tmp_path):
    """tinylm with 5 repetitions: five valid trials flagged for contention, each with its own
    share; the first trial invalid (unstable) and flagged as well; one trial throttled on
    two GPUs (one rule, two texts, counted once)."""
    data = make_report_data(kinds=("tinylm",), n_rep=5)
    t = data.trials
    valid = list(t.index[t["status"].eq("ok") & t["valid"].eq(True)])
    flags = {i: [_contention(40.0 + k)] for k, i in enumerate(valid[:5])}
    flags[valid[5]] = [
        "gpu0: throttled during the window (thermal (HW))",
        "gpu1: throttled during the window (power cap (SW))",
    ]
    flags[t.index[0]] = [_contention(48.1)]
    for i, f in flags.items():
        t.at[i, "flags"] = f
    t.at[t.index[0], "reasons"] = [UNSTABLE]
    paths = write_report(data, tmp_path / "r", settings=ReportSettings.from_plan(data.plan, **FAST))
    return data, paths


def test_stability_statement_compares_with_the_typical_segment_as_the_rule_does():
    """The window rule judges a segment against the 90th percentile of the segments'
    throughputs (gcbench.stability.TYPICAL_PERCENTILE), not their median."""
    from gcbench.plan.schema import ValidationSettings
    from gcbench.report.analysis.measurement import stability_statement
    from gcbench.stability import TYPICAL_PERCENTILE, window_finding

    assert TYPICAL_PERCENTILE == 90
    df = pd.DataFrame({"flags": [[]], "reasons": [[]]})
    text = stability_statement(df, {"validation": {"stability_stall_flag_ratio": 4}})
    assert (
        "a segment ran more than 4x slower than the window's typical throughput (the 90th percentile "
        "of its segments'), and invalid when" in text
    )
    assert "or segments slower than typical lost more than 50 % of the window" in text
    assert "median segment" not in text
    for doc in (ValidationSettings.__doc__, window_finding.__doc__):
        assert doc is not None and "than the median" not in doc and "slower-than-median" not in doc
    assert "90th" in (ValidationSettings.__doc__ or "")


def test_reasons_and_flags_are_counted_by_rule_with_one_example(tmp_path):
    _, paths = _report(tmp_path)
    md = paths.markdown.read_text(encoding="utf-8")
    validity = md.split("### Validity")[1].split("## Excluded trials")[0]
    assert "| reason (invalid trials) | trials | example |" in validity
    assert f"| unstable window | 1 | `{UNSTABLE}` |" in validity
    assert "| flag (kept, not invalidating) | trials | example |" in validity
    # six trials, six texts, one rule: one row, its example the first trial's
    assert f"| CPU contention | 6 | `{_contention(48.1)}` (1 of 6 texts) |" in validity
    assert validity.count("CPU contention: other processes") == 1
    # one trial throttled on two GPUs: one trial, two texts
    assert (
        "| throttled during the window | 1 | `gpu0: throttled during the window (thermal (HW))` (1 of 2 texts) |"
        in (validity)
    )
    html = paths.html.read_text(encoding="utf-8")
    sec = html.split('<section id="measurement">')[1].split("</section>")[0]
    assert "<tr><th>flag (kept, not invalidating)</th><th>trials</th><th>example</th></tr>" in sec
    assert re.search(r"<tr><td>CPU contention</td><td class=\"num\">6</td><td><code>CPU contention: other", sec)
    assert sec.count("CPU contention: other processes") == 1


def test_all_trials_table_tells_reasons_from_flags(tmp_path):
    data, paths = _report(tmp_path)
    t = data.trials
    first, flagged = t.loc[0, "trial_id"], t.loc[t.index[1], "trial_id"]
    md = paths.markdown.read_text(encoding="utf-8")
    table = md.split("## All trials")[1].split("## ")[0]
    rows = {line.split(" | ")[0].removeprefix("| `").removesuffix("`"): line for line in table.splitlines()}
    assert rows[first].endswith(f"| invalid: {UNSTABLE} · flagged: {_contention(48.1)} |")
    flagged_row = next(r for i, r in rows.items() if i != first and "flagged:" in r)
    assert re.search(r"\| flagged: CPU contention: other processes used 4\d\.0 % .* \|$", flagged_row)
    plain = [r for r in rows.values() if r.startswith("| `") and "nvml-counter-edge-corrected |" in r]
    assert any(r.endswith("nvml-counter-edge-corrected |  |") for r in plain)  # nothing found: an empty cell
    assert not any(re.search(r"\|  [^|\s]", r) for r in plain)  # no cell starts with a space before its text
    html = paths.html.read_text(encoding="utf-8")
    trials = html.split('<section id="trials">')[1].split("</section>")[0]
    assert f"<td>invalid: {UNSTABLE}<br>flagged: {_contention(48.1)}</td></tr>".replace("'", "&#39;") in trials
    assert "<td> " not in trials and flagged in trials
    assert "<td>error: CUDA error: out of memory" in trials
