#!/usr/bin/env python3
"""Short versions of GC-Bench's two studies for a GPU machine (under 5 minutes in all).

Runs real trials through the same entry point as the pipeline
(:func:`gcbench.trial.run_trial`: energy meter, windows, derived metrics) and prints:

* execution-regime study: TinyLM J/token per preprocessing path (torch, external-go,
  external-rust) and regime (train, infer), GPU window alone and end to end, every path
  fed by DataLoader workers (the pipeline of plans/regime.yaml), plus the torch path's
  synchronous loop (``torch-sync``); the GPU's busy share beside each;
* host-to-device copies: GB/s and GPU/CPU J/GB, pinned vs pageable;
* multi-GPU/CO2e study (one GPU): ResNet-50/CIFAR-10 energy, time, accuracy and CO2e
  with no cap and at two power caps, where setting caps is permitted (root or
  CAP_SYS_ADMIN; otherwise those trials are reported as skipped with the reason).

Usage (from the repository root)::

    python scripts/gpu_check_studies.py [--out DIR] [--tok-go BIN] [--tok-rust BIN]
                                        [--caps 300 200] [--tiny] [--backend auto] [--dry-run]

``--out`` defaults to ``.gcbench/gpu-studies`` (made absolute). External tokenizers are
built there (``tools/``) with ``gcbench.tokenizer.preprocessors.build_local`` unless
given with ``--tok-go`` / ``--tok-rust``; a path whose tokenizer cannot be built is
reported and skipped. Every trial's folder (result.json, samples.csv, trial.log) stays
under ``--out``, and ``summary.json`` there holds the printed figures (with ``device``
and ``dry_run``).

Last, the page sets the direction each factor is predicted to move its metric
(:data:`PREDICTIONS`, reasoned in docs/studies.md) beside the direction this run
measured: one short run checks a direction, never a size (one trial per variant, no
interval). Where a compared setting did not run as asked (result.json's
``settings_not_in_effect``), the page says so instead of a change.

Without a CUDA GPU it exits with status :data:`EXIT_NO_GPU` and writes nothing: its
figures are GPU results. ``--dry-run`` is ``--tiny --backend simulated`` on the CPU even
where a GPU is visible (about a minute): it checks the page, not the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins"))

from gcbench.carbon import STUDY_INTENSITY, co2e_from_joules  # noqa: E402
from gcbench.spec import Amount, EnergySettings, TrialSpec  # noqa: E402

EXIT_NO_GPU = 2
"""Exit status without a CUDA GPU (and no ``--dry-run``), as scripts/gpu_check.py."""


def spec(
    kind: str,
    variant: str,
    settings: dict,
    window: Amount,
    warmup: Amount,
    devices: list[int],
    energy: EnergySettings,
    seed: int = 7,
) -> TrialSpec:
    return TrialSpec(
        plan="gpu-check",
        workload=kind,
        kind=kind,
        variant=variant,
        settings=settings,
        repetition=0,
        seed=seed,
        devices=devices,
        window=window,
        warmup=warmup,
        energy=energy,
    ).with_id()


def run(s: TrialSpec, out: Path) -> dict:
    """One trial through gcbench.trial; returns status, metrics, error, wall time."""
    from gcbench.trial import run_trial

    folder = out / s.variant.replace("/", "_")
    t0 = time.monotonic()
    try:
        code = run_trial(s, folder)
        result = json.loads((folder / "result.json").read_text())
    except Exception as exc:  # noqa: BLE001 - a check script reports and goes on
        traceback.print_exc()
        return {
            "variant": s.variant,
            "status": "crashed",
            "error": str(exc),
            "metrics": {},
            "wall_s": time.monotonic() - t0,
        }
    m = result.get("metrics") or {}
    src = (
        "simulated"
        if (result.get("environment") or {}).get("simulated")
        else result.get("measurement", {}).get("backend")
    )
    return {
        "variant": s.variant,
        "status": result.get("status"),
        "exit_code": code,
        "error": result.get("error"),
        "metrics": m,
        "not_in_effect": result.get("settings_not_in_effect") or {},
        "energy_source": src,
        "wall_s": time.monotonic() - t0,
    }


def fmt(x, spec_: str = ".3g") -> str:
    """``x`` formatted, ``-`` when unknown (None)."""
    return "-" if x is None else format(x, spec_)


def table(header: list[str], rows: list[list[str]], align: str) -> list[str]:
    """A plain-text table whose columns line up whatever the cells hold.

    Args:
        header, rows: the cells (strings), one list per line, all as long as ``header``.
        align: one letter per column, ``r`` (right: numbers) or ``l`` (left).

    Returns:
        The lines: each column as wide as its widest cell, two spaces apart; the last
        column is not padded (free text: status, reasons).
    """
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    out = []
    for line in [header, *rows]:
        cells = [
            c if i == len(line) - 1 else c.rjust(w) if a == "r" else c.ljust(w)
            for i, (c, w, a) in enumerate(zip(line, widths, align, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
    return out


def status_text(r: dict) -> str:
    """A row's last column: status, where its energy came from, and the error if any."""
    return " ".join(str(x) for x in (r["status"], r.get("energy_source"), r.get("error")) if x)


