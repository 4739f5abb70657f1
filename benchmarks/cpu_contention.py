"""Spread of TinyLM's torch path on a quiet host and beside a planted CPU hog.

    python benchmarks/cpu_contention.py [--repetitions 5] [--hogs 1] [--path torch ...] [--quiet-factor 2]

Runs the smoke plan's ``tinylm-infer`` variant(s) (``plans/smoke.yaml``) through the local
runner, ``--repetitions`` trials each, twice: as the host is, then with ``--hogs``
busy-loop processes pinned onto the trial's CPU set (the set the trial chooses for
itself, :func:`gcbench.energy.cpuset.plan_cpus`). Prints per condition the tokens/s of the
main window (min, max, max/min), the CPU-contention share the trial measured, and how many
windows the contention rule (:func:`gcbench.validate.contention_findings`, the plan's
thresholds) and the stability rule flagged or invalidated. The quiet spread is compared
with ``--quiet-factor`` only when the quiet set was quiet (its median contention share at
most the plan's flag threshold; else it says the host was busy and judges nothing); a
hogged window should never be silently valid. Paths: every path of the smoke plan
(``--path`` to choose). Not a test: the figures depend on the machine and on whatever
else it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gcbench.energy import cpuset
from gcbench.factory.local import run_local
from gcbench.plan import expand, load_plan
from gcbench.validate import contention_findings, stability_finding

ROOT = Path(__file__).resolve().parent.parent
HOG = "import os, sys\nos.sched_setaffinity(0, [int(c) for c in sys.argv[1].split(',')])\nwhile True:\n    pass\n"


def run_condition(specs, plan, out: Path, hogs: int) -> list[dict]:
    rows = []
    for spec in specs:
        cpus = cpuset.plan_cpus(spec.devices, spec.settings.get("cpus", "auto"), host_devices=list(plan.devices)).cpus
        procs = [
            subprocess.Popen([sys.executable, "-c", HOG, ",".join(map(str, cpus))], stdin=subprocess.DEVNULL)
            for _ in range(hogs)
        ]
        try:
            outcome = run_local(spec, out / spec.trial_id, 600, host_devices=list(plan.devices))
        finally:
            for p in procs:
                p.kill()
                p.wait()
        result = json.loads((out / spec.trial_id / "result.json").read_text())
        if outcome.exit_code != 0:
            raise SystemExit(f"trial {spec.trial_id} failed: {result.get('error')}")
        reasons: list[str] = []
        flags: list[str] = []
        contention_findings(result, plan.validation, reasons, flags)
        w = result["windows"]["main"]
        tier, text = stability_finding(result, w["start_s"], w["end_s"], plan.validation)
        (reasons if tier == "invalid" else flags).extend([text] if text else [])
        rows.append(
            {
                "tokens_per_s": result["metrics"]["tokens_per_s"],
                "share": result["metrics"].get("cpu_contention_share"),
                "cpus": result["cpus"]["cpu_list"],
                "threads": (result["cpus"].get("torch_threads_in_effect") or {}).get("torch_intra_op"),
                "flagged": bool(flags) and not reasons,
                "invalid": bool(reasons),
                "why": "; ".join(reasons or flags),
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--hogs", type=int, default=1)
    parser.add_argument("--path", action="append", help="TinyLM path(s); default every path of the smoke plan")
    parser.add_argument(
        "--quiet-factor", type=float, default=2.0, help="the stated max/min of the quiet runs (docs/measurement.md)"
    )
    args = parser.parse_args()
    plan = load_plan(ROOT / "plans" / "smoke.yaml")
    paths = args.path or list(
        dict.fromkeys(str(s.factors["path"]) for s in expand(plan) if s.workload == "tinylm-infer")
    )
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("GCBENCH_HOME", str(Path(tmp) / "home"))
        os.environ["GCBENCH_HOST_SHARE_DIR"] = str(Path(tmp) / "host-share")
        print(
            f"host: {os.cpu_count()} CPUs, this process may use {cpuset.format_cpulist(sorted(os.sched_getaffinity(0)))}"
        )
        invalid_share = plan.validation.cpu_contention_invalid_share
        print(
            f"rules: contention flagged above {plan.validation.cpu_contention_flag_share:.0%}, "
            + (f"invalid above {invalid_share:.0%}" if invalid_share is not None else "never invalid (flag only)")
            + "; stability rule as in the plan\n"
        )
        print(
            "| path | condition | n | tokens/s min | tokens/s max | max/min | contention share median (max) "
            "| flagged | invalid |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        verdicts = []
        details = []
        for path in paths:
            specs = [
                s
                for s in expand(plan, repetitions=args.repetitions)
                if s.workload == "tinylm-infer" and s.factors.get("path") == path
            ]
            for label, hogs in (("quiet", 0), (f"{args.hogs} hog(s) on its CPUs", args.hogs)):
                rows = run_condition(specs, plan, Path(tmp) / f"{path}-{hogs}", hogs)
                tps = [r["tokens_per_s"] for r in rows]
                shares = [r["share"] for r in rows if r["share"] is not None]
                ratio = max(tps) / min(tps)
                print(
                    f"| {path} | {label} | {len(rows)} | {min(tps):,.0f} | {max(tps):,.0f} | {ratio:.2f}x | "
                    f"{statistics.median(shares):.1%} ({max(shares):.1%}) | {sum(r['flagged'] for r in rows)} | "
                    f"{sum(r['invalid'] for r in rows)} |"
                )
                details.extend((path, label, r) for r in rows)
                if hogs == 0:
                    busy = statistics.median(shares) if shares else None
                    if busy is not None and busy > plan.validation.cpu_contention_flag_share:
                        verdicts.append(
                            f"{path} quiet: not judged: the host was not quiet (other processes took "
                            f"{busy:.1%} of the trial's CPUs in the median window, above the "
                            f"{plan.validation.cpu_contention_flag_share:.0%} flag threshold); "
                            f"{ratio:.2f}x apart. Rerun on a quiet host."
                        )
                    else:
                        verdicts.append(
                            f"{path} quiet: {ratio:.2f}x apart (stated factor {args.quiet_factor:g}x): "
                            + ("within" if ratio <= args.quiet_factor else "NOT within")
                        )
                else:
                    silent = sum(not (r["flagged"] or r["invalid"]) for r in rows)
                    verdicts.append(f"{path} hogged: {silent} of {len(rows)} windows silently valid")
        print()
        for v in verdicts:
            print(f"* {v}")
        print("\nper trial: path, condition, tokens/s, CPUs, torch threads, contention share, verdict")
        for path, label, r in details:
            verdict = "invalid" if r["invalid"] else "flagged" if r["flagged"] else "valid"
            print(
                f"  {path:6} {label:22} {r['tokens_per_s']:>10,.0f}  cpus {r['cpus']:6} threads {r['threads']}  "
                f"share {r['share']:.1%}  {verdict}{': ' + r['why'] if r['why'] else ''}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
