"""A stand-in for the ``amdsmi`` package (amdsmi 7.0.2's Python API), replaying the
devices of a JSON fixture (``FAKE_AMDSMI_FIXTURE``) with a power model: ``idle_w`` until
``FAKE_AMDSMI_BUSY_FROM`` (monotonic s), ``busy_w`` until ``FAKE_AMDSMI_BUSY_UNTIL``.
Function names, arguments, reply keys, units and exceptions follow the real module;
tests put this folder first on PYTHONPATH (the sampler process imports it too)."""

from __future__ import annotations

import json
import math
import os
import time
from enum import IntEnum


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code):
        super().__init__(f"Error code:\n\t{abs(err_code)} | AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported")
        self.err_code = abs(err_code)


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0
    MEM = 4


class _Handle:
    def __init__(self, k):
        self.k = k


_DEV: list[dict] = []


def amdsmi_init(flag=None):
    path = os.environ.get("FAKE_AMDSMI_FIXTURE")
    if not path:
        raise AmdSmiLibraryException(-1)
    _DEV[:] = json.load(open(path, encoding="utf-8"))["devices"]


def amdsmi_shut_down():
    pass


def amdsmi_get_processor_handles():
    return [_Handle(k) for k in range(len(_DEV))]


def _d(h):
    return _DEV[h.k]


def _power(d, t):
    a = float(os.environ.get("FAKE_AMDSMI_BUSY_FROM", "inf"))
    b = float(os.environ.get("FAKE_AMDSMI_BUSY_UNTIL", "inf"))
    return d["busy_w"] if a <= t < b else d["idle_w"]


def _energy_j(d, t):
    a = float(os.environ.get("FAKE_AMDSMI_BUSY_FROM", "inf"))
    b = float(os.environ.get("FAKE_AMDSMI_BUSY_UNTIL", "inf"))
    busy = max(0.0, min(t, b) - a) if math.isfinite(a) else 0.0
    return d["idle_w"] * t + (d["busy_w"] - d["idle_w"]) * busy


def amdsmi_get_gpu_device_bdf(h):
    return _d(h)["bdf"]


def amdsmi_get_gpu_device_uuid(h):
    return _d(h)["uuid"]


def amdsmi_get_gpu_asic_info(h):
    return {"market_name": _d(h)["market_name"], "vendor_id": "0x1002"}


def amdsmi_get_gpu_compute_partition(h):
    return _d(h)["partition"]


def amdsmi_get_energy_count(h):
    d = _d(h)
    if d.get("no_counter"):
        raise AmdSmiLibraryException(2)
    t = time.monotonic()
    tick = math.floor(t / 0.001) * 0.001  # the SMU accumulates every ~1 ms
    res = d["counter_resolution"]
    start = d["accumulator_start"]
    if start == "wrap":  # the accumulator passes 2^64 at FAKE_AMDSMI_WRAP_AT (monotonic s)
        start = (1 << 64) - int(_energy_j(d, float(os.environ["FAKE_AMDSMI_WRAP_AT"])) * 1e6 / res)
    counts = (int(start) + int(_energy_j(d, tick) * 1e6 / res)) % (1 << 64)
    return {"energy_accumulator": counts, "counter_resolution": d["counter_resolution"], "timestamp": int(tick * 1e9)}


def amdsmi_get_power_info(h):
    d = _d(h)
    t = time.monotonic()
    avg = (_energy_j(d, t) - _energy_j(d, t - 1.0)) / 1.0
    cur = _power(d, t) if d["current_socket_power"] == "model" else "N/A"
    return {
        "socket_power": round(avg),
        "current_socket_power": cur,
        "average_socket_power": round(avg, 3),
        "gfx_voltage": "N/A",
        "soc_voltage": "N/A",
        "mem_voltage": "N/A",
        "power_limit": d["power_cap_uw"] // 1000000,
    }


def amdsmi_get_power_cap_info(h):
    d = _d(h)
    return {
        "power_cap": d["power_cap_uw"],
        "default_power_cap": d["default_power_cap_uw"],
        "dpm_cap": 0,
        "min_power_cap": d["min_power_cap_uw"],
        "max_power_cap": d["max_power_cap_uw"],
    }


def amdsmi_get_temp_metric(h, sensor_type, metric):
    return _d(h)["temp_c"]


def amdsmi_get_clock_info(h, clock_type):
    return {"clk": _d(h)["gfx_clk_mhz"], "min_clk": 500, "max_clk": 2100, "clk_locked": False, "clk_deep_sleep": 0}


def amdsmi_get_gpu_activity(h):
    return {"gfx_activity": 0, "umc_activity": 0, "mm_activity": "N/A"}
