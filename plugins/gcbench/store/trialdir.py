"""Reading one trial folder for ``collect``: result.json (refused as a whole only when it
is not this trial's result), what the runner saw (runner.json), the log tail, the
progress points of the windows. Nothing here touches the database."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

from gcbench.spec import TrialSpec
from gcbench.store.sanitize import IngestNotes, check_result_shape, clean_json, clean_text, decode_utf8, parse_int

ATTEMPT_FILE = "attempt.json"
"""Written by the runner into the trial folder before each attempt starts:
``{"attempt_id", "started_at"}``. The trial copies the id (``GCBENCH_ATTEMPT_ID``) into its
result.json, so a result proves which attempt wrote it."""
ATTEMPTS_DIR = "attempts"
"""Where an earlier attempt's files are moved before the next starts (``attempts/<n>-<id>/``)."""
ATTEMPT_ENV = "GCBENCH_ATTEMPT_ID"
"""The environment variable that gives the trial process its attempt id."""

LOG_TAIL_BYTES = 4000
MAX_RESULT_BYTES = 64 << 20
"""Largest result.json read (a real one is a few KiB); a larger one is refused."""


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


def _short(value: Any) -> str:
    return repr(value)[:80]


def load_result(outdir: Path, spec: TrialSpec, notes: IngestNotes) -> tuple[dict | None, str | None]:
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
    # a file cut short is named as such before anything is read from it (its attempt id may be cut off)
    missing = [k for k in ("status", "metrics", "energy") if k not in result]
    if missing:
        return None, f"result.json refused: truncated, missing {', '.join(missing)}"
    expected = current_attempt(outdir)
    if expected is not None and result.get("attempt_id") != expected:
        return None, (
            f"result.json refused: written by attempt {_short(result.get('attempt_id'))}, not by the attempt "
            f"the runner started last ({expected!r}): another attempt's output"
        )
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


def current_attempt(outdir: Path) -> str | None:
    """The id of the attempt the runner started last in this folder (attempt.json), or
    None for a folder without one (written before attempts were recorded, or a trial
    run by hand): its result.json is then taken as it is."""
    try:
        data = json.loads((Path(outdir) / ATTEMPT_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    value = data.get("attempt_id") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value else None


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


def runner_timed_out(outdir: Path) -> bool:
    """Whether the runner stopped the trial at its time limit (runner.json ``timed_out``)."""
    return _runner_json(outdir).get("timed_out") is True


def runner_interrupted(outdir: Path) -> str | None:
    """Why the runner stopped the trial on request (runner.json ``interrupted``,
    e.g. "SIGINT (Ctrl-C)"), or None when it was not stopped."""
    reason = _runner_json(outdir).get("interrupted")
    if not isinstance(reason, str) or not reason:
        return None
    return reason.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")[:200]  # text PostgreSQL takes
