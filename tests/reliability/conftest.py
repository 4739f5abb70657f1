"""Fixtures of the reliability tests (helpers in reliability_support.py)."""

from __future__ import annotations

import pytest
from reliability_support import StoppablePostgres


@pytest.fixture
def stoppable_pg(tmp_path_factory, monkeypatch, tmp_path):
    """A private PostgreSQL server for one test, as GCBENCH_DATABASE_URL."""
    import shutil
    import tempfile
    from pathlib import Path

    # outside pytest's basetemp, which a starting pytest session makes mode 0700 (see tests/conftest.py)
    root = Path(tempfile.mkdtemp(prefix="gcbench-stoppable-pg-"))
    pg = StoppablePostgres(root)
    monkeypatch.setenv("GCBENCH_DATABASE_URL", pg.url)
    monkeypatch.setenv("GCBENCH_HOME", str(tmp_path / "home"))
    yield pg
    pg.close()
    shutil.rmtree(root, ignore_errors=True)
