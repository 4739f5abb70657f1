"""The docker runner: one trial as a container through Airflow's DockerOperator.

The container runs the same entry point as the local runner,
``python -m gcbench.trial /gcbench/out/spec.json /gcbench/out``, with

* the trial's folder bind-mounted read-write at ``/gcbench/out``; the container runs as
  the calling user (``uid:gid`` of the Airflow worker) so every file it writes there
  belongs to the worker, which ``collect`` then reads. A power-capped trial runs as
  root instead (setting a GPU power limit needs root or CAP_SYS_ADMIN, and a non-root
  process keeps no capability); its files are root's but readable (umask 022);
* ``$GCBENCH_HOME/cache`` read-write at ``/gcbench/home/cache`` (TinyLM's trained
  merges and corpus file, shared by the trials) and, for the external-tokenizer paths,
  ``$GCBENCH_HOME/tools`` (the binaries built by the ``build_tokenizers`` task) and the
  ``native/`` sources (their hash names the binary) read-only;
* every GPU of the host (``device_requests`` with ``count=-1``) and
  ``CUDA_VISIBLE_DEVICES`` set to the trial's GPUs in PCI bus order, exactly as the local
  runner does: NVML inside the container then numbers the GPUs as the host does, so the
  meter measures the trial's own GPUs by their host index (a container given only its
  GPUs would renumber them from 0). Two trials never share a GPU because of the
  per-GPU Airflow pools, as with the local runner. On an engine without GPUs (no
  NVIDIA container toolkit, e.g. CI) ``GCBENCH_DOCKER_GPUS=none`` requests none: the
  trial then finds no GPU and measures the simulated device, as the local runner does
  on such a machine;
* the host's register of running trials (:func:`gcbench.energy.hostshare.share_dir`) at
  ``/gcbench/host-share``, so a trial in a container sees the trials beside it on the
  host and they see it (a shared RAPL or node-meter window is apportioned and flagged);
* no network (``network_mode="none"``), and the container removed whatever happens
  (``auto_remove="force"``; on SIGTERM of the task and at ``execution_timeout`` the
  container is stopped and removed, see :func:`run_docker`).

Airflow's own temporary-folder mount is off (``mount_tmp_dir=False``): it needs a host
path the engine can see, which the trial folder already is. All host paths here are
the worker's paths, so a worker that itself runs in a container (docker-compose.yml)
mounts ``GCBENCH_HOME`` and the checkout at the same paths as on the host.

The engine is ``DOCKER_HOST`` (e.g. ``unix:///run/gcbench/docker.sock``), else the
local socket.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gcbench import config
from gcbench.config import engine_has_gpus
from gcbench.errors import TrialError
from gcbench.spec import TrialSpec

if TYPE_CHECKING:
    from airflow.sdk import Context

CONTAINER_OUTDIR = "/gcbench/out"
CONTAINER_DATA_DIR = "/data"
CONTAINER_HOME = "/gcbench/home"
CONTAINER_PROJECT = "/gcbench/project"
CONTAINER_HOST_SHARE = "/gcbench/host-share"
"""Where the host's register of running trials (:mod:`gcbench.energy.hostshare`) is mounted."""
STOP_TIMEOUT_S = 10
"""Seconds between SIGTERM and SIGKILL when a trial container is stopped."""

docker_url = config.docker_url
"""The engine address (:func:`gcbench.config.docker_url`), as the runner's callers name it."""


def needs_power_cap(spec: TrialSpec) -> bool:
    """Whether the trial sets a GPU power cap (the container then needs CAP_SYS_ADMIN)."""
    return spec.settings.get("power_cap_w") is not None


def needs_native_tokenizer(spec: TrialSpec) -> bool:
    """Whether the trial runs a declared preprocessor (its spec carries one)."""
    return spec.preprocessor is not None


def host_share_source(home: str | Path) -> Path:
    """The folder on the Docker host bind-mounted as the trial containers' register of
    running trials (:mod:`gcbench.energy.hostshare`): ``GCBENCH_HOST_SHARE_DIR`` when
    set, else ``<home>/host-share``. Under ``GCBENCH_HOME`` because that path is the same
    on the host and in an Airflow worker container (docker-compose.yml mounts the storage
    folder at its own path); the worker's ``/tmp`` is not a folder of the host."""
    env = os.environ.get("GCBENCH_HOST_SHARE_DIR")
    return Path(env) if env else Path(home) / "host-share"


