"""samples.csv into PostgreSQL: each row made storable on its own, streamed to COPY.

Memory is bounded by one line. A sample field the column cannot hold (not a number, not
finite, out of range) is stored as NULL and the row kept, its power and energy with it;
``clocks_event_reasons`` holds the full unsigned 64-bit NVML bitmask. Only a row that
cannot be placed (no time, device or source, a wrong number of fields, cut short by a
kill) is dropped, and counted (:class:`SampleCopy`).
"""

from __future__ import annotations

import io
import math
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from gcbench.energy.base import SAMPLE_COLUMNS
from gcbench.errors import TrialError
from gcbench.store.sanitize import IngestNotes

MAX_SAMPLE_TEXT_CHARS = 256
"""Longest ``device``/``source`` label of a sample stored (``gpu0``, ``cpu:package-0``)."""
UINT64_MAX = (1 << 64) - 1

_FLOAT_COLUMNS = ("t_s", "power_w", "power_instant_w", "energy_j", "temperature_c", "sm_clock_mhz")
_UINT64_COLUMNS = ("clocks_event_reasons",)
_TEXT_COLUMNS = ("device", "source")
_REQUIRED_COLUMNS = ("t_s", "device", "source")
_FLOAT_RE = re.compile(rb"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_UINT_RE = re.compile(rb"^\+?\d+$")
_HEX_RE = re.compile(rb"^0[xX][0-9a-fA-F]+$")
_NON_FINITE = "('NaN'::float8, 'Infinity'::float8, '-Infinity'::float8)"


def _pg_float(field: bytes) -> bytes | None:
    """A samples.csv number as PostgreSQL's float8 takes it and keeps it (finite, not
    underflowing to 0: ``1e-400`` is refused by the server), or None."""
    f = field.strip()
    m = _FLOAT_RE.match(f)
    if not m:
        return None
    value = float(f)
    if not math.isfinite(value) or (value == 0.0 and m.group(1).strip(b"0.")):
        return None
    return f


def _pg_uint64(field: bytes) -> bytes | None:
    """An unsigned 64-bit integer (decimal, or 0x hex) as its decimal digits, or None."""
    f = field.strip()
    if _UINT_RE.match(f):
        value = int(f)
    elif _HEX_RE.match(f):
        value = int(f, 16)
    else:
        return None
    return str(value).encode() if value <= UINT64_MAX else None


class SampleStream(io.RawIOBase):
    """A file-like stream of samples.csv rows prefixed with the trial's key, for COPY,
    each field made storable on its own.

    Reads line by line (memory bounded by one line). The header must match
    :data:`SAMPLE_COLUMNS`. A row is dropped (counted in :attr:`drops` by why) only
    when it cannot be placed: cut short (no newline), a wrong number of fields, no
    finite ``t_s``, no ``device`` or ``source``. Otherwise every field is kept or
    made storable alone: a number the column cannot hold (not PostgreSQL syntax, not
    finite, under- or overflowing, ``clocks_event_reasons`` not an integer in
    [0, 2^64 - 1]) is written NULL and counted in :attr:`nulled`; a label with invalid
    UTF-8 or NUL bytes is stored with U+FFFD (counted in :attr:`repaired`) and quoted.
    """

    def __init__(self, path: Path, trial_pk: int):
        self._f = open(path, "rb")
        header = self._f.readline().decode("utf-8", errors="replace").strip()
        if header != ",".join(SAMPLE_COLUMNS):
            self._f.close()
            raise TrialError(None, f"{path}: unexpected samples header {header!r}")
        self._prefix = f"{trial_pk},".encode()
        self._buf = b""
        self.rows = 0
        self.drops: Counter[str] = Counter()
        self.nulled: Counter[str] = Counter()
        self.repaired: Counter[str] = Counter()
        self._n_fields = len(SAMPLE_COLUMNS)

    @property
    def dropped(self) -> int:
        """Rows not stored."""
        return sum(self.drops.values())

    def _text(self, col: str, field: bytes) -> bytes:
        text = field.decode("utf-8", "replace").replace("\x00", "\ufffd")
        if len(text) > MAX_SAMPLE_TEXT_CHARS:
            text = text[:MAX_SAMPLE_TEXT_CHARS]
        if text.encode() != field:
            self.repaired[col] += 1
        return b'"' + text.replace('"', '""').encode() + b'"'

    def _row(self, line: bytes) -> bytes | None:
        if not line.endswith(b"\n"):
            self.drops["cut short (no end of line: the trial was killed while writing it)"] += 1
            return None
        fields = line.rstrip(b"\r\n").split(b",")
        if len(fields) != self._n_fields:
            self.drops[f"{len(fields)} fields instead of {self._n_fields}"] += 1
            return None
        out = []
        for col, value in zip(SAMPLE_COLUMNS, fields, strict=True):
            if col in _TEXT_COLUMNS:
                if not value:
                    self.drops[f"no {col}"] += 1
                    return None
                out.append(self._text(col, value))
                continue
            kept = (_pg_uint64 if col in _UINT64_COLUMNS else _pg_float)(value) if value.strip() else b""
            if kept is None:
                if col in _REQUIRED_COLUMNS:
                    self.drops[f"{col} not a finite number"] += 1
                    return None
                self.nulled[col] += 1
                kept = b""
            elif not kept and col in _REQUIRED_COLUMNS:
                self.drops[f"no {col}"] += 1
                return None
            out.append(kept)
        return self._prefix + b",".join(out) + b"\n"

    def _lines(self) -> Iterator[bytes]:
        for line in self._f:
            if not line.strip():
                continue
            row = self._row(line)
            if row is not None:
                self.rows += 1
                yield row

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if not hasattr(self, "_it"):
            self._it = self._lines()
        while size < 0 or len(self._buf) < size:
            try:
                self._buf += next(self._it)
            except StopIteration:
                break
        if size < 0:
            out, self._buf = self._buf, b""
        else:
            out, self._buf = self._buf[:size], self._buf[size:]
        return out

    def readline(self, size: int | None = -1) -> bytes:  # psycopg2 may call it
        return self.read(size if size is not None and size > 0 else 65536)

    def close(self) -> None:
        self._f.close()
        super().close()


class PrefixedStream(io.RawIOBase):
    """samples.csv (header skipped) with ``<trial_pk>,`` put before every line, for COPY.

    Works on 1 MiB blocks with ``bytes.replace`` (no per-line Python work), so COPY
    runs at the server's speed; no validation: a bad row makes the server refuse the
    COPY, and :func:`copy_samples` falls back to :class:`SampleStream`.
    """

    BLOCK = 1 << 20

    def __init__(self, path: Path, trial_pk: int):
        self._f = open(path, "rb")
        self._f.readline()
        self._prefix = f"{trial_pk},".encode()
        self._rest = b""
        self._out = b""
        self._eof = False

    def readable(self) -> bool:
        return True

    def _fill(self) -> None:
        block = self._f.read(self.BLOCK)
        if not block:
            self._eof = True
            if self._rest:  # a last line without newline (cut short): let the server judge it
                self._out += self._prefix + self._rest
                self._rest = b""
            return
        data = self._rest + block
        cut = data.rfind(b"\n") + 1
        self._rest = data[cut:]
        if cut:
            lines = data[:cut]
            self._out += self._prefix + lines[:-1].replace(b"\n", b"\n" + self._prefix) + b"\n"

    def read(self, size: int = -1) -> bytes:
        while not self._eof and (size < 0 or len(self._out) < size):
            self._fill()
        if size < 0:
            out, self._out = self._out, b""
        else:
            out, self._out = self._out[:size], self._out[size:]
        return out

    def readline(self, size: int | None = -1) -> bytes:
        return self.read(size if size is not None and size > 0 else 65536)

    def close(self) -> None:
        self._f.close()
        super().close()


class SampleCopy(NamedTuple):
    """What :func:`copy_samples` stored.

    Attributes:
        rows: samples stored.
        dropped: rows not stored, by why (``Counter``).
        nulled: {column: values stored as NULL} (``Counter``).
        repaired: {column: labels stored with bytes replaced} (``Counter``).
        empty: why the file held no row at all (the sampler stopped before it finished
            its header, e.g. a killed trial), else None.
    """

    rows: int
    dropped: Counter
    nulled: Counter
    repaired: Counter
    empty: str | None = None

    def notes(self, notes: IngestNotes) -> None:
        """Write what was dropped, nulled and repaired into ``notes``."""
        if self.empty:
            notes.add(f"samples.csv: no samples ({self.empty}: stopped before its first row)")
        if self.dropped:
            why = "; ".join(f"{n} {reason}" for reason, n in self.dropped.most_common())
            notes.add(f"samples.csv: {sum(self.dropped.values())} row(s) not stored ({why})")
        for col, n in sorted(self.nulled.items()):
            notes.add(
                f"samples.csv: {col} stored as NULL in {n} row(s) (not a value the column holds: "
                f"{'an unsigned 64-bit integer' if col in _UINT64_COLUMNS else 'a finite number'}); "
                f"the rows kept",
                nulled=n,
            )
        for col, n in sorted(self.repaired.items()):
            notes.add(
                f"samples.csv: {col} of {n} row(s) stored with invalid UTF-8 or NUL bytes replaced with U+FFFD",
                repaired=n,
            )


def copy_samples(cur, path: Path, trial_pk: int) -> SampleCopy:
    """COPY a samples.csv into ``samples`` for one trial.

    Fast path: the file is streamed to the server as it is, each line prefixed with
    the trial key (:class:`PrefixedStream`); rows without a finite ``t_s`` are then
    removed and other non-finite numbers set NULL. If the server refuses the file (a
    row cut short by a killed trial, a stray value), the transaction returns to a
    savepoint and the file is streamed again through :class:`SampleStream`, which makes
    each field storable on its own. Memory stays bounded either way (1 MiB blocks).

    A file that is empty, or holds only the start of the header with no newline (the
    sampler was stopped before its first row), stores no samples and says so in
    :attr:`SampleCopy.empty`; it is not refused.

    Raises:
        TrialError: the header is not :data:`SAMPLE_COLUMNS`.
        psycopg2.Error: the database failed for another reason.
    """
    import psycopg2

    with open(path, "rb") as f:
        first = f.readline()
        rest = f.read(1)
    header = first.decode("utf-8", errors="replace").strip()
    if not rest and not first.endswith(b"\n") and ",".join(SAMPLE_COLUMNS).startswith(header):
        # The sampler was stopped before it finished its header line (a killed trial): it
        # sampled nothing, which is a finding of the trial, not a foreign file.
        written = f"{len(first)} byte(s) of its header" if first else "nothing"
        return SampleCopy(0, Counter(), Counter(), Counter(), empty=f"the sampler wrote {written}")
    if header != ",".join(SAMPLE_COLUMNS):
        raise TrialError(None, f"{path}: unexpected samples header {header!r}")
    cols = ", ".join(SAMPLE_COLUMNS)
    copy_sql = f"COPY samples (trial_pk, {cols}) FROM STDIN WITH (FORMAT csv, NULL '')"
    cur.execute("SAVEPOINT gcbench_copy")
    stream = PrefixedStream(path, trial_pk)
    try:
        cur.copy_expert(copy_sql, stream, size=1 << 20)
        copied = cur.rowcount
        cur.execute(f"DELETE FROM samples WHERE trial_pk = %s AND t_s IN {_NON_FINITE}", (trial_pk,))
        dropped = Counter({"t_s not a finite number": cur.rowcount} if cur.rowcount else {})
        others = [c for c in _FLOAT_COLUMNS if c != "t_s"]
        cur.execute(
            f"SELECT {', '.join(f'count(*) FILTER (WHERE {c} IN {_NON_FINITE})' for c in others)} "
            f"FROM samples WHERE trial_pk = %s",
            (trial_pk,),
        )
        nulled = Counter({c: n for c, n in zip(others, cur.fetchone(), strict=True) if n})
        if nulled:
            cur.execute(
                f"UPDATE samples SET {', '.join(f'{c} = CASE WHEN {c} IN {_NON_FINITE} THEN NULL ELSE {c} END' for c in nulled)} "
                f"WHERE trial_pk = %s AND ({' OR '.join(f'{c} IN {_NON_FINITE}' for c in nulled)})",
                (trial_pk,),
            )
        cur.execute("RELEASE SAVEPOINT gcbench_copy")
        return SampleCopy(copied - sum(dropped.values()), dropped, nulled, Counter())
    except (
        psycopg2.DataError,
        psycopg2.IntegrityError,
        psycopg2.errors.BadCopyFileFormat,
        psycopg2.errors.InvalidTextRepresentation,
        psycopg2.errors.CharacterNotInRepertoire,
    ):
        cur.execute("ROLLBACK TO SAVEPOINT gcbench_copy")
    finally:
        stream.close()
    slow = SampleStream(path, trial_pk)
    try:
        cur.copy_expert(copy_sql, slow, size=1 << 20)
    finally:
        slow.close()
    return SampleCopy(slow.rows, slow.drops, slow.nulled, slow.repaired)
