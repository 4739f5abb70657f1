"""Loading trial outputs into PostgreSQL (the ``collect`` task).

One transaction per trial: the trial row, its samples (COPY, streamed from
``samples.csv`` with bounded memory), its metrics and the progress points of its
windows (``progress`` table, :func:`progress_rows`). Collecting is idempotent: a
trial already stored for the DAG run with the same result is left alone, and a
stored failed trial is replaced by a newer attempt's result. Concurrent collectors
of one DAG run serialize per trial on an advisory lock.

A trial whose process died leaves no result.json: it is stored as ``failed`` with
the tail of its log, and the samples written so far are kept and marked partial;
no metric is stored for it.

Nothing a trial wrote is lost for a value PostgreSQL cannot hold, and a bad value
costs that value only (:mod:`gcbench.store.sanitize`; each change is counted in the
collect summary and written in ``trials.ingest_notes``):

* text (log tail, error, notes, labels, every string of result.json): NUL, lone
  surrogates and invalid or split UTF-8 become U+FFFD, length is bounded;
* result.json numbers: NaN, Infinity, ``1e400`` become null, integers are kept
  exactly; a known field of the wrong type becomes null;
* a sample field the column cannot hold (not a number, not finite, out of range)
  is stored as NULL and the row kept, its power and energy with it;
  ``clocks_event_reasons`` holds the full unsigned 64-bit NVML bitmask. Only a row
  that cannot be placed (no time, device or source, a wrong number of fields, cut
  short by a kill) is dropped, and counted.

result.json is refused as a whole (the trial stored as ``failed`` with the reason,
its samples kept) only when it is not a result: not JSON, of another plan or trial,
without ``status``/``metrics``/``energy``, or with those of the wrong shape. Only an
unreachable or failing *database* raises (:class:`StoreError`, retried): whatever a
trial's files hold, ``collect`` stores the trial, at worst as ``failed`` with the
reason and without its files, and never fails again on every retry.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any, NamedTuple

from gcbench.energy.base import SAMPLE_COLUMNS
from gcbench.errors import StoreError, TrialError
from gcbench.spec import TrialSpec
from gcbench.store.sanitize import (
    IngestNotes,
    check_result_shape,
    clean_json,
    clean_text,
    decode_utf8,
    parse_int,
    pg_time,
)

LOG_TAIL_BYTES = 4000
MAX_RESULT_BYTES = 64 << 20
"""Largest result.json read (a real one is a few KiB); a larger one is refused."""
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


@dataclass
class CollectOutcome:
    """What ``collect_trial`` did with one trial folder.

    Attributes:
        trial_id: the trial.
        action: ``stored``, ``unchanged`` (already stored), ``refused``.
        status: stored status (``ok``, ``failed``, ``skipped``).
        samples: samples stored; samples_dropped: rows that could not be placed
            (no time, device or source; wrong field count; cut short), not stored.
        fields_nulled: values stored as NULL because no column could hold them
            (sample fields and result.json values).
        text_repaired: strings stored with characters replaced or cut.
        notes: what was changed to store the trial (also in ``trials.ingest_notes``).
        reason: why refused or failed, when so.
    """

    trial_id: str
    action: str
    status: str | None = None
    samples: int = 0
    samples_dropped: int = 0
    reason: str | None = None
    partial: bool = False
    fields_nulled: int = 0
    text_repaired: int = 0
    notes: list[str] = field(default_factory=list)


def metric_unit(name: str) -> str | None:
    """The unit of a metric from its name (``gpu_energy_j`` -> ``J``)."""
    table = [
        ("j_per_token", "J/token"),
        ("j_per_gb", "J/GB"),
        ("gb_per_s", "GB/s"),
        ("tokens_per_s", "tokens/s"),
        ("samples_per_s", "samples/s"),
        ("steps_per_s", "steps/s"),
        ("_kg_per_kwh", "kgCO2e/kWh"),
        ("_kwh", "kWh"),
        ("co2e_kg", "kgCO2e"),
        ("_j", "J"),
        ("_w", "W"),
        ("_s", "s"),
        ("_c", "degC"),
        ("_mhz", "MHz"),
        ("bytes", "B"),
        ("size_bytes", "B"),
        ("tokens", "tokens"),
        ("_rel", "1"),
        ("accuracy", "1"),
    ]
    for suffix, unit in table:
        if name.endswith(suffix) or name == suffix.strip("_"):
            return unit
    return None


def read_log_tail(outdir: Path, limit: int = LOG_TAIL_BYTES, notes: IngestNotes | None = None) -> str:
    """The last ``limit`` bytes of the trial's logs (trial.log, then runner.log), as
    text PostgreSQL stores: a character split by the cut is left out, invalid UTF-8
    and NUL bytes become U+FFFD (counted in ``notes``)."""
    parts = []
    for name in ("trial.log", "runner.log"):
        path = outdir / name
        try:
            with open(path, "rb") as f:
                size = f.seek(0, io.SEEK_END)
                f.seek(max(0, size - limit))
                data = f.read(limit)
        except FileNotFoundError:
            continue
        except OSError as exc:
            parts.append(f"--- {name} ---\n(unreadable: {exc})")
            continue
        if size > limit:  # the cut may fall inside a character: start at the next one
            skip = 0
            while skip < min(3, len(data)) and 0x80 <= data[skip] <= 0xBF:
                skip += 1
            data = data[skip:]
        text = clean_text(decode_utf8(data, f"log tail ({name})", notes), f"log tail ({name})", notes)
        parts.append(f"--- {name} ---\n" + text)
    return "\n".join(parts)[-limit * 2 :]


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
    """

    rows: int
    dropped: Counter
    nulled: Counter
    repaired: Counter

    def notes(self, notes: IngestNotes) -> None:
        """Write what was dropped, nulled and repaired into ``notes``."""
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

    Raises:
        TrialError: the header is not :data:`SAMPLE_COLUMNS`.
        psycopg2.Error: the database failed for another reason.
    """
    import psycopg2

    with open(path, "rb") as f:
        header = f.readline().decode("utf-8", errors="replace").strip()
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


def plan_sha256(plan_json: str) -> str:
    """SHA-256 of a plan's canonical JSON."""
    return hashlib.sha256(plan_json.encode()).hexdigest()


