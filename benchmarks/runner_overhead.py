"""Per-trial overhead of the local runner with a no-op workload.

    python benchmarks/runner_overhead.py [--trials 10] [--window-s 1.0]

Each no-op trial's measured window lasts ``window_s``; everything else the runner
spends (interpreter start, imports, sampler start and stop, result writing) is
overhead. Prints seconds per trial beyond the workload's window.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from gcbench.factory.local import run_local
from gcbench.plan import expand, plan_from_text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--window-s", type=float, default=1.0)
    args = parser.parse_args()
    plan = plan_from_text(
        f"name: overhead\nrepetitions: {args.trials}\nwindow: {{seconds: {args.window_s}}}\n"
        "energy: {backend: simulated}\nworkloads: [{name: noop, kind: noop}]\n"
    )
    walls, windows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in expand(plan):
            t0 = time.perf_counter()
            out = run_local(spec, Path(tmp) / spec.trial_id, timeout_s=120)
            walls.append(time.perf_counter() - t0)
            assert out.exit_code == 0, (Path(tmp) / spec.trial_id / "runner.log").read_text()
            result = json.loads((Path(tmp) / spec.trial_id / "result.json").read_text())
            windows.append(result["metrics"]["duration_s"])
    over = [w - d for w, d in zip(walls, windows, strict=True)]
    print("| local runner, no-op trial | seconds |")
    print("|---|---:|")
    print(f"| wall per trial (median of {args.trials}) | {statistics.median(walls):.3f} |")
    print(f"| measured window (median) | {statistics.median(windows):.3f} |")
    print(f"| overhead beyond the window (median) | {statistics.median(over):.3f} |")
    print(f"| overhead min / max | {min(over):.3f} / {max(over):.3f} |")


if __name__ == "__main__":
    main()
