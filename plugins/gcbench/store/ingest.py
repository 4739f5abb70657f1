"""Loading trial outputs into PostgreSQL (the ``collect`` task).

One transaction per trial: the trial row, its samples (COPY, streamed from
``samples.csv`` with bounded memory) and its metrics. Collecting is idempotent: a
trial already stored for the DAG run with the same result is left alone, and a
stored failed trial is replaced by a newer attempt's result. Concurrent collectors
of one DAG run serialize per trial on an advisory lock.

A trial whose process died leaves no result.json: it is stored as ``failed`` with
the tail of its log, and the samples written so far are kept and marked partial;
no metric is stored for it.

Files are judged, never trusted: a result.json that is truncated, not JSON, of
another plan or trial, of the wrong shape, or holding values PostgreSQL cannot store
(NUL characters, lone surrogates, non-finite or out-of-range numbers) is refused with
the reason and the trial stored as ``failed``; sample rows the server could not take
are dropped and counted; a samples file with a foreign header is refused. Only an
unreachable or failing *database* raises (:class:`StoreError`, retried): no file
content can make ``collect`` fail again on every retry.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from gcbench.energy.base import SAMPLE_COLUMNS
from gcbench.errors import StoreError, TrialError
from gcbench.spec import TrialSpec

LOG_TAIL_BYTES = 4000

_NUMERIC_COLUMNS = ("t_s", "power_w", "power_instant_w", "energy_j", "temperature_c", "sm_clock_mhz", "clocks_event_reasons")
_INTEGER_COLUMNS = ("clocks_event_reasons",)
_REQUIRED_COLUMNS = ("t_s", "device", "source")
_FLOAT_RE = re.compile(rb"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_INT_RE = re.compile(rb"^[-+]?\d{1,19}$")
_TEXT_BAD = re.compile(rb'[\x00-\x1f"\\\x7f]')


@dataclass
class CollectOutcome:
    """What ``collect_trial`` did with one trial folder.

    Attributes:
        trial_id: the trial.
        action: ``stored``, ``unchanged`` (already stored), ``refused``.
        status: stored status (``ok``, ``failed``, ``skipped``).
        samples: samples stored; samples_dropped: malformed rows not stored.
        reason: why refused or failed, when so.
    """

    trial_id: str
    action: str
    status: str | None = None
    samples: int = 0
    samples_dropped: int = 0
    reason: str | None = None
    partial: bool = False


def metric_unit(name: str) -> str | None:
    """The unit of a metric from its name (``gpu_energy_j`` -> ``J``)."""
    table = [
        ("j_per_token", "J/token"), ("j_per_gb", "J/GB"), ("gb_per_s", "GB/s"), ("tokens_per_s", "tokens/s"),
        ("samples_per_s", "samples/s"), ("_kwh", "kWh"), ("co2e_kg", "kgCO2e"), ("_j", "J"), ("_w", "W"),
        ("_s", "s"), ("_c", "degC"), ("_mhz", "MHz"), ("bytes", "B"), ("size_bytes", "B"), ("tokens", "tokens"),
        ("_rel", "1"), ("accuracy", "1"),
    ]
    for suffix, unit in table:
        if name.endswith(suffix) or name == suffix.strip("_"):
            return unit
    return None


def read_log_tail(outdir: Path, limit: int = LOG_TAIL_BYTES) -> str:
    """The last ``limit`` bytes of the trial's logs (trial.log, then runner.log)."""
    parts = []
    for name in ("trial.log", "runner.log"):
        path = outdir / name
        if path.exists():
            with open(path, "rb") as f:
                f.seek(max(0, path.stat().st_size - limit))
                parts.append(f"--- {name} ---\n" + f.read().decode("utf-8", errors="replace"))
    return "\n".join(parts)[-limit * 2:]


