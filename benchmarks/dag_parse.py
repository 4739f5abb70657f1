"""DAG parse time of all plans: what Airflow's DAG processor pays per parse of dags/.

    python benchmarks/dag_parse.py [--rounds 5]

Prints the first parse (imports included) and the median re-parse of
dags/gcbench_dags.py through Airflow's DagBag, in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CODE = """
import json, statistics, sys, time
t0 = time.perf_counter()
from airflow.dag_processing.dagbag import DagBag
t1 = time.perf_counter()
bag = DagBag(sys.argv[1])
first = time.perf_counter() - t1
times = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter(); DagBag(sys.argv[1]); times.append(time.perf_counter() - t)
print(json.dumps({"import_airflow_s": t1 - t0, "first_parse_s": first, "reparse_median_s": statistics.median(times),
                  "dags": len(bag.dags), "errors": len(bag.import_errors)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "AIRFLOW_HOME": tmp, "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "GCBENCH_HOME": tmp}
        out = subprocess.run(
            [sys.executable, "-c", CODE, str(REPO / "dags"), str(args.rounds)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    n_plans = len(list((REPO / "plans").glob("*.yaml")))
    print(f"| DAG parse of {n_plans} plans | seconds |")
    print("|---|---:|")
    print(f"| import Airflow (once per process) | {r['import_airflow_s']:.2f} |")
    print(f"| first parse (gcbench imports included) | {r['first_parse_s']:.3f} |")
    print(f"| re-parse, median of {args.rounds} | {r['reparse_median_s']:.3f} |")
    print(
        f"DAGs: {r['dags']}, import errors: {r['errors']}; per plan: {r['reparse_median_s'] / max(1, r['dags']) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
