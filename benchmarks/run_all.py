"""Every GC-Bench benchmark, one after the other: ``make bench``.

Each prints a small Markdown table of measured figures. Targets (from the issues)
are printed beside the measured ratios; nothing here is a pass/fail test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

BENCHMARKS = [
    ("COPY ingestion vs row-by-row INSERT (1,000,000 samples)", ["ingest_copy_vs_insert.py"]),
    ("DAG parse time of all plans", ["dag_parse.py"]),
    ("Local runner overhead per no-op trial", ["runner_overhead.py"]),
    (
        "Per-trial overhead under a live Airflow scheduler, 50 no-op trials (target <= 2 s a trial, gap included)",
        ["live_scheduler_overhead.py"],
    ),
    ("Sampler overhead on a compute-bound loop (target <= 0.5 % on a GPU)", ["sampler_overhead.py"]),
    (
        "TinyLM torch path: spread of 5 repetitions quiet and beside a CPU hog (quiet within 2x; "
        "hogged flagged or invalid)",
        ["cpu_contention.py"],
    ),
    ("Tokenizer throughput, one thread (targets: Rust >= tiktoken, Go >= 0.5x tiktoken)", ["tokenizer_throughput.py"]),
    ("Report of 1,018 trials in 12 groups, 10,000 resamples (target <= 5 s)", ["report_speed.py"]),
    ("Container image sizes (no PyTorch wheel kept in a layer)", ["image_sizes.py"]),
    (
        "Coverage of every interval GC-Bench prints (target >= 93.5 % from each method's minimum n; "
        "writes docs/statistics.md)",
        [
            "coverage.py",
            "--groups",
            "1000",
            "--resamples",
            "1000",
            "--write",
            str(HERE.parent / "docs" / "statistics.md"),
        ],
    ),
]


def main() -> int:
    failed = 0
    only = set(sys.argv[1:])
    for title, argv in BENCHMARKS:
        if only and argv[0] not in only:
            continue
        script = HERE / argv[0]
        if not script.exists():
            continue
        print(f"\n## {title}\n", flush=True)
        code = subprocess.run([sys.executable, str(script), *argv[1:]]).returncode
        if code:
            print(f"(benchmark {argv[0]} exited with status {code})")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