class SampleStream(io.RawIOBase):
    """A file-like stream of samples.csv rows prefixed with the trial's key, for COPY.

    Reads line by line (memory bounded by one line). The header must match
    :data:`SAMPLE_COLUMNS`; a row is dropped and counted unless the server is sure to
    take it: the right number of fields, ``t_s``, ``device`` and ``source`` present,
    numbers in PostgreSQL's syntax, finite and in range (an integer in
    ``clocks_event_reasons``), text fields valid UTF-8 without quotes, backslashes or
    control characters. A row cut short by a killed trial is one such row.
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
        self.dropped = 0
        self._n_fields = len(SAMPLE_COLUMNS)

    def _valid(self, line: bytes) -> bool:
        if not line.endswith(b"\n"):
            return False
        fields = line.rstrip(b"\r\n").split(b",")
        if len(fields) != self._n_fields:
            return False
        for idx, col in enumerate(SAMPLE_COLUMNS):
            field = fields[idx]
            if not field:
                if col in _REQUIRED_COLUMNS:
                    return False
            elif col in _INTEGER_COLUMNS:
                if not _INT_RE.match(field) or not -(1 << 63) <= int(field) < (1 << 63):
                    return False
            elif col in _NUMERIC_COLUMNS:
                if not _FLOAT_RE.match(field):
                    return False
                value = float(field)
                # the server refuses what overflows, and what underflows to zero (1e-400)
                if not math.isfinite(value) or (value == 0.0 and _FLOAT_RE.match(field).group(1).strip(b"0.")):
                    return False
            else:
                if _TEXT_BAD.search(field):
                    return False
                try:
                    field.decode("utf-8")
                except UnicodeDecodeError:
                    return False
        return True

    def _lines(self) -> Iterator[bytes]:
        for line in self._f:
            if self._valid(line):
                self.rows += 1
                yield self._prefix + line
            elif line.strip():
                self.dropped += 1

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

    def readline(self, size: int = -1) -> bytes:  # psycopg2 may call it
        return self.read(size if size > 0 else 65536)

    def close(self) -> None:
        self._f.close()
        super().close()


def _finite(col: str) -> str:
    return f"({col} IS NULL OR {col} NOT IN ('NaN'::float8, 'Infinity'::float8, '-Infinity'::float8))"


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

    def readline(self, size: int = -1) -> bytes:
        return self.read(size if size > 0 else 65536)

    def close(self) -> None:
        self._f.close()
        super().close()


def _finite(col: str) -> str:
    return f"({col} IN ('NaN'::float8, 'Infinity'::float8, '-Infinity'::float8))"


def copy_samples(cur, path: Path, trial_pk: int) -> tuple[int, int]:
    """COPY a samples.csv into ``samples`` for one trial; returns (rows stored, rows dropped).

    Fast path: the file is streamed to the server as it is, each line prefixed with
    the trial key (:class:`PrefixedStream`), and rows with non-finite numbers are then
    removed. If the server refuses the file (a row cut short by a killed trial, a
    stray value), the transaction returns to a savepoint and the file is streamed
    again through :class:`SampleStream`, which drops and counts the bad rows. Memory
    stays bounded either way (1 MiB blocks).

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
        numeric = [c for c in SAMPLE_COLUMNS if c in _NUMERIC_COLUMNS]
        cur.execute(f"DELETE FROM samples WHERE trial_pk = %s AND ({' OR '.join(_finite(c) for c in numeric)})",
                    (trial_pk,))
        dropped = cur.rowcount
        cur.execute("RELEASE SAVEPOINT gcbench_copy")
        return copied - dropped, dropped
    except (psycopg2.DataError, psycopg2.IntegrityError, psycopg2.errors.BadCopyFileFormat,
            psycopg2.errors.InvalidTextRepresentation):
        cur.execute("ROLLBACK TO SAVEPOINT gcbench_copy")
    finally:
        stream.close()
    slow = SampleStream(path, trial_pk)
    try:
        cur.copy_expert(copy_sql, slow, size=1 << 20)
    finally:
        slow.close()
    return slow.rows, slow.dropped


def plan_sha256(plan_json: str) -> str:
    """SHA-256 of a plan's canonical JSON."""
    return hashlib.sha256(plan_json.encode()).hexdigest()


