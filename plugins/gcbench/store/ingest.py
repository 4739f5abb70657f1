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

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gcbench.errors import StoreError, TrialError
from gcbench.spec import TrialSpec
from gcbench.store.samples import copy_samples
from gcbench.store.sanitize import IngestNotes, clean_json, clean_text, pg_time
from gcbench.store.trialdir import load_result, progress_rows, read_log_tail, runner_timed_out


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


def status_killed(exit_code: int | None) -> bool:
    """Whether the runner saw the trial process killed: a signal (negative status of a
    subprocess) or a container killed by SIGKILL/SIGTERM (128 + 9, 128 + 15)."""
    return exit_code is not None and (exit_code < 0 or exit_code in (137, 143))


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
    result, refusal = load_result(outdir, spec, notes) if refused is None else (None, refused)
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
            error = (
                "trial never ran: the runner could not start it, or a task it waits for failed "
                "(see the run_trial and build_tokenizers task logs)"
            )
        else:
            error = "trial process ended without a result"
        partial = True
        metrics: dict[str, Any] = {}
    elif status_killed(exit_code) and result["status"] != "failed":
        # this attempt's own result, but the runner saw the process killed afterwards
        # (at its time limit, by the OOM killer): not a trial that ended on its own
        status = "failed"
        error = f"killed (exit status {exit_code}) after writing result.json (status {result['status']})"
        partial = True
        metrics = {}
    else:
        status = result["status"]
        error = result.get("error")
        partial = status != "ok"
        stopped = interrupted or ("the trial's time limit" if runner_timed_out(outdir) else None)
        if stopped and status == "failed":  # the trial unwound on the runner's SIGTERM and wrote its result
            error = f"interrupted: {stopped}; the trial was stopped, its samples up to the stop are kept ({error})"
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
            exit_code=exit_code if status_killed(exit_code) or result_code is None else result_code,
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
                f"UPDATE trials SET {sets}, valid = NULL, reasons = '[]'::jsonb, "
                f"windows_withheld = '{{}}'::jsonb, collected_at = now() "
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
