"""Text and numbers made storable value by value (gcbench.store.sanitize), without a database."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import pytest

from gcbench.store import sanitize
from gcbench.store.sanitize import IngestNotes


def test_nul_and_lone_surrogates_become_replacement_characters_and_are_noted():
    notes = IngestNotes()
    assert sanitize.clean_text("a\x00b\x00\ud800c", "error", notes) == "a\ufffdb\ufffd\ufffdc"
    assert notes.as_list() == [
        "error: 2 NUL characters replaced with U+FFFD; 1 lone surrogate (not UTF-8) replaced with U+FFFD"
    ]
    assert (notes.text_repaired, notes.fields_nulled) == (1, 0)


def test_clean_text_is_unchanged_and_silent_for_storable_text():
    notes = IngestNotes()
    text = "CUDA error: ünïcode ✓ \ufffd already there, \t tabs and \n newlines"
    assert sanitize.clean_text(text, "error", notes) == text and notes.as_list() == []


def test_long_text_keeps_head_and_tail_within_the_limit():
    notes = IngestNotes()
    text = "Traceback (most recent call last):" + "x" * 100_000 + "ValueError: the cause"
    out = sanitize.clean_text(text, "error", notes, limit=1000)
    assert len(out) == 1000 and out.startswith("Traceback") and out.endswith("ValueError: the cause")
    assert f"[... {len(text) - 1000} characters cut ...]" in out
    assert notes.as_list() == [f"error: cut from {len(text)} to 1000 characters (head and tail kept)"]


@pytest.mark.parametrize(
    "data,text,n",
    [
        (b"ok \xff\xfe", "ok \ufffd\ufffd", 2),  # invalid bytes
        (b"split \xe2\x82", "split \ufffd", 1),  # a character cut in two
        (b"real \xef\xbf\xbd kept", "real \ufffd kept", 0),  # a U+FFFD the bytes held is text
        (b"\xe2\xef\xbf\xbd", "\ufffd\ufffd", 1),  # a bad lead byte before a real U+FFFD
        ("caf\u00e9".encode(), "caf\u00e9", 0),
    ],
)
def test_invalid_and_split_utf8_is_replaced_and_counted(data, text, n):
    notes = IngestNotes()
    assert sanitize.decode_utf8(data, "log", notes) == text
    assert notes.as_list() == (
        [f"log: {n} invalid UTF-8 sequence{'s' if n > 1 else ''} replaced with U+FFFD"] if n else []
    )


def test_json_numbers_nan_infinity_huge_and_deep_become_null_integers_stay_exact():
    literal = (
        '{"nan": NaN, "inf": Infinity, "big": 1e400, "neg0": -0, "negf": -0.0, "u64": 18446744073709551617,'
        '"digits": ' + "7" * 5000 + ', "deep": ' + "[" * 70 + "1" + "]" * 70 + ', "ok": [1, 2.5, true, null]}'
    )
    notes = IngestNotes()
    out = sanitize.clean_json(json.loads(literal, parse_int=sanitize.parse_int), "", notes)
    assert out["nan"] is None and out["inf"] is None and out["big"] is None and out["digits"] is None
    assert out["neg0"] == 0 and out["negf"] == 0.0 and math.copysign(1, out["negf"]) == -1
    assert out["u64"] == 18446744073709551617 and out["ok"] == [1, 2.5, True, None]
    depth, node = 0, out["deep"]
    while isinstance(node, list):
        depth, node = depth + 1, node[0]
    assert depth == sanitize.MAX_DEPTH and node is None
    assert notes.fields_nulled == 5
    assert "digits: an integer of 5000 digits: stored as null" in notes.as_list()
    assert json.loads(json.dumps(out, allow_nan=False)) == out  # storable as it is


def test_keys_are_cleaned_bounded_and_kept_apart_when_they_collide():
    notes = IngestNotes()
    out = sanitize.clean_json({"a\x00": 1, "a\ufffd": 2, "k" * 600: 3}, "metrics", notes)
    assert list(out) == ["a\ufffd", "a\ufffd (2)", sanitize.cut_middle("k" * 600, sanitize.MAX_KEY_CHARS)]
    assert len(list(out)[2].encode()) <= 2704  # fits a btree index entry (the metrics primary key)
    assert list(out.values()) == [1, 2, 3]


def test_known_fields_of_the_wrong_type_become_null_and_lists_lose_wrong_items():
    result = {
        "exit_code": True,
        "error": ["not", "text"],
        "started_at": "2026-01-01T00:00:00+00:00",
        "finished_at": "soon",
        "windows": {"main": {"start_s": "0.5", "end_s": 2.0}, "warm": 3},
        "energy": {
            "main": {
                "gpu_energy_j": "450",
                "samples_count": 2.5,
                "flags": ["ok", 7],
                "gpu": [{"device": "gpu0", "energy_j": 450.0, "method": None, "idle_power_w": [1]}, "x"],
                "cpu": "none",
            }
        },
        "environment": {"gpus": [{"label": 0, "max_limit_w": "700"}]},
        "measurement": [1],
    }
    notes = IngestNotes()
    sanitize.check_result_shape(result, notes)
    assert result["exit_code"] is None and result["error"] is None and result["finished_at"] is None
    assert result["started_at"] == "2026-01-01T00:00:00+00:00" and result["measurement"] is None
    assert result["windows"] == {"main": {"start_s": None, "end_s": 2.0}, "warm": None}
    main = result["energy"]["main"]
    assert main["gpu_energy_j"] is None and main["samples_count"] is None and main["flags"] == ["ok"]
    assert main["gpu"] == [{"device": "gpu0", "energy_j": 450.0, "method": None, "idle_power_w": None}]
    assert main["cpu"] is None
    assert result["environment"]["gpus"] == [{"label": None, "max_limit_w": None}]
    assert "exit_code: True is not a 32-bit integer: stored as null" in notes.as_list()
    assert "windows.main.start_s: '0.5' is not a number: stored as null" in notes.as_list()
    assert notes.fields_nulled == 14


@pytest.mark.parametrize(
    "text,expected",
    [
        ("2026-01-01T20:00:00+20:00", datetime(2026, 1, 1, 0, 0, tzinfo=UTC)),  # offset PostgreSQL refuses
        ("2026-03-29T02:30:00", datetime(2026, 3, 29, 2, 30)),  # naive stays naive
        ("0001-01-01T00:00:00+01:00", None),  # before year 1 in UTC
        ("yesterday", None),
    ],
)
def test_times_are_given_as_postgresql_takes_them(text, expected):
    assert sanitize.pg_time(text) == expected


def test_notes_are_bounded_and_count_the_rest():
    notes = IngestNotes()
    for i in range(sanitize.MAX_NOTES + 7):
        notes.add(f"note {i}", nulled=1)
    lines = notes.as_list()
    assert len(lines) == sanitize.MAX_NOTES + 1 and lines[-1] == "... and 7 more notes"
    assert notes.fields_nulled == sanitize.MAX_NOTES + 7