def register_run(conn, plan, dag_id: str, run_id: str, logical_date: str | None, params: dict | None = None) -> int:
    """Upsert the plan and the DAG run; returns the dag_runs primary key."""
    plan_json = plan.model_dump_json()
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO plans (plan_name, plan_sha256, plan) VALUES (%s, %s, %s::jsonb) "
            "ON CONFLICT (plan_name) DO UPDATE SET plan_sha256 = EXCLUDED.plan_sha256, plan = EXCLUDED.plan, updated_at = now()",
            (plan.name, plan_sha256(plan_json), plan_json),
        )
        cur.execute(
            "INSERT INTO dag_runs (plan_name, dag_id, run_id, logical_date, params) VALUES (%s, %s, %s, %s, %s::jsonb) "
            "ON CONFLICT (dag_id, run_id) DO UPDATE SET logical_date = EXCLUDED.logical_date RETURNING id",
            (plan.name, dag_id, run_id, logical_date, json.dumps(params or {})),
        )
        pk = cur.fetchone()[0]
    conn.commit()
    return pk


def reset_run_outcome(conn, dag_run_pk: int) -> None:
    """Forget a run's notes and interruption: it is (re-)running now."""
    with conn.cursor() as cur:
        cur.execute("UPDATE dag_runs SET notes = '[]'::jsonb, interrupted_at = NULL WHERE id = %s", (dag_run_pk,))
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
            cur.execute("UPDATE dag_runs SET interrupted_at = now(), notes = notes || %s::jsonb "
                        "WHERE id = %s AND interrupted_at IS NULL", (json.dumps([note]), dag_run_pk))
        else:
            cur.execute("UPDATE dag_runs SET notes = notes || %s::jsonb WHERE id = %s AND NOT notes ? %s",
                        (json.dumps([note]), dag_run_pk, note))
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


def _load_result(outdir: Path, spec: TrialSpec) -> tuple[dict | None, str | None]:
    path = outdir / "result.json"
    if not path.exists():
        return None, None
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"result.json refused: not valid JSON ({exc})"
    if not isinstance(result, dict):
        return None, "result.json refused: not a JSON object"
    if result.get("plan") != spec.plan:
        return None, f"result.json refused: it belongs to plan {result.get('plan')!r}, not {spec.plan!r}"
    if result.get("trial_id") != spec.trial_id:
        return None, f"result.json refused: it belongs to trial {result.get('trial_id')!r}, not {spec.trial_id!r}"
    missing = [k for k in ("status", "metrics", "energy") if k not in result]
    if missing:
        return None, f"result.json refused: truncated, missing {', '.join(missing)}"
    if result["status"] not in ("ok", "failed", "skipped"):
        return None, f"result.json refused: unknown status {result['status']!r}"
    problem = _result_problem(result)
    if problem:
        return None, f"result.json refused: {problem}"
    return result, None


_RESULT_SHAPE: dict[tuple[str, ...], tuple[type, ...]] = {
    ("metrics",): (dict,), ("energy",): (dict,), ("energy", "main"): (dict,),
    ("energy", "main", "gpu"): (list,), ("energy", "main", "cpu"): (list,), ("energy", "main", "flags"): (list,),
    ("energy", "main", "cpu_reason"): (str,), ("windows",): (dict,), ("measurement",): (dict,),
    ("exit_code",): (int,), ("error",): (str,), ("started_at",): (str,), ("finished_at",): (str,),
}
"""Fields of result.json that ``collect`` reads, with the JSON types they must have (or null)."""


