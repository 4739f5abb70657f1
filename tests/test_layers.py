"""The package's layers only point down: no module imports a layer above its own.

Every ``import`` of every module under plugins/gcbench is read with :mod:`ast`
(module level, inside functions, under ``if TYPE_CHECKING``: a lazy import still
couples the two layers), resolved to its top-level unit (``gcbench.energy.meter`` ->
``energy``, ``from gcbench import config`` -> ``config``) and checked against
:data:`LAYERS`. A failure names file:line and both layers, so the fix is to move the
shared definition down (as ``SkipTrial`` went to errors.py, the local tokenizer build
to the tokenizer package, the metric lists to metrics.py, the Airflow identifier rules
to plan/identifiers.py), never to import upwards lazily.

Inside gcbench.plan the modules' imports (lazy ones too) form no cycle: expansion
(``matrix``, ``trials``) and the error text (``text``) sit below the checks (``check``)
and the loader.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "plugins" / "gcbench"

LAYERS: list[set[str]] = [
    # the registry of workload kinds (entry points: imports no gcbench module), the SDK of users' programs
    {"kinds", "sdk"},
    # shared definitions: exceptions, units, settings, trial spec, metric names, statistics
    {"__init__", "errors", "units", "config", "spec", "metrics", "stats", "stability"},
    {"carbon", "codecarbon_compare"},
    # sensors and the tokenizers
    {"energy", "tokenizer"},
    # the results database; the measured work (workloads may cap power, tokenize)
    {"store", "workloads"},
    # plans: loaded, checked (workload settings, Airflow identifiers) and expanded
    {"plan"},
    # one trial; the validation of a stored run; the nightly regression check
    {"trial", "validate", "regression"},
    {"notify", "report", "export"},
    # the web app: report pages, mounted in Airflow's API server
    {"web"},
    {"airflow_local"},
    # plan -> DAG, runners: may use everything below
    {"factory"},
    {"runprogress"},
    {"cli"},
]
"""Top-level units of gcbench, lowest first. A module may import its own unit and any
unit of a lower layer; never one of its own layer's other units, nor a higher one."""

RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}

LOWER = ("plan", "energy", "store", "tokenizer", "workloads")
RUNNERS_AND_REPORT = ("factory", "report", "validate", "trial")
"""Issue 15's rule in its own words: the first never import the second."""