def trial_operator_kwargs(
    spec: TrialSpec,
    image: str,
    host_outdir: Path,
    *,
    docker_url: str | None = None,
    timeout_s: float = 3600,
    home: Path | None = None,
    native_dir: Path | None = None,
    attempt_id: str | None = None,
    host_devices: list[int] | None = None,
) -> dict[str, Any]:
    """Keyword arguments of the DockerOperator that runs one trial.

    Args:
        spec: the trial (its devices become ``CUDA_VISIBLE_DEVICES``).
        image: the trial image (from the plan).
        host_outdir: the trial folder on the Docker host (bind-mounted read-write).
        docker_url: engine address; default ``DOCKER_HOST`` or the local socket.
        timeout_s: the trial's time limit (the operator's ``execution_timeout`` is set
            by the DAG; it is recorded on the container as a label).
        home: GCBENCH_HOME on the Docker host; default ``config.home()``.
        native_dir: the ``native/`` sources on the Docker host; default
            :func:`gcbench.tokenizer.preprocessors.native_root`.
        attempt_id: the attempt (:func:`gcbench.factory.local.begin_attempt`), given to
            the trial as ``GCBENCH_ATTEMPT_ID``.
        host_devices: the GPUs the plan may use on this host, given to the trial as
            ``GCBENCH_HOST_DEVICES`` (:func:`gcbench.factory.local.trial_env`). The trial
            pins itself to its CPU set inside the container (``sched_setaffinity``;
            Airflow's DockerOperator has no ``cpuset_cpus``), as under the local runner.

    Returns:
        A dict for ``DockerOperator(task_id=..., **kwargs)``.
    """
    from docker.types import DeviceRequest, Mount

    if home is None:
        home = config.home()
    cache = Path(home) / "cache"
    mounts = [
        Mount(target=CONTAINER_OUTDIR, source=str(host_outdir), type="bind", read_only=False),
        Mount(target=f"{CONTAINER_HOME}/cache", source=str(cache), type="bind", read_only=False),
    ]
    if needs_native_tokenizer(spec):
        if native_dir is None:
            from gcbench.tokenizer.preprocessors import native_root

            native_dir = native_root()
        mounts += [
            Mount(target=f"{CONTAINER_HOME}/tools", source=str(Path(home) / "tools"), type="bind", read_only=True),
            Mount(
                target=f"{CONTAINER_PROJECT}/native",
                source=str(Path(native_dir).resolve()),
                type="bind",
                read_only=True,
            ),
        ]
    # the host's register of running trials: a container's own /tmp would hide the trials
    # beside it, and its RAPL (or node meter) reading would be booked whole (C13)
    mounts.append(Mount(target=CONTAINER_HOST_SHARE, source=str(host_share_source(home)), type="bind", read_only=False))
    environment = {
        "GCBENCH_HOST_SHARE_DIR": CONTAINER_HOST_SHARE,
        "PYTHONUNBUFFERED": "1",
        "GCBENCH_TRIAL_ID": spec.trial_id,
        "GCBENCH_HOME": CONTAINER_HOME,
        "GCBENCH_PROJECT_ROOT": CONTAINER_PROJECT,
        "HOME": "/tmp",
        "USER": "gcbench",  # getpass.getuser() works for a uid without a passwd entry
        "CUDA_VISIBLE_DEVICES": ",".join(str(d) for d in spec.devices),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    if attempt_id:
        environment["GCBENCH_ATTEMPT_ID"] = attempt_id
    if host_devices:
        from gcbench.energy.cpuset import HOST_DEVICES_ENV

        environment[HOST_DEVICES_ENV] = ",".join(str(d) for d in sorted(set(host_devices)))
    kwargs: dict[str, Any] = {
        "image": image,
        "command": ["python", "-m", "gcbench.trial", f"{CONTAINER_OUTDIR}/spec.json", CONTAINER_OUTDIR],
        "mounts": mounts,
        "mount_tmp_dir": False,
        "auto_remove": "force",
        "network_mode": "none",
        "docker_url": docker_url or config.docker_url(),
        "environment": environment,
        "user": "0:0" if needs_power_cap(spec) else f"{os.getuid()}:{os.getgid()}",
        "retrieve_output": False,
        "do_xcom_push": True,
        "xcom_all": True,  # execute() returns every log line: kept as runner.log
        "tty": False,
        "shm_size": 2 * 1024**3,  # PyTorch data loaders and NCCL use /dev/shm; Docker's default is 64 MB
        "labels": {
            "gcbench.plan": spec.plan,
            "gcbench.trial_id": spec.trial_id,
            "gcbench.timeout_s": str(int(timeout_s)),
        },
        "container_name": f"gcbench-{spec.plan}-{spec.trial_id}",
    }
    data_dir = os.environ.get("GCBENCH_DATA_DIR")
    if data_dir:
        # data sets (CIFAR-10) from the host, read-only: trial containers have no network
        kwargs["mounts"].append(
            Mount(target=CONTAINER_DATA_DIR, source=str(Path(data_dir).resolve()), type="bind", read_only=True)
        )
        kwargs["environment"]["GCBENCH_DATA_DIR"] = CONTAINER_DATA_DIR
    if spec.devices and engine_has_gpus():
        kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if needs_power_cap(spec):
        kwargs["cap_add"] = ["SYS_ADMIN"]
    return kwargs


class TrialContainerKilled(TrialError):
    """The task running the trial was told to stop (SIGTERM); its container was removed."""


def _write_log(outdir: Path, lines: Any) -> None:
    if not lines:
        return
    if isinstance(lines, (str, bytes)):
        lines = [lines]
    text = "".join(
        (line.decode(errors="replace") if isinstance(line, bytes) else str(line)).rstrip("\n") + "\n" for line in lines
    )
    with open(outdir / "runner.log", "a", encoding="utf-8") as f:
        f.write(text)


def _remove(op: Any) -> None:
    """Stop and remove the operator's container, whatever state it is in."""
    from docker.errors import APIError, NotFound

    container = getattr(op, "container", None)
    if not container:
        return
    try:
        op.cli.remove_container(container["Id"], force=True)
    except NotFound:
        pass
    except APIError as exc:
        op.log.warning("could not remove trial container %s: %s", container["Id"][:12], exc)


def run_docker(
    spec: TrialSpec,
    image: str,
    host_outdir: Path,
    context: Context,
    *,
    timeout_s: float,
    docker_url: str | None = None,
    attempt_id: str | None = None,
    host_devices: list[int] | None = None,
) -> int:
    """Run a trial container through a DockerOperator inside the current task.

    The container's output goes to the task log and to ``OUTDIR/runner.log`` (read by
    ``collect`` for a failed trial's log tail).

    Returns:
        The container's exit status (0 ok, 1 failed trial, 3 skipped, 137 killed by the
        engine, e.g. out of memory). A trial that ran and failed is not an error of the
        runner, so Airflow does not retry it.

    Raises:
        docker.errors.DockerException, requests exceptions, AirflowException: the engine
            is unreachable, the image is missing or the container cannot be created or
            started: an infrastructure failure, retried by Airflow with backoff.
        TrialContainerKilled: the task got SIGTERM (marked failed, cleared, or the
            scheduler shut down); the container was stopped and removed first.
        AirflowTaskTimeout: the task's ``execution_timeout``; the container was removed.
    """
    from airflow.providers.docker.exceptions import DockerContainerFailedException
    from airflow.providers.docker.operators.docker import DockerOperator

    op = DockerOperator(
        task_id=f"trial_{spec.trial_id}",
        **trial_operator_kwargs(
            spec,
            image,
            host_outdir,
            timeout_s=timeout_s,
            docker_url=docker_url,
            attempt_id=attempt_id,
            host_devices=host_devices,
        ),
    )
    Path(host_outdir).mkdir(parents=True, exist_ok=True)
    (Path(op.mounts[1]["Source"])).mkdir(parents=True, exist_ok=True)  # the shared cache
    from gcbench.energy.hostshare import prepare_share_dir

    # bind-mounted: it must exist, writable by root's and the worker's trials
    prepare_share_dir(next(Path(m["Source"]) for m in op.mounts if m["Target"] == CONTAINER_HOST_SHARE))
    killed = threading.Event()
    previous = None
    in_main_thread = threading.current_thread() is threading.main_thread()
    if in_main_thread:
        # Airflow's SIGTERM handler calls on_kill() of the *task*, which knows nothing of
        # this inner operator: stop the container here, then let Airflow's handler run.
        previous = signal.getsignal(signal.SIGTERM)

        def _on_term(signum, frame):
            killed.set()
            _remove(op)
            if callable(previous):
                previous(signum, frame)

        signal.signal(signal.SIGTERM, _on_term)
    try:
        lines = op.execute(context)
        _write_log(Path(host_outdir), lines)
        code = 0
    except DockerContainerFailedException as exc:
        _write_log(Path(host_outdir), getattr(exc, "logs", None))
        m = re.search(r"'StatusCode': (-?\d+)", str(exc))
        code = int(m.group(1)) if m else 1
    except BaseException as exc:
        _remove(op)  # timeout, interrupt, or the engine failing mid-run: leave no container behind
        if killed.is_set():
            raise TrialContainerKilled(
                spec.trial_id, "the task was told to stop; the trial container was removed"
            ) from exc
        raise
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    if killed.is_set():
        raise TrialContainerKilled(spec.trial_id, "the task was told to stop; the trial container was removed")
    return code
