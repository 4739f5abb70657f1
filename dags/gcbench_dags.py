"""One Airflow DAG per plans/*.yaml, built by GC-Bench's DAG factory."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("GCBENCH_PROJECT_ROOT", str(ROOT))

from gcbench.config import plans_dir  # noqa: E402
from gcbench.factory.plans import build_all  # noqa: E402

globals().update(build_all(plans_dir()))