@dataclass(frozen=True)
class Import:
    """One import of a gcbench module: where it is and which unit it reaches."""

    path: Path
    line: int
    target: str  # dotted module imported, e.g. gcbench.trial
    unit: str  # its top-level unit, e.g. trial


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """``plugins/gcbench/energy/meter.py`` -> ``gcbench.energy.meter`` (packages: their name)."""
    parts = ["gcbench", *path.relative_to(package).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(dotted: str, units: set[str]) -> str:
    """The top-level unit of a gcbench module name (``__init__`` for the package itself)."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in units else "__init__"


def gcbench_imports(source: str, path: Path, module: str, units: set[str]) -> list[Import]:
    """Every import of a gcbench module in ``source`` (anywhere in the file), resolved.

    ``module`` is the importing module's dotted name (to resolve relative imports);
    ``from gcbench import X`` counts as importing unit X when X is a unit.
    """
    is_package = path.name == "__init__.py"
    out: list[Import] = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            # from gcbench import config -> gcbench.config; from gcbench.plan import expand -> gcbench.plan
            targets = [f"{origin}.{alias.name}" if origin == "gcbench" else origin for alias in node.names]
        else:
            continue
        for target in targets:
            if target == "gcbench" or target.startswith("gcbench."):
                out.append(Import(path, node.lineno, target, unit_of(target, units)))
    return out


def all_imports(package: Path = PACKAGE) -> list[tuple[str, Import]]:
    """``(importing unit, import)`` for every gcbench import of every module of the package."""
    units = set(RANK)
    out = []
    for path in sorted(package.rglob("*.py")):
        module = module_name(path, package)
        for imp in gcbench_imports(path.read_text(encoding="utf-8"), path, module, units):
            out.append((path.relative_to(package).parts[0].removesuffix(".py"), imp))
    return out


def where(imp: Import, root: Path = PACKAGE.parents[1]) -> str:
    """``plugins/gcbench/energy/powercap.py:40``: the import's file (relative to ``root``) and line."""
    return f"{imp.path.relative_to(root)}:{imp.line}"


def upward(imports: list[tuple[str, Import]], root: Path = PACKAGE.parents[1]) -> list[str]:
    """One line per import that does not point strictly down (its own unit excepted),
    in file and line order."""
    bad = []
    for unit, imp in sorted(imports, key=lambda ui: (str(ui[1].path), ui[1].line, ui[1].target)):
        if imp.unit == unit:
            continue
        if unit not in RANK:
            bad.append(f"{where(imp, root)}: {unit} has no layer in tests/test_layers.py LAYERS")
        elif RANK[imp.unit] >= RANK[unit]:
            direction = "sideways to" if RANK[imp.unit] == RANK[unit] else "up to"
            bad.append(
                f"{where(imp, root)}: {unit} (layer {RANK[unit]}) imports {imp.target}, {direction} "
                f"{imp.unit} (layer {RANK[imp.unit]})"
            )
    return bad


def test_every_unit_of_the_package_has_a_layer():
    units = {
        p.name.removesuffix(".py")
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py") or (p.is_dir() and (p / "__init__.py").exists())
    }
    missing = sorted(units - set(RANK))
    assert not missing, f"place {missing} in tests/test_layers.py LAYERS (which layers may they import?)"
    assert sorted(set(RANK) - units) == [], "LAYERS names a unit that no longer exists"


def test_lower_layers_never_import_the_runners_the_trial_validation_or_the_report():
    bad = [
        f"{where(imp)}: {unit} imports {imp.target}"
        for unit, imp in all_imports()
        if unit in LOWER and imp.unit in RUNNERS_AND_REPORT
    ]
    assert not bad, "lower layers import upwards:\n" + "\n".join(bad)


def test_every_import_points_down():
    bad = upward(all_imports())
    assert not bad, "imports that do not point down (move the shared definition down):\n" + "\n".join(bad)


def test_the_checker_sees_imports_inside_functions_relative_ones_and_from_gcbench(tmp_path):
    """The test above can fail: an energy module with each kind of upward import."""
    package = tmp_path / "gcbench"
    (package / "energy").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "energy" / "__init__.py").write_text("")
    (package / "energy" / "probe.py").write_text(
        "from gcbench.errors import MeasurementError\n"  # down: fine
        "from gcbench.energy import base\n"  # own unit: fine
        "def f():\n"
        "    from gcbench.trial import SkipTrial\n"  # line 4: up, inside a function
        "from .. import report\n"  # line 5: relative, up
        "from gcbench import factory, units\n"  # line 6: factory up, units fine
        "import gcbench.tokenizer.build\n"  # line 7: sideways
    )
    found = sorted((unit, imp.line, imp.target) for unit, imp in all_imports(package))
    assert found == [
        ("energy", 1, "gcbench.errors"),
        ("energy", 2, "gcbench.energy"),
        ("energy", 4, "gcbench.trial"),
        ("energy", 5, "gcbench.report"),
        ("energy", 6, "gcbench.factory"),
        ("energy", 6, "gcbench.units"),
        ("energy", 7, "gcbench.tokenizer.build"),
    ]
    bad = upward(all_imports(package), root=tmp_path)
    assert bad == [
        "gcbench/energy/probe.py:4: energy (layer 3) imports gcbench.trial, up to trial (layer 6)",
        "gcbench/energy/probe.py:5: energy (layer 3) imports gcbench.report, up to report (layer 7)",
        "gcbench/energy/probe.py:6: energy (layer 3) imports gcbench.factory, up to factory (layer 10)",
        "gcbench/energy/probe.py:7: energy (layer 3) imports gcbench.tokenizer.build, sideways to tokenizer (layer 3)",
    ]


@pytest.mark.parametrize("unit", LOWER)
def test_each_lower_layer_is_below_the_runners_and_the_report(unit):
    assert all(RANK[unit] < RANK[top] for top in RUNNERS_AND_REPORT)


REPORT_LAYERS: list[set[str]] = [
    {"fmt", "scale", "data", "metrics", "build"},
    {"analysis"},
    {"render"},
]
"""Inside gcbench.report: formatting helpers and plain data below the numbers, the numbers
(analysis) below their rendering. ``build`` (the report task's body) reaches the writer
through ``gcbench.report``'s lazy ``write_report`` only."""


def test_report_numbers_never_import_their_rendering():
    """analysis/ computes, render/ formats: analysis never imports render, the helpers neither."""
    rank = {u: i for i, layer in enumerate(REPORT_LAYERS) for u in layer}
    bad = []
    for imp in (i for _unit, i in all_imports(PACKAGE)):
        rel = imp.path.relative_to(PACKAGE).parts
        if rel[0] != "report" or len(rel) < 2 or not imp.target.startswith("gcbench.report."):
            continue
        src = Path(rel[1]).stem
        dst = imp.target.split(".")[2]
        if src in rank and dst in rank and rank[dst] > rank[src]:
            bad.append(f"{'/'.join(rel)}:{imp.line}: report.{src} imports {imp.target}")
    assert not bad, "\n".join(bad)


PLAN = PACKAGE / "plan"


@dataclass(frozen=True)
class PlanEdge:
    """One import of a module of gcbench.plan by another (``__init__``: the package itself)."""

    source: str  # the importing module, e.g. loader
    target: str  # the imported one, e.g. check
    line: int
    lazy: bool  # written inside a function: runs at call time, not at import