def _result_problem(result: dict) -> str | None:
    """Why a parsed result.json cannot be stored as it is, or None.

    Checks the shape of the fields ``collect`` reads (:data:`_RESULT_SHAPE`), then
    every value: strings PostgreSQL can hold (no NUL, no lone surrogate), finite
    numbers, integers a float can hold, and an exit status and timestamps the
    columns accept.
    """
    from datetime import datetime

    for path, types in _RESULT_SHAPE.items():
        value: Any = result
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None and (not isinstance(value, types) or (int in types and isinstance(value, bool))):
            return f"{'.'.join(path)} is {type(value).__name__}, expected {types[0].__name__}"
    main = (result.get("energy") or {}).get("main") or {}
    for key in ("gpu", "cpu"):
        if any(not isinstance(d, dict) for d in main.get(key) or []):
            return f"energy.main.{key} holds a non-object"
    if any(not isinstance(f, str) for f in main.get("flags") or []):
        return "energy.main.flags holds a non-string"
    code = result.get("exit_code")
    if code is not None and not -(1 << 31) <= code < (1 << 31):
        return f"exit_code {code} out of range"
    for key in ("started_at", "finished_at"):
        if result.get(key) is not None:
            try:
                datetime.fromisoformat(result[key])
            except ValueError:
                return f"{key} {result[key][:40]!r} is not an ISO 8601 time"
    todo: list[tuple[str, Any]] = [("", result)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, dict):
            todo.extend((f"{where}.{k}" if where else k, v) for k, v in value.items())
            todo.extend((f"{where} key", k) for k in value)
        elif isinstance(value, list):
            todo.extend((f"{where}[{i}]", v) for i, v in enumerate(value))
        elif isinstance(value, str):
            if "\x00" in value:
                return f"{where} holds a NUL character"
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return f"{where} holds a lone surrogate (not UTF-8)"
        elif isinstance(value, float) and not math.isfinite(value):
            return f"{where} is {value} (not a finite number)"
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1 << 1000:
            return f"{where} is an integer too large to store"
    return None


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


def runner_interrupted(outdir: Path) -> str | None:
    """Why the runner stopped the trial on request (runner.json ``interrupted``,
    e.g. "SIGINT (Ctrl-C)"), or None when it was not stopped."""
    reason = _runner_json(outdir).get("interrupted")
    if not isinstance(reason, str) or not reason:
        return None
    return reason.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")[:200]  # text PostgreSQL takes


def co2e_metrics(metrics: dict[str, Any], carbon: dict[str, Any] | None) -> dict[str, Any]:
    """kgCO2e = kWh x intensity (kgCO2e/kWh), with the low and high ends of the band."""
    kwh = metrics.get("energy_kwh")
    if kwh is None or not carbon:
        return {}
    low, high = carbon.get("band", (None, None))
    intensity = carbon["intensity_kg_per_kwh"]
    return {"co2e_kg": kwh * intensity, "co2e_kg_low": kwh * low if low is not None else None,
            "co2e_kg_high": kwh * high if high is not None else None}


