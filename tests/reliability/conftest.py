"""Fixtures of the reliability tests (helpers in reliability_support.py)."""

from __future__ import annotations

import pytest

from reliability_support import StoppablePostgres


@pytest.fixture
def stoppable_pg(tmp_path_factory, monkeypatch, tmp_path):
    """A private PostgreSQL server for one test, as GCBENCH_DATABASE_URL."""
    pg = StoppablePostgres(tmp_path_factory.mktemp("stoppable-pg"))
    monkeypatch.setenv("GCBENCH_DATABASE_URL", pg.url)
    monkeypatch.setenv("GCBENCH_HOME", str(tmp_path / "home"))
    yield pg
    pg.close()
