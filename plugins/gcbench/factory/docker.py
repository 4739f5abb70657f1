"""The docker runner: one trial as a container through Airflow's DockerOperator.

The container runs the same entry point as the local runner,
``python -m gcbench.trial /gcbench/out/spec.json /gcbench/out``, with the trial's
folder bind-mounted at ``/gcbench/out``, its GPUs passed as ``device_requests`` (the
NVIDIA container toolkit maps them), no network, and the container removed whatever
happens (``auto_remove="force"``). Airflow's own temporary-folder mount is off
(``mount_tmp_dir=False``): it needs a host path the engine can see, which the trial
folder already is.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gcbench.spec import TrialSpec

CONTAINER_OUTDIR = "/gcbench/out"


def needs_power_cap(spec: TrialSpec) -> bool:
    """Whether the trial sets a GPU power cap (the container then needs CAP_SYS_ADMIN)."""
    return spec.settings.get("power_cap_w") is not None


def trial_operator_kwargs(spec: TrialSpec, image: str, host_outdir: Path, *, docker_url: str | None = None,
                          timeout_s: float = 3600) -> dict[str, Any]:
    """Keyword arguments of the DockerOperator that runs one trial.

    Args:
        spec: the trial (its devices become ``device_requests``).
        image: the trial image (from the plan).
        host_outdir: the trial folder on the Docker host (bind-mounted read-write).
        docker_url: engine address; default ``DOCKER_HOST`` or the local socket.
        timeout_s: the trial's time limit (the operator's ``execution_timeout``
            is set by the DAG; here it bounds the container's stop timeout).

    Returns:
        A dict for ``DockerOperator(task_id=..., **kwargs)``.
    """
    from docker.types import DeviceRequest, Mount

    kwargs: dict[str, Any] = {
        "image": image,
        "command": ["python", "-m", "gcbench.trial", f"{CONTAINER_OUTDIR}/spec.json", CONTAINER_OUTDIR],
        "mounts": [Mount(target=CONTAINER_OUTDIR, source=str(host_outdir), type="bind", read_only=False)],
        "mount_tmp_dir": False,
        "auto_remove": "force",
        "network_mode": "none",
        "docker_url": docker_url or os.environ.get("DOCKER_HOST", "unix://var/run/docker.sock"),
        "environment": {"PYTHONUNBUFFERED": "1", "GCBENCH_TRIAL_ID": spec.trial_id},
        "retrieve_output": False,
        "tty": False,
        "shm_size": 2 * 1024**3,  # PyTorch data loaders and NCCL use /dev/shm; Docker's default is 64 MB
        "labels": {"gcbench.plan": spec.plan, "gcbench.trial_id": spec.trial_id},
        "container_name": f"gcbench-{spec.plan}-{spec.trial_id}",
    }
    if spec.devices:
        kwargs["device_requests"] = [DeviceRequest(device_ids=[str(d) for d in spec.devices], capabilities=[["gpu"]])]
    if needs_power_cap(spec):
        kwargs["cap_add"] = ["SYS_ADMIN"]
    return kwargs


def run_docker(spec: TrialSpec, image: str, host_outdir: Path, context: dict, *, timeout_s: float) -> int:
    """Run a trial container through a DockerOperator inside the current task.

    Returns the container's exit status (0 ok, 1 failed trial, 3 skipped); a failed
    trial is not an error of the runner. Raises what the operator raises when the
    engine is unreachable or the container cannot start (retried by Airflow).
    """
    from airflow.providers.docker.operators.docker import DockerOperator
    from docker.errors import APIError

    from airflow.exceptions import AirflowException

    op = DockerOperator(task_id=f"trial_{spec.trial_id}", **trial_operator_kwargs(spec, image, host_outdir, timeout_s=timeout_s))
    try:
        op.execute(context)
    except AirflowException as exc:
        # DockerOperator raises on a non-zero exit; the trial's own status is in result.json.
        code = getattr(getattr(exc, "__cause__", None), "exit_status", None)
        text = str(exc)
        if "Docker container failed" in text or code is not None:
            import re

            m = re.search(r"'StatusCode': (\d+)", text)
            return int(m.group(1)) if m else 1
        raise
    except APIError:
        raise
    return 0
