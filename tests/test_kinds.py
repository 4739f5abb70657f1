"""The registry of workload kinds: one home for every fact about a kind."""

from __future__ import annotations

import ast
import importlib.metadata
from pathlib import Path

import pytest

from gcbench import kinds

PACKAGE = Path(__file__).resolve().parents[1] / "plugins" / "gcbench"
BUILT_IN = {"noop", "tinylm", "h2d", "resnet_cifar", "python", "command", "container"}


def test_every_built_in_kind_is_registered_through_the_entry_point_group():
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group=kinds.ENTRY_POINT_GROUP)}
    assert BUILT_IN <= set(eps)
    for name in BUILT_IN:
        assert eps[name].load() is kinds.get(name)
        assert kinds.get(name).name == name


def test_an_unknown_kind_is_one_error_listing_the_installed_ones():
    with pytest.raises(kinds.UnknownKind) as err:
        kinds.get("resnet")
    text = str(err.value)
    assert "unknown workload kind 'resnet'" in text
    for name in BUILT_IN:
        assert name in text


def test_facts_come_from_the_kind_declarations():
    assert kinds.get("tinylm").primary_metric() == "j_per_token"
    assert kinds.get("h2d").primary_metric() == "gpu_j_per_gb"
    assert kinds.get("resnet_cifar").power_cap and kinds.get("resnet_cifar").tradeoff_always
    assert not kinds.get("noop").uses_gpu
    assert kinds.get("container").needs_docker and kinds.get("container").runs_beside
    # a user's program is judged on J per its unit where it counted one
    k = kinds.get("command")
    assert k.primary_metric(lambda m: m == "gpu_j_per_unit") == "gpu_j_per_unit"
    assert k.primary_metric(lambda m: m == "gpu_energy_j") == "gpu_energy_j"


class _Ep:
    def __init__(self, name, value, dist="thirdparty"):
        self.name, self.value = name, value
        self.dist = type("D", (), {"name": dist})()


def _with_entry_points(monkeypatch, eps):
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda group: eps if group == kinds.ENTRY_POINT_GROUP else []
    )
    kinds.registry.cache_clear()


@pytest.fixture
def fresh_registry():
    kinds.registry.cache_clear()
    yield
    kinds.registry.cache_clear()


def test_a_third_party_kind_registers_like_the_built_ins(monkeypatch, fresh_registry):
    _with_entry_points(
        monkeypatch,
        [_Ep("noop", "gcbench.workloads.noop:KIND", "gcbench"), _Ep("echo", "tests.fixtures.programs.echo_kind:KIND")],
    )
    assert kinds.names() == ["echo", "noop"]
    assert kinds.get("echo").unit == "lines"


@pytest.mark.parametrize(
    "target, message",
    [
        ("tests.fixtures.programs.echo_kind:NOT_A_KIND", "is a dict, not a gcbench.kinds.WorkloadKind"),
        ("tests.fixtures.programs.echo_kind:OTHER_NAME", "declares the kind 'other'"),
        ("tests.fixtures.programs.no_such_module:KIND", "cannot import 'tests.fixtures.programs.no_such_module'"),
        ("tests.fixtures.programs.echo_kind:MISSING", "has no 'MISSING'"),
    ],
)
def test_a_broken_registration_fails_loudly_naming_the_entry_point(monkeypatch, fresh_registry, target, message):
    _with_entry_points(monkeypatch, [_Ep("echo", target)])
    with pytest.raises(kinds.KindRegistryError) as err:
        kinds.registry()
    assert message in str(err.value)
    assert "'echo'" in str(err.value)


def test_one_name_claimed_by_two_packages_is_refused(monkeypatch, fresh_registry):
    _with_entry_points(
        monkeypatch,
        [
            _Ep("echo", "tests.fixtures.programs.echo_kind:KIND"),
            _Ep("echo", "tests.fixtures.programs.echo_kind:SAME_NAME"),
        ],
    )
    with pytest.raises(kinds.KindRegistryError, match="registered twice"):
        kinds.registry()


def test_a_source_tree_without_install_reads_the_built_ins_from_pyproject(monkeypatch, fresh_registry):
    def no_dist(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    monkeypatch.setattr(importlib.metadata, "distribution", no_dist)
    assert set(kinds.names()) == BUILT_IN


def _string_constants(path: Path):
    """String constants of a module that are not docstrings: (line, value)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
        # attribute docstrings: a string statement after an assignment
        body = getattr(node, "body", None)
        for i, stmt in enumerate(body if isinstance(body, list) else []):
            if i and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                docstrings.add(id(stmt.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def test_no_list_of_kinds_outside_the_registry():
    """A kind's name appears as a value in code only in its own module (its KIND):
    no dict keyed by kinds, no ``kind == "tinylm"`` branch anywhere else. (The kinds of a
    user's program are named by common words, ``command``, ``python``, ``container``, that
    are also Docker and subprocess keys: the study kinds' names are the ones checked.)"""
    names = {name for name, k in kinds.registry().items() if not k.program and k.run.startswith("gcbench.")}
    assert names == {"noop", "tinylm", "h2d", "resnet_cifar"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        for line, value in _string_constants(path):
            if value in names:
                own = {
                    "noop": "workloads/noop.py",
                    "tinylm": "workloads/tinylm.py",
                    "h2d": "workloads/h2d.py",
                    "resnet_cifar": "workloads/resnet_cifar.py",
                    "python": "workloads/pyfunc.py",
                    "command": "workloads/command.py",
                    "container": "workloads/container.py",
                }[value]
                if str(rel) != own:
                    found.append(f"{rel}:{line}: {value!r}")
    assert not found, "kind names outside their own module (read gcbench.kinds instead):\n" + "\n".join(found)
