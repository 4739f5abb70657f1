"""Sizes of GC-Bench's container images on the Docker engine, when one is reachable.

Lists every image tagged ``gcbench/*`` (the trial image, the tokenizer toolchains, the
Airflow, PostgreSQL and Redis images of the compose deployment, the debootstrap base):
its size, its layer count and its largest layer with the instruction that made it. A
layer as big as the PyTorch wheel made by a COPY/ADD means a wheel is kept in the image
(the trial image is multi-stage so that it is not: issue 15).

The engine is ``DOCKER_HOST``, else the one ``make test-docker`` / ``make test-compose``
leave running with ``GCBENCH_DOCKER_KEEP=1`` (``$GCBENCH_DOCKER_ROOT/docker.sock``), else
the local socket. Without any, it says so and exits 0: sizes are then not measured.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

MB = 1e6


def candidate_urls() -> list[str]:
    """Engine addresses to try, in order."""
    urls = []
    if os.environ.get("DOCKER_HOST"):
        urls.append(os.environ["DOCKER_HOST"])
    sock = Path(os.environ.get("GCBENCH_DOCKER_ROOT", "/var/tmp/gcbench-docker")) / "docker.sock"
    if sock.exists():
        urls.append(f"unix://{sock}")
    urls.append("unix:///var/run/docker.sock")
    return urls


def connect():
    """(client, url) of the first engine that answers, or (None, reasons)."""
    import docker

    reasons = []
    for url in candidate_urls():
        try:
            client = docker.DockerClient(base_url=url, timeout=10)
            client.ping()
            return client, url
        except Exception as exc:  # noqa: BLE001 - any failure: this engine is not reachable
            reasons.append(f"{url}: {type(exc).__name__}")
    return None, "; ".join(reasons)


def describe(client, image) -> dict:
    """Size (bytes), layer count, and the largest layer (bytes, instruction) of an image."""
    history = client.api.history(image.id)
    layers = [h for h in history if h.get("Size", 0) > 0]
    largest = max(layers, key=lambda h: h["Size"], default={"Size": 0, "CreatedBy": ""})
    made_by = " ".join(largest.get("CreatedBy", "").replace("/bin/sh -c #(nop) ", "").split())
    return dict(size=image.attrs.get("Size", 0), layers=len(layers), largest=largest["Size"], largest_by=made_by[:60])


def main() -> int:
    client, where = connect()
    if client is None:
        print(
            f"No Docker engine reachable ({where}): image sizes not measured. Run `make test-docker` "
            "with GCBENCH_DOCKER_KEEP=1, or set DOCKER_HOST."
        )
        return 0
    images = sorted(
        {tag: img for img in client.images.list() for tag in img.tags if tag.startswith("gcbench/")}.items()
    )
    print(f"engine: {where}\n")
    if not images:
        print("No gcbench/* image on this engine (make test-docker and make test-compose build them).")
        return 0
    print("| image | size (MB) | layers | largest layer (MB) | made by |")
    print("|---|---:|---:|---:|---|")
    for tag, img in images:
        d = describe(client, img)
        print(f"| {tag} | {d['size'] / MB:,.0f} | {d['layers']} | {d['largest'] / MB:,.0f} | `{d['largest_by']}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