def register_run(conn, plan, dag_id: str, run_id: str, logical_date: str | None, params: dict | None = None) -> int:
    """Upsert the plan and the DAG run; returns the dag_runs primary key.

    The plan and the trigger parameters are stored as ``jsonb``: a string PostgreSQL
    cannot hold in them (a NUL from a YAML ``"\\0"`` escape, a lone surrogate)
    becomes U+FFFD there (:func:`~gcbench.store.sanitize.clean_json`); the plan's
    SHA-256 is of the plan as given.
    """
    plan_json = plan.model_dump_json()
    stored_plan = json.dumps(clean_json(json.loads(plan_json), "", IngestNotes()))
    stored_params = json.dumps(clean_json(params or {}, "", IngestNotes()), default=str)
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO plans (plan_name, plan_sha256, plan) VALUES (%s, %s, %s::jsonb) "
            "ON CONFLICT (plan_name) DO UPDATE SET plan_sha256 = EXCLUDED.plan_sha256, plan = EXCLUDED.plan, updated_at = now()",
            (clean_text(plan.name, "plan"), plan_sha256(plan_json), stored_plan),
        )
        cur.execute(
            "INSERT INTO dag_runs (plan_name, dag_id, run_id, logical_date, params) VALUES (%s, %s, %s, %s, %s::jsonb) "
            "ON CONFLICT (dag_id, run_id) DO UPDATE SET logical_date = EXCLUDED.logical_date RETURNING id",
            (
                clean_text(plan.name, "plan"),
                clean_text(dag_id, "dag id"),
                clean_text(run_id, "run id"),
                logical_date,
                stored_params,
            ),
        )
        pk = cur.fetchone()[0]
    conn.commit()
    return pk


