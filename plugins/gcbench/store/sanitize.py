"""Making a trial's text and numbers storable in PostgreSQL without losing them.

A trial writes bytes: its log, the strings and numbers of result.json, the fields of
samples.csv. PostgreSQL refuses some of them, and one refused value used to cost the
whole trial (a NUL byte in the log made ``collect`` raise on every retry) or a whole
sample row (its power and energy with it). Here each value is made storable on its
own, and every change is counted and written down in :class:`IngestNotes` (stored in
``trials.ingest_notes``):

* Text (PostgreSQL ``text``/``jsonb``, UTF-8): NUL characters (``text`` cannot hold
  them, ``jsonb`` refuses ``\\u0000``), lone surrogates (not UTF-8) and invalid or split
  UTF-8 byte sequences become U+FFFD; a string longer than :data:`MAX_TEXT_CHARS`
  keeps its head and tail around a marker saying how much was cut.
* Numbers of result.json: ``NaN``, ``Infinity``, literals beyond double precision
  (``1e400``) and integers of more digits than Python converts become null; every
  other integer is kept exactly (``jsonb`` numeric).
* Known fields of result.json must have their type (:func:`check_result_shape`): a
  field of the wrong type becomes null (a list item is removed), so the readers of the
  stored document (validation, report) never meet a string where a number belongs.
"""

from __future__ import annotations

import math
import re
import typing
from datetime import UTC, datetime
from typing import Any

REPLACEMENT = "\ufffd"
"""U+FFFD REPLACEMENT CHARACTER: what an unstorable character or byte becomes."""

MAX_TEXT_CHARS = 65_536
"""Longest string stored from a trial's files (error, text metric, any result.json string)."""

MAX_KEY_CHARS = 500
"""Longest JSON key (metric name) stored: a metric name is in the metrics table's primary
key, whose btree entries hold at most 2704 bytes (500 characters are at most 2000 bytes)."""

MAX_DEPTH = 64
"""Deepest nesting of result.json stored; deeper values become null (a real result is < 10)."""

MAX_NOTES = 50
"""Notes kept per trial; further ones are counted in a last line."""

INT32 = (-(1 << 31), (1 << 31) - 1)

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


