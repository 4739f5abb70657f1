#!/usr/bin/env python3
"""Short versions of GC-Bench's two studies for a GPU machine (under 5 minutes in all).

Runs real trials through the same entry point as the pipeline
(:func:`gcbench.trial.run_trial`: energy meter, windows, derived metrics) and prints:

* execution-regime study: TinyLM J/token per preprocessing path (torch, external-go,
  external-rust) and regime (train, infer), GPU window alone and end to end;
* host-to-device copies: GB/s and GPU/CPU J/GB, pinned vs pageable;
* multi-GPU/CO2e study (one GPU): ResNet-50/CIFAR-10 energy, time, accuracy and CO2e
  with no cap and at two power caps, where setting caps is permitted (root or
  CAP_SYS_ADMIN; otherwise those trials are reported as skipped with the reason).

Usage (from the repository root)::

    python scripts/gpu_check_studies.py [--out DIR] [--tok-go BIN] [--tok-rust BIN]
                                        [--caps 300 200] [--tiny] [--backend auto]

External tokenizers are built with ``gcbench.tokenizer.preprocessors.build_local`` unless
given with ``--tok-go`` / ``--tok-rust``; a path whose tokenizer cannot be built is
reported and skipped. ``--tiny --backend simulated`` runs the same script in about a
minute on a CPU-only machine (figures then come from the simulated device and say so).
Every trial's folder (result.json, samples.csv, trial.log) stays under ``--out``, and
``summary.json`` there holds the printed figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins"))

from gcbench.carbon import STUDY_INTENSITY, co2e_from_joules  # noqa: E402
from gcbench.spec import Amount, EnergySettings, TrialSpec  # noqa: E402


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
        "energy_source": src,
        "wall_s": time.monotonic() - t0,
    }


def fmt(x, spec_: str = ".3g") -> str:
    return "-" if x is None else format(x, spec_)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".gcbench" / "gpu-check")
    ap.add_argument("--tok-go", type=Path)
    ap.add_argument("--tok-rust", type=Path)
    ap.add_argument("--caps", type=float, nargs=2, default=[300.0, 200.0], metavar="W")
    ap.add_argument("--tiny", action="store_true", help="CPU-sized settings (seconds per trial)")
    ap.add_argument("--backend", default="auto", choices=["auto", "nvml", "nvidia-smi", "simulated"])
    ap.add_argument("--skip", nargs="*", default=[], choices=["tinylm", "h2d", "resnet"])
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    import torch

    cuda = torch.cuda.is_available()
    devices = [0] if cuda else []
    print(
        f"device: {torch.cuda.get_device_name(0) if cuda else 'cpu (no CUDA)'}; torch {torch.__version__}", flush=True
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
        for mode in ("infer", "train"):
            for path in ("torch", "external-go", "external-rust"):
                settings = {**lm, "mode": mode, "path": path}
                if path != "torch":
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
        print(
            f"{'mode':6} {'path':14} {'tokens/s':>10} {'GPU J/token':>12} {'e2e J/token':>12} {'tokenize s':>10}  status"
        )
        for r in summary["tinylm"]:
            m = r["metrics"]
            _, mode, path = r["variant"].split("-", 2)
            print(
                f"{mode:6} {path:14} {fmt(m.get('tokens_per_s'), '10.0f')} {fmt(m.get('gpu_j_per_token'), '12.4g')} "
                f"{fmt(m.get('e2e_j_per_token'), '12.4g')} {fmt(m.get('tokenize_duration_s'), '10.3f')}  "
                f"{r['status']} {r.get('energy_source') or ''} {r.get('error') or ''}"
            )
        for mode in ("infer", "train"):
            by = {
                r["variant"].split("-", 2)[2]: r["metrics"].get("gpu_j_per_token")
                for r in summary["tinylm"]
                if r["variant"].split("-")[1] == mode
            }
            for ext in ("external-go", "external-rust"):
                if by.get("torch") and by.get(ext):
                    print(f"  {mode}: torch vs {ext}: GPU J/token {100 * (by['torch'] - by[ext]) / by[ext]:+.2f} %")

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
        print(f"{'variant':24} {'GB/s':>8} {'GPU J/GB':>9} {'CPU J/GB':>9}  status")
        for r in summary["h2d"]:
            m = r["metrics"]
            print(
                f"{r['variant']:24} {fmt(m.get('gb_per_s'), '8.2f')} {fmt(m.get('gpu_j_per_gb'), '9.3f')} "
                f"{fmt(m.get('cpu_j_per_gb'), '9.3f')}  {r['status']} {m.get('device_kind', '')} "
                f"{r.get('energy_source') or ''} {r.get('error') or ''}"
            )
        for size in sizes:
            rows = {
                r["variant"].split("-")[1]: r["metrics"]
                for r in summary["h2d"]
                if r["variant"].endswith(f"{size >> 20}MiB")
            }
            p, q = rows.get("pinned", {}), rows.get("pageable", {})
            if p.get("gb_per_s") and q.get("gb_per_s"):
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
        print(f"{'cap':>6} {'time s':>7} {'GPU J':>9} {'samples/s':>9} {'acc':>5} {'gCO2e (0.10-0.30)':>20}  status")
        for r in summary["resnet"]:
            m = r["metrics"]
            co2 = co2e_from_joules(m.get("total_energy_j") or m.get("gpu_energy_j"), STUDY_INTENSITY)
            co2s = f"{co2.kg_co2e * 1e3:.3f} ({co2.kg_co2e_low * 1e3:.3f}-{co2.kg_co2e_high * 1e3:.3f})" if co2 else "-"
            print(
                f"{r['variant'].split('-')[2]:>6} {fmt(m.get('duration_s'), '7.2f')} {fmt(m.get('gpu_energy_j'), '9.1f')} "
                f"{fmt(m.get('samples_per_s'), '9.0f')} {fmt(m.get('accuracy'), '5.2f')} {co2s:>20}  "
                f"{r['status']} {r.get('energy_source') or ''} {r.get('error') or ''}"
            )
        ref = summary["resnet"][0]["metrics"]
        for r in summary["resnet"][1:]:
            m = r["metrics"]
            if ref.get("gpu_energy_j") and m.get("gpu_energy_j") and ref.get("duration_s") and m.get("duration_s"):
                print(
                    f"  {r['variant']}: energy {100 * (m['gpu_energy_j'] - ref['gpu_energy_j']) / ref['gpu_energy_j']:+.1f} %, "
                    f"time {100 * (m['duration_s'] - ref['duration_s']) / ref['duration_s']:+.1f} % vs no cap"
                )

    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(f"\ntotal {time.monotonic() - t_start:.0f} s; trials and summary.json under {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