RESUMED_MARK = "; resumed at "
"""What a note of an earlier, resumed interruption contains (and a fresh one does not)."""


def _utc(ts) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def reset_run_outcome(conn, dag_run_pk: int) -> None:
    """A run is (re-)running now: its state follows this attempt, its history is kept.

    The run is no longer marked interrupted (``interrupted_at`` NULL). The note of the
    interruption being resumed ("Interrupted by SIGINT (Ctrl-C) after 13 of 21 trials;
    running it again does the 8 missing ones.") becomes history: "Interrupted by SIGINT
    (Ctrl-C) after 13 of 21 trials at 2026-12-01 05:34:40 UTC; resumed at 2026-12-01
    05:35:14 UTC." Notes of earlier resumed interruptions stay; notes about a previous
    attempt's outcome only ("Nothing to run: ...") are dropped, as this attempt writes
    its own.
    """
    with conn.cursor() as cur:
        cur.execute("SELECT notes, interrupted_at, now() FROM dag_runs WHERE id = %s FOR UPDATE", (dag_run_pk,))
        row = cur.fetchone()
        if row is None:
            conn.rollback()
            return
        notes, interrupted_at, now = row
        notes = notes if isinstance(notes, list) else json.loads(notes or "[]")
        kept = []
        for note in map(str, notes):
            if RESUMED_MARK in note:
                kept.append(note)  # an earlier interruption, resumed: history
            elif interrupted_at is not None and note.startswith("Interrupted"):
                head = note.split(";", 1)[0].rstrip(".")
                kept.append(f"{head} at {_utc(interrupted_at)}{RESUMED_MARK}{_utc(now)}.")
        cur.execute(
            "UPDATE dag_runs SET notes = %s::jsonb, interrupted_at = NULL WHERE id = %s", (json.dumps(kept), dag_run_pk)
        )
    conn.commit()


def add_run_note(conn, dag_run_pk: int, note: str, *, interrupted: bool = False) -> bool:
    """Add a line to the run's notes (shown at the top of its report); with
    ``interrupted``, also mark the run interrupted (``dag_runs.interrupted_at``).

    Returns:
        False when ``interrupted`` was asked and the run was already marked (nothing
        is changed then), True otherwise.
    """
    with conn.cursor() as cur:
        if interrupted:
            cur.execute(
                "UPDATE dag_runs SET interrupted_at = now(), notes = notes || %s::jsonb "
                "WHERE id = %s AND interrupted_at IS NULL",
                (json.dumps([note]), dag_run_pk),
            )
        else:
            cur.execute(
                "UPDATE dag_runs SET notes = notes || %s::jsonb WHERE id = %s AND NOT notes ? %s",
                (json.dumps([note]), dag_run_pk, note),
            )
        changed = cur.rowcount > 0
    conn.commit()
    return changed or not interrupted


def stored_trials(conn, plan_name: str, dag_id: str, run_id: str, logical_date: str | None) -> dict[str, str]:
    """``{trial_id: status}`` already stored for this DAG run, or for its logical date.

    A re-run or a backfill of a date finds the trials stored under that date by any
    run of the same DAG, so they are not run again.
    """
    with conn.cursor() as cur:
        if logical_date is not None:
            cur.execute(
                "SELECT t.trial_id, t.status FROM trials t JOIN dag_runs r ON r.id = t.dag_run_id "
                "WHERE r.dag_id = %s AND (r.run_id = %s OR r.logical_date = %s)",
                (dag_id, run_id, logical_date),
            )
        else:
            cur.execute(
                "SELECT t.trial_id, t.status FROM trials t JOIN dag_runs r ON r.id = t.dag_run_id "
                "WHERE r.dag_id = %s AND r.run_id = %s",
                (dag_id, run_id),
            )
        rows = cur.fetchall()
    conn.commit()
    out: dict[str, str] = {}
    for trial_id, status in rows:
        if out.get(trial_id) != "ok":
            out[trial_id] = status
    return out