def collect_trial(conn, dag_run_pk: int, spec: TrialSpec, outdir: Path, exit_code: int | None = None,
                  carbon: dict[str, Any] | None = None, _refused: str | None = None,
                  interrupted: str | None = None) -> CollectOutcome:
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

    Raises:
        StoreError: the database failed (the transaction is rolled back; nothing
            half-stored remains and a retry stores everything once). Content the
            server refuses (a value the checks above missed) is not raised: the
            trial is stored as failed, without its files, with the server's reason.
    """
    import psycopg2
    import psycopg2.extras

    result, refusal = _load_result(outdir, spec) if _refused is None else (None, _refused)
    samples_path = outdir / "samples.csv"
    if result is None:
        if refusal is None and not outdir.exists():
            return CollectOutcome(spec.trial_id, "refused", reason=f"no output folder {outdir}")
        status = "failed"
        if refusal:
            error = refusal
        elif interrupted:
            error = (f"interrupted: {interrupted}; the trial was stopped"
                     + (f" (exit status {exit_code})" if exit_code is not None else "")
                     + ", its samples up to the stop are kept")
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
        metrics.update(co2e_metrics(metrics, carbon))
    energy_main = (result or {}).get("energy", {}).get("main", {}) if result else {}
    gpu = energy_main.get("gpu") or []
    cpu = energy_main.get("cpu") or []
    gpu_method = ",".join(sorted({d.get("method", "?") for d in gpu})) or None
    cpu_method = ",".join(sorted({d.get("method", "?") for d in cpu})) or (("unavailable: " + energy_main["cpu_reason"]) if energy_main.get("cpu_reason") else None)
    simulated = bool(energy_main.get("simulated")) or (result or {}).get("measurement", {}).get("backend") == "simulated"
    flags = list(energy_main.get("flags") or [])
    result_json = json.dumps(result, allow_nan=False) if result is not None else None
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (dag_run_pk, spec.trial_id))
            cur.execute("SELECT id, status, result::text FROM trials WHERE dag_run_id = %s AND trial_id = %s",
                        (dag_run_pk, spec.trial_id))
            row = cur.fetchone()
            if row is not None and row[1] == "ok" and (result is None or status != "ok" or
                                                         json.loads(row[2] or "null") == json.loads(result_json or "null")):
                conn.rollback()
                return CollectOutcome(spec.trial_id, "unchanged", status=row[1])
            values = dict(
                dag_run_id=dag_run_pk, trial_id=spec.trial_id, plan_name=spec.plan, variant=spec.variant,
                workload=spec.workload, kind=spec.kind, repetition=spec.repetition, spec=spec.model_dump_json(),
                status=status, exit_code=(result or {}).get("exit_code", exit_code), error=error,
                log_tail=read_log_tail(outdir) if status != "ok" else None, result=result_json,
                samples_partial=partial, simulated=simulated, gpu_method=gpu_method, cpu_method=cpu_method,
                flags=json.dumps(flags), started_at=(result or {}).get("started_at"),
                finished_at=(result or {}).get("finished_at"),
            )
            if row is None:
                cols = ", ".join(values)
                cur.execute(f"INSERT INTO trials ({cols}) VALUES ({', '.join('%(' + k + ')s' for k in values)}) RETURNING id",
                            values)
                trial_pk = cur.fetchone()[0]
            else:
                trial_pk = row[0]
                sets = ", ".join(f"{k} = %({k})s" for k in values if k not in ("dag_run_id", "trial_id"))
                cur.execute(f"UPDATE trials SET {sets}, valid = NULL, reasons = '[]'::jsonb, collected_at = now() "
                            f"WHERE id = %(id)s", {**values, "id": trial_pk})
                cur.execute("DELETE FROM samples WHERE trial_pk = %s", (trial_pk,))
                cur.execute("DELETE FROM metrics WHERE trial_pk = %s", (trial_pk,))
            n_samples = dropped = 0
            if samples_path.exists() and _refused is None:
                try:
                    n_samples, dropped = copy_samples(cur, samples_path, trial_pk)
                except TrialError as exc:  # a foreign or empty samples file: the trial is kept, its samples refused
                    error = f"{error}; samples refused: {exc}" if error else f"samples refused: {exc}"
                    cur.execute("UPDATE trials SET error = %s, samples_partial = true WHERE id = %s", (error, trial_pk))
                    partial = True
            cur.execute("UPDATE trials SET samples_count = %s WHERE id = %s", (n_samples, trial_pk))
            rows = []
            for name, value in sorted(metrics.items()):
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    rows.append((trial_pk, name, None, None if value is None else str(value), None))
                else:
                    v = float(value)
                    rows.append((trial_pk, name, v if math.isfinite(v) else None, None, metric_unit(name)))
            if rows:
                psycopg2.extras.execute_values(
                    cur, "INSERT INTO metrics (trial_pk, name, value, text_value, unit) VALUES %s", rows)
        conn.commit()
    except (psycopg2.DataError, psycopg2.IntegrityError) as exc:
        # the server refused the trial's content, not the connection: store it as failed without its files
        conn.rollback()
        if _refused is not None:
            raise StoreError(f"storing trial {spec.trial_id} failed: {str(exc).strip()}") from exc
        return collect_trial(conn, dag_run_pk, spec, outdir, exit_code, carbon,
                             _refused=f"trial files refused by the database: {str(exc).strip()}",
                             interrupted=interrupted)
    except psycopg2.Error as exc:
        try:
            conn.rollback()
        except psycopg2.Error:
            pass
        raise StoreError(f"storing trial {spec.trial_id} failed: {str(exc).strip()}") from exc
    return CollectOutcome(spec.trial_id, "stored", status=status, samples=n_samples, samples_dropped=dropped,
                          reason=error, partial=partial)

