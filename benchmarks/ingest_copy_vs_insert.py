"""COPY ingestion of samples against row-by-row INSERT.

Prints samples/s of both and their ratio. COPY loads the full sample count
(default 1,000,000); row-by-row INSERT (one statement per sample, one transaction)
is timed on a slice (default 50,000) and its rate extrapolated, which is fair: its
cost is linear in rows.

    python benchmarks/ingest_copy_vs_insert.py [--samples 1000000] [--insert-samples 50000]
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pg import database  # noqa: E402

from gcbench.energy.base import SAMPLE_COLUMNS  # noqa: E402
from gcbench.plan import plan_from_text  # noqa: E402
from gcbench.store import db, runs, samples  # noqa: E402

PLAN = plan_from_text("name: bench\nworkloads: [{name: n, kind: noop}]\n")


def write_samples(path: Path, n: int) -> None:
    """n rows of plausible GPU samples (300 W, counter rising), written with numpy."""
    import numpy as np

    t = np.arange(n) * 0.05
    with open(path, "w") as f:
        f.write(",".join(SAMPLE_COLUMNS) + "\n")
        block = 200_000
        for i in range(0, n, block):
            tt = t[i : i + block]
            lines = [f"{x:.3f},gpu0,nvml,300.000,301.500,{1000 + 300 * x:.3f},55.0,1980,0\n" for x in tt]
            f.writelines(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--insert-samples", type=int, default=50_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, database() as url:
        path = Path(tmp) / "samples.csv"
        write_samples(path, args.samples)
        with db.connection(url) as conn:
            pk = runs.register_run(conn, PLAN, PLAN.dag_id, "bench", None)
            with conn.cursor() as cur:
                cur.execute(
                    "INSERT INTO trials (dag_run_id, trial_id, plan_name, variant, workload, kind, repetition, "
                    "spec, status) VALUES (%s, 'copy', 'bench', 'n', 'n', 'noop', 0, '{}', 'ok') RETURNING id",
                    (pk,),
                )
                copy_pk = cur.fetchone()[0]
                cur.execute(
                    "INSERT INTO trials (dag_run_id, trial_id, plan_name, variant, workload, kind, repetition, "
                    "spec, status) VALUES (%s, 'insert', 'bench', 'n', 'n', 'noop', 0, '{}', 'ok') RETURNING id",
                    (pk,),
                )
                insert_pk = cur.fetchone()[0]
            conn.commit()
            t0 = time.perf_counter()
            with conn.cursor() as cur:
                copied = samples.copy_samples(cur, path, copy_pk)
                rows, dropped = copied.rows, sum(copied.dropped.values())
            conn.commit()
            copy_s = time.perf_counter() - t0
            assert (rows, dropped) == (args.samples, 0), (rows, dropped, args.samples)
            t0 = time.perf_counter()
            with open(path) as f, conn.cursor() as cur:
                reader = csv.reader(f)
                next(reader)
                sql = (
                    f"INSERT INTO samples (trial_pk, {', '.join(SAMPLE_COLUMNS)}) "
                    f"VALUES (%s, {', '.join(['%s'] * len(SAMPLE_COLUMNS))})"
                )
                for i, row in enumerate(reader):
                    if i >= args.insert_samples:
                        break
                    cur.execute(sql, [insert_pk, *[v if v != "" else None for v in row]])
            conn.commit()
            insert_s = time.perf_counter() - t0
            with conn.cursor() as cur:
                cur.execute("SELECT trial_pk, count(*) FROM samples GROUP BY trial_pk ORDER BY trial_pk")
                counts = dict(cur.fetchall())
            conn.commit()
    copy_rate = args.samples / copy_s
    insert_rate = min(args.insert_samples, counts.get(insert_pk, 0)) / insert_s
    print("| ingestion | samples | seconds | samples/s |")
    print("|---|---:|---:|---:|")
    print(f"| COPY (streamed) | {counts[copy_pk]:,} | {copy_s:.2f} | {copy_rate:,.0f} |")
    print(f"| INSERT row by row | {counts.get(insert_pk, 0):,} | {insert_s:.2f} | {insert_rate:,.0f} |")
    print(f"COPY / INSERT throughput ratio: {copy_rate / insert_rate:.1f}x")


if __name__ == "__main__":
    main()
