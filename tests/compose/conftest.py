"""The compose deployment started for real (``make test-compose``, scripts/test_compose.sh).

The script builds the images and writes the deployment's env file; the tests start the
stack with ``docker compose up -d --wait`` and drive it (compose_stack.Stack).

Without ``GCBENCH_COMPOSE_ENV_FILE`` the tests are skipped (``make test-python``), unless
``GCBENCH_REQUIRE_DOCKER=1``: then that is a failure.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def stack_env() -> tuple[Path, str]:
    """(env file, project name) written by scripts/test_compose.sh."""
    env_file = os.environ.get("GCBENCH_COMPOSE_ENV_FILE")
    if not env_file or not Path(env_file).is_file():
        why = "no GCBENCH_COMPOSE_ENV_FILE: run make test-compose"
        if os.environ.get("GCBENCH_REQUIRE_DOCKER") == "1":
            pytest.fail(f"GCBENCH_REQUIRE_DOCKER=1 but {why}")
        pytest.skip(why)
    return Path(env_file), os.environ.get("GCBENCH_COMPOSE_PROJECT", "gcbench-ci")