class IngestNotes:
    """What ``collect`` changed to store one trial, one line per change, with counts.

    Attributes:
        lines: the notes, e.g. ``log tail: 136 NUL characters replaced with U+FFFD``.
        fields_nulled: values stored as NULL/null because no column could hold them.
        text_repaired: strings stored with characters replaced or cut.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.fields_nulled = 0
        self.text_repaired = 0
        self._more = 0

    def add(self, line: str, nulled: int = 0, repaired: int = 0) -> None:
        """Record one change (``nulled`` values stored as NULL, ``repaired`` strings changed)."""
        self.fields_nulled += nulled
        self.text_repaired += repaired
        if len(self.lines) < MAX_NOTES:
            self.lines.append(line)
        else:
            self._more += 1

    def prefixed(self, prefix: str) -> IngestNotes:
        """A view adding to these notes with ``prefix`` before every line
        (``result.json error: ...``)."""
        view = _PrefixedNotes.__new__(_PrefixedNotes)
        view._target, view._prefix = self, prefix
        return view

    def as_list(self) -> list[str]:
        """The notes for ``trials.ingest_notes`` (at most :data:`MAX_NOTES` + 1 lines)."""
        return self.lines + ([f"... and {self._more} more notes"] if self._more else [])


class _PrefixedNotes(IngestNotes):
    _target: IngestNotes
    _prefix: str

    def add(self, line: str, nulled: int = 0, repaired: int = 0) -> None:
        self._target.add(self._prefix + line, nulled, repaired)


def _where(where: str) -> str:
    return where if len(where) <= 120 else where[:60] + "..." + where[-57:]


def cut_middle(text: str, limit: int) -> str:
    """``text`` shortened to at most ``limit`` characters, head and tail kept around a
    ``[... N characters cut ...]`` marker (an error's cause and its last line both stay)."""
    if len(text) <= limit:
        return text
    marker = f" [... {len(text) - limit} characters cut ...] "
    keep = max(limit - len(marker), 0)
    head = keep // 2
    return text[:head] + marker + text[len(text) - (keep - head) :]


def clean_text(value: str, where: str, notes: IngestNotes | None = None, limit: int = MAX_TEXT_CHARS) -> str:
    """A string PostgreSQL stores as it is: NUL and lone surrogates replaced with U+FFFD,
    at most ``limit`` characters (:func:`cut_middle`). Each change is noted at ``where``."""
    changes = []
    n_nul = value.count("\x00")
    if n_nul:
        value = value.replace("\x00", REPLACEMENT)
        changes.append(f"{n_nul} NUL character{'s' if n_nul > 1 else ''} replaced with U+FFFD")
    value, n_sur = _SURROGATE_RE.subn(REPLACEMENT, value)
    if n_sur:
        changes.append(f"{n_sur} lone surrogate{'s' if n_sur > 1 else ''} (not UTF-8) replaced with U+FFFD")
    if len(value) > limit:
        changes.append(f"cut from {len(value)} to {limit} characters (head and tail kept)")
        value = cut_middle(value, limit)
    if changes and notes is not None:
        notes.add(f"{_where(where)}: {'; '.join(changes)}", repaired=1)
    return value


def decode_utf8(data: bytes, where: str, notes: IngestNotes | None = None) -> str:
    """Bytes as text: invalid or split UTF-8 sequences replaced with U+FFFD (one per
    maximal invalid sequence, as Python's ``errors="replace"``), counted at ``where``."""
    text = data.decode("utf-8", "replace")
    # a U+FFFD the bytes held already (EF BF BD) is text, not a replacement
    n_bad = text.count(REPLACEMENT) - data.count(b"\xef\xbf\xbd")
    if n_bad and notes is not None:
        notes.add(
            f"{_where(where)}: {n_bad} invalid UTF-8 sequence{'s' if n_bad > 1 else ''} replaced with U+FFFD",
            repaired=1,
        )
    return text


class HugeInt:
    """An integer literal of result.json too long for Python to convert (over 4300
    digits, ``sys.get_int_max_str_digits``); becomes null with a note."""

    def __init__(self, digits: int):
        self.digits = digits


def parse_int(literal: str) -> int | HugeInt:
    """``json.loads(parse_int=...)``: the integer, or :class:`HugeInt` instead of raising."""
    try:
        return int(literal)
    except ValueError:
        return HugeInt(len(literal.lstrip("-+")))


def clean_json(value: Any, where: str, notes: IngestNotes, depth: int = 0) -> Any:
    """A parsed JSON value made storable in ``jsonb`` and faithful to the readers.

    Strings and keys through :func:`clean_text` (keys at most :data:`MAX_KEY_CHARS`;
    two keys that become equal get `` (2)``, `` (3)`` ...); non-finite floats (NaN,
    Infinity, ``1e400``), :class:`HugeInt` and values nested deeper than
    :data:`MAX_DEPTH` become None; integers, however large, are kept exactly; a value
    that is not JSON (a datetime among trigger parameters) becomes its text. Returns a
    new value; every change is noted.
    """
    if depth > MAX_DEPTH:
        notes.add(f"{_where(where)}: nested deeper than {MAX_DEPTH} levels: stored as null", nulled=1)
        return None
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = clean_text(str(key), f"{where} (key)" if where else "key", notes, MAX_KEY_CHARS)
            if name in out:
                n = 2
                while f"{name} ({n})" in out:
                    n += 1
                notes.add(
                    f"{_where(where or 'top level')}: key {name[:60]!r} repeated after repair: stored as "
                    f"{name[:60] + f' ({n})'!r}",
                    repaired=1,
                )
                name = f"{name} ({n})"
            out[name] = clean_json(item, f"{where}.{name}" if where else name, notes, depth + 1)
        return out
    if isinstance(value, list):
        return [clean_json(item, f"{where}[{i}]", notes, depth + 1) for i, item in enumerate(value)]
    if isinstance(value, str):
        return clean_text(value, where, notes)
    if isinstance(value, float) and not math.isfinite(value):
        notes.add(f"{_where(where)}: {value} is not a finite number: stored as null", nulled=1)
        return None
    if isinstance(value, HugeInt):
        notes.add(f"{_where(where)}: an integer of {value.digits} digits: stored as null", nulled=1)
        return None
    if value is None or isinstance(value, (bool, int, float)):
        return value
    notes.add(f"{_where(where)}: a {type(value).__name__}, not a JSON value: stored as its text", repaired=1)
    return clean_text(str(value), where, notes)


# ------------------------------------------------------------------ known fields of result.json


def _is(value: Any, kind: str) -> bool:
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "int32":
        return isinstance(value, int) and not isinstance(value, bool) and INT32[0] <= value <= INT32[1]
    if kind == "time":
        return isinstance(value, str) and pg_time(value) is not None
    return isinstance(value, {"str": str, "bool": bool, "list": list, "dict": dict}[kind])


def _kinds_of(cls: type) -> dict[str, str]:
    """{field: kind} of a dataclass from its type hints (``float | None`` -> number)."""
    import types

    names = {float: "number", int: "int", str: "str", bool: "bool", list: "list", dict: "dict"}
    out = {}
    for name, hint in typing.get_type_hints(cls).items():
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            if len(args) != 1:
                continue
            hint = args[0]
        base = typing.get_origin(hint) or hint
        if base in names:
            out[name] = names[base]
    return out


def _expect(obj: dict, key: str, kind: str, where: str, notes: IngestNotes) -> Any:
    value = obj.get(key)
    if value is None or _is(value, kind):
        return value
    shown = repr(value)[:40] if isinstance(value, (str, int, float)) else type(value).__name__
    wanted = {
        "int32": "a 32-bit integer",
        "time": "an ISO 8601 time",
        "dict": "an object",
        "list": "a list",
        "str": "text",
    }.get(kind, f"a {kind}")
    notes.add(f"{_where(where)}: {shown} is not {wanted}: stored as null", nulled=1)
    obj[key] = None
    return None


def _expect_items(obj: dict, key: str, kind: str, where: str, notes: IngestNotes) -> list:
    items = _expect(obj, key, "list", where, notes)
    if items is None:
        return []
    kept = [x for x in items if _is(x, kind)]
    if len(kept) != len(items):
        notes.add(
            f"{_where(where)}: {len(items) - len(kept)} item(s) not {kind}: removed", nulled=len(items) - len(kept)
        )
        obj[key] = kept
    return kept


def check_result_shape(result: dict, notes: IngestNotes) -> None:
    """Give the fields of result.json that GC-Bench reads their types, in place.

    Fields (null always allowed): ``exit_code`` (32-bit integer), ``error`` (text),
    ``started_at``/``finished_at`` (ISO 8601 times PostgreSQL takes), ``windows.<key>``
    (object with numbers ``start_s``/``end_s``), ``energy.<key>`` (the fields of
    :class:`~gcbench.energy.base.EnergyResult`, its ``gpu``/``cpu`` lists holding
    objects with the fields of :class:`~gcbench.energy.base.DeviceEnergy`, ``flags``
    text), ``environment.gpus`` (objects; ``label`` text, ``max_limit_w`` number),
    ``measurement`` (object). A value of another type becomes null, a list item of
    another type is removed; each is noted.
    """
    from gcbench.energy.base import DeviceEnergy, EnergyResult

    for key, kind in (
        ("exit_code", "int32"),
        ("error", "str"),
        ("started_at", "time"),
        ("finished_at", "time"),
        ("measurement", "dict"),
        ("environment", "dict"),
        ("windows", "dict"),
    ):
        _expect(result, key, kind, key, notes)
    for name, window in list((result.get("windows") or {}).items()):
        if _expect(result["windows"], name, "dict", f"windows.{name}", notes) is not None:
            for edge in ("start_s", "end_s"):
                _expect(window, edge, "number", f"windows.{name}.{edge}", notes)
    env = result.get("environment") or {}
    for i, gpu in enumerate(_expect_items(env, "gpus", "dict", "environment.gpus", notes)):
        _expect(gpu, "label", "str", f"environment.gpus[{i}].label", notes)
        _expect(gpu, "max_limit_w", "number", f"environment.gpus[{i}].max_limit_w", notes)
    result_kinds, device_kinds = _kinds_of(EnergyResult), _kinds_of(DeviceEnergy)
    for name, energy in list((result.get("energy") or {}).items()):
        if _expect(result["energy"], name, "dict", f"energy.{name}", notes) is None:
            continue
        for field, kind in result_kinds.items():
            if field not in ("gpu", "cpu", "flags"):
                _expect(energy, field, kind, f"energy.{name}.{field}", notes)
        _expect(energy, "duration_s", "number", f"energy.{name}.duration_s", notes)  # a property, in to_dict()
        _expect_items(energy, "flags", "str", f"energy.{name}.flags", notes)
        for group in ("gpu", "cpu"):
            for i, dev in enumerate(_expect_items(energy, group, "dict", f"energy.{name}.{group}", notes)):
                for field, kind in device_kinds.items():
                    _expect(dev, field, kind, f"energy.{name}.{group}[{i}].{field}", notes)


def pg_time(text: str) -> datetime | None:
    """An ISO 8601 time as PostgreSQL ``timestamptz`` takes it: aware times in UTC
    (PostgreSQL refuses offsets beyond 15:59), naive ones as they are; None when
    ``text`` is not such a time."""
    try:
        value = datetime.fromisoformat(text)
        return value.astimezone(UTC) if value.tzinfo is not None else value
    except (ValueError, OverflowError, TypeError):
        return None