def _imports_in(node: ast.AST, lazy: bool = False):
    """``(import node, inside a function?)`` for every import below ``node``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, lazy
        else:
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from _imports_in(child, inner)


def _plan_targets(node: ast.Import | ast.ImportFrom, modules: set[str]) -> list[str]:
    """The modules of gcbench.plan an import reaches: ``from gcbench.plan.check import x``
    -> check, ``from gcbench.plan import trials`` -> trials, ``from . import text`` -> text,
    ``from gcbench.plan import expand`` (a name of the package) -> ``__init__``."""

    def module_of(dotted: str) -> str | None:
        parts = dotted.split(".")
        if parts[:2] != ["gcbench", "plan"]:
            return None
        return parts[2] if len(parts) > 2 and parts[2] in modules else "__init__"

    if isinstance(node, ast.Import):
        return [m for alias in node.names if (m := module_of(alias.name))]
    if node.level:  # every module of gcbench.plan, __init__ too, sits in the package gcbench.plan
        origin = ".".join(["gcbench", "plan"][: 3 - node.level] + ([node.module] if node.module else []))
    else:
        origin = node.module or ""
    out = []
    for alias in node.names:
        # from gcbench.plan import trials -> trials; from gcbench import plan -> __init__
        dotted = f"{origin}.{alias.name}" if origin in ("gcbench", "gcbench.plan") else origin
        if (module := module_of(dotted)) is not None:
            out.append(module)
    return out


def plan_edges(plan: Path = PLAN) -> list[PlanEdge]:
    """Every import between the modules of the plan package, at module level and inside
    functions, in file and line order (a module's import of itself left out)."""
    modules = {p.stem for p in plan.glob("*.py")}
    edges = []
    for path in sorted(plan.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, lazy in _imports_in(tree):
            edges += [PlanEdge(path.stem, t, node.lineno, lazy) for t in _plan_targets(node, modules) if t != path.stem]
    return sorted(edges, key=lambda e: (e.source, e.line, e.target))


def find_cycle(edges: list[PlanEdge]) -> list[PlanEdge]:
    """The edges of one import cycle (``[a->b, b->a]``), or ``[]`` when the graph has none."""
    graph: dict[str, list[PlanEdge]] = {}
    for edge in edges:
        graph.setdefault(edge.source, []).append(edge)
    done: set[str] = set()
    path: list[PlanEdge] = []
    on_path: list[str] = []

    def visit(module: str) -> list[PlanEdge]:
        on_path.append(module)
        for edge in graph.get(module, []):
            if edge.target in on_path:
                return path[on_path.index(edge.target) :] + [edge]
            if edge.target not in done:
                path.append(edge)
                if cycle := visit(edge.target):
                    return cycle
                path.pop()
        on_path.pop()
        done.add(module)
        return []

    for module in sorted(graph):
        if module not in done and (cycle := visit(module)):
            return cycle
    return []


def reachable(edges: list[PlanEdge], start: str) -> set[str]:
    """The modules ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        module = todo.pop()
        for edge in edges:
            if edge.source == module and edge.target not in seen:
                seen.add(edge.target)
                todo.append(edge.target)
    return seen


def test_the_plan_package_has_no_import_cycle_not_even_through_a_lazy_import():
    """A lazy import inside a function still couples two modules: counting those too, no
    plan module may import, directly or through others, one that imports it back."""
    cycle = find_cycle(plan_edges())
    assert not cycle, (
        "gcbench.plan import cycle (move the shared definition down, do not import lazily):\n"
        + "\n".join(
            f"plugins/gcbench/plan/{e.source}.py:{e.line}: {e.source} imports {e.target}{' (lazily)' if e.lazy else ''}"
            for e in cycle
        )
    )


def test_plan_expansion_reaches_neither_the_checks_nor_the_loader():
    """matrix.py and trials.py (what a plan expands to) stand below check.py and loader.py."""
    edges = plan_edges()
    assert (PLAN / "matrix.py").exists() and (PLAN / "trials.py").exists()
    for module in ("matrix", "trials"):
        assert not reachable(edges, module) & {"check", "loader", "__init__"}, module


def test_plan_error_text_imports_no_other_plan_module():
    """text.py (field paths, YAML 1.1 hints) sits below every module that words an error."""
    assert (PLAN / "text.py").exists()
    assert reachable(plan_edges(), "text") <= {"schema"}


def test_the_cycle_finder_sees_lazy_relative_and_package_imports(tmp_path):
    """The tests above can fail: a cycle a -> b -> c -> a closed by a lazy import."""
    plan = tmp_path / "plan"
    plan.mkdir()
    (plan / "__init__.py").write_text("from gcbench.plan.a import f\n")
    (plan / "a.py").write_text("def f():\n    from gcbench.plan.b import g\n")  # line 2, lazy
    (plan / "b.py").write_text("from . import c\nfrom gcbench.errors import PlanError\n")
    (plan / "c.py").write_text("import gcbench.plan.a\nfrom gcbench.plan import f\n")  # f: the package's name
    edges = plan_edges(plan)
    assert [(e.source, e.target, e.line, e.lazy) for e in edges] == [
        ("__init__", "a", 1, False),
        ("a", "b", 2, True),
        ("b", "c", 1, False),
        ("c", "a", 1, False),
        ("c", "__init__", 2, False),
    ]
    assert [(e.source, e.target) for e in find_cycle(edges)] == [("a", "b"), ("b", "c"), ("c", "a")]
    assert reachable(edges, "b") == {"a", "b", "c", "__init__"}
    assert find_cycle([e for e in edges if e.source != "a"]) == []
