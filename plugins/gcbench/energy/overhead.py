"""The sampler's cost to the measured work: throughput with and without a Meter.

Used by ``benchmarks/sampler_overhead.py`` (CPU here, GPU where present) and
``scripts/gpu_check.py`` (bf16 matmul on a GPU). Issue 3 asks for at most 0.5 % of a
GPU-bound workload's throughput at default settings; ARCHITECTURE.md measured 2.5 %
for an in-process thread polling at 1 kHz.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def _run_for(step: Callable[[], None], seconds: float, sync: Callable[[], None] | None) -> float:
    n = 0
    if sync:
        sync()
    t0 = time.perf_counter()
    while True:
        step()
        n += 1
        if n % 8 == 0:
            if sync:
                sync()
            if time.perf_counter() - t0 >= seconds:
                break
    if sync:
        sync()
    return n / (time.perf_counter() - t0)


def throughput_ratio(
    step: Callable[[], None],
    settings,
    devices: list[int],
    seconds: float = 3.0,
    rounds: int = 3,
    sync: Callable[[], None] | None = None,
    warmup_s: float = 1.0,
) -> dict:
    """Alternate rounds of ``step`` without and with a sampling Meter.

    Args:
        step: one unit of work (e.g. a few matmuls).
        settings: :class:`gcbench.spec.EnergySettings` of the Meter (defaults: 20 Hz power,
            10 Hz counter).
        devices: GPUs the Meter samples.
        seconds: length of each round, s.
        rounds: pairs of rounds; medians are compared.
        sync: called to wait for queued device work (``torch.cuda.synchronize``).

    Returns:
        {"baseline_steps_per_s": [...], "metered_steps_per_s": [...], "ratio": median over rounds of
        metered/baseline, "overhead": 1 - ratio, "backend": the Meter's backend,
        "sampler_cpu_fraction": CPU seconds of the sampling process per wall second
        (includes its Python start-up)}.
    """
    from gcbench.energy.meter import Meter

    _run_for(step, warmup_s, sync)
    base, metered, backend, cpu = [], [], None, []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            base.append(_run_for(step, seconds, sync))
            m = Meter(settings, devices, Path(tmp) / f"samples{r}.csv", seed=r)
            m.start()
            backend = m.backend
            m.begin_window()
            metered.append(_run_for(step, seconds, sync))
            m.end_window()
            m.stop()
            st = m.sampler_stats or {}
            if st.get("wall_s"):
                cpu.append(st["cpu_s"] / st["wall_s"])
    # pairs close in time share the machine's background load; their median ratio is
    # more robust than a ratio of medians on a shared machine
    ratio = statistics.median(m_ / b_ for m_, b_ in zip(metered, base, strict=True))
    return {
        "baseline_steps_per_s": base,
        "metered_steps_per_s": metered,
        "ratio": ratio,
        "overhead": 1.0 - ratio,
        "backend": backend,
        "sampler_cpu_fraction": statistics.median(cpu) if cpu else None,
    }
