"""The Airflow identifiers a plan's values become, and the rules Airflow sets for them.

A plan's name becomes the DAG id; its devices and hosts become task ids
(``run_trial_gpu0``, ``trials_<host>_gpu0_1`` ...), pools (``gcbench_gpu0``,
``gcbench_<host>_gpu0``) and Celery queues; a trial's variant becomes the label of its
mapped task instance. :func:`gcbench.factory.dag.build_dag` names its tasks with these
functions, and :func:`check_airflow_identifiers` refuses, at ``gcbench plan validate``,
a plan whose values would make identifiers Airflow refuses or truncates. Both sides use
this one module, so the check cannot drift from the DAG it guards
(``tests/factory/test_dag_identifiers.py`` compares them on built DAGs).

Pure: no Airflow import, no I/O.
"""

from __future__ import annotations

import re
import unicodedata

from gcbench.errors import PlanError
from gcbench.plan.matrix import preprocessors_used
from gcbench.plan.schema import Plan
from gcbench.plan.text import format_path
from gcbench.plan.trials import expand


def device_key(devices: list[int]) -> str:
    """Pool key of a set of GPUs: [0] -> ``gpu0``, [0, 1] -> ``gpu0_1``, [] -> ``cpu``."""
    return "gpu" + "_".join(str(d) for d in devices) if devices else "cpu"


def pool_name(devices: list[int]) -> str:
    """Airflow pool of a set of GPUs (``gcbench_gpu0``)."""
    return f"gcbench_{device_key(devices)}"


def device_sets(plan: Plan) -> list[list[int]]:
    """The GPU sets the plan's trials use, single GPUs first (from an expansion of one repetition)."""
    seen: dict[str, list[int]] = {}
    for spec in expand(plan, repetitions=1):
        seen.setdefault(device_key(spec.devices), spec.devices)
    return sorted(seen.values(), key=lambda d: (len(d), d))


def host_pool_name(host: str, devices: list[int]) -> str:
    """Airflow pool of a set of GPUs of one host (``gcbench_<host>_gpu0``)."""
    return f"gcbench_{host}_{device_key(devices)}"


def trial_pool(devices: list[int], host: str | None = None) -> str:
    """The pool a trial task queues in: its first GPU's (``gcbench_gpu0`` for [0] and
    for [0, 1]; ``gcbench_<host>_gpu0`` on a host). Pools only queue; the GPU lease
    (:mod:`gcbench.store.gpulock`) holds every GPU of the trial."""
    first = list(devices[:1])
    return pool_name(first) if host is None else host_pool_name(host, first)


def host_device_sets(plan: Plan) -> dict[str, list[list[int]]]:
    """``{host: GPU sets}`` for a plan with ``hosts:``: every GPU of the host for
    single-GPU trials, the host's first k GPUs for k-GPU trials (single GPUs first).

    Raises:
        PlanError: a trial needs more GPUs than any host has.
    """
    sizes = sorted({len(d) for d in device_sets(plan) if d})
    out: dict[str, list[list[int]]] = {}
    for name, host in plan.hosts.items():
        sets: list[list[int]] = []
        for k in sizes:
            if k == 1:
                sets.extend([d] for d in host.devices)
            elif len(host.devices) >= k:
                sets.append(list(host.devices[:k]))
        out[name] = sets
    for k in sizes:
        if not any(len(s) == k for sets in out.values() for s in sets):
            raise PlanError(plan.name, None, "hosts", f"trials need {k} GPUs but no host lists that many devices")
    return out


AIRFLOW_KEY_PATTERN = re.compile(r"[A-Za-z0-9_.-]+")
r"""Characters of an identifier GC-Bench builds for Airflow: the ASCII part of Airflow's
``KEY_REGEX`` (``^[\w.-]+$``, ``airflow.sdk.definitions._internal.node``) for dag and
task ids, used for pool and queue names too (they appear in ``airflow pools set`` and
Celery worker command lines)."""

AIRFLOW_ID_MAX_CHARS = 250
"""Longest dag or task id: ``airflow.models.base.ID_LEN``."""

AIRFLOW_POOL_MAX_CHARS = 256
"""Longest pool name: ``Pool.pool`` is ``String(256)``."""

AIRFLOW_QUEUE_MAX_CHARS = 256
"""Longest queue name: ``TaskInstance.queue`` is ``String(256)``."""

MAP_INDEX_LABEL_MAX_CHARS = 250
"""Longest label of a mapped task instance: ``TaskInstance.rendered_map_index`` is
``String(250)``; PostgreSQL refuses a longer one and the instance cannot record its state."""


