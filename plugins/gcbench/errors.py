"""Exceptions of GC-Bench. Each carries the file, field or device it is about.

The CLI turns any :class:`GCBenchError` into one line on stderr and an exit code
(:attr:`GCBenchError.exit_code`), never a traceback.
"""

from __future__ import annotations


class GCBenchError(Exception):
    """Base class of every error GC-Bench raises on purpose."""

    exit_code = 1


class PlanError(GCBenchError):
    """A plan file is not a valid GC-Bench plan.

    Attributes:
        path: the plan file (or ``"<string>"``).
        line: 1-based line of the offending node, or None when unknown.
        field: dotted field path inside the plan, e.g. ``workloads[0].matrix.batch_size``.
        message: what is wrong, in one sentence.
    """

    exit_code = 2

    def __init__(self, path: str, line: int | None, field: str, message: str):
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message
        where = f"{self.path}:{line}" if line is not None else self.path
        loc = f" {field}:" if field else ""
        super().__init__(f"{where}:{loc} {message}")


class RunParamsError(PlanError):
    """A parameter of one run (trigger form, REST API ``conf``, ``gcbench run`` flag) does
    not fit the plan. A PlanError (exit code 2, never retried): the same input fails the
    same way.

    Attributes:
        path: the plan's name (there is no file line to name).
        field: the parameter as the caller spells it (``variants``, ``--variant``).
        message: what is wrong and what is allowed.
    """

    def __init__(self, plan: str, field: str, message: str):
        super().__init__(plan, None, field, message)
        Exception.__init__(self, f"{field}: {message}")


class MeasurementError(GCBenchError):
    """A sensor cannot be read or gives values that cannot be trusted.

    Attributes:
        device: the device the error is about (``"gpu0"``, ``"rapl:package-0"``, ...).
    """

    def __init__(self, device: str, message: str):
        self.device = device
        super().__init__(f"{device}: {message}")


class StoreError(GCBenchError):
    """The results database refused or lost an operation."""


class TrialError(GCBenchError):
    """A trial could not be prepared or its result files are unusable.

    Attributes:
        trial_id: the trial concerned, or None.
    """

    def __init__(self, trial_id: str | None, message: str):
        self.trial_id = trial_id
        super().__init__(f"trial {trial_id}: {message}" if trial_id else message)


class SkipTrial(GCBenchError):
    """Raised by a workload that cannot run here on purpose (the reason is stored).

    The trial entry point (:func:`gcbench.trial.run_trial`) catches it and exits
    "skipped" with the message as the reason. Defined here, not in the trial module, so
    that workloads and sensors (:mod:`gcbench.energy.powercap`) can raise it without
    importing the layer that runs them.

    Args:
        *args: the reason (the exception's message).
        not_in_effect: ``{setting: reason}`` when the trial is skipped because a
            requested setting cannot be put in effect here (a power cap without
            CAP_SYS_ADMIN, bf16 on a GPU without it); written to result.json as
            ``settings_not_in_effect`` so the report marks the group.
    """

    def __init__(self, *args: object, not_in_effect: dict[str, str] | None = None) -> None:
        super().__init__(*args)
        self.not_in_effect = dict(not_in_effect or {})
