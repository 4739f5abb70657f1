"""Building the declared preprocessors for a DAG run (the ``build_tokenizers`` task).

Every preprocessor is a declaration (:mod:`gcbench.tokenizer.preprocessors`: the
built-in ``go`` and ``rust`` and a plan's own). The task builds each one the plan's
trials use, then checks it against the Python reference before any trial runs:

* Local runner: :func:`gcbench.tokenizer.preprocessors.build_local`.
* Docker runner: :func:`build_in_docker`, a DockerOperator running the declared
  ``build.command`` in its toolchain image (``build.image``; made from the declared
  ``build.dockerfile`` when it is missing, through the engine's API,
  :func:`toolchain_image_build_kwargs`: the Airflow images have no ``docker`` command;
  ``GCBENCH_BASE_IMAGE`` sets its ``BASE_IMAGE``) with the sources mounted read-only at ``/src`` and the binaries cache read-write at ``/out``,
  no network, as the calling user; its log is the compiler's output.

Both leave the binary in a cache folder named by the SHA-256 of its sources
(``<cache>/gcbench-tok-<name>-<hash16>``) with ``<binary>.json`` beside it (the build's
identity and its conformance result). A failed build or conformance check raises
:class:`gcbench.tokenizer.errors.TokenizerBuildError` (:class:`ConformanceError` with
the first differing offset and both ids), so the Airflow task fails with it in its log.

Only the standard library is imported at module level (DAG parsing stays cheap).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from gcbench.tokenizer.errors import TokenizerBuildError
from gcbench.tokenizer.preprocessors import (
    Preprocessor,
    ensure_conformant,
    fill_placeholders,
    is_built,
    write_provenance,
)

CONTAINER_SRC = "/src"
CONTAINER_OUT = "/out"


def toolchain_image_build_argv(pre: Preprocessor, *, base_image: str | None = None) -> list[str]:
    """``docker build`` argv that makes ``pre``'s toolchain image from its declared Dockerfile.

    The context is the declared ``build.context`` (default: the source folder),
    ``--target`` the declared stage; ``base_image`` sets the ``BASE_IMAGE`` build
    argument (e.g. a local Debian image made with debootstrap + ``docker import``).

    Raises:
        TokenizerBuildError: the declaration names no Dockerfile.
    """
    dockerfile = pre.dockerfile()
    if dockerfile is None:
        raise TokenizerBuildError(
            pre.name, pre.source_dir, f"no build.dockerfile declared to make {pre.toolchain_image()}"
        )
    context = (pre.source_dir / pre.decl.build.context).resolve() if pre.decl.build.context else pre.source_dir
    argv = ["docker", "build", "--network", "host"]
    if pre.decl.build.target:
        argv += ["--target", pre.decl.build.target]
    argv += ["-t", pre.toolchain_image(), "-f", str(dockerfile)]
    if base_image:
        argv += ["--build-arg", f"BASE_IMAGE={base_image}"]
    return argv + [str(context)]


def stage_name(source_hash: str, build_id: str | None = None) -> str:
    """The folder of the cache a container build writes ``{out}`` into:
    ``.docker-build-<hash16>``, with ``-<build_id>`` for one build of several at once."""
    return f".docker-build-{source_hash[:16]}" + (f"-{build_id}" if build_id else "")


def _container_values(pre: Preprocessor, source_hash: str, stage: str | None = None) -> dict[str, str]:
    folder = f"{CONTAINER_OUT}/{stage or stage_name(source_hash)}"
    return {"out": f"{folder}/{pre.binary_name}", "work": f"{CONTAINER_OUT}/work-{pre.name}"}


def prepare_docker_build(pre: Preprocessor, cache_dir: Path, source_hash: str) -> str:
    """Make the folders a container build writes into, before it starts; returns the
    stage's name (:func:`stage_name`, unique to this build).

    The container's compiler is not asked to create folders (``cc -o`` does not): the
    cache, ``<cache>/work-<name>`` (``{work}``) and ``<cache>/<stage>`` (the folder of
    ``{out}``) exist, owned by the task's user, which the container runs as. The stage
    is this build's own, so that two runs building the same version at once (two
    backfilled nights) never remove or overwrite each other's output.
    """
    import secrets

    stage = stage_name(source_hash, f"{os.getpid()}-{secrets.token_hex(4)}")
    for folder in (Path(cache_dir), Path(cache_dir) / f"work-{pre.name}", Path(cache_dir) / stage):
        folder.mkdir(parents=True, exist_ok=True)
    return stage


def docker_build_kwargs(
    pre: Preprocessor,
    cache_dir: Path,
    *,
    image: str | None = None,
    docker_url: str | None = None,
    stage: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments of the DockerOperator that builds ``pre``.

    Args:
        pre: the declared preprocessor.
        cache_dir: the binaries cache on the Docker host (bind-mounted at /out).
        image: the toolchain image; default :meth:`Preprocessor.toolchain_image`.
        docker_url: engine address; default ``DOCKER_HOST`` or the local socket.
        stage: the folder of ``{out}`` in the cache (:func:`prepare_docker_build`);
            default ``.docker-build-<hash16>``.

    Returns:
        A dict for ``DockerOperator(task_id=..., **kwargs)``: the declared command with
        ``{out}`` = ``/out/<stage>/gcbench-tok-<name>`` and ``{work}`` =
        ``/out/work-<name>``, sources read-only at /src, no network, the calling user's
        uid:gid, container removed afterwards, the compiler's output in the task log.
    """
    from docker.types import Mount

    source_hash = pre.source_hash()
    values = _container_values(pre, source_hash, stage)
    env = {"HOME": "/tmp", **{k: fill_placeholders(v, values) for k, v in pre.decl.build.env.items()}}
    return {
        "image": image or pre.toolchain_image(),
        "command": [fill_placeholders(a, values) for a in pre.decl.build.command],
        "working_dir": CONTAINER_SRC,
        "mounts": [
            Mount(target=CONTAINER_SRC, source=str(pre.source_dir.resolve()), type="bind", read_only=True),
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
        "labels": {"gcbench.tokenizer": pre.name, "gcbench.source_hash": source_hash[:16]},
    }


def docker_build_output(pre: Preprocessor, cache_dir: Path, source_hash: str, stage: str | None = None) -> Path:
    """Where the container leaves the binary (host side of the declared ``artifact``)."""
    in_container = fill_placeholders(pre.decl.build.artifact, _container_values(pre, source_hash, stage))
    return Path(cache_dir) / Path(in_container).relative_to(CONTAINER_OUT)


def toolchain_image_build_kwargs(pre: Preprocessor, *, base_image: str | None = None) -> dict[str, Any]:
    """Keyword arguments of ``docker.APIClient.build`` that make ``pre``'s toolchain image:
    the same build as :func:`toolchain_image_build_argv`, through the engine's API.

    The Airflow images have the Docker SDK but no ``docker`` command, so the build task
    makes a missing toolchain image this way (the context is read and sent by the SDK;
    a Dockerfile outside the context is sent with it).

    Raises:
        TokenizerBuildError: the declaration names no Dockerfile.
    """
    argv = toolchain_image_build_argv(pre, base_image=base_image)
    dockerfile = pre.dockerfile()
    assert dockerfile is not None  # toolchain_image_build_argv raised otherwise
    kwargs: dict[str, Any] = {
        "path": argv[-1],
        "dockerfile": str(dockerfile),
        "tag": pre.toolchain_image(),
        "network_mode": "host",  # apt/pip in the Dockerfile; an engine may have no default bridge
        "rm": True,
        "decode": True,
    }
    if pre.decl.build.target:
        kwargs["target"] = pre.decl.build.target
    if base_image:
        kwargs["buildargs"] = {"BASE_IMAGE": base_image}
    return kwargs


def _ensure_image(pre: Preprocessor, client: Any, image: str) -> None:
    """Make ``image`` from the declared Dockerfile when the engine lacks it (its build log
    goes to the task log).

    Raises:
        TokenizerBuildError: no Dockerfile is declared, or the image build failed (the
            last lines of its log in the message).
    """
    import docker

    try:
        client.images.get(image)
        return
    except docker.errors.ImageNotFound:
        pass
    if pre.dockerfile() is None:
        raise TokenizerBuildError(
            pre.name, pre.source_dir, f"toolchain image {image} not found and no build.dockerfile is declared"
        )
    base_image = os.environ.get("GCBENCH_BASE_IMAGE") or None
    kwargs = toolchain_image_build_kwargs(pre, base_image=base_image)
    kwargs["tag"] = image
    print("making the toolchain image:", " ".join(toolchain_image_build_argv(pre, base_image=base_image)))
    lines: list[str] = []
    error = None
    try:
        for chunk in client.api.build(**kwargs):
            text = chunk.get("stream") or chunk.get("status") or ""
            if text:
                print(text, end="" if text.endswith("\n") else "\n")
                lines.extend(text.rstrip("\n").splitlines())
            if chunk.get("error"):
                error = str(chunk["error"]).strip()
    except docker.errors.APIError as exc:
        error = str(exc)
    if error is None:
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            error = "the engine reported no error but has no such image"
    if error is not None:
        tail = "\n".join(lines[-30:])
        raise TokenizerBuildError(pre.name, pre.dockerfile(), f"docker build of {image} failed: {error}\n{tail}")


def build_in_docker(
    pre: Preprocessor, cache_dir: Path, context: Any, *, image: str | None = None, docker_url: str | None = None
) -> Path:
    """Build ``pre`` in a container (inside the current Airflow task), or reuse the
    cached binary; then check it against the reference (:func:`ensure_conformant`).

    Returns:
        The conformant executable in ``cache_dir``.

    Raises:
        TokenizerBuildError: the toolchain image is missing and cannot be made, the
            compiler failed (its output is in the task log, the last lines in the
            message); ConformanceError: ids differ from the reference.
    """
    source_hash = pre.source_hash()
    target = pre.cached_binary(cache_dir, source_hash)
    if not is_built(target):
        stage = prepare_docker_build(pre, cache_dir, source_hash)
        kwargs = docker_build_kwargs(pre, cache_dir, image=image, docker_url=docker_url, stage=stage)

        import docker
        from airflow.exceptions import AirflowException
        from airflow.providers.docker.operators.docker import DockerOperator

        client = docker.DockerClient(base_url=kwargs["docker_url"])
        _ensure_image(pre, client, kwargs["image"])
        image_id = client.images.get(kwargs["image"]).id
        op = DockerOperator(task_id=f"build_tokenizer_{pre.name}", **kwargs)
        try:
            try:
                op.execute(context)
            except AirflowException as exc:
                raise TokenizerBuildError(
                    pre.name, pre.source_dir, f"container build failed (compiler output above in the log): {exc}"
                ) from None
            produced = docker_build_output(pre, cache_dir, source_hash, stage)
            if not produced.is_file():
                raise TokenizerBuildError(pre.name, pre.source_dir, f"container exited 0 but {produced} does not exist")
            staging = target.with_name(f".{target.name}.build{os.getpid()}")
            shutil.copy2(produced, staging)
            os.chmod(staging, 0o755)
            os.replace(staging, target)  # atomic: a concurrent build of the same version is harmless
        finally:
            shutil.rmtree(Path(cache_dir) / stage, ignore_errors=True)
        write_provenance(target, pre, source_hash, f"docker:{kwargs['image']}", f"image {image_id}", image_id=image_id)
    ensure_conformant(pre, target, cache_dir)
    return target
