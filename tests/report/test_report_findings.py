"""What the report says about validity: the throughput-stability rule as the code judges it."""

from __future__ import annotations

import pandas as pd


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
