"""The registry of workload kinds: the one home of every fact about a kind.

A *kind* is what a plan's ``kind:`` names (``tinylm``, ``h2d``, ``command``, a third
party's ``hf_causal_lm`` ...). Everything the rest of GC-Bench asks about a kind is
declared once, in its :class:`WorkloadKind`: the settings it accepts (and their
check), its unit of work, the metric it is judged on and those it is compared on, the
energy and time a trade-off uses, whether it runs on a GPU, which study table of the
paper it feeds. The plan schema, expansion, the trial, validation, the regression check
and the report read it from here; no list of kinds lives anywhere else.

Kinds are found through the Python entry-point group ``gcbench.workloads``, as Airflow
finds its providers and pytest its plugins. GC-Bench's own kinds register the same way,
in its ``pyproject.toml``::

    [project.entry-points."gcbench.workloads"]
    tinylm = "gcbench.workloads.tinylm:KIND"

and a third-party package adds one by shipping the same two lines (see
``examples/hf-causal-lm/`` and docs/your-own-workload.md). Each entry point names a
:class:`WorkloadKind` whose ``name`` equals the entry point's name; anything else fails
loudly at first use (:class:`KindRegistryError`), never falls back to a default.

When the package runs from a source tree that is not installed (no ``gcbench``
distribution on the path, e.g. ``PYTHONPATH=plugins`` on a lent GPU machine), the
built-in entry points are read from that tree's ``pyproject.toml`` instead, so the
list still has one home.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENTRY_POINT_GROUP = "gcbench.workloads"
"""The entry-point group that lists workload kinds."""


class KindRegistryError(RuntimeError):
    """A registered entry point is not a usable :class:`WorkloadKind` (wrong type,
    a name that differs from its entry point's, two packages claiming one name, or an
    import error): the message names the entry point and the distribution."""


class ProgramError(ValueError):
    """A plan's program fields that cannot run: ``field`` names the one at fault
    (``command``, ``entrypoint``, ``cwd``, ``env.NAME``), the message says why."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