def airflow_identifiers(plan: Plan) -> list[tuple[str, str, tuple[str | int, ...]]]:
    """Every Airflow identifier built from plan values: ``(kind, identifier, plan field)``.

    ``kind`` is ``"dag id"``, ``"task id"``, ``"pool"`` or ``"queue"``; the field is the
    plan path the value comes from (``("hosts", "gpu-a")``, ``("devices",)``, ...), for
    errors. The ids follow :func:`gcbench.factory.dag.build_dag` (``tests/factory/test_dag_identifiers.py``
    checks them against a built DAG).

    Raises:
        PlanError: a plan with ``hosts:`` has trials no host has enough GPUs for.
    """
    out: list[tuple[str, str, tuple[str | int, ...]]] = [("dag id", plan.dag_id, ("name",))]
    if not plan.hosts:
        for devices in device_sets(plan):
            key = device_key(devices)
            out += [
                ("task id", f"trials_{key}", ("devices",)),
                ("task id", f"run_trial_{key}", ("devices",)),
                ("pool", trial_pool(devices), ("devices",)),
            ]
        return out
    for host, sets in host_device_sets(plan).items():
        field = ("hosts", host)
        out += [("task id", f"collect_{host}", field), ("queue", plan.hosts[host].queue, field + ("queue",))]
        if preprocessors_used(plan):
            out.append(("task id", f"build_tokenizers_{host}", field))
        for devices in sets:
            key = device_key(devices)
            out += [
                ("task id", f"trials_{host}_{key}", field),
                ("task id", f"run_trial_{host}_{key}", field),
                ("pool", trial_pool(devices, host), field),
            ]
    return out


def check_airflow_identifiers(plan: Plan, lines: dict | None = None, source: str = "<plan>") -> None:
    """Refuse a plan whose values would make identifiers Airflow refuses or truncates.

    A host name with a space (C02: ``hosts: {"gpu node 1": ...}``) would make task ids
    Airflow refuses: the DAG file's import fails, and with it every plan's DAG. Such
    names are refused here, at ``gcbench plan validate``, rather than mapped to safe ids:
    the names are typed by hand elsewhere (``airflow pools set gcbench_<host>_gpu0``, a
    worker's queue), so each must be the one name the plan gives.

    Raises:
        PlanError: naming the plan field (and its line) the identifier is built from.
    """
    lines = lines or {}

    def line_of(field: tuple) -> int | None:
        for n in range(len(field), 0, -1):
            if field[:n] in lines:
                return lines[field[:n]]
        return None

    try:
        identifiers = airflow_identifiers(plan)
    except PlanError as exc:  # raised without the file: add it
        raise PlanError(source, line_of(("hosts",)), exc.field, exc.message) from None
    limits = {
        "dag id": AIRFLOW_ID_MAX_CHARS,
        "task id": AIRFLOW_ID_MAX_CHARS,
        "pool": AIRFLOW_POOL_MAX_CHARS,
        "queue": AIRFLOW_QUEUE_MAX_CHARS,
    }
    seen: dict[tuple[str, str], tuple] = {}
    for kind, ident, field in identifiers:
        where = format_path(field)
        value = str(field[-1]) if field[:1] == ("hosts",) and len(field) == 2 else None
        if not AIRFLOW_KEY_PATTERN.fullmatch(ident):
            what = f"host name {value!r}" if value is not None else "this value"
            ascii_value = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode() if value else ""
            safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", ascii_value).strip("-")
            raise PlanError(
                source,
                line_of(field),
                where,
                f"{what} becomes the Airflow {kind} {ident!r}, which may hold only ASCII letters, digits, "
                f"'_', '.' and '-'" + (f" (e.g. {safe!r})" if safe else ""),
            )
        if len(ident) > limits[kind]:
            raise PlanError(
                source,
                line_of(field),
                where,
                f"becomes the Airflow {kind} {ident[:40]}... of {len(ident)} characters, more than "
                f"Airflow's {limits[kind]}",
            )
        if (kind, ident) in seen and seen[(kind, ident)] != field and kind == "task id":
            raise PlanError(
                source,
                line_of(field),
                where,
                f"becomes the Airflow task id {ident!r}, which {format_path(seen[(kind, ident)])} "
                "also makes: rename one of them",
            )
        seen.setdefault((kind, ident), field)


def trial_label(variant: str, repetition: int, trial_id: str) -> str:
    """The label of a trial's mapped task instance: ``"<variant> #<repetition>"``.

    Labels longer than :data:`MAP_INDEX_LABEL_MAX_CHARS` (Airflow's
    ``rendered_map_index`` column; C03: a matrix note of 180 characters) are shortened
    in the variant, keeping the repetition and adding the trial id so that the
    instance can still be told apart and found: ``"tinylm[note=node gpu…] #0 (3f2a…)"``.
    """
    label = f"{variant} #{repetition}"
    if len(label) <= MAP_INDEX_LABEL_MAX_CHARS:
        return label
    tail = f"… #{repetition} ({trial_id})"
    return variant[: MAP_INDEX_LABEL_MAX_CHARS - len(tail)] + tail
