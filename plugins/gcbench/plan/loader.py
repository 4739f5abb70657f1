"""Loading plans from YAML with errors that name the file, the line and the field.

Plans are read with the YAML 1.2 core schema (:class:`PlanLoader`, a ``yaml.SafeLoader``
with 1.2 resolvers), so YAML 1.1 implicit typing never changes a value silently:
``yes``, ``no``, ``on``, ``off``, ``y``, ``n`` stay text (``matrix: {note: [no]}`` keeps
"no"), as do ``1:20`` (1.1: sexagesimal 80), ``1_000`` and ``0b101``; ``0o17`` and
``1e3`` are numbers. Where YAML 1.1 and 1.2 both read a number but disagree on its
value (``0777``: octal 511 or decimal 777; ``08``: text or 8), the value is refused with
a hint to write it unambiguously or quote it. Plain dates are refused too (1.1 reads a
date, 1.2 text). Where a number or boolean is expected and a 1.1-only form is given,
the type error says what YAML 1.1 would have read and how to write it.

Anchors, aliases and merge keys (``<<: *common``, or ``<<: [*a, *b]``) work as in the
YAML merge-key spec: a mapping's own keys win over merged ones, and earlier mappings of
a merge list win over later ones. Every field keeps the line where it is written (a
merged field: its line in the anchored mapping). Top-level keys starting with ``x-``
are ignored, as in Compose files, so ``x-common: &common`` can hold shared settings.

Only the safe constructors are used: tags such as ``!!python/object`` are refused. The
YAML node tree is walked once to record the line of every field, to resolve merge keys
and to refuse duplicate keys (which ``yaml.safe_load`` would silently merge) and alias
bombs; then every value is checked to be a plain JSON value (text, finite number,
boolean, null, list, mapping with text keys), then pydantic validates the data; its
first error is mapped back to the line of the field.

Whatever the input, :func:`plan_from_text` raises :class:`PlanError` and nothing else
(``tests/reliability/test_bad_input.py`` feeds it random YAML to hold it to that).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gcbench.errors import PlanError
from gcbench.plan.check import check_plan
from gcbench.plan.schema import REPETITION_TAGS, Plan
from gcbench.plan.text import YAML_TAG, PathKey, format_path, yaml11_hint

MAX_PLAN_BYTES = 1_000_000
"""Plans larger than this are refused (a plan is a page of YAML, not data)."""

MAX_NODES = 100_000
"""Alias expansion beyond this many nodes is refused (YAML 'billion laughs')."""

MERGE_TAG = YAML_TAG + "merge"
EXTENSION_PREFIX = "x-"
"""Top-level keys with this prefix are ignored (Compose-style extension fields)."""


class PlanLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with the YAML 1.2 core schema's implicit types.

    Plain scalars resolve as in YAML 1.2 (https://yaml.org/spec/1.2.2/#1032-tag-resolution):
    null ``~ null Null NULL`` and empty; booleans ``true True TRUE false False FALSE``;
    integers ``[-+]?[0-9]+``, ``0o17``, ``0x1F``; floats ``1.5 .5 1e3 .inf .nan``;
    everything else is text. Two YAML 1.1 forms are kept so that they can be
    refused rather than read as text: ``<<`` merge keys (resolved by the loader's
    walk) and timestamps (refused by :func:`check_json_values`).
    """

    yaml_implicit_resolvers: dict = {}


for _tag, _pattern, _first in (
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        "float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+.0123456789",
    ),
    ("merge", r"^(?:<<)$", "<"),
    (
        "timestamp",
        r"""^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]
                    |[0-9][0-9][0-9][0-9] -[0-9][0-9]? -[0-9][0-9]?
                     (?:[Tt]|[ \t]+)[0-9][0-9]?
                     :[0-9][0-9] :[0-9][0-9] (?:\.[0-9]*)?
                     (?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$""",
        "0123456789",
    ),
):
    PlanLoader.add_implicit_resolver(
        YAML_TAG + _tag, re.compile(_pattern, re.X if _tag == "timestamp" else 0), list(_first)
    )


