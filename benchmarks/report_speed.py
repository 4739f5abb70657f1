"""Time of one full report for the study-1 scale: 1,018 trials in 12 groups, 10,000
bootstrap resamples (issue 6: at most 5 s on the 2-core development machine).

    python benchmarks/report_speed.py [--repeat 3] [--resamples 10000]

Data: SYNTHETIC trials from tests/report/synthetic.py (TinyLM infer/train x 3 paths and
H2D pinned/pageable x 3 sizes), not measurements. Prints the analysis and plotting
times separately and the total of write_report.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "tests" / "report")]

LIMIT_S = 5.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--resamples", type=int, default=10_000)
    args = ap.parse_args()

    t0 = time.perf_counter()
    import matplotlib  # noqa: F401  (import cost reported apart: paid once per process)
    import pandas  # noqa: F401
    import scipy.stats  # noqa: F401
    from synthetic import make_report_data

    from gcbench.report import write_report
    from gcbench.report.analysis import ReportSettings, analyze
    from gcbench.report.render.plots import make_plots

    t_import = time.perf_counter() - t0
    # 85 repetitions x 12 groups = 1,020, minus 2 failed/skipped trials listed apart.
    data = make_report_data(kinds=("tinylm", "h2d"), n_rep=85)
    data.trials = data.trials.iloc[:1018].reset_index(drop=True)
    n_groups = data.trials.groupby(["workload", "variant"]).ngroups
    settings = ReportSettings.from_plan(data.plan, n_resamples=args.resamples)

    best = {}
    for _ in range(args.repeat):
        t = time.perf_counter()
        a = analyze(data, settings)
        t_an = time.perf_counter() - t
        t = time.perf_counter()
        make_plots(a)
        t_pl = time.perf_counter() - t
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            write_report(data, Path(tmp) / "r", settings=settings)
            t_all = time.perf_counter() - t
        for k, v in (("analysis", t_an), ("plots", t_pl), ("write_report", t_all)):
            best[k] = min(best.get(k, v), v)

    print(
        f"report speed: {len(data.trials):,} trials, {n_groups} groups, "
        f"{len(a.comparisons)} comparisons, {args.resamples:,} bootstrap resamples "
        f"(best of {args.repeat})"
    )
    print(f"  imports (once per process)   {t_import:6.2f} s")
    print(f"  statistics + analysis        {best['analysis']:6.2f} s")
    print(f"  plots ({len(make_plots(a))} PNG)              {best['plots']:6.2f} s")
    print(
        f"  write_report total           {best['write_report']:6.2f} s   "
        f"(limit {LIMIT_S:.0f} s: {'OK' if best['write_report'] <= LIMIT_S else 'TOO SLOW'})"
    )
    return 0 if best["write_report"] <= LIMIT_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
