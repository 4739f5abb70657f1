"""Building the native tokenizers (``gcbench-tok-go``, ``gcbench-tok-rust``) for a DAG run.

The DAG's ``build_tokenizers`` task calls :func:`gcbench.tokenizer.build.build_local`
with the local runner and :func:`build_in_docker` with the docker runner. Both return
the path of a binary in a cache folder named by the SHA-256 of the sources that make it
(``<cache>/gcbench-tok-go-<hash16>``), so an unchanged source is never rebuilt and a
changed one never runs stale. Next to each binary, ``<binary>.json`` records how it was
built (impl, source hash, toolchain version, builder).

* Local: :mod:`gcbench.tokenizer.build` (the workloads and the tokenizer CLI use it too).
* Docker: a DockerOperator runs the ``toolchain`` stage of images/tokenizer-{go,rust}
  .Dockerfile with the sources mounted read-only at ``/src`` and the cache read-write
  at ``/out``, no network, as the calling user; its log is the compiler's output.
  The toolchain image is made once with :func:`toolchain_image_build_argv`.

A failed build raises :class:`gcbench.tokenizer.errors.TokenizerBuildError` carrying the
compiler's message, so the Airflow task fails with it in its log.

Only the standard library is imported at module level (DAG parsing stays cheap).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from gcbench.tokenizer.build import IMPLS, is_built, tokenizer, write_provenance
from gcbench.tokenizer.errors import TokenizerBuildError

CONTAINER_SRC = "/src"
CONTAINER_OUT = "/out"


def toolchain_image(impl: str) -> str:
    """Tag of the toolchain image the docker build runs (``gcbench/tokenizer-go-toolchain:1``)."""
    if impl not in IMPLS:
        raise ValueError(f"unknown tokenizer implementation {impl!r}")
    return f"gcbench/tokenizer-{impl}-toolchain:1"


def toolchain_image_build_argv(
    impl: str, *, base_image: str | None = None, native_dir: Path | None = None
) -> list[str]:
    """``docker build`` argv that makes :func:`toolchain_image` (run in the checkout).

    The context is ``native/`` (small; native/.dockerignore drops build outputs);
    ``base_image`` overrides the Dockerfile's ``BASE_IMAGE`` (e.g. a local Debian image
    made with debootstrap + ``docker import``, on which the stage apt-installs the
    compiler).
    """
    tok = tokenizer(impl, native_dir)
    argv = [
        "docker",
        "build",
        "--network",
        "host",
        "--target",
        "toolchain",
        "-t",
        toolchain_image(impl),
        "-f",
        str(tok.dockerfile),
    ]
    if base_image:
        argv += ["--build-arg", f"BASE_IMAGE={base_image}"]
    return argv + [str(tok.source_dir.parent)]


def container_build_command(impl: str, source_hash: str) -> list[str]:
    """The command the build container runs (argv; its working directory is /src).

    The result lands in ``/out/.docker-build-<hash16>/``; :func:`build_in_docker` moves
    it into the cache once the container has exited 0.
    """
    stage = f"{CONTAINER_OUT}/.docker-build-{source_hash[:16]}"
    if impl == "go":
        return ["go", "build", "-trimpath", "-o", f"{stage}/gcbench-tok-go", "."]
    if impl == "rust":
        # CARGO_TARGET_DIR (environment) points into the stage folder
        return ["cargo", "build", "--release", "--locked", "--offline"]
    raise ValueError(f"unknown tokenizer implementation {impl!r}")


def docker_build_kwargs(
    impl: str,
    cache_dir: Path,
    *,
    native_dir: Path | None = None,
    image: str | None = None,
    docker_url: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments of the DockerOperator that compiles ``gcbench-tok-<impl>``.

    Args:
        impl: ``go`` or ``rust``.
        cache_dir: the binaries cache on the Docker host (bind-mounted at /out).
        native_dir: the ``native/`` folder on the Docker host; default
            :func:`gcbench.tokenizer.build.native_root`.
        image: the toolchain image; default :func:`toolchain_image`.
        docker_url: engine address; default ``DOCKER_HOST`` or the local socket.

    Returns:
        A dict for ``DockerOperator(task_id=..., **kwargs)``: sources read-only at /src,
        cache read-write at /out, no network, the calling user's uid:gid, container
        removed afterwards, the compiler's output in the task log.
    """
    from docker.types import Mount

    tok = tokenizer(impl, native_dir)
    source_hash = tok.source_hash()
    stage = f"{CONTAINER_OUT}/.docker-build-{source_hash[:16]}"
    env = {
        "HOME": "/tmp",
        "GOCACHE": "/tmp/gocache",
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "0",
        "CARGO_HOME": "/tmp/cargo",
        "CARGO_TARGET_DIR": f"{stage}/cargo-target",
        "CARGO_NET_OFFLINE": "true",
    }
    return {
        "image": image or toolchain_image(impl),
        "command": container_build_command(impl, source_hash),
        "working_dir": CONTAINER_SRC,
        "mounts": [
            Mount(target=CONTAINER_SRC, source=str(tok.source_dir.resolve()), type="bind", read_only=True),
            Mount(target=CONTAINER_OUT, source=str(Path(cache_dir).resolve()), type="bind", read_only=False),
        ],
        "environment": env,
        "user": f"{os.getuid()}:{os.getgid()}",
        "network_mode": "none",
        "auto_remove": "force",
        "mount_tmp_dir": False,
        "retrieve_output": False,
        "tty": False,
        "docker_url": docker_url or os.environ.get("DOCKER_HOST", "unix://var/run/docker.sock"),
        "labels": {"gcbench.tokenizer": impl, "gcbench.source_hash": source_hash[:16]},
    }


