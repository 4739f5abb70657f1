"""Tests against a real Docker engine (``make test-docker`` starts one, builds the images).

Every test module here is marked ``docker`` (``pytestmark``). Without a reachable engine holding the trial image
they are skipped, unless ``GCBENCH_REQUIRE_DOCKER=1`` (set by scripts/test_docker.sh),
which turns the skip into a failure: CI must not pass by skipping them.
"""

from __future__ import annotations

import os

import pytest

TRIAL_IMAGE = os.environ.get("GCBENCH_TEST_TRIAL_IMAGE", "gcbench/trial:latest")


def _unavailable(why: str):
    if os.environ.get("GCBENCH_REQUIRE_DOCKER") == "1":
        pytest.fail(f"GCBENCH_REQUIRE_DOCKER=1 but {why}")
    pytest.skip(why)


@pytest.fixture(scope="session")
def docker_client():
    """A docker-py client of ``DOCKER_HOST`` (or the local socket) that has the trial image."""
    import docker

    from gcbench.factory.docker import docker_url

    try:
        client = docker.DockerClient(base_url=docker_url(), timeout=30)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means: no engine here
        _unavailable(f"no Docker engine at {docker_url()} ({type(exc).__name__}); run make test-docker")
    try:
        client.images.get(TRIAL_IMAGE)
    except docker.errors.ImageNotFound:
        _unavailable(f"the engine has no {TRIAL_IMAGE}; run make test-docker")
    yield client
    client.close()


@pytest.fixture
def no_gpu_engine(monkeypatch):
    """Trial containers request no GPU (the CI engine has no NVIDIA toolkit)."""
    monkeypatch.setenv("GCBENCH_DOCKER_GPUS", "none")