class SettingError(ValueError):
    """A bad value inside a structured setting (``loader.workers``): ``field`` is the
    dotted path below ``settings`` (``loader.workers``), so that ``plan validate`` names
    the exact line; a kind's ``check_settings`` raises it where a plain ValueError would
    name only the setting."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


class UnknownKind(KeyError):
    """A kind no installed package registers; the message lists the installed ones."""

    def __init__(self, kind: str, known: list[str]):
        self.kind, self.known = kind, known
        super().__init__(kind)

    def __str__(self) -> str:
        return (
            f"unknown workload kind {self.kind!r}; installed kinds: {', '.join(self.known)} "
            f"(a package adds one through the {ENTRY_POINT_GROUP!r} entry-point group)"
        )


@dataclass(frozen=True)
class WorkloadKind:
    """Everything GC-Bench needs to know about one workload kind.

    Attributes:
        name: the plan's ``kind:`` value (lower_snake_case).
        run: ``"package.module:function"`` of ``run(spec, ctx) -> counts`` (imported
            when a trial runs, never at DAG parsing).
        description: one line for ``gcbench doctor`` and the docs.
        defaults: the settings the kind accepts, with their defaults (types follow the
            defaults: an integer default takes integers). ``None``: free-form settings,
            passed as written (a user's own program decides what they mean).
        check_settings: ``check(cfg) -> None`` raising ValueError on a bad value of
            the effective settings (defaults overlaid); used by ``plan validate``.
        program: which program fields a plan entry of this kind must or may give
            (``entrypoint``, ``command``, ``image``, ``env``, ``cwd``): ``{field:
            required?}``. Empty for the built-in kinds.
        unit: the unit of work counted by default (``tokens``, ``bytes``,
            ``samples``, ``steps``...), or None; a plan's ``unit:`` overrides it for
            kinds with free-form settings.
        primary_metrics: the metric the kind is judged on (outlier rule, regression
            check, first column of its table): the first of these a trial has.
        metrics: the metrics its report table leads with (primary first).
        compared: metrics tested between its variants (each joins the Holm family).
        paired: an energy ratio and a rate always summarised over the same trials.
        energy_time: (energy metric candidates, time metric) of its energy-time
            trade-off; None: the run's energy and duration (fixed work).
        tradeoff_always: its per-configuration energy and time are computed even
            without a trade-off factor (the multi-GPU study's table needs them).
        uses_gpu: whether its work runs on the trial's GPUs (``noop`` does not: its
            torch device is the CPU).
        power_cap: whether a ``power_cap_w`` setting is honoured for it.
        study: the study table of ``gcbench report --paper`` it feeds
            (``regime-tokens``, ``regime-h2d``, ``multigpu-co2e``), or None.
        runs_beside: its work is a program the trial process starts beside itself
            (a container): the trial process, and so the meter, runs on the worker
            under every runner.
        needs_docker: it needs a Docker engine (a plan with ``runner: local`` and this
            kind is refused at validation).
        preprocessor_setting: the setting whose ``external-<name>`` value selects a
            declared preprocessor (:mod:`gcbench.tokenizer.preprocessors`; TinyLM's
            ``path``), or None: plan validation checks the name is declared, expansion
            puts its version into the trial spec, the DAG builds and checks it.
        check_program: ``check(program, settings, runner) -> None`` raising
            :class:`ProgramError` when the program fields cannot run (an entry point
            that does not exist, an executable not found, a placeholder that names no
            setting); used by ``plan validate``.
    """

    name: str
    run: str
    description: str = ""
    defaults: Mapping[str, Any] | None = None
    check_settings: Callable[[dict[str, Any]], None] | None = None
    program: Mapping[str, bool] = field(default_factory=dict)
    unit: str | None = None
    primary_metrics: tuple[str, ...] = ("gpu_energy_j", "duration_s")
    metrics: tuple[str, ...] = ("gpu_energy_j", "duration_s")
    compared: tuple[str, ...] = ("gpu_energy_j",)
    paired: tuple[str, ...] = ()
    energy_time: tuple[tuple[str, ...], str] | None = None
    tradeoff_always: bool = False
    uses_gpu: bool = True
    power_cap: bool = False
    study: str | None = None
    runs_beside: bool = False
    needs_docker: bool = False
    preprocessor_setting: str | None = None
    check_program: Callable[[dict[str, Any], dict[str, Any], str], None] | None = None

    def load_run(self) -> Callable[..., Any]:
        """The kind's ``run(spec, ctx)`` function.

        Raises:
            KindRegistryError: the module or function cannot be imported.
        """
        return load_callable(self.run, f"kind {self.name!r}")

    def primary_metric(self, known: Callable[[str], bool] | None = None) -> str:
        """The metric the kind is judged on: the first of :attr:`primary_metrics` for
        which ``known(metric)`` is true (every candidate when ``known`` is None)."""
        for m in self.primary_metrics:
            if known is None or known(m):
                return m
        return self.primary_metrics[-1]


def load_callable(target: str, what: str) -> Callable[..., Any]:
    """Import ``"package.module:attribute"`` and return the attribute.

    Raises:
        KindRegistryError: malformed target, the module cannot be imported, or it has
            no such attribute (the message names ``what`` and the target).
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise KindRegistryError(f"{what}: {target!r} is not 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure of a plugin is reported with its name
        raise KindRegistryError(f"{what}: cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise KindRegistryError(f"{what}: module {module_name!r} has no {attr!r}") from None
    return obj


def _source_tree_entry_points() -> list[tuple[str, str, str]]:
    """The built-in ``(name, target, distribution)`` entry points from the source
    tree's pyproject.toml, for a package run without being installed."""
    import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.is_file():
        return []
    with open(pyproject, "rb") as f:
        data = tomllib.load(f)
    eps = data.get("project", {}).get("entry-points", {}).get(ENTRY_POINT_GROUP, {})
    return [(name, target, "gcbench (source tree)") for name, target in eps.items()]


def _entry_points() -> list[tuple[str, str, str]]:
    found = [
        (ep.name, ep.value, ep.dist.name if ep.dist is not None else "?")
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    ]
    try:
        importlib.metadata.distribution("gcbench")
    except importlib.metadata.PackageNotFoundError:
        found += _source_tree_entry_points()
    return found


@functools.cache
def registry() -> dict[str, WorkloadKind]:
    """``{kind name: WorkloadKind}`` of every installed kind, sorted by name (read once
    per process).

    Raises:
        KindRegistryError: an entry point that does not load as a WorkloadKind of its
            own name, or one name registered by two different targets.
    """
    kinds: dict[str, WorkloadKind] = {}
    targets: dict[str, str] = {}
    for name, target, dist in sorted(_entry_points()):
        if name in targets:
            if targets[name] == target:
                continue  # the same package seen twice on the path
            raise KindRegistryError(
                f"workload kind {name!r} is registered twice: {targets[name]!r} and {target!r} ({dist})"
            )
        obj = load_callable(target, f"entry point {name!r} of {dist} in group {ENTRY_POINT_GROUP!r}")
        if not isinstance(obj, WorkloadKind):
            raise KindRegistryError(
                f"entry point {name!r} of {dist} ({target}) is a {type(obj).__name__}, not a gcbench.kinds.WorkloadKind"
            )
        if obj.name != name:
            raise KindRegistryError(f"entry point {name!r} of {dist} ({target}) declares the kind {obj.name!r}")
        targets[name] = target
        kinds[name] = obj
    return dict(sorted(kinds.items()))


def names() -> list[str]:
    """Names of every installed kind, sorted."""
    return list(registry())


def get(kind: str) -> WorkloadKind:
    """The :class:`WorkloadKind` named ``kind``.

    Raises:
        UnknownKind: no installed package registers it (the message lists those that do).
    """
    try:
        return registry()[kind]
    except KeyError:
        raise UnknownKind(kind, names()) from None


def find(kind: str) -> WorkloadKind | None:
    """The kind named ``kind``, or None where it is not installed (a stored run of a
    kind whose package is gone is still reported, with the defaults of an unknown kind)."""
    return registry().get(kind)


def primary_metric(kind: str, known: Callable[[str], bool] | None = None) -> str:
    """The metric trials of ``kind`` are judged on (see :meth:`WorkloadKind.primary_metric`);
    ``gpu_energy_j`` for a kind that is not installed."""
    k = find(kind)
    if k is None:
        return "gpu_energy_j" if known is None or known("gpu_energy_j") else "duration_s"
    return k.primary_metric(known)


def primary_metric_candidates() -> tuple[str, ...]:
    """Every metric some installed kind may be judged on (the regression check's history query)."""
    return tuple(sorted({m for k in registry().values() for m in k.primary_metrics}))
