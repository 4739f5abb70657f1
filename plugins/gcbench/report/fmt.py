"""Formatting helpers shared by the numbers and their rendering: numbers and p-values as text."""

from __future__ import annotations

import math
import re


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


FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
"""A spreadsheet (Excel, LibreOffice, Google Sheets) evaluates a CSV cell that starts with one
of these as a formula (OWASP "CSV Injection", CWE-1236)."""


def spreadsheet_text(value: object) -> object:
    """A CSV cell value that no spreadsheet evaluates: text starting with ``= + - @``, a tab
    or a carriage return gets a leading ``'`` (OWASP's neutralisation; the spreadsheet shows
    the text as typed). Numbers, and text that reads as a number (``-1.5``), are unchanged.

    Args:
        value: any cell value.

    Returns:
        ``value`` itself, or the text with ``'`` prefixed.
    """
    if not isinstance(value, str) or not value.startswith(FORMULA_PREFIXES):
        return value
    try:
        float(value)
    except ValueError:
        return "'" + value
    return value


class MarkdownLiteral(str):
    """Text already escaped for Markdown (:func:`md_escape`): :func:`markdown_text` leaves it."""


# ASCII punctuation that starts Markdown syntax inline (emphasis, code, links, raw HTML,
# table cells, entities, strikethrough); CommonMark 0.31 section 2.4: any ASCII punctuation
# after a backslash is a literal character.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|&~])")


def md_escape(text: object) -> MarkdownLiteral:
    """Plan text (a place, a series path, a reason) as literal Markdown: each character of
    ``\\ ` * _ [ ] < > | & ~`` gets a backslash (CommonMark, "Backslash escapes"), so a name
    like ``a|b*c<script>`` shows as written, neither as emphasis, a table cell nor HTML; a
    line break becomes a space (it would end a table row)."""
    return MarkdownLiteral(_MD_SPECIAL.sub(r"\\\1", _one_line(str(text))))


def markdown_text(value: object) -> object:
    """A value for report.md as text: ``|`` escaped (it would end a table cell and shift the
    row), ``<`` as ``&lt;`` (Markdown passes HTML through: a ``<script>`` in a plan value
    would be markup), a line break as a space (it would end a table row). Non-text values,
    and text :func:`md_escape` already escaped, are unchanged (Jinja prints them)."""
    if not isinstance(value, str) or isinstance(value, MarkdownLiteral):
        return value
    return _one_line(value).replace("|", "\\|").replace("<", "&lt;")


def _one_line(text: str) -> str:
    # a line break inside a value ends a Markdown table row (a plan value ``a\nb`` cut the
    # row in two): each one becomes a space
    return re.sub(r"\r\n|[\r\n]", " ", text)
