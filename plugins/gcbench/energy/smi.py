"""nvidia-smi: the fallback when the NVML library cannot be loaded, and parsers of its
output formats (``--query-gpu`` CSV with or without header/units, ``-q`` and the
default table).

Facts (fixtures in tests/fixtures/nvidia-smi, recorded on an H200, driver 580):

* One unknown field fails the whole query with ``Field "X" is not a valid field to
  query.`` (invalid_field_error.txt), so :func:`probe_fields` asks for what the driver
  supports and falls back field by field (``power.draw.instant`` -> ``power.draw``),
  recording which field fills each role.
* ``[N/A]``, ``[Not Supported]``, ``N/A`` and ``Not Found`` are missing values (None),
  never 0, and so is *any* bracketed cell: drivers add markers over the years
  (``[Requested functionality has been deprecated]`` on 590-610), and a role whose
  field gives only markers falls back to its next field.
* Units: ``--format=csv`` puts them in the header (``power.draw [W]``), but
  ``csv,noheader`` keeps them in every cell (``631.95 W``, ``19818 MiB``, ``100 %``);
  they are stripped either way (:data:`UNITS`).
* nvidia-smi may print an error line among its rows and still exit 0
  (``Unable to determine the device handle for GPU 0000:11:00.0: Unknown Error``):
  :class:`SmiOutputError`, a :class:`~gcbench.errors.MeasurementError` naming that
  GPU, carrying the good rows.
* ``power.draw`` is the 1-second average, ``power.draw.instant`` the instant value
  (h200_loop_50ms_power_draw_vs_instant.txt shows the average decaying over 1 s after
  the instant value dropped).
* ``timestamp`` is local wall-clock time ``YYYY/MM/DD HH:MM:SS.mmm``: a time zone, a
  daylight-saving change or an NTP step moves it. Streamed samples are therefore timed
  on the sampler's monotonic clock (:class:`SmiStream`); the printed time is only a
  cross-reference, whose steps are reported.

Every command is an argv list (no shell); plan values never reach a shell.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from collections.abc import Callable
from datetime import datetime

from gcbench.energy.backend import BackendUnavailable, DeviceFacts, Facts, GpuBackend, Opened, without
from gcbench.errors import MeasurementError

MISSING = {
    "[N/A]",
    "[Not Supported]",
    "N/A",
    "Not Found",
    "[Unknown Error]",
    "[Insufficient Permissions]",
    "[GPU requires reset]",
    "[GPU is lost]",
    "Unknown Error",
    "",
}
"""Cell values that mean *unknown* (besides any ``[...]`` cell, see :func:`is_missing`)."""

UNITS = (
    "W",
    "mW",
    "kW",
    "J",
    "mJ",
    "kJ",
    "Wh",
    "KiB",
    "MiB",
    "GiB",
    "TiB",
    "B",
    "KB",
    "MB",
    "GB",
    "TB",
    "Hz",
    "kHz",
    "MHz",
    "GHz",
    "%",
    "C",
    "\u00b0C",
    "F",
    "V",
    "mV",
    "A",
    "mA",
    "s",
    "ms",
    "us",
    "ns",
    "RPM",
    "KB/s",
    "MB/s",
    "GB/s",
)
"""Unit suffixes nvidia-smi prints after numbers (``csv`` without ``nounits``, ``-q``)."""

NUMERIC_ROLES = ("power_instant_w", "power_w", "temperature_c", "sm_clock_mhz", "clocks_event_reasons")
"""Sample roles that hold numbers: any other value in them is unknown (None)."""

ROLES: dict[str, tuple[str, ...]] = {
    "timestamp": ("timestamp",),
    "index": ("index",),
    "uuid": ("uuid",),
    "power_instant_w": ("power.draw.instant",),
    "power_w": ("power.draw.average", "power.draw"),
    "temperature_c": ("temperature.gpu",),
    "sm_clock_mhz": ("clocks.sm", "clocks.current.sm"),
    "clocks_event_reasons": ("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
}
"""Sample role -> nvidia-smi fields to try, best first. ``power.draw`` is the 1-s
average on Ampere and newer (ml-energy/zeus#45, NVIDIA/DCGM#157): it fills the
*average* role, never the instant one (C16), and energy from it is lag-corrected
(:mod:`gcbench.energy.window`)."""

REQUIRED_ROLES = ("timestamp", "index")
POWER_ROLES = ("power_instant_w", "power_w")
"""At least one of these must have a field."""

Runner = Callable[[list[str]], tuple[int, str]]
"""Runs an argv list, returns (exit status, stdout + stderr)."""


def run_argv(argv: list[str], timeout_s: float = 10.0) -> tuple[int, str]:
    """Default :data:`Runner`: subprocess without a shell."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return p.returncode, (p.stdout or "") + (p.stderr or "")


def find_nvidia_smi() -> str | None:
    """Path of nvidia-smi on PATH, or None."""
    return shutil.which("nvidia-smi")


# ---------------------------------------------------------------- values and CSV


def parse_timestamp(text: str) -> datetime:
    """``2026/11/29 22:27:04.979`` -> naive local datetime."""
    return datetime.strptime(text.strip(), "%Y/%m/%d %H:%M:%S.%f")


_NUMBER_RE = re.compile(r"^[-+]?\d+(\.\d+)?$")
_WITH_UNIT_RE = re.compile(
    r"^(?P<num>[-+]?\d+(?:\.\d+)?)\s*(?P<unit>"
    + "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
    + r")$"
)


def is_missing(cell: str) -> bool:
    """True for a cell that means *unknown*: :data:`MISSING` or any ``[...]`` marker."""
    s = cell.strip()
    return s in MISSING or (s.startswith("[") and s.endswith("]"))


def parse_value(raw: str, field: str = "", unit: str | None = None):
    """One cell of a ``--query-gpu`` CSV.

    Returns None for missing values (:func:`is_missing`), a datetime for
    ``timestamp``, an int for hex bitmasks (``0x0000000000000001``), a float or int for
    numbers (a unit suffix stripped: the header's ``unit`` or any of :data:`UNITS`,
    ``631.95 W`` -> 631.95), else the stripped string (``Not Active``, names).

    Raises:
        ValueError: a ``timestamp`` cell that is not ``YYYY/MM/DD HH:MM:SS.mmm``.
    """
    s = raw.strip()
    if is_missing(s):
        return None
    if field == "timestamp":
        return parse_timestamp(s)
    if s.startswith("0x"):
        try:
            return int(s, 16)
        except ValueError:
            return s
    if unit and s.endswith(unit) and _NUMBER_RE.match(s[: -len(unit)].rstrip()):
        s = s[: -len(unit)].rstrip()
    m = _WITH_UNIT_RE.match(s)
    if m:
        s = m.group("num")
    if _NUMBER_RE.match(s):
        return float(s) if "." in s else int(s)
    return s


_HEADER_RE = re.compile(r"^(?P<field>[^\[]+?)(?:\s*\[(?P<unit>[^\]]+)\])?$")


def parse_header(line: str) -> list[tuple[str, str | None]]:
    """``timestamp, index, power.draw [W]`` -> [(field, unit or None), ...]."""
    out = []
    for cell in next(csv.reader([line], skipinitialspace=True)):
        m = _HEADER_RE.match(cell.strip())
        out.append((m.group("field").strip(), m.group("unit")) if m else (cell.strip(), None))
    return out


def parse_csv_line(line: str, columns: list[tuple[str, str | None]]) -> dict:
    """One data line of ``--query-gpu`` output -> {field: value}.

    Raises:
        ValueError: when the number of cells differs from the number of columns, or
            the timestamp cell is not a time (an error message, not a row).
    """
    if is_error_line(line):
        raise ValueError(f"nvidia-smi error: {line.strip()[:200]!r}")
    cells = next(csv.reader([line.rstrip("\r\n")], skipinitialspace=True), [])
    if len(cells) != len(columns):
        raise ValueError(f"expected {len(columns)} cells, got {len(cells)}: {line!r}")
    return {f: parse_value(c, f, u) for (f, u), c in zip(columns, cells, strict=True)}


class SmiOutputError(MeasurementError, ValueError):
    """nvidia-smi printed a line that is not a row (an error message) among its rows.

    A :class:`~gcbench.errors.MeasurementError` naming the GPU of the message
    (``GPU 0000:11:00.0``; ``nvidia-smi`` when it names none), and a ValueError for
    callers that treat any unparsable output alike.

    Attributes:
        line: the first such line.
        rows: the rows that did parse, in order (nothing measured is lost).
    """

    def __init__(self, device: str, message: str, line: str, rows: list[dict]):
        super().__init__(device, message)
        self.line = line
        self.rows = rows


_GPU_IN_MESSAGE_RE = re.compile(
    r"\bGPU\s+(?P<id>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]|\d+)\b", re.IGNORECASE
)


_ERROR_LINE_RE = re.compile(
    r"^\s*(Unable to |Failed to |NVIDIA-SMI has failed|No devices were found|Unknown Error|Insufficient Permissions"
    r"|GPU is lost|Error\b)|device handle|Unknown Error\s*$",
    re.IGNORECASE,
)


def is_error_line(line: str) -> bool:
    """True for one of nvidia-smi's error messages (``Unable to determine the device
    handle for GPU 0000:11:00.0: Unknown Error``, ``No devices were found``, ...), which
    it prints where a row should be, sometimes with exit status 0."""
    return bool(_ERROR_LINE_RE.search(line))


def error_device(line: str) -> str:
    """The GPU an nvidia-smi error message is about: ``GPU 0000:11:00.0``, ``GPU 1``,
    or ``nvidia-smi`` when it names none."""
    m = _GPU_IN_MESSAGE_RE.search(line)
    return f"GPU {m.group('id')}" if m else "nvidia-smi"


def is_header_line(line: str, fields: list[str]) -> bool:
    """True for nvidia-smi's CSV header of ``fields`` (``timestamp, index, power.draw [W]``),
    which it repeats mid-stream in some modes: a line to skip, never a row or an error."""
    if not fields:
        return False
    try:
        cols = parse_header(line)
    except StopIteration:
        return False
    return [f for f, _ in cols] == list(fields)


def parse_query_csv(text: str, fields: list[str] | None = None) -> list[dict]:
    """A whole ``--query-gpu`` output.

    Args:
        text: the output; with a header (``--format=csv``) or without
            (``csv,noheader[,nounits]``).
        fields: the queried fields, required when there is no header.

    Returns:
        one {field: value} per row (see :func:`parse_value`). Blank lines and repeated
        header lines (:func:`is_header_line`) are skipped wherever they appear.

    Raises:
        ValueError: the output is nvidia-smi's invalid-field message (see
            :func:`invalid_field`).
        SmiOutputError: a line is not a row (an error message such as ``Unable to
            determine the device handle for GPU ...``): names the GPU, keeps the good
            rows in ``rows``.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if lines and invalid_field(lines[0]):
        raise ValueError(lines[0].strip())
    if fields is None:
        if not lines:
            return []
        columns, lines = parse_header(lines[0]), lines[1:]
    else:
        columns = [(f, None) for f in fields]
    names = [f for f, _ in columns]
    rows, bad = [], []
    for ln in lines:
        if is_header_line(ln, names):
            continue  # a repeated header (blank lines were dropped above): skipped, not an error
        try:
            rows.append(parse_csv_line(ln, columns))
        except ValueError:
            bad.append(ln.strip())
    if bad:
        device = error_device(bad[0])
        raise SmiOutputError(
            device,
            f"nvidia-smi printed {len(bad)} line(s) that are not rows (after {len(rows)} good row(s)): {bad[0][:200]}",
            bad[0],
            rows,
        )
    return rows


_INVALID_RE = re.compile(r'Field "(?P<field>[^"]+)" is not a valid field to query')


def invalid_field(text: str) -> str | None:
    """The field named by nvidia-smi's invalid-field error, or None."""
    m = _INVALID_RE.search(text)
    return m.group("field") if m else None


# ---------------------------------------------------------------- probing


def query_argv(
    fields: list[str], indices: list[int], interval_ms: int | None = None, nvidia_smi: str = "nvidia-smi"
) -> list[str]:
    """argv of a CSV query without header or units; ``-lms`` when streaming."""
    argv = [nvidia_smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]
    if indices:
        argv += ["-i", ",".join(str(int(i)) for i in indices)]
    if interval_ms:
        argv += ["-lms", str(int(interval_ms))]
    return argv


def probe_fields(
    indices: list[int], run: Runner = run_argv, nvidia_smi: str = "nvidia-smi", max_tries: int = 12
) -> dict[str, str]:
    """Choose the field that fills each sample role on this driver.

    Runs the full query once; an invalid field is replaced by its next fallback and the
    query retried; a role whose value is missing on every GPU (``[N/A]``) falls back
    the same way. Roles with no usable field are left out.

    Returns:
        {role: field}, e.g. ``{"power_w": "power.draw", ...}`` without
        ``power_instant_w`` when ``power.draw.instant`` is unknown or printed ``[N/A]``.

    Raises:
        gcbench.errors.MeasurementError: nvidia-smi fails for another reason, prints an
            error line for a GPU (:class:`SmiOutputError`, naming it), or a required
            role (timestamp, index, one power role) has no field.
    """
    choice = {role: 0 for role in ROLES}
    rows: list[dict] = []
    for _ in range(max_tries):
        chosen = {r: ROLES[r][i] for r, i in choice.items() if i < len(ROLES[r])}
        fields = list(dict.fromkeys(chosen.values()))
        rc, out = run(query_argv(fields, indices, nvidia_smi=nvidia_smi))
        bad = invalid_field(out)
        if bad:
            for r, f in chosen.items():
                if f == bad:
                    choice[r] += 1
            continue
        if rc != 0:
            raise MeasurementError("nvidia-smi", f"query failed (exit {rc}): {out.strip()[:200]}")
        rows = parse_query_csv(out, fields)
        missing = [
            r
            for r, f in chosen.items()
            if rows and all(row.get(f) is None for row in rows) and choice[r] + 1 < len(ROLES[r])
        ]
        if not missing:
            break
        for r in missing:
            choice[r] += 1
    chosen = {r: ROLES[r][i] for r, i in choice.items() if i < len(ROLES[r])}
    # a role whose last field still prints only markers is left out (unknown, not a value)
    chosen = {
        r: f for r, f in chosen.items() if r in REQUIRED_ROLES or not rows or any(x.get(f) is not None for x in rows)
    }
    for r in REQUIRED_ROLES:
        if r not in chosen:
            raise MeasurementError("nvidia-smi", f"no supported field for {r} (tried {', '.join(ROLES[r])})")
    if not any(r in chosen for r in POWER_ROLES):
        tried = ", ".join(dict.fromkeys(f for r in POWER_ROLES for f in ROLES[r]))
        raise MeasurementError("nvidia-smi", f"no supported field for power (tried {tried})")
    return chosen


AVERAGED_POWER_DRAW_FROM_CC = 8.0
"""``power.draw`` (NVML's ``nvmlDeviceGetPowerUsage``) is the 1-s average on Ampere
(compute capability 8.0) and newer, the instant power on older GPUs (Volta 7.0, Turing
7.5, Pascal 6.x: ``nvidia-smi --help-query-gpu``)."""


def power_draw_roles(
    roles: dict[str, str], indices: list[int], run: Runner = run_argv, nvidia_smi: str = "nvidia-smi"
) -> tuple[dict[str, str], str | None]:
    """The roles of :func:`probe_fields` with ``power.draw`` in the role its GPUs give it.

    Where ``power.draw`` is the only power field (drivers before 530), it is the 1-s
    average on Ampere and newer but the *instant* power on older GPUs: integrated as an
    average it would be shifted by the average's lag (0.57 s) and lose that much of a
    power step. ``compute_cap`` is asked for ``indices``; when every GPU is older than
    :data:`AVERAGED_POWER_DRAW_FROM_CC`, ``power.draw`` fills the instant role instead.

    Returns:
        ``(roles, note)``: the roles (unchanged unless moved) and a one-line note of what
        was decided, or None when ``power.draw`` is not the only power field.
    """
    if roles.get("power_w") != "power.draw" or "power_instant_w" in roles:
        return roles, None
    rc, out = run(query_argv(["compute_cap"], indices, nvidia_smi=nvidia_smi))
    caps: list[float] = []
    if rc == 0 and not invalid_field(out):
        for line in out.splitlines():
            try:
                caps.append(float(line.strip()))
            except ValueError:
                continue
    if not caps or len(caps) != len(indices or caps):
        return roles, "compute capability unknown: power.draw taken as the 1-s average (Ampere and newer)"
    older = [c for c in caps if c < AVERAGED_POWER_DRAW_FROM_CC]
    if not older:
        return roles, f"compute capability {', '.join(f'{c:g}' for c in caps)}: power.draw is the 1-s average"
    if len(older) != len(caps):
        return roles, (
            f"compute capabilities {', '.join(f'{c:g}' for c in caps)}: power.draw is instant on some GPUs and "
            "the 1-s average on others; taken as the average"
        )
    moved = {r: f for r, f in roles.items() if r != "power_w"}
    moved["power_instant_w"] = "power.draw"
    return moved, f"compute capability {', '.join(f'{c:g}' for c in caps)} (before Ampere): power.draw is instant"


def row_to_sample(row: dict, roles: dict[str, str]) -> dict:
    """A parsed CSV row -> {role: value}; missing values stay None, and so does a
    non-number in a numeric role (:data:`NUMERIC_ROLES`), never written as text."""
    out = {role: row.get(f) for role, f in roles.items()}
    for role in NUMERIC_ROLES:
        v = out.get(role)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            out[role] = None
    return out


class SmiStream:
    """Streamed ``--query-gpu ... -lms N`` output -> samples timed on the monotonic clock.

    A row's ``t_s`` is its printed ``timestamp`` plus an *offset* onto the sampler's
    monotonic clock, so rows keep the spacing nvidia-smi printed even when several
    arrive in one read (a buffered pipe, a slow reader). A row is never read before it
    was printed, so ``read_t_s - printed`` bounds the offset from above for every row;
    the offset is the smallest such bound seen (the least-delayed read), i.e. it is
    anchored on the monotonic clock, never on the wall clock.

    The printed time is local wall-clock time: a time zone, a daylight-saving change or
    an NTP step moves it. Its differences are therefore checked: a row printed *before*
    the previous one, or further after it than the monotonic time that has passed
    allows (more than ``clock_step_s`` beyond it), is a clock step; the printed
    difference across it is refused, the offset re-anchored on that read, and an
    ``nvidia_smi_clock_step`` event reported (``step_s``: how far the printed clock moved
    against the monotonic one). Rows are kept in order and never placed after their
    read or before ``start_t_s``. A slow drift of the wall clock against the monotonic
    one (NTP slewing, at most 500 ppm) shifts rows by at most that fraction of the
    stream's length.

    Blank lines and repeated header lines (nvidia-smi repeats its header in some modes)
    are skipped.

    Args:
        roles: {role: field} from :func:`probe_fields`.
        start_t_s: when nvidia-smi was started, s on the sampler's clock (no row is
            placed earlier).
        clock_step_s: tolerance of the step check, s.

    :meth:`feed` returns (samples, events): samples are ``(t_s, {role: value})`` with
    ``timestamp`` removed; events are dicts for the sampler's event stream:
    ``nvidia_smi_error`` (an error line, ``device`` naming the GPU, the good rows
    kept), ``nvidia_smi_unparsed`` (another line that is not a row),
    ``nvidia_smi_clock_step``.
    """

    def __init__(self, roles: dict[str, str], start_t_s: float = 0.0, clock_step_s: float = 0.5):
        self.roles = roles
        self.columns: list[tuple[str, str | None]] = [(f, None) for f in dict.fromkeys(roles.values())]
        self.fields = [f for f, _ in self.columns]
        self.buf = b""
        self.floor_t_s = start_t_s
        self.clock_step_s = clock_step_s
        self.offset_s: float | None = None
        self.last_printed_s: float | None = None
        self.ref_printed: datetime | None = None

    def _is_step(self, printed_s: float, read_t_s: float) -> bool:
        prev = self.last_printed_s
        if prev is None:
            return False
        gap = printed_s - prev
        return gap < 0 or gap > (read_t_s - self.floor_t_s) + self.clock_step_s

    def feed(self, data: bytes, read_t_s: float) -> tuple[list[tuple[float, dict]], list[dict]]:
        """Add bytes read at ``read_t_s`` (s, monotonic); returns (samples, events)."""
        self.buf += data
        *raw_lines, self.buf = self.buf.split(b"\n")
        rows: list[dict] = []
        events: list[dict] = []
        for raw in raw_lines:
            line = raw.decode("utf-8", "replace").strip()
            if not line or is_header_line(line, self.fields):
                continue
            try:
                rows.append(row_to_sample(parse_csv_line(line, self.columns), self.roles))
            except ValueError:
                kind = "nvidia_smi_error" if is_error_line(line) else "nvidia_smi_unparsed"
                events.append({"event": kind, "device": error_device(line), "line": line[:200], "t_s": read_t_s})
        if not rows:
            return [], events
        printed: list[float | None] = []
        for row in rows:  # seconds since the first printed time (epoch seconds would cost precision)
            ts = row.pop("timestamp", None)
            if ts is not None and self.ref_printed is None:
                self.ref_printed = ts
            printed.append((ts - self.ref_printed).total_seconds() if ts is not None and self.ref_printed else None)
        # segments of rows whose printed differences are trusted; a new one starts at each step
        segments: list[list[int]] = []
        steps: list[bool] = []
        for i, p in enumerate(printed):
            step = p is None or self._is_step(p, read_t_s)
            if not segments or step:
                segments.append([])
                steps.append(step)
            segments[-1].append(i)
            if p is not None:
                self.last_printed_s = p
        times = [read_t_s] * len(rows)
        hi = max(read_t_s, self.floor_t_s)
        prev_t = self.floor_t_s
        for seg, step in zip(segments, steps, strict=True):
            last_p = printed[seg[-1]]
            if last_p is None:
                for i in seg:
                    times[i] = prev_t = hi
                continue
            bound = read_t_s - last_p  # the segment's last row was printed at or before this read
            old = self.offset_s
            self.offset_s = bound if (old is None or step) else min(old, bound)
            if step and old is not None:
                events.append(
                    {
                        "event": "nvidia_smi_clock_step",
                        "t_s": min(max(last_p + self.offset_s, prev_t), hi),
                        "step_s": round(old - self.offset_s, 3),
                    }
                )
            for i in seg:
                p = printed[i]
                t = (p + self.offset_s) if p is not None else hi
                times[i] = prev_t = min(max(t, prev_t), hi)
        self.floor_t_s = max(self.floor_t_s, times[-1])
        return list(zip(times, rows, strict=True)), events


# ---------------------------------------------------------------- -q and table


_Q_GPU_RE = re.compile(r"^GPU [0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+$")
_Q_LINE_RE = re.compile(r"^(?P<indent> *)(?P<key>[^:]+?)\s*(?::\s?(?P<value>.*))?$")


def parse_q(text: str) -> dict:
    """``nvidia-smi -q`` -> nested dict.

    Section lines (no colon) open a dict; ``Key : value`` lines are leaves; missing
    values (``N/A``, ``Not Found``) become None, other values stay strings (see
    :func:`quantity`). Each ``GPU <bus id>`` section is a key of the result. A table
    printed before the ``==============NVSMI LOG==============`` line is ignored.
    """
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if "NVSMI LOG" in ln:
            lines = lines[i + 1 :]
            break
    root: dict = {}
    stack: list[tuple[int, dict]] = [(-1, root)]
    for ln in lines:
        if not ln.strip() or ln.strip().startswith("="):
            continue
        m = _Q_LINE_RE.match(ln.rstrip())
        if not m:
            continue
        indent = len(m.group("indent"))
        key = m.group("key").strip()
        section = m.group("value") is None or bool(_Q_GPU_RE.match(ln.strip()))
        if section:
            key = ln.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if section:
            node: dict = {}
            parent[key] = node
            stack.append((indent, node))
        else:
            v = m.group("value").strip()
            parent[key] = None if v in MISSING else v
    return root


_QTY_RE = re.compile(r"^(?P<num>[-+]?\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z%/()]+)?$")


def quantity(value: str | None) -> tuple[float, str | None] | None:
    """``"123.24 W"`` -> (123.24, "W"); ``"3559642 us"`` -> (3559642.0, "us"); None for
    missing or non-numeric values."""
    if value is None:
        return None
    m = _QTY_RE.match(value.strip())
    if not m:
        return None
    return float(m.group("num")), m.group("unit")


def q_gpus(tree: dict) -> dict[str, dict]:
    """The ``GPU <bus id>`` sections of a :func:`parse_q` tree, by bus id."""
    return {k.split(" ", 1)[1]: v for k, v in tree.items() if k.startswith("GPU ") and isinstance(v, dict)}


def q_power(gpu: dict) -> dict[str, float | None]:
    """Power readings of one ``-q`` GPU section, W (None when missing)."""
    pr = gpu.get("GPU Power Readings") or gpu.get("Power Readings") or {}
    keys = {
        "average_w": "Average Power Draw",
        "instant_w": "Instantaneous Power Draw",
        "limit_w": "Current Power Limit",
        "requested_limit_w": "Requested Power Limit",
        "default_limit_w": "Default Power Limit",
        "min_limit_w": "Min Power Limit",
        "max_limit_w": "Max Power Limit",
    }
    out = {}
    for k, label in keys.items():
        q = quantity(pr.get(label))
        out[k] = q[0] if q else None
    return out


_TABLE_HDR_RE = re.compile(r"NVIDIA-SMI (?P<smi>\S+)\s+Driver Version: (?P<driver>\S+)\s+CUDA Version: (?P<cuda>\S+)")
_TABLE_ROW1_RE = re.compile(
    r"^\|\s+(?P<index>\d+)\s+(?P<name>.+?)\s+(?P<persistence>On|Off)\s+\|\s+(?P<bus_id>[0-9A-Fa-f:.]+)\s+(?P<disp>\S+)\s+\|\s*(?P<ecc>\S+)\s*\|$"
)
_TABLE_ROW2_RE = re.compile(
    r"^\|\s+(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+(?P<power>\S+)\s*/\s*(?P<cap>\S+)\s+\|"
    r"\s+(?P<mem_used>\d+)MiB\s*/\s*(?P<mem_total>\d+)MiB\s+\|\s+(?P<util>\S+)\s+(?P<compute>\S+)\s+\|$"
)
_TABLE_ROW3_RE = re.compile(r"^\|\s+\|\s+\|\s+(?P<mig>\S+)\s+\|$")


def _num(text: str, suffix: str) -> float | None:
    t = text.strip()
    if t in MISSING or not t.endswith(suffix):
        return None
    v = t[: len(t) - len(suffix)]
    return float(v) if _NUMBER_RE.match(v) else None


def parse_table(text: str) -> dict:
    """The default ``nvidia-smi`` table -> {smi_version, driver_version, cuda_version,
    gpus: [{index, name, persistence, bus_id, fan, temperature_c, pstate, power_w,
    power_cap_w, memory_used_mib, memory_total_mib, utilization_pct, compute_mode,
    mig_mode}], processes_found: bool}."""
    out: dict = {"smi_version": None, "driver_version": None, "cuda_version": None, "gpus": [], "processes_found": None}
    gpu: dict | None = None
    for ln in text.splitlines():
        if "NVSMI LOG" in ln:
            break
        m = _TABLE_HDR_RE.search(ln)
        if m:
            out.update(smi_version=m.group("smi"), driver_version=m.group("driver"), cuda_version=m.group("cuda"))
            continue
        m = _TABLE_ROW1_RE.match(ln.rstrip())
        if m:
            gpu = {
                "index": int(m.group("index")),
                "name": m.group("name").strip(),
                "persistence": m.group("persistence"),
                "bus_id": m.group("bus_id"),
            }
            out["gpus"].append(gpu)
            continue
        m = _TABLE_ROW2_RE.match(ln.rstrip())
        if m and gpu is not None:
            gpu.update(
                fan=None if m.group("fan") in MISSING else m.group("fan"),
                temperature_c=_num(m.group("temp"), "C"),
                pstate=m.group("perf"),
                power_w=_num(m.group("power"), "W"),
                power_cap_w=_num(m.group("cap"), "W"),
                memory_used_mib=int(m.group("mem_used")),
                memory_total_mib=int(m.group("mem_total")),
                utilization_pct=_num(m.group("util"), "%"),
                compute_mode=m.group("compute"),
            )
            continue
        m = _TABLE_ROW3_RE.match(ln.rstrip())
        if m and gpu is not None and "mig_mode" not in gpu:
            gpu["mig_mode"] = m.group("mig")
            continue
        if "No running processes found" in ln:
            out["processes_found"] = False
    return out


def list_gpus(run: Runner = run_argv, nvidia_smi: str = "nvidia-smi") -> list[dict]:
    """GPUs as nvidia-smi sees them: [{index, name, uuid, pci_bus_id}]; [] on failure."""
    rc, out = run(query_argv(["index", "name", "uuid", "pci.bus_id"], [], nvidia_smi=nvidia_smi))
    if rc != 0 or invalid_field(out):
        return []
    try:
        rows = parse_query_csv(out, ["index", "name", "uuid", "pci.bus_id"])
    except SmiOutputError as exc:  # a lost GPU: the others are still listed
        rows = exc.rows
    except ValueError:
        return []
    return [{"index": r["index"], "name": r["name"], "uuid": r["uuid"], "pci_bus_id": r["pci.bus_id"]} for r in rows]


# ---------------------------------------------------------------- the backend


class SmiBackend(GpuBackend):
    """NVIDIA GPUs through a streamed ``nvidia-smi --query-gpu ... -lms N`` (no counter).

    Which power fields the driver offers is probed (:func:`probe_fields`): without
    ``power.draw.instant`` (drivers before 530) only ``power.draw`` is read: on Ampere and
    newer the 1-s average, declared as such and its energy lag-corrected; on older GPUs
    the instant power (:func:`power_draw_roles`), integrated as it is.
    """

    facts = Facts(
        name="nvidia-smi",
        label="nvidia-smi",
        energy_counter=False,
        instant_power=True,
        average_power=True,
        average_period_s=1.0,
        average_lag_s=0.57,  # the same sensor as NVML's (docs/measurement.md)
        update_period_s=0.1,
        temperature=True,
        clocks=True,
        utilization=True,
        power_limits=True,
        polled=False,
    )

    def open(self, devices: list[int], env: dict) -> Opened:
        """Raises:
        BackendUnavailable: nvidia-smi is not on PATH or lists no GPU.
        MeasurementError: ``CUDA_VISIBLE_DEVICES`` names a MIG instance, a GPU is not
            listed, or no power field is supported."""
        path = find_nvidia_smi()
        listed = list_gpus(nvidia_smi=path) if path else []
        if not path or not listed:
            raise BackendUnavailable(
                "nvidia-smi", "nvidia-smi not found on PATH" if not path else "nvidia-smi lists no GPU"
            )
        if any(str(e).startswith("MIG-") for e in (env.get("CUDA_VISIBLE_DEVICES") or "").split(",")):
            raise MeasurementError(
                "cuda",
                "CUDA_VISIBLE_DEVICES names a MIG instance: energy is per physical GPU; give the trial a whole GPU",
            )
        wanted = devices or [g["index"] for g in listed]
        by_idx = {g["index"]: g for g in listed}
        missing = [i for i in wanted if i not in by_idx]
        if missing:
            raise MeasurementError(f"gpu{missing[0]}", f"nvidia-smi lists no GPU {missing[0]}")
        roles = probe_fields(wanted, nvidia_smi=path)
        roles, power_draw_note = power_draw_roles(roles, wanted, nvidia_smi=path)
        self._path = path
        facts = without(self.facts, instant_power="power_instant_w" in roles, average_power="power_w" in roles)
        power_field = roles.get("power_instant_w") or roles.get("power_w")
        gpus = [
            {
                "label": f"gpu{i}",
                "uuid": by_idx[i]["uuid"],
                "index": i,
                "has_counter": False,
                "counter_reason": "nvidia-smi has no energy counter",
                "name": by_idx[i]["name"],
            }
            for i in wanted
        ]
        return Opened(
            gpus=gpus,
            device_facts={
                g["label"]: DeviceFacts(facts, counter_reason=g["counter_reason"], power_field=power_field)
                for g in gpus
            },
            environment={
                "gpus": gpus,
                "nvidia_smi": path,
                "nvidia_smi_fields": roles,
                "nvidia_smi_power_draw": power_draw_note,
            },
            sampler_cfg={"smi_roles": roles, "nvidia_smi": path},
        )

    def max_temperature_c(self, opened: Opened) -> float | None:
        rc, out = run_argv(query_argv(["temperature.gpu"], [g["index"] for g in opened.gpus], nvidia_smi=self._path))
        try:
            vals = [r["temperature.gpu"] for r in parse_query_csv(out, ["temperature.gpu"])] if rc == 0 else []
        except ValueError:
            return None
        return max(vals) if vals and None not in vals else None

    @classmethod
    def reader(cls, cfg: dict) -> SmiReader:
        return SmiReader(cfg)


class SmiReader:
    """The streamed reader of the sampler: the argv of nvidia-smi's loop and a
    :class:`SmiStream` whose rows are returned as ``(t_s, host index, row)``."""

    def __init__(self, cfg: dict):
        self.roles = cfg["smi_roles"]
        fields = list(dict.fromkeys(self.roles.values()))
        interval_ms = max(int(round(1000.0 / float(cfg["sample_hz"]))), 10)
        self._argv = query_argv(
            fields,
            [g["index"] for g in cfg["gpus"]],
            interval_ms=interval_ms,
            nvidia_smi=cfg.get("nvidia_smi") or "nvidia-smi",
        )
        self.stream: SmiStream | None = None

    def argv(self, start_t_s: float) -> list[str]:
        self.stream = SmiStream(self.roles, start_t_s=start_t_s)
        return self._argv

    def feed(self, data: bytes, t_s: float) -> tuple[list[tuple[float, int | None, dict]], list[dict]]:
        assert self.stream is not None  # argv() came first
        samples, events = self.stream.feed(data, t_s)
        rows = []
        for t, row in samples:
            index = row.pop("index", None)
            row.pop("uuid", None)
            rows.append((t, index, row))
        return rows, events