def _short(value: Any) -> str:
    return repr(value)[:80]


def _load_result(outdir: Path, spec: TrialSpec, notes: IngestNotes) -> tuple[dict | None, str | None]:
    """(result, None) with every value made storable (see the module docstring), or
    (None, why result.json is refused), or (None, None) when there is none."""
    path = outdir / "result.json"
    try:
        size = path.stat().st_size
        if size > MAX_RESULT_BYTES:
            return None, f"result.json refused: {size} bytes, more than {MAX_RESULT_BYTES} (a result is a few KiB)"
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"result.json refused: unreadable ({exc})"
    text = decode_utf8(raw, "result.json", notes)
    try:
        result = json.loads(text, parse_int=parse_int)
    except json.JSONDecodeError as exc:
        return None, f"result.json refused: not valid JSON ({exc})"
    except (ValueError, RecursionError) as exc:
        return None, f"result.json refused: not valid JSON ({type(exc).__name__}: {str(exc)[:200]})"
    if not isinstance(result, dict):
        return None, "result.json refused: not a JSON object"
    if result.get("plan") != spec.plan:
        return None, f"result.json refused: it belongs to plan {_short(result.get('plan'))}, not {spec.plan!r}"
    if result.get("trial_id") != spec.trial_id:
        return None, f"result.json refused: it belongs to trial {_short(result.get('trial_id'))}, not {spec.trial_id!r}"
    missing = [k for k in ("status", "metrics", "energy") if k not in result]
    if missing:
        return None, f"result.json refused: truncated, missing {', '.join(missing)}"
    if not isinstance(result["status"], str) or result["status"] not in ("ok", "failed", "skipped"):
        return None, f"result.json refused: unknown status {_short(result['status'])}"
    for where, value in (
        ("metrics", result["metrics"]),
        ("energy", result["energy"]),
        ("energy.main", result["energy"].get("main") if isinstance(result["energy"], dict) else None),
    ):
        if value is not None and not isinstance(value, dict):
            return None, f"result.json refused: {where} is {type(value).__name__}, expected dict"
    in_result = notes.prefixed("result.json ")
    try:
        result = clean_json(result, "", in_result)
    except RecursionError:
        return None, "result.json refused: nested too deeply to read"
    check_result_shape(result, in_result)
    return result, None


