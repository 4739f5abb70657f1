"""DAG runs in the results database: registered, their outcome reset on a re-run, notes,
and the trials already stored for a run or its logical date (``expand_trials`` leaves
those out)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC

from gcbench.store.sanitize import IngestNotes, clean_json, clean_text


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


def runs_of_date(conn, dag_id: str, run_id: str, logical_date: str | None) -> list[int]:
    """Primary keys of this DAG run and of every run of the same DAG at its logical date
    (the runs whose stored trials :func:`stored_trials` finds), oldest first."""
    with conn.cursor() as cur:
        if logical_date is not None:
            cur.execute(
                "SELECT id FROM dag_runs WHERE dag_id = %s AND (run_id = %s OR logical_date = %s) ORDER BY id",
                (dag_id, run_id, logical_date),
            )
        else:
            cur.execute("SELECT id FROM dag_runs WHERE dag_id = %s AND run_id = %s ORDER BY id", (dag_id, run_id))
        rows = cur.fetchall()
    conn.commit()
    return [int(r[0]) for r in rows]


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