def not_in_effect(rows, factor: str) -> str | None:
    """Why ``factor`` did not run as asked in one of ``rows`` (their result.json's
    ``settings_not_in_effect``), or None where it did in all."""
    for r in rows:
        why = (r.get("not_in_effect") or {}).get(factor)
        if why:
            return str(why)
    return None


TIE_REL = 0.03
"""A measured change within +-3 % is a tie: one trial per side cannot tell less apart."""


@dataclass(frozen=True)
class Prediction:
    """What one factor is expected to do to one metric on a GPU (docs/studies.md).

    Attributes:
        study, factor: where it belongs (``regime``/``h2d``/``caps``; ``path``, ``loader``...).
        comparison: the two variants in words, treatment first.
        section, treat, base: the summary section and the two variant names compared.
        metric: the metric compared (treatment against base).
        predicted: ``higher``, ``lower`` or ``tie`` (within :data:`TIE_REL`).
        seed: what the seed studies found on their hardware.
    """

    study: str
    factor: str
    comparison: str
    section: str
    treat: str
    base: str
    metric: str
    predicted: str
    seed: str


PREDICTIONS = (
    Prediction(
        "regime",
        "path",
        "infer: torch vs external-go",
        "tinylm",
        "tinylm-infer-torch",
        "tinylm-infer-external-go",
        "gpu_j_per_token",
        "tie",
        "pure PyTorch -6.73 % GPU J/token in inference (its torch path: its own loop)",
    ),
    Prediction(
        "regime",
        "path",
        "train: torch vs external-go",
        "tinylm",
        "tinylm-train-torch",
        "tinylm-train-external-go",
        "gpu_j_per_token",
        "tie",
        "training nearly tied",
    ),
    Prediction(
        "regime",
        "loader",
        "infer: synchronous loop vs DataLoader",
        "tinylm",
        "tinylm-infer-torch-sync",
        "tinylm-infer-torch",
        "gpu_j_per_token",
        "higher",
        "not studied (one loop only)",
    ),
    Prediction(
        "regime",
        "loader",
        "infer: synchronous loop vs DataLoader",
        "tinylm",
        "tinylm-infer-torch-sync",
        "tinylm-infer-torch",
        "gpu_busy_share",
        "lower",
        "not studied",
    ),
    Prediction(
        "regime",
        "loader",
        "train: synchronous loop vs DataLoader",
        "tinylm",
        "tinylm-train-torch-sync",
        "tinylm-train-torch",
        "gpu_j_per_token",
        "higher",
        "not studied",
    ),
    Prediction(
        "h2d",
        "memory",
        "pinned vs pageable",
        "h2d",
        "pinned",
        "pageable",
        "gb_per_s",
        "higher",
        "2.82x bandwidth (ARCHITECTURE.md's H200: 55 vs 6.5-7.4 GB/s)",
    ),
    Prediction(
        "h2d",
        "memory",
        "pinned vs pageable",
        "h2d",
        "pinned",
        "pageable",
        "gpu_j_per_gb",
        "lower",
        "-19 % J/GB (H200: 2.3 vs 16.9-19.0 J/GB)",
    ),
    Prediction(
        "caps",
        "power_cap_w",
        "lowest cap vs no cap",
        "resnet",
        "cap-low",
        "cap-none",
        "gpu_energy_j",
        "lower",
        "~250 W: -4.6 to -9.6 % energy",
    ),
    Prediction(
        "caps",
        "power_cap_w",
        "lowest cap vs no cap",
        "resnet",
        "cap-low",
        "cap-none",
        "duration_s",
        "higher",
        "~250 W: +0.7 to +1.9 % time",
    ),
)
"""The predicted directions the page checks (docs/studies.md says why for each)."""


