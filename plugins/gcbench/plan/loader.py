"""Loading plans from YAML with errors that name the file, the line and the field.

Only ``yaml.SafeLoader`` is used: tags such as ``!!python/object`` are refused. The
YAML node tree is walked once to record the line of every field (and to refuse
duplicate keys, which ``yaml.safe_load`` would silently merge), then every value is
checked to be a plain JSON value (text, finite number, boolean, null, list, mapping
with text keys), then pydantic validates the data; its first error is mapped back to
the line of the field.

Whatever the input, :func:`plan_from_text` raises :class:`PlanError` and nothing else
(``tests/reliability/test_bad_input.py`` feeds it random YAML to hold it to that).
"""

from __future__ import annotations

import math

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gcbench.errors import PlanError
from gcbench.plan.schema import Plan

MAX_PLAN_BYTES = 1_000_000
"""Plans larger than this are refused (a plan is a page of YAML, not data)."""

MAX_NODES = 100_000
"""Alias expansion beyond this many nodes is refused (YAML 'billion laughs')."""

PathKey = tuple[str | int, ...]


def format_path(path: PathKey) -> str:
    """``("workloads", 0, "matrix", "batch_size")`` -> ``workloads[0].matrix.batch_size``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _walk(node: yaml.Node, path: PathKey, lines: dict[PathKey, int], source: str, budget: list[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise PlanError(source, node.start_mark.line + 1, format_path(path), "plan has too many YAML nodes (alias bomb?)")
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise PlanError(source, key_node.start_mark.line + 1, format_path(path), "mapping keys must be plain scalars")
            key = key_node.value
            if key == "<<":
                raise PlanError(source, key_node.start_mark.line + 1, format_path(path), "YAML merge keys (<<) are not allowed in plans")
            line = key_node.start_mark.line + 1
            if key in seen:
                raise PlanError(source, line, format_path(path + (key,)), f"duplicate key {key!r} (first at line {seen[key]})")
            seen[key] = line
            lines[path + (key,)] = line
            _walk(value_node, path + (key,), lines, source, budget)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, path + (i,), lines, source, budget)


def _line_for(loc: PathKey, lines: dict[PathKey, int]) -> int | None:
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


def check_json_values(data: Any, lines: dict[PathKey, int], source: str, path: PathKey = ()) -> None:
    """Refuse plan values that are not plain JSON values.

    A plan becomes trial specs, JSON files and hashed trial ids; a value that JSON
    cannot carry unchanged would give a trial another spec than the one its id was
    computed from. Refused: NaN and infinities (``.nan``, ``.inf``), and what YAML's
    other tags construct (``!!binary`` bytes, dates and timestamps, ``!!set``),
    and mapping keys that are not text (``1:``, ``yes:``, ``null:``).

    Raises:
        PlanError: naming the field and its line, and how to write the value instead.
    """
    if isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, str):
                raise PlanError(source, _line_for(path, lines), format_path(path),
                                f"mapping key {key!r} is a {type(key).__name__} in YAML, not text; quote it")
            check_json_values(value, lines, source, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            check_json_values(value, lines, source, path + (i,))
    elif isinstance(data, float):
        if not math.isfinite(data):
            raise PlanError(source, _line_for(path, lines), format_path(path),
                            f"{data!r} is not allowed: plan numbers must be finite")
    elif not isinstance(data, (str, int, bool, type(None))):
        raise PlanError(source, _line_for(path, lines), format_path(path),
                        f"a YAML {type(data).__name__} value is not allowed in a plan; quote it to make it text")


def parse_yaml(text: str, source: str = "<string>") -> tuple[Any, dict[PathKey, int]]:
    """Parse YAML text safely; returns (data, {field path: line}).

    Raises:
        PlanError: not YAML, a disallowed tag, a duplicate key, or an alias bomb.
    """
    if len(text.encode("utf-8", errors="replace")) > MAX_PLAN_BYTES:
        raise PlanError(source, None, "", f"plan file is larger than {MAX_PLAN_BYTES} bytes")
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                raise PlanError(source, 1, "", "plan file is empty")
            lines: dict[PathKey, int] = {}
            _walk(node, (), lines, source, [MAX_NODES])
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = (exc.problem or exc.context or "invalid YAML").strip()
        raise PlanError(source, line, "", f"not valid plan YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise PlanError(source, None, "", f"not valid YAML: {exc}") from None
    except RecursionError:
        raise PlanError(source, None, "", "plan YAML is nested too deeply") from None
    return data, lines


def _first_error(exc: ValidationError) -> tuple[PathKey, str]:
    err = exc.errors(include_url=False)[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    if err["type"] == "literal_error" or err["type"].endswith("_type") or err["type"].endswith("_parsing"):
        msg = f"{msg} (got {err.get('input')!r})"
    return loc, msg


def plan_from_text(text: str, source: str = "<string>") -> Plan:
    """Validate plan YAML text into a :class:`Plan`.

    Raises:
        PlanError: with the file (``source``), the line and the field path.
    """
    data, lines = parse_yaml(text, source)
    if not isinstance(data, dict):
        raise PlanError(source, 1, "", f"a plan must be a YAML mapping, got {type(data).__name__}")
    check_json_values(data, lines, source)
    workloads = data.get("workloads")
    if isinstance(workloads, list):
        seen: dict[Any, int] = {}
        for i, w in enumerate(workloads):
            name = w.get("name") if isinstance(w, dict) else None
            if isinstance(name, str) and name in seen:
                raise PlanError(source, lines.get(("workloads", i, "name")), f"workloads[{i}].name",
                                f"duplicate workload name {name!r} (also workloads[{seen[name]}])")
            if isinstance(name, str):
                seen[name] = i
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        loc, msg = _first_error(exc)
        raise PlanError(source, _line_for(loc, lines), format_path(loc), msg) from None
    from gcbench.plan.expand import check_plan

    check_plan(plan, lines, source)
    return plan


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file.

    Raises:
        PlanError: unreadable file, invalid YAML or an invalid plan; names file, line, field.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PlanError(str(path), None, "", f"plan file is not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise PlanError(str(path), None, "", f"cannot read plan file: {exc.strerror or exc}") from None
    return plan_from_text(text, str(path))