def _construct_int(loader: PlanLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    try:
        if re.fullmatch(r"[-+]?[0-9]+", text):
            return int(text, 10)
        if re.fullmatch(r"0o[0-7]+", text):
            return int(text[2:], 8)
        if re.fullmatch(r"0x[0-9a-fA-F]+", text):
            return int(text[2:], 16)
    except ValueError:  # more digits than Python converts (4300)
        raise yaml.constructor.ConstructorError(
            None, None, f"an integer of {len(text)} characters is too long", node.start_mark
        ) from None
    raise yaml.constructor.ConstructorError(None, None, f"{text[:40]!r} is not a YAML 1.2 integer", node.start_mark)


def _construct_float(loader: PlanLoader, node: yaml.ScalarNode) -> float:
    text = loader.construct_scalar(node)
    special = {".inf": math.inf, "+.inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}
    if text.lower() in special:
        return special[text.lower()]
    if re.fullmatch(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?", text):
        return float(text)
    raise yaml.constructor.ConstructorError(None, None, f"{text!r} is not a YAML 1.2 float", node.start_mark)


PlanLoader.add_constructor(YAML_TAG + "int", _construct_int)
PlanLoader.add_constructor(YAML_TAG + "float", _construct_float)


def _ambiguous_number(node: yaml.ScalarNode) -> str | None:
    """Why a plain integer scalar means different values in YAML 1.1 and 1.2, or None."""
    if node.style is not None or node.tag != YAML_TAG + "int" or not re.fullmatch(r"[-+]?0[0-9]+", node.value):
        return None
    text = node.value
    if len(text) > 40:  # no number of this length is meant; keep the message short
        return f"{text[:20]}... is a number with a leading zero, which YAML 1.1 and 1.2 read differently: quote it"
    digits = text.lstrip("+-")
    sign = "-" if text.startswith("-") else ""
    as_12 = int(text, 10)
    if set(digits) <= set("01234567"):
        as_11 = f"octal {sign}{int(digits, 8)}"
        octal = f"{sign}0o{digits.lstrip('0') or '0'}"
        write = f"write {as_12} or {octal}"
    else:
        as_11 = "text"
        write = f"write {as_12}"
    return (
        f"{text} is ambiguous: YAML 1.1 reads it as {as_11}, YAML 1.2 as {as_12}; {write}, "
        f"or quote it ('{text}') if it is text"
    )


def _merge_sources(node: yaml.Node, source: str, path: PathKey) -> list[yaml.MappingNode]:
    if isinstance(node, yaml.MappingNode):
        return [node]
    if isinstance(node, yaml.SequenceNode) and all(isinstance(n, yaml.MappingNode) for n in node.value):
        return list(node.value)
    raise PlanError(
        source,
        node.start_mark.line + 1,
        format_path(path),
        "a merge key (<<) takes a mapping or a list of mappings (e.g. <<: *common)",
    )


def _flatten(node: yaml.MappingNode, source: str, path: PathKey, active: set[int]) -> None:
    """Resolve the merge keys of a mapping node in place (YAML merge-key semantics).

    The node's own keys win over merged ones; of a merge list, earlier mappings win.
    Duplicate own keys are refused. Afterwards the node holds no ``<<`` key, so the
    constructor's own merge handling has nothing left to do (and no merge chain can
    multiply the pairs: every key appears once).
    """
    if id(node) in active:
        raise PlanError(
            source, node.start_mark.line + 1, format_path(path), "a merge key (<<) merges a mapping into itself"
        )
    active.add(id(node))
    own: list[tuple[yaml.Node, yaml.Node]] = []
    merged: list[yaml.MappingNode] = []
    seen: dict[Any, int] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise PlanError(
                source, key_node.start_mark.line + 1, format_path(path), "mapping keys must be plain scalars"
            )
        key = key_node.value if key_node.tag != MERGE_TAG else "<<"
        line = key_node.start_mark.line + 1
        if key in seen:
            raise PlanError(
                source,
                line,
                format_path(path if key == "<<" else path + (key,)),
                f"duplicate key {key!r} (first at line {seen[key]})",
            )
        seen[key] = line
        if key_node.tag == MERGE_TAG:
            merged = _merge_sources(value_node, source, path)
        else:
            own.append((key_node, value_node))
    if merged:
        pairs: dict[Any, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in own:
            pairs[key_node.value] = (key_node, value_node)
        for mapping in merged:
            _flatten(mapping, source, path, active)
            for key_node, value_node in mapping.value:
                pairs.setdefault(key_node.value, (key_node, value_node))
        own_keys = {k.value for k, _ in own}
        node.value = [p for k, p in pairs.items() if k not in own_keys] + own
    active.discard(id(node))


def _walk(node: yaml.Node, path: PathKey, lines: dict[PathKey, int], source: str, budget: list[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise PlanError(
            source, node.start_mark.line + 1, format_path(path), "plan has too many YAML nodes (alias bomb?)"
        )
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        _flatten(node, source, path, set())
        for key_node, value_node in node.value:
            key = key_node.value
            lines[path + (key,)] = key_node.start_mark.line + 1
            _walk(value_node, path + (key,), lines, source, budget)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, path + (i,), lines, source, budget)
    elif isinstance(node, yaml.ScalarNode):
        problem = _ambiguous_number(node)
        if problem:
            raise PlanError(source, node.start_mark.line + 1, format_path(path), problem)


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
    mapping keys that are not text (``1:``, ``yes:``, ``null:``), and text holding the
    NUL character (``"\\0"``, ``"\\x00"``), which PostgreSQL's text and jsonb cannot
    store (PostgreSQL documentation, 8.14 JSON Types: ``\\u0000`` is rejected), so the
    trial would fail when its spec is stored, after the run began.

    Raises:
        PlanError: naming the field and its line, and how to write the value instead.
    """
    if isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, str):
                raise PlanError(
                    source,
                    _line_for(path, lines),
                    format_path(path),
                    f"mapping key {key!r} is a {type(key).__name__} in YAML, not text; quote it",
                )
            if "\x00" in key:
                raise PlanError(
                    source, _line_for(path, lines), format_path(path), f"mapping key {key!r} holds a NUL character"
                )
            check_json_values(value, lines, source, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            check_json_values(value, lines, source, path + (i,))
    elif isinstance(data, str):
        if "\x00" in data:
            raise PlanError(
                source,
                _line_for(path, lines),
                format_path(path),
                "text holding a NUL character (\\0) is not allowed: PostgreSQL cannot store it",
            )
    elif isinstance(data, float):
        if not math.isfinite(data):
            raise PlanError(
                source,
                _line_for(path, lines),
                format_path(path),
                f"{data!r} is not allowed: plan numbers must be finite",
            )
    elif not isinstance(data, (int, bool, type(None))):
        raise PlanError(
            source,
            _line_for(path, lines),
            format_path(path),
            f"a YAML {type(data).__name__} value is not allowed in a plan; quote it to make it text",
        )


def parse_yaml(text: str, source: str = "<string>") -> tuple[Any, dict[PathKey, int]]:
    """Parse YAML text safely; returns (data, {field path: line}).

    Raises:
        PlanError: not YAML, a disallowed tag, a duplicate key, or an alias bomb.
    """
    if len(text.encode("utf-8", errors="replace")) > MAX_PLAN_BYTES:
        raise PlanError(source, None, "", f"plan file is larger than {MAX_PLAN_BYTES} bytes")
    try:
        loader = PlanLoader(text)
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


BOUND_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal", "multiple_of"})
"""pydantic error types whose message states the bound but not the value the plan gave."""


def _first_error(exc: ValidationError) -> tuple[PathKey, str]:
    err = exc.errors(include_url=False)[0]
    raw = err["loc"]
    loc = tuple(
        p
        for i, p in enumerate(raw)
        if not (isinstance(p, str) and p.startswith("function-"))
        and not (p in REPETITION_TAGS and i > 0 and raw[i - 1] == "repetitions")
    )
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    if err["type"] == "literal_error" or err["type"].endswith("_type") or err["type"].endswith("_parsing"):
        msg = f"{msg} (got {err.get('input')!r}){yaml11_hint(err.get('input'))}"
    elif err["type"] in BOUND_ERRORS:  # "Input should be less than or equal to 1": say what was given
        msg = f"{msg}, got {err.get('input')!r}"
    return loc, msg


def plan_from_text(text: str, source: str = "<string>") -> Plan:
    """Validate plan YAML text into a :class:`Plan`.

    Raises:
        PlanError: with the file (``source``), the line and the field path.
    """
    data, lines = parse_yaml(text, source)
    if not isinstance(data, dict):
        raise PlanError(source, 1, "", f"a plan must be a YAML mapping, got {type(data).__name__}")
    data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith(EXTENSION_PREFIX))}
    check_json_values(data, lines, source)
    workloads = data.get("workloads")
    if isinstance(workloads, list):
        seen: dict[Any, int] = {}
        for i, w in enumerate(workloads):
            name = w.get("name") if isinstance(w, dict) else None
            if isinstance(name, str) and name in seen:
                raise PlanError(
                    source,
                    lines.get(("workloads", i, "name")),
                    f"workloads[{i}].name",
                    f"duplicate workload name {name!r} (also workloads[{seen[name]}])",
                )
            if isinstance(name, str):
                seen[name] = i
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        loc, msg = _first_error(exc)
        raise PlanError(source, _line_for(loc, lines), format_path(loc), msg) from None
    plan.set_source(source)
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
