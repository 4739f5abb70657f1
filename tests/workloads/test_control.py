"""The control channel of a user's program: parsing, reading, bounded under floods."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gcbench.workloads.control import ControlLineError, ControlReader, Event, Problems, parse_line


@pytest.mark.parametrize(
    "line, event",
    [
        ("window begin main", Event("begin", "main", None, None, 3)),
        ("window end prefill t=12.5", Event("end", "prefill", None, 12.5, 3)),
        ("step", Event("step", "", 1, None, 3)),
        ("step 25 t=1.000001", Event("step", "", 25, 1.000001, 3)),
        ("count tokens 123456", Event("count", "tokens", 123456, None, 3)),
        ("count tokens 1000000000000000000000000000000", Event("count", "tokens", 10**30, None, 3)),
        ("count gb 0.25", Event("count", "gb", 0.25, None, 3)),
        ("metric loss 2.31", Event("metric", "loss", 2.31, None, 3)),
        ("  metric loss -0.5  ", Event("metric", "loss", -0.5, None, 3)),
    ],
)
def test_well_formed_lines(line, event):
    assert parse_line(line, 3) == event


@pytest.mark.parametrize("line", ["", "   ", "# a comment"])
def test_blank_lines_and_comments_are_nothing(line):
    assert parse_line(line) is None


@pytest.mark.parametrize(
    "line, why",
    [
        ("window open main", "expected 'window begin <name>'"),
        ("window begin Main", "not lower_snake_case"),
        ("window begin", "expected 'window begin <name>'"),
        ("count tokens -5", "not a non-negative number"),
        ("count tokens 1e400", "not finite"),
        ("count tokens lots", "not a non-negative number"),
        ("count Tokens 5", "not lower_snake_case"),
        ("step 2.5", "not a whole number"),
        ("metric loss nan", "not finite"),
        ("metric loss", "expected 'metric <name> <value>'"),
        ("begin main", "unknown event 'begin'"),
        ("window begin main t=", "t= without a value"),
        ("window begin main t=yesterday", "not a non-negative number"),
    ],
)
def test_malformed_lines_say_why(line, why):
    with pytest.raises(ControlLineError, match=why):
        parse_line(line)


def _reader(tmp_path):
    events: list[tuple[Event, float]] = []
    problems = Problems()
    reader = ControlReader(tmp_path / "control.fifo", lambda e, t: events.append((e, t)), problems).open()
    return reader, events, problems


def test_a_child_program_writes_events_timed_on_arrival(tmp_path):
    reader, events, problems = _reader(tmp_path)
    before = time.monotonic()
    script = (
        "import os, sys, time\n"
        "p = os.environ['GCBENCH_CONTROL']\n"
        "for line in ['window begin main', 'count tokens 10', 'not a line', 'window end main']:\n"
        "    with open(p, 'w') as f: f.write(line + '\\n')\n"
        "    time.sleep(0.02)\n"
    )
    subprocess.run([sys.executable, "-c", script], env={**os.environ, "GCBENCH_CONTROL": str(reader.path)}, check=True)
    reader.close()
    assert [e.what for e, _ in events] == ["begin", "count", "end"]
    times = [t for _, t in events]
    assert before <= times[0] <= times[1] <= times[2] <= time.monotonic()
    assert times[2] - times[0] >= 0.05  # three sleeps apart, not one arrival time
    assert problems.to_list() == [
        "control line 3 'not a line': unknown event 'not' (window, step, count, metric); ignored"
    ]
    assert not reader.path.exists()


def test_a_program_that_never_opens_the_channel_sends_nothing(tmp_path):
    reader, events, problems = _reader(tmp_path)
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    reader.close()
    assert events == [] and problems.to_list() == [] and reader.lines == 0


def test_a_flood_keeps_memory_bounded_and_every_line_read(tmp_path):
    reader, events, problems = _reader(tmp_path)
    n = 200_000
    script = (
        "import os\n"
        "fd = os.open(os.environ['GCBENCH_CONTROL'], os.O_WRONLY)\n"
        f"chunk = b'count tokens 1\\nbogus\\n' * 1000\n"
        f"for _ in range({n // 2000}): os.write(fd, chunk)\n"
    )
    subprocess.run([sys.executable, "-c", script], env={**os.environ, "GCBENCH_CONTROL": str(reader.path)}, check=True)
    reader.close()
    assert reader.lines == n
    assert sum(1 for e, _ in events if e.what == "count") == n // 2
    kept = problems.to_list()
    assert len(kept) == 51 and kept[-1] == f"... and {n // 2 - 50} more control-channel problems"


def test_an_over_long_line_and_invalid_utf8_are_problems(tmp_path):
    reader, events, problems = _reader(tmp_path)
    fd = os.open(reader.path, os.O_WRONLY)
    os.write(fd, b"metric x " + b"9" * 5000 + b"\n" + b"\xff\xfe\n" + b"step\n")
    os.close(fd)
    reader.close()
    assert [e.what for e, _ in events] == ["step"]
    assert problems.to_list() == [
        "control line 1: longer than 4096 bytes, ignored",
        "control line 2: not UTF-8, ignored",
    ]


def test_a_last_line_without_newline_is_read(tmp_path):
    reader, events, problems = _reader(tmp_path)
    fd = os.open(reader.path, os.O_WRONLY)
    os.write(fd, b"window begin main\nwindow end main")
    os.close(fd)
    reader.close()
    assert [e.what for e, _ in events] == ["begin", "end"]