def docker_build_output(impl: str, cache_dir: Path, source_hash: str) -> Path:
    """Where the container leaves the binary (host side of /out)."""
    stage = Path(cache_dir) / f".docker-build-{source_hash[:16]}"
    if impl == "go":
        return stage / "gcbench-tok-go"
    return stage / "cargo-target" / "release" / "gcbench-tok-rust"


def build_in_docker(
    impl: str,
    cache_dir: Path,
    context: Any,
    *,
    native_dir: Path | None = None,
    image: str | None = None,
    docker_url: str | None = None,
) -> Path:
    """Build ``gcbench-tok-<impl>`` in a container (inside the current Airflow task),
    or reuse the cached binary.

    Returns:
        The executable in ``cache_dir`` (as :func:`gcbench.tokenizer.build.build_local`).

    Raises:
        TokenizerBuildError: the toolchain image is missing (the message gives the
            ``docker build`` command that makes it) or the compiler failed (its output
            is in the task log, the last lines in the message).
    """
    tok = tokenizer(impl, native_dir)
    source_hash = tok.source_hash()
    target = Path(cache_dir) / f"{tok.binary_name}-{source_hash[:16]}"
    if is_built(target):
        return target
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    kwargs = docker_build_kwargs(impl, cache_dir, native_dir=native_dir, image=image, docker_url=docker_url)

    import docker
    from airflow.exceptions import AirflowException
    from airflow.providers.docker.operators.docker import DockerOperator

    try:
        docker.DockerClient(base_url=kwargs["docker_url"]).images.get(kwargs["image"])
    except docker.errors.ImageNotFound:
        cmd = " ".join(toolchain_image_build_argv(impl, native_dir=native_dir))
        raise TokenizerBuildError(
            impl, tok.dockerfile, f"toolchain image {kwargs['image']} not found; make it with: {cmd}"
        ) from None
    op = DockerOperator(task_id=f"build_tokenizer_{impl}", **kwargs)
    try:
        op.execute(context)
    except AirflowException as exc:
        raise TokenizerBuildError(
            impl, tok.source_dir, f"container build failed (compiler output above in the log): {exc}"
        ) from None
    produced = docker_build_output(impl, cache_dir, source_hash)
    if not produced.is_file():
        raise TokenizerBuildError(impl, tok.source_dir, f"container exited 0 but {produced} does not exist")
    staging = target.with_name(f".{target.name}.build{os.getpid()}")
    shutil.copy2(produced, staging)
    os.chmod(staging, 0o755)
    os.replace(staging, target)
    shutil.rmtree(produced.parents[0] if impl == "go" else produced.parents[2], ignore_errors=True)
    write_provenance(target, tok, source_hash, f"docker:{kwargs['image']}", "see image")
    return target
