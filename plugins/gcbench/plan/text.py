"""Text of plan errors: field paths, and hints for values YAML 1.1 would read otherwise.

Shared by the loader (:mod:`gcbench.plan.loader`: YAML and schema errors) and the
checks (:mod:`gcbench.plan.check`, :mod:`gcbench.plan.identifiers`), so that every
error names a field and hints at a YAML 1.1 reading the same way.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

PathKey = tuple[str | int, ...]
"""A field's path in a plan: ``("workloads", 0, "matrix", "batch_size")``."""

YAML_TAG = "tag:yaml.org,2002:"
"""Prefix of YAML's standard tags (``tag:yaml.org,2002:int``)."""


def format_path(path: PathKey) -> str:
    """``("workloads", 0, "matrix", "batch_size")`` -> ``workloads[0].matrix.batch_size``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def yaml11_reading(text: str) -> Any:
    """What YAML 1.1 (PyYAML's SafeLoader) would make of ``text`` written unquoted, when
    that is a boolean or a number; None otherwise (also for text it cannot have come from).

    ``"yes"`` -> True, ``"1:20"`` -> 80, ``"1_000"`` -> 1000, ``"0777"`` -> 511.
    """
    if not isinstance(text, str) or not 0 < len(text) <= 64:
        return None
    yaml11 = yaml.SafeLoader("")  # only its resolver and scalar constructors are used
    tag = yaml11.resolve(yaml.ScalarNode, text, (True, False))
    if tag not in (YAML_TAG + "bool", YAML_TAG + "int", YAML_TAG + "float"):
        return None
    try:
        value = yaml11.construct_object(yaml.ScalarNode(tag, text))
    except (ValueError, yaml.YAMLError):
        return None
    return None if isinstance(value, float) and not math.isfinite(value) else value


def yaml11_hint(value: Any) -> str:
    """``"; YAML 1.1 would read yes as true, ..."`` for a text value that YAML 1.1 reads
    as a boolean or number (so that a type error says how to write it), else ``""``."""
    reading = yaml11_reading(value)
    if reading is None:
        return ""
    written = json.dumps(reading)
    return (
        f"; YAML 1.1 would read {value} as {written}, but plans are read as YAML 1.2, where it is text: write {written}"
    )
