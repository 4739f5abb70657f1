#!/usr/bin/env python3
"""GPU check (``make gpu-check``): GC-Bench's energy measurement on this GPU, one page.

Runs in about two minutes on one NVIDIA GPU with the machine's own python3 (torch with
CUDA, numpy, nvidia-ml-py, PyYAML) plus pydantic, which ``make gpu-wheels`` carries as
wheels (docs/measurement.md, "GPU check"). It needs neither Airflow nor PostgreSQL.
It prints one page and writes the same figures as JSON:

1. NVML facts: GPU, driver, limits, which readings exist, the cost of a counter read
   and of a power read, the counter's tick period.
2. The 1-s average power's lag, measured here: ~250 reads/s of instant and 1-s average
   power and of the energy counter through idle, steady, bursty and idle phases, the
   lag fitted as on the H200 traces (gcbench.energy.integrate.fit_average_power_lag_s),
   and the cross-check of every phase of 1 s or more at the default lag.
3. The cross-check as trials run it: a steady and a bursty (30 ms on / 70 ms off) bf16
   matmul load, each in a Meter window at default settings: the edge-corrected counter
   against the lag-shifted 1-s average reference, the edge allowance, and the verdict
   of the rule at the plan defaults (validation.cross_check_flag_rel / _invalid_rel);
   instant power and the plain counter difference for comparison.
4. The sampler's overhead on a GPU-bound loop (bf16 matmul): metered / unmetered
   throughput (target: at most 0.5 % lost).

Without torch, CUDA or NVML it says why and exits with status 2 (nothing written).
``--dry-run`` runs the same analysis and page on a machine without a GPU: section 2 on
the recorded H200 traces (tests/fixtures/gpu), sections 3-4 on GC-Bench's simulated
device and a CPU loop, every figure labelled as such; it is what the unit test runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins"))

EXIT_NO_GPU = 2
PHASES = (("idle", 2.0), ("steady", 3.0), ("bursty", 4.0), ("idle", 3.0))
"""Phases of the high-rate recording (name, seconds)."""


class NoGpu(Exception):
    """This machine cannot run the GPU check (the message says why)."""


# ----------------------------------------------------------------------------- GPU side


def open_gpu():
    """(torch, pynvml, GpuInfo, handle) of CUDA device 0; raises :class:`NoGpu`."""
    try:
        import torch
    except ImportError as exc:
        raise NoGpu(f"torch is not installed ({exc})") from None
    if not torch.cuda.is_available():
        raise NoGpu(
            f"no CUDA GPU visible to torch (torch {torch.__version__}, CUDA build {torch.version.cuda}, "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); run this on a GPU machine, "
            f"or use --dry-run"
        )
    from gcbench.energy import nvml
    from gcbench.errors import MeasurementError

    try:
        nv = nvml.load()
        gpus, _ = nvml.resolve_devices(
            nv, [], os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER")
        )
    except MeasurementError as exc:
        raise NoGpu(str(exc)) from None
    cuda_uuid = "GPU-" + str(torch.cuda.get_device_properties(0).uuid)
    gpu = ([g for g in gpus if g.uuid == cuda_uuid] or gpus[:1])[0]
    return torch, nv, gpu, nv.nvmlDeviceGetHandleByUUID(gpu.uuid)


def nvml_facts(nv, handle) -> dict:
    """Versions, limits, readings supported, cost of the reads, the counter's tick period."""
    import numpy as np

    from gcbench.energy import integrate

    def safe(fn, *a):
        try:
            return fn(*a)
        except nv.NVMLError as exc:
            return f"error: {exc}"

    def s(v):
        return v.decode() if isinstance(v, bytes) else v

    constraints = safe(nv.nvmlDeviceGetPowerManagementLimitConstraints, handle)
    facts = {
        "name": s(safe(nv.nvmlDeviceGetName, handle)),
        "driver": s(safe(nv.nvmlSystemGetDriverVersion)),
        "nvml_version": s(safe(nv.nvmlSystemGetNVMLVersion)),
        "power_limit_w": _mw(safe(nv.nvmlDeviceGetPowerManagementLimit, handle)),
        "power_limit_constraints_w": constraints if isinstance(constraints, str) else [_mw(x) for x in constraints],
    }
    fields = [nv.NVML_FI_DEV_POWER_INSTANT, nv.NVML_FI_DEV_POWER_AVERAGE]
    try:
        vals = nv.nvmlDeviceGetFieldValues(handle, fields)
        facts["instant_power_field"] = vals[0].nvmlReturn == 0
        facts["average_power_field"] = vals[1].nvmlReturn == 0
    except nv.NVMLError as exc:
        facts["instant_power_field"] = facts["average_power_field"] = f"not supported: {exc}"
    t0 = time.perf_counter()
    for _ in range(500):
        nv.nvmlDeviceGetFieldValues(handle, fields)
    facts["power_read_ms"] = (time.perf_counter() - t0) / 500 * 1e3
    try:
        nv.nvmlDeviceGetTotalEnergyConsumption(handle)
        facts["energy_counter"] = True
    except nv.NVMLError as exc:
        facts["energy_counter"] = f"not supported: {exc}"
        return facts
    t, e = [], []
    end = time.perf_counter() + 1.5
    while time.perf_counter() < end:
        a = time.perf_counter()
        v = nv.nvmlDeviceGetTotalEnergyConsumption(handle)
        t.append((a + time.perf_counter()) / 2)
        e.append(v / 1e3)
    facts["counter_read_ms"] = 1.5e3 / len(t)
    facts["counter_tick_period_s"] = integrate.detect_ticks(np.array(t), np.array(e)).period_s
    return facts


