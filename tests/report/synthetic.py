"""SYNTHETIC TEST DATA for the report tests and benchmarks/report_speed.py.

Nothing here is a measurement. The numbers are drawn from fixed-seed distributions
shaped like the studies' (ARCHITECTURE.md): TinyLM inference where the torch path uses
~6.7 % less GPU energy per token, H2D copies where pinned memory is ~8x faster and
~19 % cheaper per GB, ResNet-50 under power caps. Plan names start with
``synthetic-test`` so that a stray report says what it is.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from gcbench.report.data import ReportData


def _trial_rows(
    rng,
    *,
    workload,
    kind,
    factors_list,
    n_rep,
    simulated,
    metric_fn,
    gpu_method="nvml-counter-edge-corrected",
    source="nvml",
):
    rows = []
    for factors in factors_list:
        variant = workload + "[" + ",".join(f"{k}={factors[k]}" for k in sorted(factors)) + "]"
        for rep in range(n_rep):
            m = metric_fn(rng, factors)
            rows.append(
                dict(
                    trial_id=f"{abs(hash((workload, variant, rep))) % 16**12:012x}{rep:04x}",
                    variant=variant,
                    workload=workload,
                    kind=kind,
                    repetition=rep,
                    status="ok",
                    error=None,
                    valid=True,
                    reasons=[],
                    flags=[],
                    factors=dict(factors),
                    gpu_method="simulated" if simulated else gpu_method,
                    gpu_source="simulated" if simulated else source,
                    cpu_method=None,
                    simulated=simulated,
                    **m,
                )
            )
    return rows


def _tinylm(rng, f):
    base = {"torch": 0.0933, "external-go": 0.1000, "external-rust": 0.0998}[f["path"]]
    if f.get("mode") == "train":
        base *= 3.0
    tokens = 131072.0
    jpt = base * (1 + rng.normal(0, 0.02))
    dur = tokens / (52000.0 * (1 + rng.normal(0, 0.01)))
    e = jpt * tokens
    return dict(
        tokens=tokens,
        duration_s=dur,
        tokens_per_s=tokens / dur,
        gpu_energy_j=e,
        j_per_token=jpt,
        gpu_j_per_token=jpt,
        cpu_energy_j=np.nan,
        total_energy_j=np.nan,
    )


def _h2d(rng, f):
    pinned = f["memory"] == "pinned"
    gbps = (55.0 if pinned else 7.0) * (1 + rng.normal(0, 0.01))
    jpg = (2.3 if pinned else 2.84) * (1 + rng.normal(0, 0.02))
    nbytes = f["size_mib"] * 2**20 * 64
    gb = nbytes / 1e9
    return dict(bytes=nbytes, duration_s=gb / gbps, gb_per_s=gbps, gpu_j_per_gb=jpg, gpu_energy_j=jpg * gb)


def _resnet(rng, f):
    cap = f["power_cap_w"]
    e_scale = {300: 1.0, 250: 0.93, 200: 0.88}[cap]
    t_scale = {300: 1.0, 250: 1.012, 200: 1.08}[cap]
    amp = 0.6 if f["precision"] == "amp" else 1.0
    gpus = f["gpus"]
    dur = 600.0 * amp * t_scale / (1.9 if gpus == 2 else 1.0) * (1 + rng.normal(0, 0.01))
    gpu_e = 260.0 * gpus * dur * e_scale / t_scale * (1 + rng.normal(0, 0.015))
    cpu_e = 90.0 * dur * (1 + rng.normal(0, 0.02))
    total = gpu_e + cpu_e
    cc = total * (1 + rng.normal(0.04, 0.01))
    return dict(
        duration_s=dur,
        gpu_energy_j=gpu_e,
        cpu_energy_j=cpu_e,
        total_energy_j=total,
        energy_kwh=total / 3.6e6,
        samples=50000.0 * 3,
        samples_per_s=150000.0 / dur,
        accuracy=0.80 + rng.normal(0, 0.005),
        codecarbon_energy_j=cc,
        codecarbon_rel_error=(cc - total) / total,
    )


def make_samples(trial_id: str, *, simulated: bool = False, window=(2.0, 12.0), hz=20.0):
    """Samples of one synthetic trial: idle, busy window, idle; counter ticks every 0.1 s."""
    rng = np.random.default_rng(abs(hash(trial_id)) % 2**32)
    t = np.arange(0.0, window[1] + 2.0, 1.0 / hz)
    busy = (t >= window[0]) & (t <= window[1])
    p_inst = np.where(busy, 420.0, 120.0) + rng.normal(0, 6, t.size)
    p_avg = pd.Series(p_inst).rolling(int(hz), min_periods=1).mean().to_numpy()
    tick = np.floor(t / 0.1) * 0.1
    energy = 1.0e6 + np.cumsum(np.r_[0, np.diff(t)] * p_inst)
    energy = np.interp(tick, t, energy)
    return pd.DataFrame(
        dict(
            t_s=t,
            device="gpu0",
            source="simulated" if simulated else "nvml",
            power_w=p_avg,
            power_instant_w=p_inst,
            energy_j=energy,
            temperature_c=np.where(busy, 62.0, 40.0),
            sm_clock_mhz=np.where(busy, 1980.0, 345.0),
            clocks_event_reasons=0,
        )
    )


def make_report_data(
    *,
    kinds=("tinylm", "h2d"),
    n_rep: int = 8,
    simulated: bool = False,
    failures: bool = True,
    history: bool = False,
    seed: int = 0,
    plan_name: str = "synthetic-test",
) -> ReportData:
    """A ReportData of SYNTHETIC trials.

    kinds: any of ``tinylm`` (2 workloads x 3 paths), ``h2d`` (memory x 3 sizes),
    ``resnet_cifar`` (gpus x precision x power cap: 12 groups), ``noop``, ``command`` (a
    user's program counting ``requests``: batch 1 vs 8).
    With ``failures`` a few trials are made invalid, failed, skipped, or unknown.
    """
    rng = np.random.default_rng(seed)
    rows = []
    if "tinylm" in kinds:
        for mode in ("infer", "train"):
            rows += _trial_rows(
                rng,
                workload=f"tinylm-{mode}",
                kind="tinylm",
                factors_list=[{"path": p, "mode": mode} for p in ("torch", "external-go", "external-rust")],
                n_rep=n_rep,
                simulated=simulated,
                metric_fn=_tinylm,
            )
    if "h2d" in kinds:
        rows += _trial_rows(
            rng,
            workload="h2d",
            kind="h2d",
            factors_list=[
                {"memory": m, "size_mib": s} for m, s in itertools.product(("pinned", "pageable"), (1, 64, 1024))
            ],
            n_rep=n_rep,
            simulated=simulated,
            metric_fn=_h2d,
        )
    if "resnet_cifar" in kinds:
        rows += _trial_rows(
            rng,
            workload="resnet50-cifar10",
            kind="resnet_cifar",
            factors_list=[
                {"gpus": g, "precision": p, "power_cap_w": c}
                for g, p, c in itertools.product((1, 2), ("fp32", "amp"), (300, 250, 200))
            ],
            n_rep=n_rep,
            simulated=simulated,
            metric_fn=_resnet,
        )
        for r in rows:
            if r["kind"] == "resnet_cifar":
                r["cpu_method"] = "simulated" if simulated else "rapl"
    if "noop" in kinds:
        rows += _trial_rows(
            rng,
            workload="noop",
            kind="noop",
            factors_list=[{}],
            n_rep=n_rep,
            simulated=simulated,
            metric_fn=lambda r, f: dict(duration_s=0.05 + abs(r.normal(0, 0.005))),
        )
    if "command" in kinds:  # a user's program counting its own unit of work (plan: unit: requests)

        def _serve(r, f):
            requests = 200.0 * f["batch"]
            energy = 900.0 * (1 + 0.3 * (f["batch"] == 1)) * (1 + r.normal(0, 0.01))
            duration = 10.0 * (1 + r.normal(0, 0.01))
            return dict(
                gpu_energy_j=energy,
                duration_s=duration,
                units=requests,
                units_per_s=requests / duration,
                gpu_j_per_unit=energy / requests,
                unit="requests",
            )

        rows += _trial_rows(
            rng,
            workload="serve",
            kind="command",
            factors_list=[{"batch": b} for b in (1, 8)],
            n_rep=n_rep,
            simulated=simulated,
            metric_fn=_serve,
        )
    if failures and len(rows) > 6:
        rows[0].update(valid=False, reasons=["window_too_short", "counter_decreased"])
        rows[1].update(flags=["throttled_thermal"])
        rows[2].update(status="failed", valid=None, error="CUDA error: out of memory (log tail: RuntimeError ...)")
        for col in ("gpu_energy_j", "j_per_token", "gpu_j_per_gb", "duration_s"):
            if col in rows[2]:
                rows[2][col] = np.nan
        rows[3].update(status="skipped", valid=None, error="no permission to set the power limit (needs CAP_SYS_ADMIN)")
        rows[4].update(valid=None)  # not validated
        rows[5].update(gpu_energy_j=np.nan)  # unknown metric in a valid trial
    trials = pd.DataFrame(rows)
    hist = None
    if history:
        recs = []
        for i in range(35):
            for v in sorted(trials["variant"].unique())[:3]:
                recs.append(
                    dict(
                        run_id=f"scheduled__2025-01-{i + 1:02d}" if i < 31 else f"scheduled__2025-02-{i - 30:02d}",
                        logical_date=str(pd.Timestamp("2025-01-01") + pd.Timedelta(days=i)),
                        variant=v,
                        metric="gpu_energy_j",
                        value=1000 + 10 * np.sin(i / 3) + rng.normal(0, 3),
                    )
                )
        hist = pd.DataFrame(recs)

    def samples(trial_id: str) -> pd.DataFrame:
        return make_samples(trial_id, simulated=simulated)

    def windows(trial_id: str) -> dict:
        return {"main": {"start_s": 2.0, "end_s": 12.0}, "warmup": {"start_s": 0.5, "end_s": 2.0}}

    plan = {
        "name": plan_name,
        "description": "SYNTHETIC TEST DATA: not a measurement.",
        "carbon": {"intensity_kg_per_kwh": 0.2, "band": [0.1, 0.3]},
        "validation": {"min_valid_repetitions": 2},
        "seed": seed,
    }
    return ReportData(
        plan_name=plan_name,
        run_id="manual__2025-01-01T00:00:00+00:00",
        logical_date="2025-01-01T00:00:00+00:00",
        plan=plan,
        trials=trials,
        samples=samples,
        windows=windows,
        history=hist,
    )