def direction(rel: float | None) -> str:
    """``higher``, ``lower`` or ``tie`` of a relative change (None: unknown)."""
    if rel is None:
        return "unknown"
    return "tie" if abs(rel) <= TIE_REL else "higher" if rel > 0 else "lower"


def _h2d_side(summary: dict, memory: str) -> dict | None:
    """The largest copy size's trial of ``memory`` (the clearest bandwidth)."""
    rows = [r for r in summary.get("h2d", []) if r["variant"].split("-")[1] == memory]
    return max(rows, key=lambda r: int(r["variant"].rsplit("-", 1)[1].removesuffix("MiB")), default=None)


def _trial(summary: dict, section: str, name: str) -> dict | None:
    rows = summary.get(section, [])
    if section == "h2d":
        return _h2d_side(summary, name)
    if section == "resnet":
        caps = [r for r in rows if r["variant"] != "resnet-cap-noneW"]
        if name == "cap-none":
            return next((r for r in rows if r["variant"] == "resnet-cap-noneW"), None)
        return min(caps, key=lambda r: int(r["variant"].split("-")[2].removesuffix("W")), default=None)
    return next((r for r in rows if r["variant"] == name), None)


def measured_directions(summary: dict) -> list[dict]:
    """Each :data:`PREDICTIONS` row with what this run measured: ``rel`` (treatment /
    base - 1), ``measured`` (its direction, or why there is none), ``agrees`` (True,
    False, or None when not measured)."""
    out = []
    for p in PREDICTIONS:
        t, b = _trial(summary, p.section, p.treat), _trial(summary, p.section, p.base)
        row = {**asdict(p), "rel": None, "treat_value": None, "base_value": None, "agrees": None}
        why = None
        if t is None or b is None:
            why = "not run"
        elif t.get("status") != "ok" or b.get("status") != "ok":
            bad = t if t.get("status") != "ok" else b
            why = f"{bad.get('status')} (above)"
        elif p.factor in ((t.get("not_in_effect") or {}) | (b.get("not_in_effect") or {})):
            why = f"{p.factor} not in effect"
        else:
            tv, bv = t["metrics"].get(p.metric), b["metrics"].get(p.metric)
            row["treat_value"], row["base_value"] = tv, bv
            if tv is None or bv is None or not bv:
                why = f"{p.metric} unknown"
            else:
                row["rel"] = tv / bv - 1.0
        row["measured"] = why or direction(row["rel"])
        if row["rel"] is not None:
            row["agrees"] = row["measured"] == p.predicted
        out.append(row)
    return out


