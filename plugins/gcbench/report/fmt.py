"""Formatting helpers shared by the numbers and their rendering: numbers and p-values as text."""

from __future__ import annotations

import math


def fmt_num(v: float | None, digits: int = 4) -> str:
    """A number with ``digits`` significant digits, or an en dash for unknown."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if v == 0:
        return "0"
    mag = abs(v)
    if 1e-3 <= mag < 1e6:
        decimals = max(0, digits - 1 - int(math.floor(math.log10(mag))))
        return f"{v:,.{decimals}f}"
    return f"{v:.{digits - 1}e}"


def fmt_p(p: float | None) -> str:
    """p-value as in papers: ``p = 0.031``, ``p < 0.001``."""
    if p is None:
        return "p = –"
    if p < 0.001:
        return "p < 0.001"
    return f"p = {p:.3f}" if p < 0.1 else f"p = {p:.2f}"
