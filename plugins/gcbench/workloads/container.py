"""Kind ``container``: a user's own image, with nothing of GC-Bench inside, on the trial's GPUs.

A plan entry::

    - name: my-image
      kind: container
      image: my-lab/bench:1.4
      command: ["/app/bench", "--size", "{size}"]   # optional: the image's own command otherwise
      env: {MODE: "fast"}
      unit: requests
      settings: {size: 1000}

The trial process, and so the meter, runs *beside* the container, on the worker: it
starts the container through the Docker engine's API (the ``docker`` library that
Airflow's DockerOperator drives), waits for it and removes it, whatever ends the trial.
The container gets

* the trial's GPUs: ``device_requests`` naming the UUIDs of the GPUs the meter measures
  through NVML on the worker (their host indices where a UUID is unknown; the NVIDIA
  container toolkit then shows the program only those GPUs, numbered from 0);
* the trial folder at ``/gcbench/out`` (read-write) with the control channel at
  ``/gcbench/out/control/control.fifo``, named by ``GCBENCH_CONTROL``; ``GCBENCH_SPEC``
  (``/gcbench/out/spec.json``) and ``GCBENCH_OUTDIR`` as for the ``command`` kind;
* no network, and the worker's user and group (files it writes in the trial folder
  belong to the worker), like GC-Bench's own trial containers.

What the image must provide: its program, nothing else. Marking windows and counts is
optional (one ``echo`` per line, see docs/your-own-workload.md); unmarked, the window
is the container's whole run. The engine is ``DOCKER_HOST`` or the local socket; on an
engine without GPUs, ``GCBENCH_DOCKER_GPUS=none`` requests none. This kind needs a
Docker engine: a plan with ``runner: local`` is refused at validation.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gcbench.kinds import ProgramError
from gcbench.spec import TrialSpec
from gcbench.workloads import TrialContext
from gcbench.workloads.program import check_program_placeholders, program_kind, run_program, substitute, values_for

CONTAINER_OUTDIR = "/gcbench/out"
"""Where the trial folder is mounted in the user's container."""

STOP_TIMEOUT_S = 10
"""Seconds the engine waits between SIGTERM and SIGKILL when the trial stops the container."""


def check_program(program: dict[str, Any], settings: dict[str, Any], runner: str) -> None:
    """Plan-time check: placeholders of ``command`` and ``env`` name settings; the
    runner is ``docker``.

    Raises:
        ProgramError: naming ``command``, ``env.NAME`` or ``image``.
    """
    if runner != "docker":
        raise ProgramError(
            "image", "kind container runs a user's image through a Docker engine: set runner: docker in the plan"
        )
    check_program_placeholders(program, settings)


def device_ids(spec: TrialSpec, measured: list[dict] | None = None) -> list[str]:
    """The engine's ``device_ids`` of the trial's GPUs: the UUIDs of the GPUs the meter
    measures (``Meter.gpus``, one per trial device) where it knows them all, else the
    trial's host indices.

    A UUID names one GPU everywhere; an index is the engine host's numbering, which is not
    the worker's where the worker itself runs in a container given some of the GPUs
    (``--gpus device=GPU-...``: its GPU 0 is any host GPU), so the program would compute
    on another GPU than the one measured (C15)."""
    uuids = [str(g.get("uuid") or "") for g in measured or [] if isinstance(g, dict)]
    if spec.devices and len(uuids) == len(spec.devices) and all(u.startswith("GPU-") for u in uuids):
        return uuids
    return [str(d) for d in spec.devices]


