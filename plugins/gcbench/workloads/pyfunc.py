"""Kind ``python``: a user's own Python function, with the built-in workloads' protocol.

A plan entry::

    - name: my-model
      kind: python
      entrypoint: "my_package.bench:run"    # importable where the trial runs
      unit: tokens
      settings: {batch_size: 8}             # passed as written: spec.settings

The function is called as ``run(spec, ctx)``, exactly like a built-in workload
(:mod:`gcbench.workloads`): it prepares outside the window, does the measured part in
``with ctx.window():`` (or ``with gcbench.sdk.window():``), may count its units with
``ctx.count(tokens=n)`` / ``gcbench.sdk.count(...)`` and returns a dict of counts and
figures. Everything else (energy, edge correction, validation, statistics) is GC-Bench's.
"""

from __future__ import annotations

import ast
import importlib.util
from typing import Any

from gcbench.kinds import ProgramError, load_callable
from gcbench.spec import TrialSpec
from gcbench.workloads import TrialContext
from gcbench.workloads.program import program_kind


def check_program(program: dict[str, Any], settings: dict[str, Any], runner: str) -> None:
    """Plan-time check that the entry point's module exists and defines the function,
    without running the module (parsing a plan stays cheap and side-effect free).

    Raises:
        ProgramError: naming ``entrypoint``.
    """
    target = str(program.get("entrypoint") or "")
    module_name, _, attr = target.partition(":")
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as exc:
        raise ProgramError("entrypoint", f"{target!r}: cannot find module {module_name!r}: {exc}") from None
    if found is None:
        raise ProgramError("entrypoint", f"{target!r}: no module {module_name!r} on the Python path")
    origin = found.origin
    if origin and origin.endswith(".py"):
        try:
            with open(origin, encoding="utf-8") as f:
                tree = ast.parse(f.read(), origin)
        except (OSError, SyntaxError, ValueError) as exc:
            raise ProgramError("entrypoint", f"{target!r}: cannot read {origin}: {exc}") from None
        top = attr.split(".")[0]
        defined = (
            {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
            | {
                t.id
                for n in tree.body
                if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                if isinstance(t, ast.Name)
            }
            | {
                (a.asname or a.name).split(".")[0]
                for n in tree.body
                if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names
            }
        )
        if top not in defined:
            raise ProgramError("entrypoint", f"{target!r}: module {module_name!r} ({origin}) defines no {top!r}")


def run(spec: TrialSpec, ctx: TrialContext) -> dict:
    """Call the plan's entry point as ``run(spec, ctx)``; see the module docstring.

    Raises:
        gcbench.kinds.KindRegistryError: the entry point cannot be imported.
        whatever the function raises (the trial records it as failed).
    """
    from gcbench import sdk
    from gcbench.workloads import SETTINGS_EFFECTIVE, effective

    fn = load_callable(str((spec.program or {}).get("entrypoint")), "entrypoint")
    sdk.bind(ctx)
    try:
        out = fn(spec, ctx)
    finally:
        sdk.bind(None)
    counts = dict(out or {})
    if SETTINGS_EFFECTIVE not in counts:
        counts.update(effective(dict(spec.settings)))
    return counts


KIND = program_kind(
    "python",
    "gcbench.workloads.pyfunc:run",
    "a user's Python function run(spec, ctx), the built-in workloads' protocol",
    {"entrypoint": True, "unit": False},
    check_program=check_program,
)
"""The kind's registration (entry point ``python`` of group ``gcbench.workloads``)."""
