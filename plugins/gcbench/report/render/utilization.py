"""The GPU's busy and idle share in the report's tables: the paper table's two column
heads and the note under every table that shows them (the cells are
:func:`gcbench.report.render.tables.busy_cells`) (numbers from
:mod:`gcbench.report.analysis.utilization`)."""

from __future__ import annotations

from gcbench.report.analysis.groups import Group
from gcbench.report.analysis.utilization import (
    STARVED_IDLE_SHARE,
    busy_methods,
    describe_busy_method,
    starved_groups,
)
from gcbench.report.metrics import info, kind_metrics
from gcbench.report.scale import Unit

PERCENT = Unit("%", 0.01)
"""A share (stored 0..1) shown in percent."""

BUSY_HEADS = ("GPU busy share (%)", "GPU idle share (%)")
"""The paper tables' heads of the two columns."""


def has_busy(groups: list[Group]) -> bool:
    """Whether any group has a known busy share (else the columns are left out)."""
    return any(g.known("gpu_busy_share").size for g in groups)


def busy_note(groups: list[Group]) -> str | None:
    """The sentence under a table with the busy/idle columns: what they are, how each was
    found, and which groups' GPUs waited more than they worked; None without a value."""
    if not has_busy(groups):
        return None
    methods = busy_methods(groups)
    how = "; ".join(f"{m}: {describe_busy_method(m)}" for m in methods) or "method not recorded"
    per = info(kind_metrics(groups[0].kind)[0], groups[0].work_unit).label  # the kind's primary figure
    text = (
        "GPU busy share = the share of the measured window in which the GPU ran work, "
        f"idle share = 1 - busy (median over the valid trials; {how}). A {per} that comes "
        "with a large idle share is the energy of a GPU waiting for its input, not of its work."
    )
    if "simulated-trial-busy-time" in methods:
        text += (
            " On the simulated device the work runs on the CPU, so CPU contention lengthens it and raises "
            "the busy share: compare busy shares only between groups without contention flags."
        )
    starved = starved_groups(groups)
    if starved:
        text += f" Idle more than {STARVED_IDLE_SHARE:.0%} of the window: {', '.join(starved)}."
    return text