def print_directions(rows: list[dict]) -> None:
    """The page's last table: predicted and measured direction side by side per factor."""
    print(
        "\nPredicted vs measured direction (docs/studies.md; one short run checks a direction, not a size;", flush=True
    )
    print(f"a change within +-{TIE_REL:.0%} is a tie)")
    cells = []
    for r in rows:
        rel = "" if r["rel"] is None else f"{100 * r['rel']:+.1f} % "
        agrees = {True: "yes", False: "NO", None: "-"}[r["agrees"]]
        cells.append(
            [
                r["study"],
                r["factor"],
                r["comparison"],
                r["metric"],
                r["predicted"],
                rel + r["measured"],
                agrees,
                r["seed"],
            ]
        )
    header = ["study", "factor", "comparison", "metric", "predicted", "measured", "agrees", "seed studies"]
    for line in table(header, cells, "lllllrll"):
        print(line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".gcbench" / "gpu-studies")
    ap.add_argument("--tok-go", type=Path)
    ap.add_argument("--tok-rust", type=Path)
    ap.add_argument("--caps", type=float, nargs=2, default=[300.0, 200.0], metavar="W")
    ap.add_argument("--tiny", action="store_true", help="CPU-sized settings (seconds per trial)")
    ap.add_argument("--backend", default="auto", choices=["auto", "nvml", "nvidia-smi", "simulated"])
    ap.add_argument("--skip", nargs="*", default=[], choices=["tinylm", "h2d", "resnet"])
    ap.add_argument("--dry-run", action="store_true", help="--tiny --backend simulated on the CPU: checks the page")
    args = ap.parse_args(argv)
    if args.dry_run:
        args.tiny, args.backend = True, "simulated"
    args.out = args.out.resolve()  # trial settings and tokenizer builds name it from other folders

    try:
        import torch
    except ImportError as exc:
        print(f"gpu-studies: FAILED, torch is not installed ({exc}); run this on a GPU machine", file=sys.stderr)
        return EXIT_NO_GPU
    if not args.dry_run and not torch.cuda.is_available():
        print(
            f"gpu-studies: FAILED, no GPU to study: no CUDA GPU visible to torch (torch {torch.__version__}, "
            f"CUDA build {torch.version.cuda}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); "
            "its figures are GPU results: run it on a GPU machine, or use --dry-run to check the page on the CPU "
            "(simulated device)",
            file=sys.stderr,
        )
        return EXIT_NO_GPU
    args.out.mkdir(parents=True, exist_ok=True)

    cuda = torch.cuda.is_available() and not args.dry_run
    devices = [0] if cuda else []
    device = torch.cuda.get_device_name(0) if cuda else "cpu (no CUDA)"
    print(
        f"device: {device}; torch {torch.__version__}"
        + ("; DRY RUN: tiny settings on the SIMULATED device" if args.dry_run else ""),
        flush=True,
    )
    energy = EnergySettings(backend=args.backend, sample_hz=20, counter_hz=10)
    tiny = args.tiny or not cuda
    summary: dict[str, list] = {"tinylm": [], "h2d": [], "resnet": []}
    t_start = time.monotonic()

    # ---------------------------------------------------------------- TinyLM regimes
    if "tinylm" not in args.skip:
        lm = (
            {"layers": 1, "d_model": 64, "heads": 2, "context_length": 64, "batch_size": 4, "vocab_size": 1024}
            if tiny
            else {
                "layers": 6,
                "d_model": 512,
                "heads": 8,
                "context_length": 256,
                "batch_size": 32,
                "vocab_size": 4096,
                "precision": "bf16",
            }
        )
        lm["cache_dir"] = str(args.out / "cache")
        window = Amount(seconds=1.5 if tiny else 8.0)
        binaries: dict[str, Path | None] = {"go": args.tok_go, "rust": args.tok_rust}
        for impl in ("go", "rust"):
            if binaries[impl] is None:
                try:
                    from gcbench.tokenizer import preprocessors

                    binaries[impl] = preprocessors.build_local(preprocessors.builtin()[impl], args.out / "tools")
                except Exception as exc:  # noqa: BLE001
                    print(f"external-{impl}: tokenizer unavailable ({exc}); path skipped", flush=True)
        # the pipeline of plans/regime.yaml: DataLoader workers on every path; torch-sync is the
        # torch path's synchronous loop (loader workers 0)
        workers = {"workers": 2 if tiny else 4, "prefetch": 2, "pin_memory": True}
        for mode in ("infer", "train"):
            for path in ("torch", "torch-sync", "external-go", "external-rust"):
                loader = {"workers": 0} if path == "torch-sync" else workers
                settings = {**lm, "mode": mode, "path": path.removesuffix("-sync"), "loader": loader}
                if path.startswith("external"):
                    b = binaries[path.removeprefix("external-")]
                    if b is None:
                        summary["tinylm"].append(
                            {
                                "variant": f"tinylm-{mode}-{path}",
                                "status": "skipped",
                                "error": "tokenizer unavailable",
                                "metrics": {},
                            }
                        )
                        continue
                    settings["tokenizer_bin"] = str(b)
                r = run(
                    spec("tinylm", f"tinylm-{mode}-{path}", settings, window, Amount(steps=3), devices, energy),
                    args.out,
                )
                summary["tinylm"].append(r)
        print("\nTinyLM (execution regime)", flush=True)
        cells = []
        for r in summary["tinylm"]:
            m = r["metrics"]
            _, mode, path = r["variant"].split("-", 2)
            busy = m.get("gpu_busy_share")
            cells.append(
                [
                    mode,
                    path,
                    fmt(m.get("tokens_per_s"), ".0f"),
                    fmt(m.get("gpu_j_per_token"), ".4g"),
                    fmt(m.get("e2e_j_per_token"), ".4g"),
                    fmt(m.get("tokenize_duration_s"), ".3f"),
                    "-" if busy is None else f"{100 * busy:.1f}%",
                    status_text(r),
                ]
            )
        header = ["mode", "path", "tokens/s", "GPU J/token", "e2e J/token", "tokenize s", "GPU busy", "status"]
        for line in table(header, cells, "llrrrrrl"):
            print(line)
        for mode in ("infer", "train"):
            rows = {r["variant"].split("-", 2)[2]: r for r in summary["tinylm"] if r["variant"].split("-")[1] == mode}
            for ext in ("external-go", "external-rust"):
                pair = [rows[k] for k in ("torch", ext) if k in rows]
                why = not_in_effect(pair, "path")
                a, b = (rows.get(k, {}).get("metrics", {}).get("gpu_j_per_token") for k in ("torch", ext))
                if why:
                    print(f"  {mode}: torch vs {ext}: path not in effect ({why})")
                elif a and b:
                    print(f"  {mode}: torch vs {ext}: GPU J/token {100 * (a - b) / b:+.2f} %")

    # ---------------------------------------------------------------- H2D copies
    if "h2d" not in args.skip:
        sizes = [4 << 20] if tiny else [64 << 20, 256 << 20]
        for size in sizes:
            for memory in ("pinned", "pageable"):
                r = run(
                    spec(
                        "h2d",
                        f"h2d-{memory}-{size >> 20}MiB",
                        {"memory": memory, "size_bytes": size},
                        Amount(seconds=1.5 if tiny else 4.0),
                        Amount(steps=3),
                        devices,
                        energy,
                    ),
                    args.out,
                )
                summary["h2d"].append(r)
        print("\nHost-to-device copies", flush=True)
        cells = [
            [
                r["variant"],
                fmt(r["metrics"].get("gb_per_s"), ".2f"),
                fmt(r["metrics"].get("gpu_j_per_gb"), ".3f"),
                fmt(r["metrics"].get("cpu_j_per_gb"), ".3f"),
                r["metrics"].get("device_kind") or "-",
                status_text(r),
            ]
            for r in summary["h2d"]
        ]
        for line in table(["variant", "GB/s", "GPU J/GB", "CPU J/GB", "device", "status"], cells, "lrrrll"):
            print(line)
        for size in sizes:
            pair = {r["variant"].split("-")[1]: r for r in summary["h2d"] if r["variant"].endswith(f"{size >> 20}MiB")}
            p, q = (pair.get(k, {}).get("metrics", {}) for k in ("pinned", "pageable"))
            why = not_in_effect(pair.values(), "memory")
            if why:
                # a ratio of two copies that did not run as asked would read as a finding
                print(f"  {size >> 20} MiB: pinned vs pageable: memory not in effect ({why})")
            elif p.get("gb_per_s") and q.get("gb_per_s"):
                line = f"  {size >> 20} MiB: pinned/pageable bandwidth x{p['gb_per_s'] / q['gb_per_s']:.2f}"
                if p.get("gpu_j_per_gb") and q.get("gpu_j_per_gb"):
                    line += f", GPU J/GB {100 * (p['gpu_j_per_gb'] - q['gpu_j_per_gb']) / q['gpu_j_per_gb']:+.1f} %"
                print(line)

    # ---------------------------------------------------------------- ResNet-50 at caps
    if "resnet" not in args.skip:
        base = (
            {
                "dataset": "synthetic",
                "synthetic_train_per_batch": 64,
                "synthetic_test": 64,
                "global_batch": 16,
                "train_samples": 64,
                "lr": 0.01,
            }
            if tiny
            else {
                "dataset": "synthetic",
                "synthetic_train_per_batch": 2048,
                "synthetic_test": 2000,
                "global_batch": 256,
                "train_samples": 256 * 120,
                "precision": "amp",
            }
        )
        base["data_dir"] = str(args.out / "cifar-synthetic")
        for cap in (None, *args.caps):
            r = run(
                spec(
                    "resnet_cifar",
                    f"resnet-cap-{'none' if cap is None else int(cap)}W",
                    {**base, "power_cap_w": cap},
                    Amount(steps=1),
                    Amount(steps=3),
                    devices,
                    energy,
                ),
                args.out,
            )
            summary["resnet"].append(r)
        print("\nResNet-50 / CIFAR-10 (fixed budget, 1 GPU)", flush=True)
        cells = []
        for r in summary["resnet"]:
            m = r["metrics"]
            co2 = co2e_from_joules(m.get("total_energy_j") or m.get("gpu_energy_j"), STUDY_INTENSITY)
            co2s = f"{co2.kg_co2e * 1e3:.3f} ({co2.kg_co2e_low * 1e3:.3f}-{co2.kg_co2e_high * 1e3:.3f})" if co2 else "-"
            cells.append(
                [
                    r["variant"].split("-")[2],
                    fmt(m.get("duration_s"), ".2f"),
                    fmt(m.get("gpu_energy_j"), ".1f"),
                    fmt(m.get("samples_per_s"), ".0f"),
                    fmt(m.get("accuracy"), ".2f"),
                    co2s,
                    status_text(r),
                ]
            )
        header = ["cap", "time s", "GPU J", "samples/s", "acc", "gCO2e (0.10-0.30)", "status"]
        for line in table(header, cells, "rrrrrrl"):
            print(line)
        ref = summary["resnet"][0]["metrics"]
        for r in summary["resnet"][1:]:
            m = r["metrics"]
            if r["status"] != "ok":
                continue  # its reason is in the table
            why = not_in_effect([summary["resnet"][0], r], "power_cap_w")
            if why:
                print(f"  {r['variant']}: power_cap_w not in effect ({why})")
            elif ref.get("gpu_energy_j") and m.get("gpu_energy_j") and ref.get("duration_s") and m.get("duration_s"):
                print(
                    f"  {r['variant']}: energy {100 * (m['gpu_energy_j'] - ref['gpu_energy_j']) / ref['gpu_energy_j']:+.1f} %, "
                    f"time {100 * (m['duration_s'] - ref['duration_s']) / ref['duration_s']:+.1f} % vs no cap"
                )

    directions = measured_directions(summary)
    print_directions(directions)
    facts = {"device": device, "dry_run": args.dry_run}
    (args.out / "summary.json").write_text(
        json.dumps({**facts, **summary, "directions": directions}, indent=2, default=str)
    )
    print(f"\ntotal {time.monotonic() - t_start:.0f} s; trials and summary.json under {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
