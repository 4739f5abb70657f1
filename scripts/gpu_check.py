#!/usr/bin/env python
"""GPU check (``make gpu-check``): what GC-Bench's energy measurement does on this GPU.

Runs in about a minute (under 5) on one NVIDIA GPU with only torch, nvidia-ml-py and
the gcbench package, and prints:

1. NVML facts: GPU, driver, NVML version, power limits, whether the energy counter and
   the instant/average power fields are supported, the cost of one counter read and one
   power read, the counter's tick period and step at idle.
2. Counter against integrated power on a steady and a bursty (30 ms on / 70 ms off)
   bf16 matmul load, measured by the Meter at default settings: the edge-corrected
   counter, the plain counter difference at the edges (no correction), the trapezoid of
   instant power and of the 1-s average power.
3. The sampler's overhead: bf16 matmul throughput with and without the Meter sampling.

Without a GPU it exits with status 2 and says why. ``--json FILE`` also writes the
figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def fail(message: str) -> None:
    print(f"gpu-check: {message}", file=sys.stderr)
    sys.exit(2)


def nvml_facts(nv, handle) -> dict:
    """Versions, limits, support and costs of the reads, counter tick period and step."""
    def safe(fn, *a):
        try:
            return fn(*a)
        except nv.NVMLError as exc:
            return f"error: {exc}"

    facts = {"driver": safe(nv.nvmlSystemGetDriverVersion), "nvml_version": safe(nv.nvmlSystemGetNVMLVersion),
             "name": safe(nv.nvmlDeviceGetName, handle),
             "power_limit_mw": safe(nv.nvmlDeviceGetPowerManagementLimit, handle),
             "power_limit_constraints_mw": safe(nv.nvmlDeviceGetPowerManagementLimitConstraints, handle),
             "default_limit_mw": safe(nv.nvmlDeviceGetPowerManagementDefaultLimit, handle)}
    try:
        nv.nvmlDeviceGetTotalEnergyConsumption(handle)
        facts["energy_counter"] = True
    except nv.NVMLError as exc:
        facts["energy_counter"] = f"not supported: {exc}"
    fields = [nv.NVML_FI_DEV_POWER_INSTANT, nv.NVML_FI_DEV_POWER_AVERAGE]
    try:
        vals = nv.nvmlDeviceGetFieldValues(handle, fields)
        facts["power_instant_mw"] = vals[0].value.uiVal if vals[0].nvmlReturn == 0 else f"ret {vals[0].nvmlReturn}"
        facts["power_average_mw"] = vals[1].value.uiVal if vals[1].nvmlReturn == 0 else f"ret {vals[1].nvmlReturn}"
    except nv.NVMLError as exc:
        facts["power_fields"] = f"not supported: {exc}"
    t0 = time.perf_counter()
    for _ in range(1000):
        nv.nvmlDeviceGetFieldValues(handle, fields)
    facts["power_read_cost_ms"] = (time.perf_counter() - t0)
    if facts["energy_counter"] is True:
        from gcbench.energy import integrate
        import numpy as np

        t, e = [], []
        end = time.perf_counter() + 2.0
        while time.perf_counter() < end:
            a = time.perf_counter()
            v = nv.nvmlDeviceGetTotalEnergyConsumption(handle)
            b = time.perf_counter()
            t.append((a + b) / 2)
            e.append(v / 1e3)
        facts["counter_read_cost_ms"] = 2000.0 / len(t)
        ticks = integrate.detect_ticks(np.array(t), np.array(e))
        facts["counter_tick_period_s"] = ticks.period_s
        steps = np.diff(ticks.energy_j)
        facts["counter_idle_step_j_median"] = float(np.median(steps)) if steps.size else None
    return facts


def measure_load(kind: str, gpu_index: int, seconds: float, a, b, torch) -> dict:
    """One load in a Meter window at default settings; figures from the samples."""
    import numpy as np

    from gcbench.energy import integrate
    from gcbench.energy.meter import Meter, read_samples
    from gcbench.spec import EnergySettings

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "samples.csv"
        m = Meter(EnergySettings(jitter_max_s=0.1), [gpu_index], path, seed=1)
        m.start()
        time.sleep(0.5)
        start = m.begin_window()
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            if kind == "steady":
                for _ in range(4):
                    a @ b
                torch.cuda.synchronize()
            else:  # 30 ms on, 70 ms off
                on_until = time.perf_counter() + 0.03
                while time.perf_counter() < on_until:
                    a @ b
                    torch.cuda.synchronize()
                time.sleep(0.07)
        end = m.end_window()
        r = m.stop()["main"]
        s = read_samples(path)[f"gpu{gpu_index}"]
    g = r.gpu[0]
    ok = np.isfinite(s.energy_j)
    # the reads a meter without bursts would have made: 10 Hz grid only
    grid_idx = np.unique(np.searchsorted(s.t_s[ok], np.arange(s.t_s[ok][0], s.t_s[ok][-1], 0.1)))
    grid_idx = grid_idx[grid_idx < ok.sum()]
    naive = integrate.naive_counter_energy_j(s.t_s[ok][grid_idx], s.energy_j[ok][grid_idx], start, end)
    avg_ok = np.isfinite(s.power_w)
    avg_j = integrate.power_integral_j(s.t_s[avg_ok], s.power_w[avg_ok], start, end)
    out = {"load": kind, "duration_s": end - start, "method": g.method, "counter_edge_corrected_j": g.energy_j,
           "counter_plain_difference_j": naive, "instant_power_trapezoid_j": g.cross_check_j,
           "average_power_trapezoid_j": avg_j, "flags": r.flags, "mean_power_w": (g.energy_j or 0) / (end - start)}
    ref = g.energy_j
    for k in ("counter_plain_difference_j", "instant_power_trapezoid_j", "average_power_trapezoid_j"):
        out[k.replace("_j", "_vs_corrected")] = (out[k] - ref) / ref if ref and out[k] is not None else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description="GC-Bench GPU energy check")
    ap.add_argument("--seconds", type=float, default=6.0, help="length of each load window, s")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = ap.parse_args()
    t_start = time.monotonic()
    try:
        import torch
    except ImportError as exc:
        fail(f"torch is not installed ({exc})")
    if not torch.cuda.is_available():
        fail(f"no CUDA GPU visible to torch (torch {torch.__version__}, CUDA build {torch.version.cuda}, "
             f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); run this on a GPU machine")
    from gcbench.energy import nvml
    from gcbench.energy.overhead import throughput_ratio
    from gcbench.errors import MeasurementError
    from gcbench.spec import EnergySettings

    try:
        nv = nvml.load()
        gpus, notes = nvml.resolve_devices(nv, [], os.environ.get("CUDA_VISIBLE_DEVICES"),
                                           os.environ.get("CUDA_DEVICE_ORDER"))
    except MeasurementError as exc:
        fail(str(exc))
    cuda_uuid = "GPU-" + str(torch.cuda.get_device_properties(0).uuid)
    match = [g for g in gpus if g.uuid == cuda_uuid] or gpus[:1]
    gpu = match[0]
    handle = nv.nvmlDeviceGetHandleByUUID(gpu.uuid)
    report: dict = {"gpu": gpu.to_dict(), "cuda_device_0_uuid": cuda_uuid, "mapping_notes": notes}

    print(f"== NVML facts ({gpu.label}, {gpu.name}, {gpu.uuid})")
    facts = nvml_facts(nv, handle)
    report["nvml"] = facts
    for k, v in facts.items():
        print(f"  {k:28s} {v}")

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()

    print(f"\n== counter vs integrated power (Meter defaults, {args.seconds:g} s windows)")
    report["loads"] = []
    for kind in ("steady", "bursty"):
        r = measure_load(kind, gpu.host_index, args.seconds, a, b, torch)
        report["loads"].append(r)
        print(f"  {kind:7s} {r['duration_s']:.3f} s, {r['mean_power_w']:.1f} W mean, method {r['method']}, "
              f"flags {r['flags']}")
        print(f"    counter, edge-corrected   {r['counter_edge_corrected_j']:10.2f} J")
        for k in ("counter_plain_difference", "instant_power_trapezoid", "average_power_trapezoid"):
            rel = r[f"{k}_vs_corrected"]
            print(f"    {k.replace('_', ' '):26s}{r[k + '_j']:10.2f} J  "
                  f"({'n/a' if rel is None else f'{100 * rel:+.2f} %'} vs corrected)")

    print("\n== sampler overhead (bf16 matmul 8192x8192, Meter defaults)")
    ov = throughput_ratio(lambda: a @ b, EnergySettings(), [gpu.host_index], seconds=5.0, rounds=3,
                          sync=torch.cuda.synchronize)
    flop = 2 * n**3
    ov["baseline_tflops"] = max(ov["baseline_steps_per_s"]) * flop / 1e12
    report["overhead"] = ov
    print(f"  baseline {ov['baseline_tflops']:.1f} TFLOP/s; metered/baseline {ov['ratio']:.4f}; "
          f"overhead {100 * ov['overhead']:+.2f} % (target <= 0.5 %); sampler CPU "
          f"{100 * (ov['sampler_cpu_fraction'] or 0):.1f} % of a core")
    report["elapsed_s"] = time.monotonic() - t_start
    print(f"\ngpu-check done in {report['elapsed_s']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