def _runner_json(outdir: Path) -> dict:
    try:
        data = json.loads((Path(outdir) / "runner.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def runner_exit_code(outdir: Path) -> int | None:
    """The trial's exit status as the runner saw it (runner.json), None when the file
    is missing or unreadable (a runner killed while writing it is not a reason to stop
    collecting)."""
    code = _runner_json(outdir).get("exit_code")
    return code if isinstance(code, int) and not isinstance(code, bool) and -(1 << 31) <= code < (1 << 31) else None


def progress_rows(trial_pk: int, result: dict | None) -> list[tuple[int, str, float, int]]:
    """Rows of the ``progress`` table from result.json's ``progress`` section.

    ``{window key: {"points": [[t_s, steps], ...]}}``; points that are not a finite
    time with a whole, non-negative, increasing step count are left out (a malformed
    section costs its points, never the trial).
    """
    rows: list[tuple[int, str, float, int]] = []
    progress = (result or {}).get("progress")
    if not isinstance(progress, dict):
        return rows
    for key, prog in progress.items():
        points = prog.get("points") if isinstance(prog, dict) else None
        if not isinstance(key, str) or not isinstance(points, list):
            continue
        last = -1
        for p in points:
            if not (isinstance(p, list) and len(p) == 2):
                continue
            t, n = p
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
                continue
            if isinstance(n, bool) or not isinstance(n, int) or not last < n < (1 << 63):
                continue
            rows.append((trial_pk, key, float(t), n))
            last = n
    return rows


def runner_interrupted(outdir: Path) -> str | None:
    """Why the runner stopped the trial on request (runner.json ``interrupted``,
    e.g. "SIGINT (Ctrl-C)"), or None when it was not stopped."""
    reason = _runner_json(outdir).get("interrupted")
    if not isinstance(reason, str) or not reason:
        return None
    return reason.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")[:200]  # text PostgreSQL takes


def co2e_metrics(
    metrics: dict[str, Any], carbon: dict[str, Any] | None, result: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The trial's CO2e metrics from its ``energy_kwh`` and the plan's carbon settings, at
    the intensity of its own measured window (:func:`gcbench.carbon.trial_co2e`)."""
    from gcbench.carbon import trial_co2e

    kwh = metrics.get("energy_kwh")
    if not isinstance(kwh, (int, float)) or isinstance(kwh, bool) or not carbon:
        return {}
    try:
        kwh = float(kwh)
    except OverflowError:
        return {}
    return trial_co2e(kwh if math.isfinite(kwh) else None, carbon, result)


def _infrastructure(exc: BaseException) -> bool:
    """True for a failure of the database or the connection (retried), False for one
    about the content (deterministic: a retry would fail alike). Class 54 (program
    limit exceeded, e.g. an index entry too large) is psycopg2's OperationalError but
    is about the content."""
    import psycopg2

    if isinstance(exc, psycopg2.InterfaceError):
        return True
    return isinstance(exc, psycopg2.OperationalError) and not (getattr(exc, "pgcode", None) or "").startswith("54")


def _rollback(conn) -> None:
    import psycopg2

    try:
        conn.rollback()
    except psycopg2.Error:
        pass


def collect_trial(
    conn,
    dag_run_pk: int,
    spec: TrialSpec,
    outdir: Path,
    exit_code: int | None = None,
    carbon: dict[str, Any] | None = None,
    interrupted: str | None = None,
) -> CollectOutcome:
    """Store one trial folder in one transaction; see the module docstring.

    Args:
        conn: psycopg2 connection (search_path gcbench).
        dag_run_pk: ``dag_runs.id`` of the run.
        spec: the trial's spec (its id and plan are checked against result.json).
        outdir: the trial's output folder.
        exit_code: the trial process's exit status as seen by the runner, if known.
        carbon: the plan's carbon settings, for CO2e metrics.
        interrupted: why the runner stopped the trial on request, if it did: a trial
            left without a result is then stored as failed with ``interrupted: ...``
            as its error, its samples kept and marked partial (as for a kill).

    Returns:
        a :class:`CollectOutcome`; its notes say what was changed to store the trial.

    Raises:
        StoreError: the database failed (the transaction is rolled back; nothing
            half-stored remains and a retry stores everything once). Content that
            cannot be stored even value by value (the database refuses something the
            checks missed, a file unreadable) is not raised: the trial is stored as
            failed, without its files, with the reason, so a retry does not meet the
            same error again.
    """
    import psycopg2

    try:
        return _store_trial(conn, dag_run_pk, spec, outdir, exit_code, carbon, interrupted=interrupted)
    except StoreError:
        _rollback(conn)
        raise
    except Exception as exc:  # noqa: BLE001 - any content failure is stored with its reason below, not lost
        _rollback(conn)
        if isinstance(exc, psycopg2.Error) and _infrastructure(exc):
            raise StoreError(f"storing trial {spec.trial_id} failed: {str(exc).strip()}") from exc
        what = "refused by the database" if isinstance(exc, psycopg2.Error) else f"not storable ({type(exc).__name__})"
        reason = f"trial files {what}: {str(exc).strip()}"
    try:
        return _store_trial(conn, dag_run_pk, spec, outdir, exit_code, carbon, refused=reason, interrupted=interrupted)
    except Exception as exc:  # noqa: BLE001 - even the bare row failed: the database is at fault, retry
        _rollback(conn)
        raise StoreError(f"storing trial {spec.trial_id} failed: {str(exc).strip()}") from exc


def _metric_rows(trial_pk: int, metrics: dict[str, Any], notes: IngestNotes) -> list[tuple]:
    """(trial_pk, name, value, text_value, unit) per metric: numbers as double precision
    (an integer beyond it is NULL there, exact in ``trials.result``), booleans, text and
    JSON values as text."""
    rows: list[tuple[int, str, float | None, str | None, str | None]] = []
    for name, value in sorted(metrics.items()):
        if value is None:
            rows.append((trial_pk, name, None, None, None))
        elif isinstance(value, bool):
            rows.append((trial_pk, name, None, str(value), None))
        elif isinstance(value, (int, float)):
            try:
                v = float(value)
            except OverflowError:
                notes.add(
                    f"metrics.{name}: an integer of {len(str(abs(value)))} digits is beyond double precision: "
                    f"value NULL (exact in the stored result)",
                    nulled=1,
                )
                v = None
            rows.append((trial_pk, name, v if v is not None and math.isfinite(v) else None, None, metric_unit(name)))
        elif isinstance(value, str):
            rows.append((trial_pk, name, None, value, None))
        else:
            text = clean_text(json.dumps(value, ensure_ascii=False), f"metrics.{name}", notes)
            rows.append((trial_pk, name, None, text, None))
    return rows


def _store_trial(
    conn,
    dag_run_pk: int,
    spec: TrialSpec,
    outdir: Path,
    exit_code: int | None,
    carbon: dict[str, Any] | None,
    refused: str | None = None,
    interrupted: str | None = None,
) -> CollectOutcome:
    """:func:`collect_trial`'s transaction; with ``refused`` (the reason), the trial is
    stored as failed without reading any of its files."""
    import psycopg2.extras

    notes = IngestNotes()
    result, refusal = _load_result(outdir, spec, notes) if refused is None else (None, refused)
    samples_path = outdir / "samples.csv"
    if refused is not None:
        notes.add(f"stored without its files: {refused}")
    error: str | None
    if result is None:
        if refusal is None and not outdir.exists():
            return CollectOutcome(spec.trial_id, "refused", reason=f"no output folder {outdir}")
        status = "failed"
        if refusal:
            error = refusal
        elif interrupted:
            error = (
                f"interrupted: {interrupted}; the trial was stopped"
                + (f" (exit status {exit_code})" if exit_code is not None else "")
                + ", its samples up to the stop are kept"
            )
        elif exit_code is not None:
            error = f"trial process ended without a result (exit status {exit_code})"
        elif not (outdir / "trial.log").exists():
            error = "trial never ran: the runner could not start it (see the run_trial task log)"
        else:
            error = "trial process ended without a result"
        partial = True
        metrics: dict[str, Any] = {}
    else:
        status = result["status"]
        error = result.get("error")
        partial = status != "ok"
        metrics = dict(result.get("metrics") or {}) if status == "ok" else {}
        metrics.update(co2e_metrics(metrics, carbon, result))
    energy_main = ((result or {}).get("energy") or {}).get("main") or {}
    gpu = energy_main.get("gpu") or []
    cpu = energy_main.get("cpu") or []
    gpu_method = ",".join(sorted({str(d.get("method") or "?") for d in gpu})) or None
    cpu_reason = energy_main.get("cpu_reason")
    cpu_method = ",".join(sorted({str(d.get("method") or "?") for d in cpu})) or (
        ("unavailable: " + cpu_reason) if cpu_reason else None
    )
    simulated = (
        bool(energy_main.get("simulated")) or ((result or {}).get("measurement") or {}).get("backend") == "simulated"
    )
    flags = list(energy_main.get("flags") or [])
    result_json = json.dumps(result, allow_nan=False) if result is not None else None
    log_tail = read_log_tail(outdir, notes=notes) if status != "ok" and refused is None else None
    result_code = (result or {}).get("exit_code")
    spec_doc = clean_json(json.loads(spec.model_dump_json()), "", notes.prefixed("spec.json "))
    times = {
        k: pg_time(result[k]) if result and isinstance(result.get(k), str) else None
        for k in ("started_at", "finished_at")
    }

    def text(value: str | None, where: str) -> str | None:
        return clean_text(value, where, notes) if value is not None else None

    with conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (dag_run_pk, spec.trial_id))
        # the same result? compared as jsonb by the server: a number is compared as the numeric
        # it was stored as (1.0605852582168403e+17 reads back as 106058525821684030)
        cur.execute(
            "SELECT id, status, result = %s::jsonb FROM trials WHERE dag_run_id = %s AND trial_id = %s",
            (result_json, dag_run_pk, spec.trial_id),
        )
        row = cur.fetchone()
        if row is not None and row[1] == "ok" and (result is None or status != "ok" or row[2] is True):
            conn.rollback()
            return CollectOutcome(spec.trial_id, "unchanged", status=row[1])
        values = dict(
            dag_run_id=dag_run_pk,
            trial_id=spec.trial_id,
            plan_name=text(spec.plan, "plan"),
            variant=text(spec.variant, "variant"),
            workload=text(spec.workload, "workload"),
            kind=text(spec.kind, "kind"),
            repetition=spec.repetition,
            spec=json.dumps(spec_doc),
            status=status,
            exit_code=result_code if result_code is not None else exit_code,
            error=text(error, "error"),
            log_tail=log_tail,
            result=result_json,
            samples_partial=partial,
            simulated=simulated,
            gpu_method=text(gpu_method, "gpu method"),
            cpu_method=text(cpu_method, "cpu method"),
            flags=json.dumps(flags),
            started_at=times["started_at"],
            finished_at=times["finished_at"],
        )
        if row is None:
            cols = ", ".join(values)
            cur.execute(
                f"INSERT INTO trials ({cols}) VALUES ({', '.join('%(' + k + ')s' for k in values)}) RETURNING id",
                values,
            )
            trial_pk = cur.fetchone()[0]
        else:
            trial_pk = row[0]
            sets = ", ".join(f"{k} = %({k})s" for k in values if k not in ("dag_run_id", "trial_id"))
            cur.execute(
                f"UPDATE trials SET {sets}, valid = NULL, reasons = '[]'::jsonb, collected_at = now() "
                f"WHERE id = %(id)s",
                {**values, "id": trial_pk},
            )
            cur.execute("DELETE FROM samples WHERE trial_pk = %s", (trial_pk,))
            cur.execute("DELETE FROM metrics WHERE trial_pk = %s", (trial_pk,))
            cur.execute("DELETE FROM progress WHERE trial_pk = %s", (trial_pk,))
        n_samples = dropped = 0
        if samples_path.exists() and refused is None:
            try:
                copied = copy_samples(cur, samples_path, trial_pk)
            except TrialError as exc:  # a foreign or empty samples file: the trial is kept, its samples refused
                error = f"{error}; samples refused: {exc}" if error else f"samples refused: {exc}"
                cur.execute(
                    "UPDATE trials SET error = %s, samples_partial = true WHERE id = %s",
                    (text(error, "error"), trial_pk),
                )
                partial = True
            else:
                copied.notes(notes)
                n_samples, dropped = copied.rows, sum(copied.dropped.values())
        rows = _metric_rows(trial_pk, metrics, notes)
        if rows:
            psycopg2.extras.execute_values(
                cur, "INSERT INTO metrics (trial_pk, name, value, text_value, unit) VALUES %s", rows
            )
        progress = progress_rows(trial_pk, result)
        if progress:
            psycopg2.extras.execute_values(
                cur, "INSERT INTO progress (trial_pk, window_key, t_s, steps) VALUES %s", progress, page_size=1000
            )
        cur.execute(
            "UPDATE trials SET samples_count = %s, samples_dropped = %s, ingest_notes = %s::jsonb WHERE id = %s",
            (n_samples, dropped, json.dumps(notes.as_list()), trial_pk),
        )
    conn.commit()
    return CollectOutcome(
        spec.trial_id,
        "stored",
        status=status,
        samples=n_samples,
        samples_dropped=dropped,
        reason=error,
        partial=partial,
        fields_nulled=notes.fields_nulled,
        text_repaired=notes.text_repaired,
        notes=notes.as_list(),
    )
