"""A throw-away PostgreSQL server for benchmarks: GCBENCH_DATABASE_URL, or an embedded one."""

from __future__ import annotations

import os
from contextlib import contextmanager

from gcbench.store.db import temporary_server


@contextmanager
def database():
    """Yields a libpq URL of an empty database; the embedded server is deleted afterwards."""
    url = os.environ.get("GCBENCH_DATABASE_URL")
    if url:
        yield url
        return
    with temporary_server("gcbench-bench-") as server_url:
        yield server_url