def container_kwargs(
    spec: TrialSpec, outdir: Path, control_path: str, measured: list[dict] | None = None
) -> dict[str, Any]:
    """Keyword arguments of ``docker.DockerClient().containers.run`` for one trial
    (container paths in the environment and the placeholders); ``measured``: the GPUs
    the meter measures (:func:`device_ids`)."""
    from docker.types import DeviceRequest, Mount

    from gcbench import config

    program = spec.program or {}
    inside_control = f"{CONTAINER_OUTDIR}/{Path(control_path).relative_to(outdir)}"
    values = values_for(spec, Path(CONTAINER_OUTDIR), inside_control)
    command = [substitute(a, values) for a in program.get("command") or []]
    environment = {
        **{k: substitute(v, values) for k, v in (program.get("env") or {}).items()},
        "GCBENCH_CONTROL": inside_control,
        "GCBENCH_SPEC": f"{CONTAINER_OUTDIR}/spec.json",
        "GCBENCH_OUTDIR": CONTAINER_OUTDIR,
        "GCBENCH_TRIAL_ID": spec.trial_id,
    }
    kwargs: dict[str, Any] = {
        "image": program["image"],
        "command": command or None,
        "detach": True,
        "environment": environment,
        "mounts": [Mount(target=CONTAINER_OUTDIR, source=str(outdir), type="bind", read_only=False)],
        "network_mode": "none",
        "user": f"{os.getuid()}:{os.getgid()}",
        "labels": {"gcbench.plan": spec.plan, "gcbench.trial_id": spec.trial_id, "gcbench.kind": "container"},
        "name": f"gcbench-user-{spec.plan}-{spec.trial_id}",
    }
    if spec.devices and config.engine_has_gpus():
        kwargs["device_requests"] = [DeviceRequest(device_ids=device_ids(spec, measured), capabilities=[["gpu"]])]
    return kwargs


def run(spec: TrialSpec, ctx: TrialContext) -> dict:
    """Run the plan's image as the trial's work; see the module docstring.

    Raises:
        gcbench.errors.TrialError: the image is missing, the engine unreachable, or the
            container exited with a non-zero status.
    """
    import docker
    from docker.errors import DockerException

    from gcbench import config
    from gcbench.errors import TrialError

    outdir = Path(ctx.outdir)
    spec_path = outdir / "spec.json"
    if not spec_path.exists():
        spec_path.write_text(spec.to_json(), encoding="utf-8")
    try:
        client = docker.DockerClient(base_url=config.docker_url())
    except DockerException as exc:
        raise TrialError(spec.trial_id, f"container: no Docker engine at {config.docker_url()}: {exc}") from None
    image = (spec.program or {}).get("image")

    def start(extra_env: dict[str, str]) -> Any:
        from gcbench.workloads.control import ENV_VAR

        measured = getattr(getattr(ctx, "meter", None), "gpus", None)  # the GPUs measured (Meter.gpus)
        kwargs = container_kwargs(spec, outdir, extra_env[ENV_VAR], measured)
        try:
            old = client.containers.get(kwargs["name"])
            old.remove(force=True)  # an earlier attempt's container, left by a killed worker
        except DockerException:
            pass
        ctx.log(f"container {image} command {kwargs['command']!r}")
        try:
            return client.containers.run(**kwargs)
        except DockerException as exc:
            raise TrialError(spec.trial_id, f"container: cannot start image {image!r}: {exc}") from None

    def wait(container: Any) -> int:
        try:
            status = container.wait()
            code = int(status.get("StatusCode", 1))
        finally:
            with open(outdir / "program.log", "ab") as f:
                try:
                    f.write(container.logs(stdout=True, stderr=True))
                except DockerException:
                    pass
            _remove(container)
        return code

    def stop(container: Any) -> None:
        try:
            container.stop(timeout=STOP_TIMEOUT_S)
        except DockerException:
            pass
        _remove(container)

    try:
        return run_program(spec, ctx, start, wait, stop, f"container {image!r}")
    finally:
        client.close()


def _remove(container: Any) -> None:
    from docker.errors import DockerException

    try:
        container.remove(force=True)
    except DockerException:
        pass


KIND = program_kind(
    "container",
    "gcbench.workloads.container:run",
    "a user's own image, nothing of GC-Bench inside, the meter beside it on the worker",
    {"image": True, "command": False, "env": False, "unit": False},
    check_program=check_program,
    runs_beside=True,
    needs_docker=True,
)
"""The kind's registration (entry point ``container`` of group ``gcbench.workloads``)."""
