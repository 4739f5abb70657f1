"""Throughput cost of the energy sampler: a matmul loop with and without a Meter.

    python benchmarks/sampler_overhead.py [--seconds 3] [--rounds 3]

On a GPU: bf16 matmul (8192 x 8192) with the NVML sampler at default settings. On a
machine without one: fp32 matmul on the CPU with the simulated device's sampler, which
is the worst case (the sampler process competes for the same CPU cores). Prints the
ratio metered/baseline throughput and the overhead in percent.
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each round, s")
    ap.add_argument("--rounds", type=int, default=5, help="pairs of rounds (baseline, metered)")
    ap.add_argument("--size", type=int, default=0, help="matrix size (default 8192 on GPU, 384 on CPU)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args()

    import torch

    from gcbench.energy.overhead import throughput_ratio
    from gcbench.spec import EnergySettings

    if torch.cuda.is_available():
        n = args.size or 8192
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        step, sync, settings, where = (lambda: a @ b), torch.cuda.synchronize, EnergySettings(), "cuda bf16"
        flop = 2 * n**3
    else:
        torch.set_num_threads(1)
        n = args.size or 384
        a, b = torch.randn(n, n), torch.randn(n, n)
        step, sync, settings, where = (lambda: a @ b), None, EnergySettings(backend="simulated"), "cpu fp32 (1 thread)"
        flop = 2 * n**3
    r = throughput_ratio(step, settings, [0], seconds=args.seconds, rounds=args.rounds, sync=sync)
    r.update(
        device=where,
        matrix=n,
        sample_hz=settings.sample_hz,
        counter_hz=settings.counter_hz,
        baseline_tflops=max(r["baseline_steps_per_s"]) * flop / 1e12,
    )
    if args.json:
        print(json.dumps(r, indent=2))
        return
    print(
        f"sampler overhead on {where} matmul {n}x{n}, meter backend {r['backend']}, "
        f"{settings.sample_hz:g} Hz power / {settings.counter_hz:g} Hz counter"
    )
    print(f"  baseline steps/s: {', '.join(f'{x:.1f}' for x in r['baseline_steps_per_s'])}")
    print(f"  metered  steps/s: {', '.join(f'{x:.1f}' for x in r['metered_steps_per_s'])}")
    print(
        f"  throughput ratio (median of paired metered/baseline): {r['ratio']:.4f}  "
        f"overhead: {100 * r['overhead']:+.2f} %"
    )
    if r.get("sampler_cpu_fraction") is not None:
        print(f"  sampler process CPU: {100 * r['sampler_cpu_fraction']:.1f} % of one core (start-up included)")


if __name__ == "__main__":
    main()