def _mw(v):
    return v / 1e3 if isinstance(v, (int, float)) else v


def make_load(torch, n: int = 8192):
    """``load(kind, seconds)``: bf16 matmuls, ``steady`` or ``bursty`` (30 ms on, 70 ms off),
    ``idle`` sleeps; and ``step()`` (4 matmuls) for the overhead loop."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()

    def load(kind: str, seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            if kind == "idle":
                time.sleep(min(0.05, max(0.0, end - time.perf_counter())))
            elif kind == "steady":
                for _ in range(4):
                    a @ b
                torch.cuda.synchronize()
            else:
                on_until = time.perf_counter() + 0.03
                while time.perf_counter() < on_until:
                    a @ b
                    torch.cuda.synchronize()
                time.sleep(0.07)

    def step() -> None:
        for _ in range(4):
            a @ b

    return load, step, torch.cuda.synchronize, 2 * n**3 * 4


def record_phases(nv, handle, load) -> dict:
    """Poll instant and 1-s average power and the counter as fast as NVML allows (a
    thread) while ``load`` runs through :data:`PHASES`; arrays and phase edges."""
    rows: list[tuple[float, float, float, float]] = []
    stop = threading.Event()
    fields = [nv.NVML_FI_DEV_POWER_INSTANT, nv.NVML_FI_DEV_POWER_AVERAGE]

    def poll() -> None:
        while not stop.is_set():
            a = time.perf_counter()
            try:
                inst, avg = nv.nvmlDeviceGetFieldValues(handle, fields)
                e = nv.nvmlDeviceGetTotalEnergyConsumption(handle)
            except nv.NVMLError:
                continue
            rows.append(((a + time.perf_counter()) / 2, inst.value.uiVal / 1e3, avg.value.uiVal / 1e3, e / 1e3))

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    time.sleep(1.2)  # reads before the first phase: its 1-s averages and edge steps need them
    phases = []
    for name, seconds in PHASES:
        a = time.perf_counter()
        load(name, seconds)
        phases.append((name, a, time.perf_counter()))
    time.sleep(1.3)  # and after the last
    stop.set()
    th.join()
    import numpy as np

    arr = np.array(rows)
    return {"t_s": arr[:, 0], "instant_w": arr[:, 1], "average_w": arr[:, 2], "energy_j": arr[:, 3], "phases": phases}


# ----------------------------------------------------------------------------- analysis


def analyse_recording(rec: dict, sampler_hz: float = 20.0) -> dict:
    """The lag of the 1-s average and the cross-check of every phase of 1 s or more.

    Args:
        rec: ``t_s``, ``instant_w``, ``average_w``, ``energy_j`` arrays (high-rate reads)
            and ``phases`` [(name, start_s, end_s)].
        sampler_hz: the 1-s average is also judged at this read rate (the sampler's).
    """
    import numpy as np

    from gcbench.energy import integrate as I
    from gcbench.energy.base import CROSS_CHECK_FLAG_REL, CROSS_CHECK_INVALID_REL

    t, inst, avg, e = (np.asarray(rec[k], dtype=float) for k in ("t_s", "instant_w", "average_w", "energy_j"))
    ticks = I.detect_ticks(t, e)
    good = ticks.uncertainty_s <= I.MAX_TICK_UNCERTAINTY_S
    out: dict = {
        "reads": int(t.size),
        "reads_per_s": float(t.size / (t[-1] - t[0])) if t.size > 1 else None,
        "counter_tick_period_s": ticks.period_s,
        "default_lag_s": I.AVERAGE_POWER_LAG_S,
    }
    try:
        theta, rms = I.fit_average_power_lag_s(t, avg, ticks.t_s[good], ticks.energy_j[good])
        out.update(fitted_theta_s=theta, fitted_lag_s=0.5 + theta, fit_rms_w=rms)
    except ValueError as exc:
        out.update(fitted_theta_s=None, fitted_lag_s=None, fit_rms_w=None, fit_error=str(exc))
    g = np.unique(np.searchsorted(t, np.arange(t[0], t[-1], 1.0 / sampler_hz)))
    g = g[g < t.size]
    phases = []
    for name, a, b in rec["phases"]:
        if b - a < 1.0 - 1e-6:
            continue
        cw = I.counter_window_energy_j(ticks, t, inst, a, b)
        if cw is None:
            continue
        row = {
            "phase": name,
            "start_s": a,
            "duration_s": b - a,
            "counter_j": cw.energy_j,
            "mean_power_w": cw.energy_j / (b - a),
        }
        ii = I.power_integral_j(t, inst, a, b)
        row["instant_rel"] = (cw.energy_j - ii) / ii if ii > 0 else None
        for label, lag in (("default", I.AVERAGE_POWER_LAG_S), ("fitted", out.get("fitted_lag_s"))):
            if lag is None:
                continue
            cc = I.cross_check_reference(
                cw.energy_j,
                t[g],
                avg[g],
                a,
                b,
                flag_rel=CROSS_CHECK_FLAG_REL,
                invalid_rel=CROSS_CHECK_INVALID_REL,
                lag_s=lag,
            )
            row[f"{label}_lag"] = {
                "reference_j": cc.reference_j,
                "rel": cc.rel,
                "allowance_rel": cc.allowance_rel,
                "excess_rel": cc.excess_rel,
                "verdict": cc.verdict,
                "reason": cc.reason,
            }
        phases.append(row)
    out["phases"] = phases
    return out


def measure_load(kind: str, load, settings, devices: list[int]) -> dict:
    """One load in a Meter window (``settings``); the cross-check's figures and verdict."""
    import numpy as np

    from gcbench.energy import integrate
    from gcbench.energy.meter import Meter, read_samples
    from gcbench.plan.schema import ValidationSettings
    from gcbench.validate import cross_check_finding

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "samples.csv"
        m = Meter(settings, devices, path, seed=1)
        m.start()
        load("idle", 0.5)
        load(kind, 0.6)  # the load runs before the window opens, as after a warm-up
        start = m.begin_window()
        load(kind, LOAD_SECONDS)
        end = m.end_window()
        r = m.stop()["main"]
        s = read_samples(path)[r.gpu[0].device]
    g = r.gpu[0]
    ok = np.isfinite(s.energy_j)
    grid = np.unique(np.searchsorted(s.t_s[ok], np.arange(s.t_s[ok][0], s.t_s[ok][-1], 0.1)))
    grid = grid[grid < ok.sum()]
    naive = integrate.naive_counter_energy_j(s.t_s[ok][grid], s.energy_j[ok][grid], start, end) if ok.any() else None
    tier, text = cross_check_finding(dataclasses.asdict(g), ValidationSettings())
    return {
        "load": kind,
        "backend": r.backend,
        "simulated": r.simulated,
        "duration_s": end - start,
        "method": g.method,
        "counter_j": g.energy_j,
        "mean_power_w": g.energy_j / (end - start) if g.energy_j else None,
        "reference_j": g.cross_check_j,
        "rel": g.cross_check_rel,
        "allowance_rel": g.cross_check_allowance_rel,
        "excess_rel": g.cross_check_excess_rel,
        "lag_s": g.cross_check_lag_s,
        "verdict": tier,
        "finding": text,
        "instant_integral_j": g.instant_integral_j,
        "instant_rel": g.instant_integral_rel,
        "counter_plain_difference_j": naive,
        "flags": r.flags,
    }


LOAD_SECONDS = 6.0


# ----------------------------------------------------------------------------- the page


def _pct(x, digits: int = 2) -> str:
    return "n/a" if x is None else f"{100 * x:+.{digits}f} %"


def render(report: dict) -> str:
    """The one-page text of a report dict (what is printed and what the JSON holds)."""
    lines = []
    dry = report.get("dry_run")
    head = f"GC-Bench GPU check  {report['when']}  {report['device']}"
    lines += [head, "=" * len(head)]
    if dry:
        lines.append(
            "DRY RUN without a GPU: section 2 analyses the recorded H200 traces (tests/fixtures/gpu); "
            "sections 3-4 run on the SIMULATED device and a CPU loop. Not a measurement of a GPU."
        )
    f = report.get("nvml") or {}
    if f:
        lines.append(
            f"1 NVML  {f.get('name')}, driver {f.get('driver')}, limit {f.get('power_limit_w')} W "
            f"{f.get('power_limit_constraints_w')}; counter {f.get('energy_counter')} "
            f"({_num(f.get('counter_read_ms'), '.2f')} ms/read, tick {_num(f.get('counter_tick_period_s'), '.3f')} s); "
            f"instant/average fields {f.get('instant_power_field')}/{f.get('average_power_field')} "
            f"({_num(f.get('power_read_ms'), '.3f')} ms/read)"
        )
    rec = report["recording"]
    lines.append(
        f"2 1-s average lag{' (recorded H200 traces)' if dry else ''}: {rec['reads']} reads at "
        f"{_num(rec['reads_per_s'], '.0f')}/s; read at t = mean power over [t-1-theta, t-theta], "
        f"theta {_num(rec.get('fitted_theta_s'), '.3f')} s (rms {_num(rec.get('fit_rms_w'), '.1f')} W) -> lag "
        f"{_num(rec.get('fitted_lag_s'), '.3f')} s; GC-Bench uses {rec['default_lag_s']} s"
    )
    lines.append(
        f"  {'phase':7} {'s':>5} {'W':>6} {'instant':>9} {'reference':>9} {'allow':>7} {'verdict':>9}"
        f" | {'at fitted lag':>13}"
    )
    for p in rec["phases"]:
        d, fl = p.get("default_lag") or {}, p.get("fitted_lag") or {}
        lines.append(
            f"  {p['phase']:7} {p['duration_s']:5.2f} {p['mean_power_w']:6.0f} {_pct(p['instant_rel']):>9} "
            f"{_pct(d.get('rel')):>9} {_pct(d.get('allowance_rel'), 1):>7} {d.get('verdict', 'n/a'):>9}"
            f" | {_pct(fl.get('rel'))} {fl.get('verdict', '')}"
        )
    lines.append(
        f"3 Cross-check as trials run it (Meter defaults, {LOAD_SECONDS:g} s windows"
        f"{', SIMULATED device' if dry else ''}; rel = counter vs reference)"
    )
    for r in report["loads"]:
        lines.append(
            f"  {r['load']:7} {r['duration_s']:.2f} s {_num(r['mean_power_w'], '.0f')} W  counter "
            f"{_num(r['counter_j'], '.1f')} J  reference {_num(r['reference_j'], '.1f')} J  rel "
            f"{_pct(r['rel'])}  allowance {_pct(r['allowance_rel'], 1)}  verdict {r['verdict'].upper()}"
            f"  (instant {_pct(r['instant_rel'])}, plain counter "
            f"{_pct(_rel(r['counter_plain_difference_j'], r['counter_j']))})"
        )
        if r.get("finding"):
            lines.append(f"    {r['finding']}")
    ov = report["overhead"]
    lines.append(
        f"4 Sampler overhead{' (CPU loop, SIMULATED device)' if dry else ' (bf16 matmul 8192^3)'}: "
        f"metered/unmetered {ov['ratio']:.4f} -> {100 * ov['overhead']:+.2f} % lost "
        f"({'OK' if ov['overhead'] <= 0.005 else 'ABOVE'} the 0.5 % target); sampler "
        f"{100 * (ov.get('sampler_cpu_fraction') or 0):.1f} % of a core"
        + (f"; {ov['baseline_tflops']:.0f} TFLOP/s" if ov.get("baseline_tflops") else "")
    )
    lines.append(f"done in {report['elapsed_s']:.0f} s")
    return "\n".join(lines)


def _num(x, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def _rel(x, ref):
    return (x - ref) / ref if x is not None and ref else None


def write_json(report: dict, out_dir: Path) -> Path:
    """``out_dir/gpu-check-<device>-<UTC time>.json`` with the report and its page."""
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", report["device"].lower()).strip("-") or "device"
    stamp = report["when"].replace(":", "").replace("-", "").replace(" ", "T")
    path = out_dir / f"gpu-check-{'dry-run-' if report.get('dry_run') else ''}{slug}-{stamp}.json"
    path.write_text(json.dumps({**report, "page": render(report)}, indent=2, default=_plain) + "\n")
    return path


def _plain(x):
    try:
        return x.item()
    except AttributeError:
        return str(x)


# ----------------------------------------------------------------------------- runs


def run_gpu() -> dict:
    """The check on CUDA device 0 (raises :class:`NoGpu`)."""
    from gcbench.energy.overhead import throughput_ratio
    from gcbench.spec import EnergySettings

    t0 = time.monotonic()
    torch, nv, gpu, handle = open_gpu()
    report = {
        "dry_run": False,
        "device": f"{gpu.name} ({gpu.label}, {gpu.uuid})",
        "gpu": gpu.to_dict(),
        "torch": torch.__version__,
    }
    report["nvml"] = nvml_facts(nv, handle)
    load, step, sync, flop = make_load(torch)
    report["recording"] = analyse_recording(record_phases(nv, handle, load))
    report["loads"] = [measure_load(k, load, EnergySettings(), [gpu.host_index]) for k in ("steady", "bursty")]
    ov = throughput_ratio(step, EnergySettings(), [gpu.host_index], seconds=4.0, rounds=4, sync=sync)
    ov["baseline_tflops"] = max(ov["baseline_steps_per_s"]) * flop / 1e12
    report["overhead"] = ov
    report["elapsed_s"] = time.monotonic() - t0
    return report


def run_dry() -> dict:
    """The same analysis and page without a GPU (see the module docstring)."""
    import importlib.util

    import numpy as np

    from gcbench.energy.overhead import throughput_ratio
    from gcbench.spec import EnergySettings

    t0 = time.monotonic()
    # the recorded H200 traces as one recording, read by the energy tests' own loader
    spec = importlib.util.spec_from_file_location("gcbench_trace_fixtures", ROOT / "tests" / "energy" / "conftest.py")
    traces = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = traces  # its dataclasses look their module up
    spec.loader.exec_module(traces)
    session = traces.load_session()
    rec = {
        "t_s": session.t_s,
        "instant_w": session.instant_w,
        "average_w": session.average_w,
        "energy_j": session.energy_j,
        "phases": session.phases,
    }

    def load(kind: str, seconds: float) -> None:
        end = time.perf_counter() + seconds
        x = np.ones(64)
        while time.perf_counter() < end:
            if kind == "idle":
                time.sleep(0.02)
            elif kind == "steady":
                x = x * 1.0000001
            else:
                on_until = time.perf_counter() + 0.03
                while time.perf_counter() < on_until:
                    x = x * 1.0000001
                time.sleep(0.07)

    sim = EnergySettings(backend="simulated")
    report = {"dry_run": True, "device": "no GPU", "nvml": {}}
    report["recording"] = analyse_recording(rec)
    report["loads"] = [measure_load(k, load, sim, [0]) for k in ("steady", "bursty")]
    report["overhead"] = throughput_ratio(lambda: sum(range(2000)), sim, [0], seconds=0.5, rounds=1, warmup_s=0.1)
    report["elapsed_s"] = time.monotonic() - t0
    return report


def main(argv: list[str] | None = None) -> int:
    """``python3 scripts/gpu_check.py [--out-dir DIR] [--dry-run] [--seconds S]``."""
    global LOAD_SECONDS
    ap = argparse.ArgumentParser(description="GC-Bench GPU check: one page, and the same as JSON")
    ap.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help="write gpu-check-<device>-<time>.json here (make gpu-check: docs/gpu-results)",
    )
    ap.add_argument("--dry-run", action="store_true", help="no GPU: recorded traces and the simulated device")
    ap.add_argument("--seconds", type=float, default=LOAD_SECONDS, help="length of each load window, s")
    args = ap.parse_args(argv)
    LOAD_SECONDS = args.seconds
    when = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    try:
        report = run_dry() if args.dry_run else run_gpu()
    except NoGpu as exc:
        print(f"gpu-check: FAILED, no GPU to check: {exc}", file=sys.stderr)
        return EXIT_NO_GPU
    except ImportError as exc:
        print(
            f"gpu-check: FAILED, a package is missing: {exc} (on a bare GPU machine run `make gpu-check`, which "
            f"installs the carried wheels of .whl/ first; make them with `make gpu-wheels`)",
            file=sys.stderr,
        )
        return EXIT_NO_GPU
    report["when"] = when
    print(render(report), flush=True)
    if args.out_dir is not None:
        print(f"wrote {write_json(report, args.out_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
