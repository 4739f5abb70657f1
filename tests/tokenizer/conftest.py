"""Fixtures of the tokenizer tests: the shared vectors and the built native binaries."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from tok_vectors import REPO, load_vectors


@pytest.fixture(scope="session")
def vectors():
    return load_vectors()


@pytest.fixture(scope="session")
def vector_merges(vectors):
    from gcbench.tokenizer import Merges

    return Merges.load(vectors.merges_path)


@pytest.fixture(scope="session")
def tools_cache() -> Path:
    """Native binaries cache kept between sessions (binaries are keyed by source hash,
    so a kept one is never stale): $GCBENCH_TEST_TOOLS or <repo>/.gcbench/test-tools."""
    path = Path(os.environ.get("GCBENCH_TEST_TOOLS") or REPO / ".gcbench" / "test-tools")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _native(impl: str, cache: Path) -> Path:
    from gcbench.tokenizer.preprocessors import build_local, builtin

    pre = builtin()[impl]
    tool = pre.decl.build.command[0]
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not installed (make system-deps)")
    return build_local(pre, cache)


@pytest.fixture(scope="session")
def go_binary(tools_cache) -> Path:
    return _native("go", tools_cache)


@pytest.fixture(scope="session")
def rust_binary(tools_cache) -> Path:
    return _native("rust", tools_cache)
